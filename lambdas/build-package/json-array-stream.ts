// Reads a top-level JSON array item by item from a byte stream, so a large export file is never held whole.
import { InvalidArchiveError } from '#shared/errors';

/**
 * Reads a top-level JSON array (messages.json, likes.json) item by item from a byte stream, so a
 * file of a gigabyte is never held whole. The scanner only finds where each item begins and ends
 * (brackets and braces outside strings, escapes inside them); each item's text is then parsed by
 * the native JSON.parse, which checks it strictly. That keeps this file small and fast: a
 * token-by-token parser in JavaScript (stream-json, clarinet) builds every value itself and is
 * several times slower, and it would be a new dependency in the Lambda bundle.
 *
 * Memory: the bytes of the item being read, at most `maxItemBytes` (a larger item is refused),
 * plus the chunk being scanned. `maxRetainedBytes` records the most ever held, for tests.
 */
export class JsonArrayScanner {
  /** The most bytes of unfinished items ever held at once. */
  maxRetainedBytes = 0;
  readonly #name: string;
  readonly #maxItemBytes: number;
  readonly #maxDepth: number;
  /** Before '[', inside the array, or after its ']'. */
  #state: 'start' | 'items' | 'end' = 'start';
  /** Nesting inside the current item: 0 between items. */
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** The current item's bytes so far, as pieces of chunks. */
  #pieces: Buffer[] = [];
  #pieceBytes = 0;
  /** Whether the current item has begun (a non-space byte since the last comma). */
  #itemStarted = false;
  /** A comma was read and an item must follow. */
  #expectItem = false;
  #items = 0;

  constructor(name: string, options: { maxItemBytes?: number; maxDepth?: number } = {}) {
    this.#name = name;
    this.#maxItemBytes = options.maxItemBytes ?? 8 * 1024 * 1024;
    this.#maxDepth = options.maxDepth ?? 64;
  }

  /** How many items were read so far. */
  get items(): number {
    return this.#items;
  }

  /** Scans a chunk; answers the items it completed, parsed. */
  push(chunk: Buffer): unknown[] {
    const out: unknown[] = [];
    let itemStart = this.#itemStarted ? 0 : -1;
    for (let index = 0; index < chunk.length; index++) {
      const byte = chunk[index] as number;
      if (this.#state === 'end') {
        if (!isSpace(byte)) this.#fail('holds more after the end of its array');
        continue;
      }
      if (this.#state === 'start') {
        if (isSpace(byte)) continue;
        if (byte !== OPEN_BRACKET) this.#fail('is not a JSON array');
        this.#state = 'items';
        continue;
      }
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (byte === BACKSLASH) this.#escaped = true;
        else if (byte === QUOTE) this.#inString = false;
        continue;
      }
      if (this.#depth === 0 && (byte === COMMA || byte === CLOSE_BRACKET)) {
        if (this.#itemStarted) {
          this.#keep(chunk, itemStart, index);
          out.push(this.#finishItem());
          itemStart = -1;
        } else if (byte === COMMA || this.#expectItem) {
          this.#fail('is not JSON');
        }
        if (byte === COMMA) this.#expectItem = true;
        else this.#state = 'end';
        continue;
      }
      if (!this.#itemStarted) {
        if (isSpace(byte)) continue;
        this.#itemStarted = true;
        this.#expectItem = false;
        itemStart = index;
      }
      if (byte === QUOTE) this.#inString = true;
      else if (byte === OPEN_BRACE || byte === OPEN_BRACKET) {
        this.#depth += 1;
        if (this.#depth > this.#maxDepth) this.#fail(`nests deeper than ${this.#maxDepth} levels`);
      } else if (byte === CLOSE_BRACE || byte === CLOSE_BRACKET) {
        this.#depth -= 1;
        if (this.#depth < 0) this.#fail('is not JSON');
      }
    }
    if (this.#itemStarted && itemStart >= 0) this.#keep(chunk, itemStart, chunk.length);
    return out;
  }

  /** The stream ended: the array must have been closed. */
  end(): void {
    if (this.#state !== 'end') this.#fail('is not JSON (it ends inside its array)');
  }

  #keep(chunk: Buffer, from: number, to: number): void {
    if (to <= from) return;
    this.#pieceBytes += to - from;
    if (this.#pieceBytes > this.#maxItemBytes) {
      this.#fail(`holds an item larger than ${this.#maxItemBytes} bytes`);
    }
    // A copy: the caller may reuse the chunk's memory, and a slice would keep the whole chunk alive.
    this.#pieces.push(Buffer.from(chunk.subarray(from, to)));
    this.maxRetainedBytes = Math.max(this.maxRetainedBytes, this.#pieceBytes);
  }

  #finishItem(): unknown {
    const text = (this.#pieces.length === 1 ? this.#pieces[0] : Buffer.concat(this.#pieces))?.toString(
      'utf8',
    );
    this.#pieces = [];
    this.#pieceBytes = 0;
    this.#itemStarted = false;
    this.#items += 1;
    try {
      return JSON.parse(text ?? '');
    } catch {
      return this.#fail('is not JSON');
    }
  }

  #fail(problem: string): never {
    // Never the bytes: they are the subject's data.
    throw new InvalidArchiveError(`${this.#name} in the archive ${problem}`);
  }
}

/** Each item of the JSON array in `source`, parsed, in order. */
export async function* jsonArrayItems(
  source: AsyncIterable<Uint8Array>,
  scanner: JsonArrayScanner,
): AsyncGenerator<unknown> {
  for await (const chunk of source) {
    const buffer = Buffer.isBuffer(chunk)
      ? chunk
      : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    yield* scanner.push(buffer);
  }
  scanner.end();
}

const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;

function isSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}
