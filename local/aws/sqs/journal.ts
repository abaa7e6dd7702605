/**
 * A queue's journal on disk: one JSON line per send, receive, delete or purge, appended in order and
 * flushed before a send or a delete is answered; replayed into memory and compacted at start. A
 * message's body holds a request, primary_key included: once its delete (or a purge) is on the disk,
 * the body in its send line is blanked in place, so a processed request does not stay readable in
 * the journal until the next compaction.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fdatasyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { type Message, md5, messageAttributesSchema } from './messages.ts';

/** One journal line. `send` carries the message; `recv` counts a receive; `del` ends it. */
const recordSchema = z.discriminatedUnion('op', [
  z.object({
    op: z.literal('send'),
    id: z.string(),
    body: z.string(),
    sent: z.number(),
    attrs: messageAttributesSchema.optional(),
    visible: z.number().optional(),
    rc: z.number().optional(),
    first: z.number().optional(),
  }),
  z.object({ op: z.literal('recv'), id: z.string(), at: z.number() }),
  z.object({ op: z.literal('del'), id: z.string() }),
  z.object({ op: z.literal('purge') }),
]);
export type JournalRecord = z.infer<typeof recordSchema>;

/** Where a send line's body lies in the journal file: its bytes between the quotes. */
interface BodySpan {
  readonly offset: number;
  readonly length: number;
}

/** One record as its journal line, with where its body lies within the line (send records). */
interface Line {
  readonly record: JournalRecord;
  readonly text: string;
  readonly body?: BodySpan;
}

/**
 * A queue's journal: records are appended in order; `append` resolves once they are on the disk.
 * Calls that arrive while a flush is running are written together by the next one.
 */
export class Journal {
  #fd: number;
  /** The file's length: records are written at this offset (positional writes, so a blanking can go anywhere). */
  #size = 0;
  /** Where each live message's body lies in the file, by message id. */
  #bodies = new Map<string, BodySpan>();
  #pending: { lines: Line[]; durable: boolean; done: () => void; failed: (error: unknown) => void }[] = [];
  #flushing = false;
  records = 0;

  constructor(
    private readonly path: string,
    initial: readonly JournalRecord[],
  ) {
    this.#fd = this.#rewrite(initial);
    this.records = initial.length;
  }

  /** Replaces the journal with `records` in one rename; returns a descriptor to write to. */
  #rewrite(records: readonly JournalRecord[]): number {
    const { path } = this;
    const temp = `${path}.${randomBytes(4).toString('hex')}.tmp`;
    const fd = openSync(temp, 'w', 0o600);
    const lines = records.map(lineOf);
    let size = 0;
    try {
      if (lines.length > 0) size = writeSync(fd, lines.map((line) => line.text).join(''));
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, path);
    syncDirectory(join(path, '..'));
    this.#size = 0;
    this.#bodies.clear();
    this.#place(lines);
    if (this.#size !== size) throw new Error(`the local SQS journal ${path} was not written whole`);
    return openSync(path, 'r+');
  }

  /** Appends; `durable` waits for fdatasync (sends and deletes), otherwise only for the write. */
  append(records: readonly JournalRecord[], durable: boolean): Promise<void> {
    if (records.length === 0) return Promise.resolve();
    this.records += records.length;
    const lines = records.map(lineOf);
    return new Promise((done, failed) => {
      this.#pending.push({ lines, durable, done, failed });
      if (!this.#flushing) setImmediate(() => this.#flush());
      this.#flushing = true;
    });
  }

  #flush(): void {
    const batch = this.#pending;
    this.#pending = [];
    try {
      const lines = batch.flatMap((entry) => entry.lines);
      const text = Buffer.from(lines.map((line) => line.text).join(''));
      writeSync(this.#fd, text, 0, text.length, this.#size);
      if (batch.some((entry) => entry.durable)) fdatasyncSync(this.#fd);
      // The deletes are on the disk: the bodies they end may go. The blanks reach the disk with the
      // next durable write (fdatasync flushes the whole file); the delete records alone already
      // keep the messages from coming back.
      this.#place(lines);
      for (const entry of batch) entry.done();
    } catch (error) {
      for (const entry of batch) entry.failed(error);
    }
    if (this.#pending.length > 0) setImmediate(() => this.#flush());
    else this.#flushing = false;
  }

  /**
   * Notes `lines` as written at the end of the file: a send's body span is kept, a delete's body
   * (and, for a purge, every body) is blanked with spaces, which leaves a valid, empty-looking line.
   */
  #place(lines: readonly Line[]): void {
    for (const line of lines) {
      const { record } = line;
      if (record.op === 'send' && line.body !== undefined) {
        this.#bodies.set(record.id, { offset: this.#size + line.body.offset, length: line.body.length });
      } else if (record.op === 'del') {
        this.#blank(record.id);
      } else if (record.op === 'purge') {
        for (const id of [...this.#bodies.keys()]) this.#blank(id);
      }
      this.#size += Buffer.byteLength(line.text);
    }
  }

  #blank(id: string): void {
    const span = this.#bodies.get(id);
    this.#bodies.delete(id);
    if (span === undefined || span.length === 0) return;
    writeSync(this.#fd, Buffer.alloc(span.length, 0x20), 0, span.length, span.offset);
  }

  /** Rewrites the journal as `records` (the live messages), once nothing is waiting to be written. */
  compact(records: readonly JournalRecord[]): void {
    if (this.#flushing) return;
    closeSync(this.#fd);
    this.#fd = this.#rewrite(records);
    this.records = records.length;
  }

  close(): void {
    if (this.#pending.length > 0) this.#flush();
    closeSync(this.#fd);
  }
}

/** A record's journal line; for a send, where the characters of its body lie within the line, in bytes. */
function lineOf(record: JournalRecord): Line {
  const text = `${JSON.stringify(record)}\n`;
  if (record.op !== 'send') return { record, text };
  // sendRecord writes op, id and body first, so the body's JSON string follows this prefix.
  const prefix = `{"op":"send","id":${JSON.stringify(record.id)},"body":`;
  if (!text.startsWith(prefix)) return { record, text };
  const quoted = Buffer.byteLength(JSON.stringify(record.body));
  return { record, text, body: { offset: Buffer.byteLength(prefix) + 1, length: quoted - 2 } };
}

/** Flushes a folder, so that a rename into it survives a power cut. */
export function syncDirectory(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A message as its journal's send record; `rc` and `first` carry its receives over a compaction. */
export function sendRecord(message: Message): JournalRecord {
  return {
    op: 'send',
    id: message.id,
    body: message.body,
    sent: message.sent,
    ...(message.attributes ? { attrs: message.attributes } : {}),
    ...(message.receiveCount === 0 && message.visibleAt > message.sent ? { visible: message.visibleAt } : {}),
    ...(message.receiveCount > 0 ? { rc: message.receiveCount } : {}),
    ...(message.firstReceive !== undefined ? { first: message.firstReceive } : {}),
  };
}

/** The journal's live content: one send record per message. */
export function snapshotOf(messages: ReadonlyMap<string, Message>): JournalRecord[] {
  return [...messages.values()].map(sendRecord);
}

/** The messages the journal at `path` leaves live (none when it is missing), by id. */
export function replayJournal(path: string): Map<string, Message> {
  const messages = new Map<string, Message>();
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const lines = text.split('\n');
  lines.forEach((line, index) => {
    if (line === '') return;
    let record: JournalRecord;
    try {
      record = recordSchema.parse(JSON.parse(line));
    } catch (error) {
      // A kill can cut only the last line short, and what it held was never acknowledged.
      if (index >= lines.length - 2) return;
      throw new Error(`the local SQS journal ${path} is damaged at line ${index + 1}: ${String(error)}`);
    }
    applyRecord(messages, record);
  });
  return messages;
}

function applyRecord(messages: Map<string, Message>, record: JournalRecord): void {
  if (record.op === 'send') {
    messages.set(record.id, {
      id: record.id,
      body: record.body,
      md5: md5(record.body),
      attributes: record.attrs,
      sent: record.sent,
      // Received and not deleted before the restart: visible again now.
      visibleAt: record.visible ?? record.sent,
      receiveCount: record.rc ?? 0,
      firstReceive: record.first,
      receipt: undefined,
      stored: true,
    });
  } else if (record.op === 'recv') {
    const message = messages.get(record.id);
    if (message) {
      message.receiveCount += 1;
      message.firstReceive ??= record.at;
    }
  } else if (record.op === 'del') messages.delete(record.id);
  else messages.clear();
}
