import { createReadStream } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * An external merge sort over local disk (Lambda's /tmp): records are held in memory up to
 * `runBytes` of their JSON, then sorted and written out as a run; reading merges the runs. Memory
 * stays at one run's buffer plus a read buffer per run merged, whatever the number of records, so
 * the package can be ordered as before (conversations newest first, comments oldest first) for a
 * subject of any size. The sorted output can be read more than once (the page and data.json each
 * read it); the runs are removed by `dispose()`.
 */
export class SpillSort<T> {
  /** The most bytes of JSON ever held in the buffer at once. */
  maxBufferedBytes = 0;
  /** The most records ever held in the buffer at once. */
  maxBufferedRecords = 0;
  readonly #dir: string;
  readonly #name: string;
  readonly #compare: (left: T, right: T) => number;
  readonly #runBytes: number;
  readonly #fanIn: number;
  #buffer: { record: T; line: string }[] = [];
  #bufferedBytes = 0;
  #runs: string[] = [];
  #runCount = 0;
  #records = 0;
  #sealed = false;

  constructor(
    dir: string,
    name: string,
    compare: (left: T, right: T) => number,
    options: { runBytes?: number; fanIn?: number } = {},
  ) {
    this.#dir = dir;
    this.#name = name;
    this.#compare = compare;
    this.#runBytes = options.runBytes ?? 4 * 1024 * 1024;
    this.#fanIn = options.fanIn ?? 64;
  }

  /** How many records were added. */
  get size(): number {
    return this.#records;
  }

  /** Adds a record; writes a run when the buffer is full. */
  async add(record: T): Promise<void> {
    if (this.#sealed) throw new Error(`SpillSort ${this.#name}: add after reading began`);
    const line = JSON.stringify(record);
    this.#buffer.push({ record, line });
    this.#bufferedBytes += line.length;
    this.#records += 1;
    this.maxBufferedBytes = Math.max(this.maxBufferedBytes, this.#bufferedBytes);
    this.maxBufferedRecords = Math.max(this.maxBufferedRecords, this.#buffer.length);
    if (this.#bufferedBytes >= this.#runBytes) await this.#flush();
  }

  /** The records in order. Adding ends with the first call; each call reads the runs again. */
  async *sorted(): AsyncGenerator<T> {
    if (!this.#sealed) {
      this.#sealed = true;
      if (this.#buffer.length > 0 && this.#runs.length > 0) await this.#flush();
      // Runs beyond the fan-in are merged into fewer, longer runs first.
      while (this.#runs.length > this.#fanIn) {
        const group = this.#runs.splice(0, this.#fanIn);
        this.#runs.push(await this.#writeRun(this.#merge(group)));
        await Promise.all(group.map((file) => rm(file, { force: true })));
      }
    }
    if (this.#runs.length === 0) {
      // Everything fitted in one buffer: no disk at all.
      this.#buffer.sort((left, right) => this.#compare(left.record, right.record));
      for (const { record } of this.#buffer) yield record;
      return;
    }
    yield* this.#merge(this.#runs);
  }

  /** Removes the runs from disk. */
  async dispose(): Promise<void> {
    const runs = this.#runs;
    this.#runs = [];
    this.#buffer = [];
    await Promise.all(runs.map((file) => rm(file, { force: true })));
  }

  async #flush(): Promise<void> {
    const buffer = this.#buffer;
    this.#buffer = [];
    this.#bufferedBytes = 0;
    buffer.sort((left, right) => this.#compare(left.record, right.record));
    this.#runs.push(await this.#writeRun(linesOf(buffer)));
  }

  async #writeRun(records: Iterable<string> | AsyncIterable<T>): Promise<string> {
    this.#runCount += 1;
    const file = join(this.#dir, `${this.#name}-${this.#runCount}.ndjson`);
    const handle = await open(file, 'w');
    try {
      let pending = '';
      for await (const item of records) {
        pending += `${typeof item === 'string' ? item : JSON.stringify(item)}\n`;
        if (pending.length >= WRITE_BYTES) {
          await handle.write(pending);
          pending = '';
        }
      }
      if (pending !== '') await handle.write(pending);
    } finally {
      await handle.close();
    }
    return file;
  }

  /** A k-way merge over a small binary heap; ties keep the runs' order, so the sort is stable. */
  async *#merge(files: readonly string[]): AsyncGenerator<T> {
    const readers = files.map((file) => readLines(file)[Symbol.asyncIterator]());
    const heap: { record: T; run: number }[] = [];
    const less = (a: { record: T; run: number }, b: { record: T; run: number }) => {
      const order = this.#compare(a.record, b.record);
      return order < 0 || (order === 0 && a.run < b.run);
    };
    const push = (entry: { record: T; run: number }) => {
      heap.push(entry);
      let index = heap.length - 1;
      while (index > 0) {
        const parent = (index - 1) >> 1;
        if (!less(heap[index] as { record: T; run: number }, heap[parent] as { record: T; run: number }))
          break;
        [heap[index], heap[parent]] = [
          heap[parent] as { record: T; run: number },
          heap[index] as { record: T; run: number },
        ];
        index = parent;
      }
    };
    const pop = () => {
      const top = heap[0];
      const last = heap.pop();
      if (heap.length > 0 && last !== undefined) {
        heap[0] = last;
        let index = 0;
        for (;;) {
          const left = index * 2 + 1;
          const right = left + 1;
          let smallest = index;
          if (
            left < heap.length &&
            less(heap[left] as { record: T; run: number }, heap[smallest] as { record: T; run: number })
          )
            smallest = left;
          if (
            right < heap.length &&
            less(heap[right] as { record: T; run: number }, heap[smallest] as { record: T; run: number })
          )
            smallest = right;
          if (smallest === index) break;
          [heap[index], heap[smallest]] = [
            heap[smallest] as { record: T; run: number },
            heap[index] as { record: T; run: number },
          ];
          index = smallest;
        }
      }
      return top;
    };
    try {
      for (const [run, reader] of readers.entries()) {
        const next = await reader.next();
        if (next.done !== true) push({ record: JSON.parse(next.value) as T, run });
      }
      while (heap.length > 0) {
        const top = pop();
        if (top === undefined) break;
        yield top.record;
        const next = await readers[top.run]?.next();
        if (next !== undefined && next.done !== true)
          push({ record: JSON.parse(next.value) as T, run: top.run });
      }
    } finally {
      await Promise.all(readers.map((reader) => reader.return?.(undefined)));
    }
  }
}

/** Bytes gathered before a write to a run file. */
const WRITE_BYTES = 256 * 1024;

function* linesOf(buffer: readonly { line: string }[]): Generator<string> {
  for (const { line } of buffer) yield line;
}

/** The lines of a run file; a record never holds a raw newline (JSON escapes it). */
async function* readLines(file: string): AsyncGenerator<string> {
  const stream = createReadStream(file, { encoding: 'utf8', highWaterMark: 64 * 1024 });
  let carry = '';
  for await (const chunk of stream as AsyncIterable<string>) {
    const text = carry + chunk;
    let start = 0;
    for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
      yield text.slice(start, end);
      start = end + 1;
    }
    carry = text.slice(start);
  }
  if (carry !== '') yield carry;
}
