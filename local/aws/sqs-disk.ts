/**
 * A local SQS that keeps what it acknowledged: the SQS JSON protocol (AWS JSON 1.0,
 * `X-Amz-Target: AmazonSQS.<Op>`) on loopback, with each queue's messages in an append-only journal
 * under `<root>/<queue>/journal.jsonl`. A send or a delete is answered only once its record is on
 * the disk (written and fdatasync'ed; concurrent calls share one flush), so what a producer was told
 * is sent survives a kill, and a deleted message never comes back. A message that was received but
 * not deleted becomes visible again after a restart, as it would once its visibility timeout ran
 * out. The journal is replayed and compacted at start, and compacted again while it runs once dead
 * records outnumber live ones.
 *
 * Without a root it keeps everything in memory, for tests. Standard queues only: no FIFO, tags or
 * permissions, which svc-dsr does not use.
 */

import { createHash, randomBytes, randomUUID } from 'node:crypto';
import {
  closeSync,
  fdatasyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { z } from 'zod';
import { listen, readBody, trackSockets } from '../http.ts';

/** Options for {@link startDiskSqs}. */
export interface DiskSqsOptions {
  /** Folder for the queues' journals, kept across restarts. @default in memory */
  readonly root?: string;
  readonly region?: string;
  /** Loopback host to bind. @default 127.0.0.1 */
  readonly host?: string;
  /** Called with the HTTP server before it listens (local mode's throttling wraps it). */
  readonly wrapServer?: (server: Server) => void;
}

/** A running local SQS; `close()` stops it and ends any long poll under way. */
export interface DiskSqs {
  readonly endpoint: string;
  close(): Promise<void>;
}

const ACCOUNT = '000000000000';
const MAX_BODY_BYTES = 262_144;
/** A request's body at most: a batch of ten messages at the largest size, escaped in JSON. */
const MAX_REQUEST_BYTES = 8 * 1024 * 1024;
const MAX_WAIT_SECONDS = 20;
/** Compact a journal while running once it holds this many records more than live messages. */
const COMPACT_AFTER_DEAD_RECORDS = 10_000;

/** A character SQS refuses in a message body: anything outside #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF. */
const SQS_INVALID_BODY_CHAR = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/u;
const QUEUE_NAME = /^[A-Za-z0-9_-]{1,80}$/;

/** An SQS error as the wire carries it: a code for `__type` and the query-compatible header. */
class SqsFailure extends Error {
  override readonly name = 'SqsFailure';
  constructor(
    readonly code: string,
    message: string,
    readonly queryCode = code,
    readonly status = 400,
  ) {
    super(message);
  }
}

const messageAttributeSchema = z.object({
  DataType: z.string().min(1),
  StringValue: z.string().optional(),
  BinaryValue: z.string().optional(),
});
type MessageAttribute = z.infer<typeof messageAttributeSchema>;
const messageAttributesSchema = z.record(z.string(), messageAttributeSchema);

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
type JournalRecord = z.infer<typeof recordSchema>;

const queueFileSchema = z.object({
  name: z.string(),
  created: z.number(),
  attributes: z.record(z.string(), z.string()),
});

interface Message {
  readonly id: string;
  readonly body: string;
  readonly md5: string;
  readonly attributes: Record<string, MessageAttribute> | undefined;
  readonly sent: number;
  visibleAt: number;
  receiveCount: number;
  firstReceive: number | undefined;
  receipt: string | undefined;
  /** False until its send record is on the disk: it is not received before it counts as sent. */
  stored: boolean;
}

/**
 * A queue's journal: records are appended in order; `append` resolves once they are on the disk.
 * Calls that arrive while a flush is running are written together by the next one.
 */
class Journal {
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

function syncDirectory(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A message as its journal's send record; `rc` and `first` carry its receives over a compaction. */
function sendRecord(message: Message): JournalRecord {
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
function snapshotOf(messages: ReadonlyMap<string, Message>): JournalRecord[] {
  return [...messages.values()].map(sendRecord);
}

class Queue {
  readonly messages = new Map<string, Message>();
  #waiters = new Set<() => void>();

  constructor(
    readonly name: string,
    readonly created: number,
    public attributes: Record<string, string>,
    readonly journal: Journal | undefined,
  ) {}

  number(attribute: string, fallback: number): number {
    const value = Number(this.attributes[attribute]);
    return Number.isFinite(value) ? value : fallback;
  }

  /** Wakes every long poll waiting on this queue. */
  notify(): void {
    for (const wake of this.#waiters) wake();
    this.#waiters.clear();
  }

  /** Resolves at the next send, or after `ms`. */
  waitForMessage(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#waiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#waiters.add(wake);
    });
  }

  async persist(records: readonly JournalRecord[], durable: boolean): Promise<void> {
    if (this.journal === undefined) return;
    await this.journal.append(records, durable);
    if (this.journal.records - this.messages.size > COMPACT_AFTER_DEAD_RECORDS) {
      this.journal.compact(snapshotOf(this.messages));
    }
  }
}

const DEFAULT_ATTRIBUTES: Record<string, string> = {
  VisibilityTimeout: '30',
  MessageRetentionPeriod: '345600',
  MaximumMessageSize: String(MAX_BODY_BYTES),
  DelaySeconds: '0',
  ReceiveMessageWaitTimeSeconds: '0',
};

/** Starts the local SQS on a free loopback port, replaying the journals under `root`. */
export async function startDiskSqs(options: DiskSqsOptions = {}): Promise<DiskSqs> {
  const region = options.region ?? 'us-east-1';
  const host = options.host ?? '127.0.0.1';
  const { root } = options;
  const queues = new Map<string, Queue>();
  if (root !== undefined) {
    mkdirSync(root, { recursive: true });
    for (const entry of readdirSync(root, { withFileTypes: true })) {
      if (entry.isDirectory() && QUEUE_NAME.test(entry.name)) {
        const queue = loadQueue(join(root, entry.name));
        if (queue !== undefined) queues.set(queue.name, queue);
      }
    }
  }
  let closed = false;

  const queueUrl = (name: string) => `http://sqs.${region}.localhost/${ACCOUNT}/${name}`;
  const queueArn = (name: string) => `arn:aws:sqs:${region}:${ACCOUNT}:${name}`;
  const queueOf = (input: unknown): Queue => {
    const { QueueUrl } = z.object({ QueueUrl: z.string() }).parse(input);
    const name = QueueUrl.split('/').pop() ?? '';
    const queue = queues.get(name);
    if (queue === undefined) {
      throw new SqsFailure(
        'QueueDoesNotExist',
        'The specified queue does not exist.',
        'AWS.SimpleQueueService.NonExistentQueue',
      );
    }
    return queue;
  };

  const createQueue = (input: unknown) => {
    const { QueueName, Attributes = {} } = z
      .object({ QueueName: z.string(), Attributes: z.record(z.string(), z.string()).optional() })
      .parse(input);
    if (!QUEUE_NAME.test(QueueName)) {
      throw new SqsFailure(
        'InvalidParameterValue',
        `Queue name ${JSON.stringify(QueueName)} is invalid: use 1-80 letters, digits, hyphens or underscores (FIFO queues are not supported locally).`,
      );
    }
    const existing = queues.get(QueueName);
    // Unlike SQS, a second create with other attributes updates them: a restarted local mode may
    // create its queues with settings a newer version changed.
    const attributes = { ...DEFAULT_ATTRIBUTES, ...existing?.attributes, ...Attributes };
    const queue =
      existing ??
      new Queue(QueueName, Date.now(), attributes, root ? newJournal(root, QueueName) : undefined);
    queue.attributes = attributes;
    if (root !== undefined) saveQueueFile(join(root, QueueName), queue);
    queues.set(QueueName, queue);
    return { QueueUrl: queueUrl(QueueName) };
  };

  const send = async (queue: Queue, entries: readonly SendEntry[]) => {
    const now = Date.now();
    const maxBytes = queue.number('MaximumMessageSize', MAX_BODY_BYTES);
    const accepted: { entry: SendEntry; message: Message }[] = [];
    const failed: { Id: string; Code: string; Message: string; SenderFault: true }[] = [];
    for (const entry of entries) {
      const problem = bodyProblem(entry.MessageBody, maxBytes);
      if (problem !== undefined) {
        failed.push({ Id: entry.Id, Code: problem.code, Message: problem.message, SenderFault: true });
        continue;
      }
      const delay = entry.DelaySeconds ?? queue.number('DelaySeconds', 0);
      accepted.push({
        entry,
        message: {
          id: randomUUID(),
          body: entry.MessageBody,
          md5: md5(entry.MessageBody),
          attributes: entry.MessageAttributes,
          sent: now,
          visibleAt: now + delay * 1000,
          receiveCount: 0,
          firstReceive: undefined,
          receipt: undefined,
          stored: false,
        },
      });
    }
    // On the disk first: a message counts as sent only once it would survive a kill.
    // The map changes before the journal, so a compaction's snapshot never misses a written record.
    for (const { message } of accepted) queue.messages.set(message.id, message);
    try {
      await queue.persist(
        accepted.map(({ message }) => sendRecord(message)),
        true,
      );
    } catch (error) {
      for (const { message } of accepted) queue.messages.delete(message.id);
      throw error;
    }
    for (const { message } of accepted) message.stored = true;
    queue.notify();
    return {
      failed,
      successful: accepted.map(({ entry, message }) => ({
        Id: entry.Id,
        MessageId: message.id,
        MD5OfMessageBody: message.md5,
        ...(message.attributes && Object.keys(message.attributes).length > 0
          ? { MD5OfMessageAttributes: md5OfAttributes(message.attributes) }
          : {}),
      })),
    };
  };

  /** Moves the message to the dead-letter queue: there first, then gone from here. */
  const deadLetter = async (queue: Queue, message: Message, targetArn: string) => {
    const target = queues.get(targetArn.split(':').pop() ?? '');
    if (target === undefined) return false;
    const moved: Message = { ...message, visibleAt: 0, receipt: undefined, stored: false };
    queue.messages.delete(message.id);
    target.messages.set(moved.id, moved);
    await target.persist([sendRecord(moved)], true);
    moved.stored = true;
    target.notify();
    await queue.persist([{ op: 'del', id: message.id }], true);
    return true;
  };

  const receiveNow = async (queue: Queue, max: number, visibilitySeconds: number) => {
    const now = Date.now();
    const retentionMs = queue.number('MessageRetentionPeriod', 345_600) * 1000;
    const redrive = redrivePolicy(queue.attributes.RedrivePolicy);
    const taken: Message[] = [];
    const records: JournalRecord[] = [];
    for (const message of [...queue.messages.values()]) {
      if (taken.length >= max) break;
      if (message.visibleAt > now || !message.stored) continue;
      if (now - message.sent > retentionMs) {
        queue.messages.delete(message.id);
        records.push({ op: 'del', id: message.id });
        continue;
      }
      if (redrive && message.receiveCount >= redrive.maxReceiveCount) {
        if (await deadLetter(queue, message, redrive.deadLetterTargetArn)) continue;
      }
      message.receiveCount += 1;
      message.firstReceive ??= now;
      message.visibleAt = now + visibilitySeconds * 1000;
      message.receipt = `${message.id}.${randomBytes(12).toString('base64url')}`;
      taken.push(message);
      records.push({ op: 'recv', id: message.id, at: now });
    }
    // Receive counts and expiries need no flush: a kill keeps what was written, and only a lost
    // power supply could undercount a receive.
    await queue.persist(records, false);
    return taken;
  };

  const receive = async (input: unknown) => {
    const queue = queueOf(input);
    const request = z
      .object({
        MaxNumberOfMessages: z.number().int().min(1).max(10).optional(),
        VisibilityTimeout: z.number().int().min(0).max(43_200).optional(),
        WaitTimeSeconds: z.number().int().min(0).max(MAX_WAIT_SECONDS).optional(),
        AttributeNames: z.array(z.string()).optional(),
        MessageSystemAttributeNames: z.array(z.string()).optional(),
        MessageAttributeNames: z.array(z.string()).optional(),
      })
      .loose()
      .parse(input);
    const max = request.MaxNumberOfMessages ?? 1;
    const visibility = request.VisibilityTimeout ?? queue.number('VisibilityTimeout', 30);
    const waitSeconds = request.WaitTimeSeconds ?? queue.number('ReceiveMessageWaitTimeSeconds', 0);
    const deadline = Date.now() + waitSeconds * 1000;
    let taken = await receiveNow(queue, max, visibility);
    while (taken.length === 0 && !closed && Date.now() < deadline) {
      // A send wakes the poll at once; a message whose visibility ends is seen within 100 ms.
      await queue.waitForMessage(Math.min(100, deadline - Date.now()));
      taken = await receiveNow(queue, max, visibility);
    }
    const systemNames = new Set([
      ...(request.AttributeNames ?? []),
      ...(request.MessageSystemAttributeNames ?? []),
    ]);
    const attributeNames = request.MessageAttributeNames ?? [];
    return {
      Messages: taken.map((message) => {
        const attributes = selectAttributes(message.attributes, attributeNames);
        const system = systemAttributes(message, systemNames);
        return {
          MessageId: message.id,
          ReceiptHandle: message.receipt,
          Body: message.body,
          MD5OfBody: message.md5,
          ...(Object.keys(system).length > 0 ? { Attributes: system } : {}),
          ...(attributes
            ? { MessageAttributes: attributes, MD5OfMessageAttributes: md5OfAttributes(attributes) }
            : {}),
        };
      }),
    };
  };

  /** The in-flight message a receipt handle names, or a failure SQS would give. */
  const byReceipt = (queue: Queue, receipt: string): Message | undefined => {
    const id = receipt.split('.')[0] ?? '';
    if (!/^[0-9a-f-]{36}$/.test(id)) {
      throw new SqsFailure('ReceiptHandleIsInvalid', `The receipt handle "${receipt}" is not valid.`);
    }
    return queue.messages.get(id);
  };

  const deleteMessages = async (queue: Queue, receipts: readonly string[]) => {
    const gone: JournalRecord[] = [];
    for (const receipt of receipts) {
      const message = byReceipt(queue, receipt);
      if (message === undefined) continue;
      queue.messages.delete(message.id);
      gone.push({ op: 'del', id: message.id });
    }
    // Answered once on the disk: a deleted message never comes back after a restart.
    await queue.persist(gone, true);
  };

  const changeVisibility = (queue: Queue, receipt: string, seconds: number) => {
    const message = byReceipt(queue, receipt);
    if (message === undefined || message.receipt === undefined || message.visibleAt <= Date.now()) {
      throw new SqsFailure(
        'MessageNotInflight',
        'The message referred to is not in flight.',
        'AWS.SimpleQueueService.MessageNotInflight',
      );
    }
    message.visibleAt = Date.now() + seconds * 1000;
    if (seconds === 0) queue.notify();
  };

  const batch = <T extends { Id: string }>(input: unknown, entry: z.ZodType<T>) => {
    const { Entries } = z.object({ Entries: z.array(entry) }).parse(input);
    if (Entries.length === 0) {
      throw new SqsFailure(
        'EmptyBatchRequest',
        'There should be at least one entry in the request.',
        'AWS.SimpleQueueService.EmptyBatchRequest',
      );
    }
    if (Entries.length > 10) {
      throw new SqsFailure(
        'TooManyEntriesInBatchRequest',
        `Maximum number of entries per request are 10. You have sent ${Entries.length}.`,
        'AWS.SimpleQueueService.TooManyEntriesInBatchRequest',
      );
    }
    if (new Set(Entries.map((item) => item.Id)).size !== Entries.length) {
      throw new SqsFailure(
        'BatchEntryIdsNotDistinct',
        'Two or more batch entries in the request have the same Id.',
        'AWS.SimpleQueueService.BatchEntryIdsNotDistinct',
      );
    }
    return Entries;
  };

  const actions: Record<string, (input: unknown) => unknown> = {
    CreateQueue: createQueue,
    GetQueueUrl(input) {
      const { QueueName } = z.object({ QueueName: z.string() }).parse(input);
      return { QueueUrl: queueUrl(queueOf({ QueueUrl: queueUrl(QueueName) }).name) };
    },
    ListQueues(input) {
      const { QueueNamePrefix = '' } = z
        .object({ QueueNamePrefix: z.string().optional() })
        .loose()
        .parse(input);
      return {
        QueueUrls: [...queues.keys()].filter((name) => name.startsWith(QueueNamePrefix)).map(queueUrl),
      };
    },
    GetQueueAttributes(input) {
      const queue = queueOf(input);
      const { AttributeNames = ['All'] } = z
        .object({ AttributeNames: z.array(z.string()).optional() })
        .loose()
        .parse(input);
      const now = Date.now();
      const messages = [...queue.messages.values()];
      const all: Record<string, string> = {
        ...queue.attributes,
        QueueArn: queueArn(queue.name),
        CreatedTimestamp: String(Math.floor(queue.created / 1000)),
        LastModifiedTimestamp: String(Math.floor(queue.created / 1000)),
        ApproximateNumberOfMessages: String(messages.filter((m) => m.visibleAt <= now).length),
        ApproximateNumberOfMessagesNotVisible: String(
          messages.filter((m) => m.visibleAt > now && m.receipt !== undefined).length,
        ),
        ApproximateNumberOfMessagesDelayed: String(
          messages.filter((m) => m.visibleAt > now && m.receipt === undefined).length,
        ),
      };
      const wanted = AttributeNames.includes('All') ? Object.keys(all) : AttributeNames;
      return {
        Attributes: Object.fromEntries(wanted.filter((name) => name in all).map((name) => [name, all[name]])),
      };
    },
    SetQueueAttributes(input) {
      const queue = queueOf(input);
      const { Attributes } = z
        .object({ Attributes: z.record(z.string(), z.string()) })
        .loose()
        .parse(input);
      queue.attributes = { ...queue.attributes, ...Attributes };
      if (root !== undefined) saveQueueFile(join(root, queue.name), queue);
      return {};
    },
    async SendMessage(input) {
      const queue = queueOf(input);
      const entry = sendEntrySchema.omit({ Id: true }).parse(input);
      const { successful, failed } = await send(queue, [{ ...entry, Id: '0' }]);
      const [problem] = failed;
      if (problem !== undefined) throw new SqsFailure(problem.Code, problem.Message);
      const [{ Id: _id, ...sent } = { Id: '', MessageId: '', MD5OfMessageBody: '' }] = successful;
      return sent;
    },
    async SendMessageBatch(input) {
      const queue = queueOf(input);
      const entries = batch(input, sendEntrySchema);
      const { successful, failed } = await send(queue, entries);
      return { Successful: successful, Failed: failed };
    },
    ReceiveMessage: receive,
    async DeleteMessage(input) {
      const queue = queueOf(input);
      const { ReceiptHandle } = z.object({ ReceiptHandle: z.string() }).loose().parse(input);
      await deleteMessages(queue, [ReceiptHandle]);
      return {};
    },
    async DeleteMessageBatch(input) {
      const queue = queueOf(input);
      const entries = batch(input, z.object({ Id: z.string(), ReceiptHandle: z.string() }));
      const failed: { Id: string; Code: string; Message: string; SenderFault: true }[] = [];
      const valid: typeof entries = [];
      for (const entry of entries) {
        try {
          byReceipt(queue, entry.ReceiptHandle);
          valid.push(entry);
        } catch (error) {
          if (!(error instanceof SqsFailure)) throw error;
          failed.push({ Id: entry.Id, Code: error.code, Message: error.message, SenderFault: true });
        }
      }
      await deleteMessages(
        queue,
        valid.map((entry) => entry.ReceiptHandle),
      );
      return { Successful: valid.map((entry) => ({ Id: entry.Id })), Failed: failed };
    },
    ChangeMessageVisibility(input) {
      const queue = queueOf(input);
      const { ReceiptHandle, VisibilityTimeout } = z
        .object({ ReceiptHandle: z.string(), VisibilityTimeout: z.number().int().min(0).max(43_200) })
        .loose()
        .parse(input);
      changeVisibility(queue, ReceiptHandle, VisibilityTimeout);
      return {};
    },
    ChangeMessageVisibilityBatch(input) {
      const queue = queueOf(input);
      const entries = batch(
        input,
        z.object({
          Id: z.string(),
          ReceiptHandle: z.string(),
          VisibilityTimeout: z.number().int().min(0).max(43_200),
        }),
      );
      const successful: { Id: string }[] = [];
      const failed: { Id: string; Code: string; Message: string; SenderFault: true }[] = [];
      for (const entry of entries) {
        try {
          changeVisibility(queue, entry.ReceiptHandle, entry.VisibilityTimeout);
          successful.push({ Id: entry.Id });
        } catch (error) {
          if (!(error instanceof SqsFailure)) throw error;
          failed.push({ Id: entry.Id, Code: error.code, Message: error.message, SenderFault: true });
        }
      }
      return { Successful: successful, Failed: failed };
    },
    async PurgeQueue(input) {
      const queue = queueOf(input);
      queue.messages.clear();
      await queue.persist([{ op: 'purge' }], true);
      return {};
    },
  };

  const server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      reply(response, 500, { __type: 'com.amazonaws.sqs#InternalError', message: String(error) });
    });
  });
  options.wrapServer?.(server);
  const sockets = trackSockets(server);

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const body = await readBody(request, MAX_REQUEST_BYTES);
    const target = String(request.headers['x-amz-target'] ?? '');
    const action = actions[target.replace(/^AmazonSQS\./, '')];
    if (action === undefined) {
      const failure = new SqsFailure(
        'InvalidAction',
        `The action ${JSON.stringify(target)} is not valid for this endpoint; the local SQS speaks the JSON protocol (X-Amz-Target: AmazonSQS.<Operation>).`,
      );
      replyFailure(response, failure);
      return;
    }
    try {
      const input: unknown = body.length === 0 ? {} : JSON.parse(body.toString('utf8'));
      reply(response, 200, await action(input));
    } catch (error) {
      if (error instanceof SqsFailure) replyFailure(response, error);
      else if (error instanceof z.ZodError || error instanceof SyntaxError) {
        replyFailure(
          response,
          new SqsFailure('InvalidParameterValue', `The request is not valid: ${error.message}`),
        );
      } else throw error;
    }
  }

  const { endpoint } = await listen(server, 0, host);
  return {
    endpoint,
    close() {
      closed = true;
      for (const queue of queues.values()) queue.notify();
      return new Promise<void>((resolve, reject) => {
        server.close((error) => {
          for (const queue of queues.values()) queue.journal?.close();
          if (error) reject(error);
          else resolve();
        });
        server.closeIdleConnections();
        // Give a long poll that was just woken the moment it needs to answer, then cut the rest.
        setTimeout(() => {
          for (const socket of sockets) socket.destroy();
        }, 50).unref();
      });
    },
  };
}

const sendEntrySchema = z
  .object({
    Id: z.string(),
    MessageBody: z.string(),
    DelaySeconds: z.number().int().min(0).max(900).optional(),
    MessageAttributes: messageAttributesSchema.optional(),
  })
  .loose();
type SendEntry = z.infer<typeof sendEntrySchema>;

function bodyProblem(body: string, maxBytes: number): { code: string; message: string } | undefined {
  if (body.length === 0) {
    return { code: 'InvalidParameterValue', message: 'The request must contain the parameter MessageBody.' };
  }
  if (SQS_INVALID_BODY_CHAR.test(body)) {
    return {
      code: 'InvalidMessageContents',
      message:
        'Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF',
    };
  }
  if (Buffer.byteLength(body, 'utf8') > maxBytes) {
    return {
      code: 'InvalidParameterValue',
      message: `One or more parameters are invalid. Reason: Message must be shorter than ${maxBytes} bytes.`,
    };
  }
  return undefined;
}

const redriveSchema = z.object({
  deadLetterTargetArn: z.string(),
  maxReceiveCount: z.coerce.number().int().min(1),
});

function redrivePolicy(text: string | undefined) {
  if (text === undefined || text === '') return undefined;
  const parsed = redriveSchema.safeParse(JSON.parse(text));
  return parsed.success ? parsed.data : undefined;
}

function systemAttributes(message: Message, names: ReadonlySet<string>): Record<string, string> {
  const all: Record<string, string> = {
    SenderId: ACCOUNT,
    SentTimestamp: String(message.sent),
    ApproximateReceiveCount: String(message.receiveCount),
    ApproximateFirstReceiveTimestamp: String(message.firstReceive ?? message.sent),
  };
  if (names.has('All')) return all;
  return Object.fromEntries(Object.entries(all).filter(([name]) => names.has(name)));
}

function selectAttributes(
  attributes: Record<string, MessageAttribute> | undefined,
  names: readonly string[],
): Record<string, MessageAttribute> | undefined {
  if (attributes === undefined || names.length === 0) return undefined;
  const wanted = (name: string) =>
    names.some(
      (pattern) =>
        pattern === 'All' ||
        pattern === '.*' ||
        pattern === name ||
        (pattern.endsWith('.*') && name.startsWith(pattern.slice(0, -1))),
    );
  const selected = Object.fromEntries(Object.entries(attributes).filter(([name]) => wanted(name)));
  return Object.keys(selected).length > 0 ? selected : undefined;
}

function md5(text: string | Buffer): string {
  return createHash('md5').update(text).digest('hex');
}

/** MD5OfMessageAttributes as SQS computes it: length-prefixed name, type, transport byte and value, by name. */
function md5OfAttributes(attributes: Record<string, MessageAttribute>): string {
  const parts: Buffer[] = [];
  const prefixed = (value: Buffer) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(value.length);
    parts.push(length, value);
  };
  for (const name of Object.keys(attributes).sort()) {
    const attribute = attributes[name];
    if (attribute === undefined) continue;
    prefixed(Buffer.from(name, 'utf8'));
    prefixed(Buffer.from(attribute.DataType, 'utf8'));
    if (attribute.BinaryValue !== undefined) {
      parts.push(Buffer.from([2]));
      prefixed(Buffer.from(attribute.BinaryValue, 'base64'));
    } else {
      parts.push(Buffer.from([1]));
      prefixed(Buffer.from(attribute.StringValue ?? '', 'utf8'));
    }
  }
  return md5(Buffer.concat(parts));
}

function reply(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/x-amz-json-1.0',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

function replyFailure(response: ServerResponse, failure: SqsFailure): void {
  response.setHeader('x-amzn-query-error', `${failure.queryCode};Sender`);
  reply(response, failure.status, { __type: `com.amazonaws.sqs#${failure.code}`, message: failure.message });
}

function newJournal(root: string, name: string): Journal {
  mkdirSync(join(root, name), { recursive: true });
  return new Journal(join(root, name, 'journal.jsonl'), []);
}

function saveQueueFile(dir: string, queue: Queue): void {
  const path = join(dir, 'queue.json');
  const temp = `${path}.tmp`;
  const fd = openSync(temp, 'w', 0o600);
  try {
    writeSync(
      fd,
      `${JSON.stringify({ name: queue.name, created: queue.created, attributes: queue.attributes })}\n`,
    );
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temp, path);
  syncDirectory(dir);
}

/** Replays a queue's journal into memory and compacts it; a queue folder without queue.json is skipped. */
function loadQueue(dir: string): Queue | undefined {
  let file: z.infer<typeof queueFileSchema>;
  try {
    file = queueFileSchema.parse(JSON.parse(readFileSync(join(dir, 'queue.json'), 'utf8')));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(
      `the local SQS cannot read ${join(dir, 'queue.json')}: ${error instanceof Error ? error.message : String(error)}; remove that queue's folder to start it empty`,
    );
  }
  // A rewrite a kill cut short left its temporary file; the journal it was replacing is intact.
  for (const name of readdirSync(dir)) if (name.endsWith('.tmp')) rmSync(join(dir, name), { force: true });
  const messages = new Map<string, Message>();
  const path = join(dir, 'journal.jsonl');
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
  });
  // Compacted at start: the journal holds the live messages only.
  const queue = new Queue(file.name, file.created, file.attributes, new Journal(path, snapshotOf(messages)));
  for (const message of messages.values()) queue.messages.set(message.id, message);
  return queue;
}
