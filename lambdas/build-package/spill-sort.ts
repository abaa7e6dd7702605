// An external merge sort over local disk, so a package of any size is ordered in fixed memory.
import { open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readLines } from './streams.ts';

/**
 * An external merge sort over local disk (Lambda's /tmp): records are held in memory up to
 * `runBytes` of their JSON, then sorted and written out as a run; reading merges the runs. Memory
 * stays at one run's buffer plus a read buffer per run merged, whatever the number of records, so
 * the package can be ordered as before (conversations newest first, comments oldest first) for a
 * subject of any size. The sorted output can be read more than once (the page and data.json each
 * read it); the runs are removed by `dispose()`.
 */
export class SpillSort<T, K = T> {
  /** The most bytes of JSON ever held in the buffer at once. */
  maxBufferedBytes = 0;
  /** The most records ever held in the buffer at once. */
  maxBufferedRecords = 0;
  readonly #dir: string;
  readonly #name: string;
  readonly #keyOf: (record: T) => K;
  readonly #compare: (left: K, right: K) => number;
  readonly #runBytes: number;
  readonly #runRecords: number;
  readonly #fanIn: number;
  /**
   * Each record's sort key, and where its JSON lies in `#data`. The JSON goes into one buffer
   * outside the JavaScript heap, reused run after run: held as strings, the records of a run would
   * live long enough for V8 to move them to its old generation, where they would pile up as
   * garbage until a full collection, a heap that grows with the number of comments after all.
   */
  #buffer: { key: K; start: number; end: number }[] = [];
  #data: Buffer | undefined;
  #bufferedBytes = 0;
  #runs: string[] = [];
  #runCount = 0;
  #records = 0;
  #sealed = false;

  constructor(
    dir: string,
    name: string,
    order: { readonly keyOf: (record: T) => K; readonly compare: (left: K, right: K) => number },
    options: SpillOptions = {},
  ) {
    this.#dir = dir;
    this.#name = name;
    this.#keyOf = order.keyOf;
    this.#compare = order.compare;
    this.#runBytes = options.runBytes ?? 2 * 1024 * 1024;
    this.#runRecords = options.runRecords ?? 20_000;
    this.#fanIn = options.fanIn ?? 256;
  }

  /** How many records were added. */
  get size(): number {
    return this.#records;
  }

  /** Adds a record; writes a run when the buffer is full. */
  async add(record: T): Promise<void> {
    if (this.#sealed) throw new Error(`SpillSort ${this.#name}: add after reading began`);
    const line = JSON.stringify(record);
    const bytes = Buffer.byteLength(line);
    if (this.#bufferedBytes + bytes > (this.#data?.length ?? 0) && this.#buffer.length > 0)
      await this.#flush();
    if (this.#data === undefined || bytes > this.#data.length) {
      this.#data = Buffer.allocUnsafeSlow(Math.max(this.#runBytes, bytes));
    }
    const start = this.#bufferedBytes;
    this.#data.write(line, start);
    this.#bufferedBytes += bytes;
    this.#buffer.push({ key: this.#keyOf(record), start, end: this.#bufferedBytes });
    this.#records += 1;
    this.maxBufferedBytes = Math.max(this.maxBufferedBytes, this.#bufferedBytes);
    this.maxBufferedRecords = Math.max(this.maxBufferedRecords, this.#buffer.length);
    if (this.#bufferedBytes >= this.#runBytes || this.#buffer.length >= this.#runRecords) await this.#flush();
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
      this.#buffer.sort((left, right) => this.#compare(left.key, right.key));
      const data = this.#data;
      for (const { start, end } of this.#buffer)
        yield JSON.parse(data?.toString('utf8', start, end) ?? '') as T;
      return;
    }
    yield* this.#merge(this.#runs);
  }

  /** Removes the runs from disk. */
  async dispose(): Promise<void> {
    const runs = this.#runs;
    this.#runs = [];
    this.#buffer = [];
    this.#data = undefined;
    await Promise.all(runs.map((file) => rm(file, { force: true })));
  }

  async #flush(): Promise<void> {
    const buffer = this.#buffer;
    const data = this.#data;
    this.#buffer = [];
    this.#bufferedBytes = 0;
    if (data === undefined) return;
    buffer.sort((left, right) => this.#compare(left.key, right.key));
    this.#runs.push(await this.#writeBytes(buffer, data));
  }

  /** A run from the buffer: each record's JSON copied, in order, into small writes. */
  async #writeBytes(buffer: readonly { start: number; end: number }[], data: Buffer): Promise<string> {
    this.#runCount += 1;
    const file = join(this.#dir, `${this.#name}-${this.#runCount}.ndjson`);
    const handle = await open(file, 'w');
    const out = Buffer.allocUnsafe(WRITE_BYTES);
    let used = 0;
    try {
      for (const { start, end } of buffer) {
        if (used + (end - start) + 1 > out.length && used > 0) {
          await handle.write(out, 0, used);
          used = 0;
        }
        if (end - start + 1 > out.length) {
          await handle.write(data, start, end - start);
          await handle.write('\n');
          continue;
        }
        used += data.copy(out, used, start, end);
        out[used] = NEWLINE;
        used += 1;
      }
      if (used > 0) await handle.write(out, 0, used);
    } finally {
      await handle.close();
    }
    return file;
  }

  async #writeRun(records: AsyncIterable<T>): Promise<string> {
    this.#runCount += 1;
    const file = join(this.#dir, `${this.#name}-${this.#runCount}.ndjson`);
    const handle = await open(file, 'w');
    try {
      let pending = '';
      for await (const item of records) {
        pending += `${JSON.stringify(item)}\n`;
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
    const readers = files.map((file) => readLines(file, RUN_READ_BYTES)[Symbol.asyncIterator]());
    const heap: HeapEntry<T, K>[] = [];
    const less = (a: HeapEntry<T, K>, b: HeapEntry<T, K>) => {
      const order = this.#compare(a.key, b.key);
      return order < 0 || (order === 0 && a.run < b.run);
    };
    const at = (index: number) => heap[index] as HeapEntry<T, K>;
    const swap = (a: number, b: number) => {
      const entry = at(a);
      heap[a] = at(b);
      heap[b] = entry;
    };
    const push = (record: T, run: number) => {
      heap.push({ record, key: this.#keyOf(record), run });
      for (let index = heap.length - 1; index > 0; ) {
        const parent = (index - 1) >> 1;
        if (!less(at(index), at(parent))) break;
        swap(index, parent);
        index = parent;
      }
    };
    const pop = (): HeapEntry<T, K> | undefined => {
      const top = heap[0];
      const last = heap.pop();
      if (heap.length === 0 || last === undefined) return top;
      heap[0] = last;
      for (let index = 0; ; ) {
        const left = index * 2 + 1;
        let smallest = index;
        if (left < heap.length && less(at(left), at(smallest))) smallest = left;
        if (left + 1 < heap.length && less(at(left + 1), at(smallest))) smallest = left + 1;
        if (smallest === index) break;
        swap(index, smallest);
        index = smallest;
      }
      return top;
    };
    try {
      for (const [run, reader] of readers.entries()) {
        const next = await reader.next();
        if (next.done !== true) push(JSON.parse(next.value) as T, run);
      }
      for (let top = pop(); top !== undefined; top = pop()) {
        yield top.record;
        const next = await readers[top.run]?.next();
        if (next !== undefined && next.done !== true) push(JSON.parse(next.value) as T, top.run);
      }
    } finally {
      await Promise.all(readers.map((reader) => reader.return?.(undefined)));
    }
  }
}

interface HeapEntry<T, K> {
  readonly record: T;
  readonly key: K;
  readonly run: number;
}

/** How much a sort holds before it writes a run, and how many runs it merges at once. */
export interface SpillOptions {
  /** JSON held before a run is written. @default 2 MiB */
  readonly runBytes?: number;
  /** Records held before a run is written (small records cost more than their JSON). @default 20,000 */
  readonly runRecords?: number;
  /** Runs merged at once; more runs are first merged into fewer. @default 256 (a million comments need one merge) */
  readonly fanIn?: number;
}

/** Bytes gathered before a write to a run file. */
const WRITE_BYTES = 64 * 1024;

const NEWLINE = 0x0a;

/** Bytes read at a time from a run file: 256 runs merged at once read through 4 MiB. */
const RUN_READ_BYTES = 16 * 1024;
