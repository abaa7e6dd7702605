/**
 * Checks the zip while its bytes stream from the platform to S3, so the stored copy never has to be
 * read back: each entry's data is inflated (or, if stored, taken as it is) and its CRC-32 computed
 * on the way, and at the end the central directory, read by yauzl from the bytes held back, is
 * checked entry by entry against what streamed past. The directory decides, as it does for any
 * zip reader: an entry is judged by the offset, sizes and CRC-32 the directory gives it.
 *
 * A layout this reader cannot follow forward (bytes before the first entry, a stored entry of
 * unknown size without a signed data descriptor, a directory larger than it holds) is not an error:
 * the check then answers `undefined`, and the caller reads the stored object once instead.
 */
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { crc32, createInflateRaw, type InflateRaw } from 'node:zlib';
import yauzl from 'yauzl';
import { ArchiveTooLargeError, InvalidArchiveError } from '../errors.ts';
import { crc32Append, crc32Unappend } from './crc32.ts';
import type { VerifiedArchive, VerifyLimits } from './options.ts';
import {
  archiveError,
  checkStructure,
  entryLabel,
  hex32,
  readCentralDirectory,
  verifiedArchive,
} from './verify.ts';

const LOCAL_HEADER = 0x04034b50;
const DATA_DESCRIPTOR = 0x08074b50;
/** Signatures that may follow the last entry: central header, end records, signature, extra data. */
const AFTER_ENTRIES = new Set([0x02014b50, 0x06054b50, 0x06064b50, 0x05054b50, 0x08064b50]);
const DESCRIPTOR_BYTES = Buffer.from([0x50, 0x4b, 0x07, 0x08]);
/** Bytes needed to judge a data descriptor candidate: the longest form, and the next signature. */
const DESCRIPTOR_LOOKAHEAD = 24 + 4;
const FLAG_ENCRYPTED = 0x0001;
const FLAG_DATA_DESCRIPTOR = 0x0008;
const STORED = 0;
const DEFLATED = 8;
const ZIP64_EXTRA = 0x0001;
const U32_MAX = 0xffffffff;
/** yauzl looks for the end record in the last 22 + 65,535 bytes; a little more is always held. */
const END_SEARCH_BYTES = 22 + 0xffff + 1024;
/** The most of the central directory held in memory; past it the stored copy is read instead. */
const MAX_DIRECTORY_BYTES = 32 * 1024 * 1024;

/** An entry as it went past: where its header started, and what its data turned out to be. */
interface StreamedEntry {
  readonly offset: number;
  readonly method: number;
  compressedSize: number;
  uncompressedSize: number;
  crc: number;
}

/** The entry whose data is streaming now. */
interface OpenEntry {
  readonly record: StreamedEntry;
  readonly kind: 'stored' | 'deflated' | 'skipped' | 'stored-until-descriptor';
  readonly descriptor: boolean;
  /** Data bytes still to come, when the local header gave the size. */
  remaining: number;
  inflater?: InflateRaw;
  inflaterEnded?: Promise<void>;
  inflateError?: unknown;
  /** Stored data held back because a data descriptor may start in it. */
  held: Buffer;
}

type State = 'header' | 'data' | 'descriptor' | 'directory' | 'undecided';

/** Feed it every byte of the download in order; `finish` judges the archive. */
export class ZipStreamCheck {
  #state: State = 'header';
  /** Stream offset of the next byte `write` will see. */
  #offset = 0;
  /** Stream offset of the first byte of the input being parsed. */
  #cursor = 0;
  /** Header bytes collected until the header is whole. */
  #pending: Buffer = Buffer.alloc(0);
  #pendingStart = 0;
  #entry: OpenEntry | undefined;
  #expanded = 0;
  readonly #entries = new Map<number, StreamedEntry>();
  /** The last bytes of the stream (and, from the directory on, all of them), for yauzl. */
  readonly #held: { start: number; bytes: Buffer }[] = [];
  #heldBytes = 0;
  /** The chunk being parsed, and its CRC-32 when the caller computed it. */
  #chunk: Buffer = Buffer.alloc(0);
  #chunkCrc: number | undefined;

  constructor(private readonly limits: VerifyLimits) {}

  /**
   * Takes the next chunk, and its CRC-32 if known (a chunk that lies whole inside a stored entry's
   * data is then not read again). Throws only for an archive past the expansion or entry limits.
   */
  async write(chunk: Buffer, crc?: number): Promise<void> {
    this.#hold(chunk);
    this.#chunk = chunk;
    this.#chunkCrc = crc;
    this.#cursor = this.#offset;
    let input = chunk;
    while (input.length > 0 && this.#state !== 'undecided' && this.#state !== 'directory') {
      input = await this.#step(input);
    }
    this.#offset += chunk.length;
  }

  /**
   * After the last byte: the verified entries, or `undefined` when this reader could not follow the
   * layout. Throws InvalidArchiveError for a broken archive and ArchiveTooLargeError past the limit.
   */
  async finish(totalBytes: number): Promise<VerifiedArchive | undefined> {
    if (this.#state === 'data' && this.#entry?.kind === 'deflated') {
      // The deflate stream never said it was complete: the zip was cut inside an entry.
      this.#entry.inflater?.end();
      await this.#entry.inflaterEnded?.catch(() => undefined);
    }
    if (this.#state !== 'directory') {
      if (this.#state === 'undecided') return undefined;
      throw new InvalidArchiveError(
        'the stored object is not a readable zip (it ends before its central directory; the zip is truncated)',
      );
    }
    const reader = new HeldBytesReader(this.#held);
    let zip: yauzl.ZipFile;
    try {
      zip = await yauzl.fromRandomAccessReaderPromise(reader, totalBytes, {
        autoClose: false,
        lazyEntries: true,
        validateEntrySizes: true,
        strictFileNames: false,
      });
    } catch (error) {
      if (reader.missed) return undefined;
      throw archiveError(error, 'the stored object is not a readable zip');
    }
    zip.on('error', () => {});
    let entries: yauzl.Entry[];
    try {
      entries = await readCentralDirectory(zip, this.limits.maxEntries);
    } catch (error) {
      if (reader.missed) return undefined;
      throw error;
    } finally {
      zip.close();
    }
    checkStructure(entries, this.limits);
    for (const entry of entries) {
      const streamed = this.#entries.get(entry.relativeOffsetOfLocalHeader);
      // The directory points somewhere this reader did not see an entry start: let a reader decide.
      if (streamed === undefined || streamed.method !== entry.compressionMethod) return undefined;
      matchEntry(entry, streamed);
    }
    return verifiedArchive(entries);
  }

  /** Consumes a prefix of `input` and answers the rest. */
  async #step(input: Buffer): Promise<Buffer> {
    switch (this.#state) {
      case 'header':
        return this.#header(input);
      case 'data':
        return this.#data(input);
      case 'descriptor':
        return this.#descriptor(input);
      default:
        return Buffer.alloc(0);
    }
  }

  /** Collects bytes into `#pending` until `size` are there; answers whether they are. */
  #collect(input: Buffer, size: number): { whole: boolean; rest: Buffer } {
    if (this.#pending.length === 0) this.#pendingStart = this.#cursor;
    const wanted = Math.max(0, size - this.#pending.length);
    const taken = input.subarray(0, wanted);
    this.#pending = this.#pending.length === 0 ? Buffer.from(taken) : Buffer.concat([this.#pending, taken]);
    this.#cursor += taken.length;
    return { whole: this.#pending.length >= size, rest: input.subarray(taken.length) };
  }

  #header(input: Buffer): Buffer {
    const signature = this.#collect(input, 4);
    if (!signature.whole) return signature.rest;
    const kind = this.#pending.readUInt32LE(0);
    if (AFTER_ENTRIES.has(kind)) {
      this.#pending = Buffer.alloc(0);
      this.#state = 'directory';
      return Buffer.alloc(0);
    }
    if (kind !== LOCAL_HEADER) return this.#giveUp();
    const fixed = this.#collect(signature.rest, 30);
    if (!fixed.whole) return fixed.rest;
    const header = this.#pending;
    const nameLength = header.readUInt16LE(26);
    const extraLength = header.readUInt16LE(28);
    const whole = this.#collect(fixed.rest, 30 + nameLength + extraLength);
    if (!whole.whole) return whole.rest;
    this.#openEntry(this.#pending, this.#pendingStart);
    this.#pending = Buffer.alloc(0);
    return whole.rest;
  }

  #openEntry(header: Buffer, offset: number): void {
    const flags = header.readUInt16LE(6);
    const method = header.readUInt16LE(8);
    const nameLength = header.readUInt16LE(26);
    const extra = header.subarray(30 + nameLength);
    let compressedSize = header.readUInt32LE(18);
    let uncompressedSize = header.readUInt32LE(22);
    const zip64 = zip64Sizes(extra, uncompressedSize, compressedSize);
    if (zip64 !== undefined) ({ compressedSize, uncompressedSize } = zip64);
    const descriptor = (flags & FLAG_DATA_DESCRIPTOR) !== 0;
    if (this.#entries.size >= this.limits.maxEntries) {
      // Each entry seen is remembered until the directory comes: a flood of them stops here.
      throw new InvalidArchiveError(
        `the archive has more than ${this.limits.maxEntries} entries, above the limit`,
      );
    }
    const record: StreamedEntry = { offset, method, compressedSize: 0, uncompressedSize: 0, crc: 0 };
    this.#entries.set(offset, record);
    let kind: OpenEntry['kind'];
    if ((flags & FLAG_ENCRYPTED) !== 0 || (method !== STORED && method !== DEFLATED)) {
      // The directory check refuses these; the data is only stepped over.
      if (descriptor) {
        this.#giveUp();
        return;
      }
      kind = 'skipped';
    } else if (method === DEFLATED) {
      kind = 'deflated';
    } else {
      kind = descriptor ? 'stored-until-descriptor' : 'stored';
    }
    if (!descriptor && this.#expanded + uncompressedSize > this.limits.maxUncompressedBytes) {
      // The header announces it: no need to inflate up to the limit to know.
      throw new ArchiveTooLargeError(
        this.limits.maxUncompressedBytes,
        this.#expanded + uncompressedSize,
        true,
      );
    }
    const entry: OpenEntry = {
      record,
      kind,
      descriptor,
      remaining: descriptor ? Number.POSITIVE_INFINITY : compressedSize,
      held: Buffer.alloc(0),
    };
    if (kind === 'deflated') this.#startInflater(entry);
    this.#entry = entry;
    this.#state = 'data';
    if (kind !== 'deflated' && entry.remaining === 0) this.#closeEntry();
  }

  #startInflater(entry: OpenEntry): void {
    const inflater = createInflateRaw();
    // A late error (after destroy) must not go unhandled; the write callbacks report the ones that count.
    inflater.on('error', () => {});
    inflater.on('data', (output: Buffer) => {
      entry.record.crc = crc32(output, entry.record.crc);
      entry.record.uncompressedSize += output.length;
      try {
        this.#expand(output.length);
      } catch (error) {
        entry.inflateError = error;
        inflater.destroy();
      }
    });
    entry.inflaterEnded = once(inflater, 'end').then(() => undefined);
    entry.inflaterEnded.catch((error: unknown) => {
      entry.inflateError ??= error;
    });
    entry.inflater = inflater;
  }

  async #data(input: Buffer): Promise<Buffer> {
    const entry = this.#entry;
    if (entry === undefined) return this.#giveUp();
    if (entry.kind === 'deflated') return this.#inflate(entry, input);
    if (entry.kind === 'stored-until-descriptor') return this.#storedUntilDescriptor(entry, input);
    const taken = input.subarray(0, Math.min(input.length, entry.remaining));
    if (entry.kind === 'stored') {
      entry.record.crc = crc32Append(entry.record.crc, taken, this.#crcIfWholeChunk(taken));
      entry.record.uncompressedSize += taken.length;
      this.#expand(taken.length);
    }
    entry.record.compressedSize += taken.length;
    entry.remaining -= taken.length;
    this.#cursor += taken.length;
    if (entry.remaining === 0) this.#closeEntry();
    return input.subarray(taken.length);
  }

  /** Feeds the inflater; the deflate stream ends itself, and zlib says how much of the input it used. */
  async #inflate(entry: OpenEntry, input: Buffer): Promise<Buffer> {
    const inflater = entry.inflater;
    if (inflater === undefined) return this.#giveUp();
    const before = inflater.bytesWritten;
    const written = await new Promise<unknown>((resolve) => {
      inflater.write(input, (error) => resolve(error ?? undefined));
    });
    if (entry.inflateError !== undefined) throw entry.inflateError;
    if (written !== undefined) {
      // Not deflate data: the directory will name the entry, and a reader of the stored copy says why.
      inflater.destroy();
      return this.#giveUp();
    }
    const used = inflater.bytesWritten - before;
    entry.record.compressedSize += used;
    this.#cursor += used;
    if (used === input.length) return Buffer.alloc(0);
    await entry.inflaterEnded;
    if (entry.inflateError !== undefined) throw entry.inflateError;
    this.#closeEntry();
    return input.subarray(used);
  }

  /**
   * A stored entry whose size comes after it: its data ends where a data descriptor starts whose
   * sizes match the bytes before it, and whose CRC-32 matches them too or which the next header
   * follows (a damaged entry still ends there, for the directory check to name). Up to 27 bytes
   * that may begin one are held back.
   */
  #storedUntilDescriptor(entry: OpenEntry, input: Buffer): Buffer {
    if (this.#storedWithoutSignature(entry, input)) return Buffer.alloc(0);
    const bytes = entry.held.length === 0 ? input : Buffer.concat([entry.held, input]);
    const fromHeld = entry.held.length;
    const bytesStart = this.#cursor - fromHeld;
    this.#cursor += input.length;
    entry.held = Buffer.alloc(0);
    let searchFrom = 0;
    let committed = 0;
    for (;;) {
      const found = bytes.indexOf(DESCRIPTOR_BYTES, searchFrom);
      if (found === -1) {
        // Keep the last 3 bytes: a signature may straddle into the next chunk.
        const keep = Math.min(3, bytes.length - committed);
        this.#storeData(entry, bytes.subarray(committed, bytes.length - keep));
        entry.held = Buffer.from(bytes.subarray(bytes.length - keep));
        return Buffer.alloc(0);
      }
      if (bytes.length - found < DESCRIPTOR_LOOKAHEAD) {
        this.#storeData(entry, bytes.subarray(committed, found));
        entry.held = Buffer.from(bytes.subarray(found));
        return Buffer.alloc(0);
      }
      this.#storeData(entry, bytes.subarray(committed, found));
      committed = found;
      const length = descriptorLength(entry.record, bytes.subarray(found, found + DESCRIPTOR_LOOKAHEAD));
      if (length > 0) {
        // The descriptor is stepped over here: the next header starts right after it.
        this.#entry = undefined;
        this.#state = 'header';
        const next = found + length;
        this.#cursor = bytesStart + next;
        return next >= fromHeld ? input.subarray(next - fromHeld) : Buffer.from(bytes.subarray(next));
      }
      searchFrom = found + 1;
    }
  }

  /**
   * The common case of a stored entry of unknown size: no signature starts in the held bytes or in
   * `input`. All of it but the last 3 bytes is data, and when `input` is the whole chunk its CRC-32
   * comes from the chunk's, without a pass over the bytes. Answers false, having done nothing, when
   * the general path must look.
   */
  #storedWithoutSignature(entry: OpenEntry, input: Buffer): boolean {
    const keep = 3;
    if (input.length <= keep || entry.held.length > keep) return false;
    if (input.indexOf(DESCRIPTOR_BYTES) !== -1) return false;
    if (Buffer.concat([entry.held, input.subarray(0, keep)]).indexOf(DESCRIPTOR_BYTES) !== -1) return false;
    const tail = input.subarray(input.length - keep);
    // Through the whole input (from the chunk's CRC when it is the chunk), less the tail held back.
    const through = crc32Append(crc32(entry.held, entry.record.crc), input, this.#crcIfWholeChunk(input));
    this.#cursor += input.length;
    this.#countStored(
      entry,
      entry.held.length + input.length - keep,
      crc32Unappend(through, crc32(tail), keep),
    );
    entry.held = Buffer.from(tail);
    return true;
  }

  /** The chunk's CRC-32 when `bytes` is the whole chunk `write` was given with one. */
  #crcIfWholeChunk(bytes: Buffer): number | undefined {
    const chunk = this.#chunk;
    const whole =
      bytes.buffer === chunk.buffer && bytes.byteOffset === chunk.byteOffset && bytes.length === chunk.length;
    return whole ? this.#chunkCrc : undefined;
  }

  #storeData(entry: OpenEntry, data: Buffer): void {
    if (data.length === 0) return;
    this.#countStored(entry, data.length, crc32(data, entry.record.crc));
  }

  /** Stored data went past: `length` more bytes, `crc` the entry's CRC-32 through them. */
  #countStored(entry: OpenEntry, length: number, crc: number): void {
    entry.record.crc = crc;
    entry.record.uncompressedSize += length;
    entry.record.compressedSize += length;
    this.#expand(length);
  }

  #closeEntry(): void {
    const entry = this.#entry;
    this.#state = entry?.descriptor === true ? 'descriptor' : 'header';
    if (entry?.descriptor !== true) this.#entry = undefined;
  }

  /**
   * Steps over a deflated entry's data descriptor: its figures are the directory's to give, and are
   * checked there. Its sizes are 4 or 8 bytes each (writers do not always say which in the local
   * header), so the next header's signature decides where it ends.
   */
  #descriptor(input: Buffer): Buffer {
    const signature = this.#collect(input, 4);
    if (!signature.whole) return signature.rest;
    const base = this.#pending.readUInt32LE(0) === DATA_DESCRIPTOR ? 4 : 0;
    const whole = this.#collect(signature.rest, base + 24);
    if (!whole.whole) return whole.rest;
    const short = base + 12;
    const long = base + 20;
    const length = isHeader(this.#pending.readUInt32LE(short))
      ? short
      : isHeader(this.#pending.readUInt32LE(long))
        ? long
        : short;
    // What was read past the descriptor is the start of the next header: hand it back.
    const past = this.#pending.subarray(length);
    this.#cursor -= past.length;
    this.#pending = Buffer.alloc(0);
    this.#entry = undefined;
    this.#state = 'header';
    return past.length === 0 ? whole.rest : Buffer.concat([past, whole.rest]);
  }

  /** Counts expanded bytes: past the limit the copy stops at once rather than at the end. */
  #expand(bytes: number): void {
    this.#expanded += bytes;
    if (this.#expanded > this.limits.maxUncompressedBytes) {
      throw new ArchiveTooLargeError(this.limits.maxUncompressedBytes, this.#expanded, true);
    }
  }

  #giveUp(): Buffer {
    this.#state = 'undecided';
    this.#entry?.inflater?.destroy();
    this.#entry = undefined;
    this.#held.length = 0;
    this.#heldBytes = 0;
    return Buffer.alloc(0);
  }

  /** Keeps the end of the stream: the last END_SEARCH_BYTES, and everything from the directory on. */
  #hold(chunk: Buffer): void {
    if (this.#state === 'undecided') return;
    this.#held.push({ start: this.#offset, bytes: chunk });
    this.#heldBytes += chunk.length;
    if (this.#state === 'directory') {
      if (this.#heldBytes > MAX_DIRECTORY_BYTES + END_SEARCH_BYTES) this.#giveUp();
      return;
    }
    for (;;) {
      const first = this.#held[0];
      if (first === undefined || this.#heldBytes - first.bytes.length < END_SEARCH_BYTES) break;
      this.#held.shift();
      this.#heldBytes -= first.bytes.length;
    }
  }
}

/** Whether `signature` starts a local header or one of the records after the entries. */
function isHeader(signature: number): boolean {
  return signature === LOCAL_HEADER || AFTER_ENTRIES.has(signature);
}

/**
 * The length of the signed data descriptor at the start of `bytes` (16 bytes, or 24 with 8-byte
 * sizes) when its sizes are those of the data before it, and its CRC-32 matches too or the next
 * header follows it; 0 when it is not this entry's.
 */
function descriptorLength(record: StreamedEntry, bytes: Buffer): number {
  for (const length of [16, 24]) {
    const crc = bytes.readUInt32LE(4);
    const compressed = length === 16 ? bytes.readUInt32LE(8) : Number(bytes.readBigUInt64LE(8));
    const size = length === 16 ? bytes.readUInt32LE(12) : Number(bytes.readBigUInt64LE(16));
    if (compressed !== record.compressedSize || size !== record.uncompressedSize) continue;
    if (crc === record.crc >>> 0 || isHeader(bytes.readUInt32LE(length))) return length;
  }
  return 0;
}

/** The local header's ZIP64 sizes, when it has them. */
function zip64Sizes(
  extra: Buffer,
  uncompressed: number,
  compressed: number,
): { uncompressedSize: number; compressedSize: number } | undefined {
  if (uncompressed !== U32_MAX && compressed !== U32_MAX) return undefined;
  for (let at = 0; at + 4 <= extra.length; ) {
    const id = extra.readUInt16LE(at);
    const size = extra.readUInt16LE(at + 2);
    const data = extra.subarray(at + 4, at + 4 + size);
    if (id === ZIP64_EXTRA) {
      let field = 0;
      const next = (fallback: number) => {
        if (fallback !== U32_MAX || field + 8 > data.length) return fallback;
        const value = Number(data.readBigUInt64LE(field));
        field += 8;
        return value;
      };
      const uncompressedSize = next(uncompressed);
      const compressedSize = next(compressed);
      return { uncompressedSize, compressedSize };
    }
    at += 4 + size;
  }
  return undefined;
}

/** The directory's figures for an entry against what streamed past at its offset. */
function matchEntry(entry: yauzl.Entry, streamed: StreamedEntry): void {
  const name = entry.fileName;
  if (streamed.compressedSize !== entry.compressedSize) {
    throw new InvalidArchiveError(
      `${entryLabel(name)}: its data is ${streamed.compressedSize} bytes, but the directory records ${entry.compressedSize}; the entry is corrupt`,
    );
  }
  if (streamed.uncompressedSize !== entry.uncompressedSize) {
    throw new InvalidArchiveError(
      `${entryLabel(name)}: its data expands to ${streamed.uncompressedSize} bytes, but the directory records ${entry.uncompressedSize}; the entry is corrupt`,
    );
  }
  if (streamed.crc >>> 0 !== entry.crc32 >>> 0) {
    throw new InvalidArchiveError(
      `${entryLabel(name)}: the data's CRC-32 ${hex32(streamed.crc)} does not match the recorded ${hex32(entry.crc32)}; the entry is corrupt`,
    );
  }
}

/** yauzl's reads served from the bytes held back; a read outside them marks the check undecided. */
class HeldBytesReader extends yauzl.RandomAccessReader {
  missed = false;

  constructor(private readonly held: readonly { start: number; bytes: Buffer }[]) {
    super();
  }

  override _readStreamForRange(start: number, end: number): Readable {
    const parts: Buffer[] = [];
    let covered = start;
    for (const { start: at, bytes } of this.held) {
      const from = Math.max(covered, at);
      const to = Math.min(end, at + bytes.length);
      if (from !== covered || to <= from) continue;
      parts.push(bytes.subarray(from - at, to - at));
      covered = to;
    }
    if (covered !== end) {
      this.missed = true;
      const stream = new Readable({ read() {} });
      stream.destroy(new Error('the range was not held'));
      return stream;
    }
    return Readable.from(parts);
  }
}
