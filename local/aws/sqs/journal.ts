/**
 * A queue's journal on disk: one JSON line per send, receive, delete or purge, appended in order and
 * flushed before a send or a delete is answered; replayed into memory and compacted at start.
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

/**
 * A queue's journal: records are appended in order; `append` resolves once they are on the disk.
 * Calls that arrive while a flush is running are written together by the next one.
 */
export class Journal {
  #fd: number;
  #pending: { records: string; durable: boolean; done: () => void; failed: (error: unknown) => void }[] = [];
  #flushing = false;
  records = 0;

  constructor(
    private readonly path: string,
    initial: readonly JournalRecord[],
  ) {
    this.#fd = Journal.#rewrite(path, initial);
    this.records = initial.length;
  }

  /** Replaces the journal at `path` with `records` in one rename; returns a descriptor to append to. */
  static #rewrite(path: string, records: readonly JournalRecord[]): number {
    const temp = `${path}.${randomBytes(4).toString('hex')}.tmp`;
    const fd = openSync(temp, 'w', 0o600);
    try {
      if (records.length > 0) writeSync(fd, records.map((record) => `${JSON.stringify(record)}\n`).join(''));
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, path);
    syncDirectory(join(path, '..'));
    return openSync(path, 'a');
  }

  /** Appends; `durable` waits for fdatasync (sends and deletes), otherwise only for the write. */
  append(records: readonly JournalRecord[], durable: boolean): Promise<void> {
    if (records.length === 0) return Promise.resolve();
    this.records += records.length;
    const text = records.map((record) => `${JSON.stringify(record)}\n`).join('');
    return new Promise((done, failed) => {
      this.#pending.push({ records: text, durable, done, failed });
      if (!this.#flushing) setImmediate(() => this.#flush());
      this.#flushing = true;
    });
  }

  #flush(): void {
    const batch = this.#pending;
    this.#pending = [];
    try {
      writeSync(this.#fd, batch.map((entry) => entry.records).join(''));
      if (batch.some((entry) => entry.durable)) fdatasyncSync(this.#fd);
      for (const entry of batch) entry.done();
    } catch (error) {
      for (const entry of batch) entry.failed(error);
    }
    if (this.#pending.length > 0) setImmediate(() => this.#flush());
    else this.#flushing = false;
  }

  /** Rewrites the journal as `records` (the live messages), once nothing is waiting to be written. */
  compact(records: readonly JournalRecord[]): void {
    if (this.#flushing) return;
    closeSync(this.#fd);
    this.#fd = Journal.#rewrite(this.path, records);
    this.records = records.length;
  }

  close(): void {
    if (this.#pending.length > 0) this.#flush();
    closeSync(this.#fd);
  }
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
