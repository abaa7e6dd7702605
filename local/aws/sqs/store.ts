/**
 * The queues by name, and where they live on disk: `<root>/<queue>/queue.json` (name, creation time,
 * attributes) beside the queue's journal. Queues are read back at start; a queue is found by its URL
 * or ARN, created, or given new attributes here.
 */
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
import { join } from 'node:path';
import { z } from 'zod';
import { Journal, replayJournal, snapshotOf, syncDirectory } from './journal.ts';
import { ACCOUNT, DEFAULT_ATTRIBUTES, QUEUE_NAME } from './limits.ts';
import { SqsFailure } from './protocol.ts';
import { Queue } from './queue.ts';

const queueFileSchema = z.object({
  name: z.string(),
  created: z.number(),
  attributes: z.record(z.string(), z.string()),
});

/** An operation of the local SQS: the request's JSON in, the answer's JSON out, over the queues. */
export type SqsOperation = (store: QueueStore, input: unknown) => unknown;

export class QueueStore {
  readonly #queues = new Map<string, Queue>();
  /** True once the server is closing: a long poll under way stops waiting. */
  closed = false;

  private constructor(
    readonly region: string,
    readonly root: string | undefined,
  ) {}

  /** The queues under `root`, replayed from their journals; none, in memory, without a root. */
  static open(region: string, root: string | undefined): QueueStore {
    const store = new QueueStore(region, root);
    if (root !== undefined) {
      mkdirSync(root, { recursive: true });
      for (const entry of readdirSync(root, { withFileTypes: true })) {
        if (entry.isDirectory() && QUEUE_NAME.test(entry.name)) {
          const queue = loadQueue(join(root, entry.name));
          if (queue !== undefined) store.#queues.set(queue.name, queue);
        }
      }
    }
    return store;
  }

  url(name: string): string {
    return `http://sqs.${this.region}.localhost/${ACCOUNT}/${name}`;
  }

  arn(name: string): string {
    return `arn:aws:sqs:${this.region}:${ACCOUNT}:${name}`;
  }

  names(): string[] {
    return [...this.#queues.keys()];
  }

  /** The queue a request's `QueueUrl` names, or the failure SQS gives for a queue that does not exist. */
  queueOf(input: unknown): Queue {
    const { QueueUrl } = z.object({ QueueUrl: z.string() }).parse(input);
    const name = QueueUrl.split('/').pop() ?? '';
    const queue = this.#queues.get(name);
    if (queue === undefined) {
      throw new SqsFailure(
        'QueueDoesNotExist',
        'The specified queue does not exist.',
        'AWS.SimpleQueueService.NonExistentQueue',
      );
    }
    return queue;
  }

  /** The queue an ARN names (a redrive policy's target), if it exists. */
  byArn(arn: string): Queue | undefined {
    return this.#queues.get(arn.split(':').pop() ?? '');
  }

  /** Creates the queue, or updates its attributes when it exists; answers its URL. */
  create(name: string, requested: Record<string, string>): string {
    if (!QUEUE_NAME.test(name)) {
      throw new SqsFailure(
        'InvalidParameterValue',
        `Queue name ${JSON.stringify(name)} is invalid: use 1-80 letters, digits, hyphens or underscores (FIFO queues are not supported locally).`,
      );
    }
    const existing = this.#queues.get(name);
    // Unlike SQS, a second create with other attributes updates them: a restarted local mode may
    // create its queues with settings a newer version changed.
    const attributes = { ...DEFAULT_ATTRIBUTES, ...existing?.attributes, ...requested };
    const queue =
      existing ??
      new Queue(name, Date.now(), attributes, this.root ? newJournal(this.root, name) : undefined);
    queue.attributes = attributes;
    if (this.root !== undefined) saveQueueFile(join(this.root, name), queue);
    this.#queues.set(name, queue);
    return this.url(name);
  }

  setAttributes(queue: Queue, attributes: Record<string, string>): void {
    queue.attributes = { ...queue.attributes, ...attributes };
    if (this.root !== undefined) saveQueueFile(join(this.root, queue.name), queue);
  }

  /** Marks the store closed and ends every long poll under way. */
  stopPolls(): void {
    this.closed = true;
    for (const queue of this.#queues.values()) queue.notify();
  }

  closeJournals(): void {
    for (const queue of this.#queues.values()) queue.journal?.close();
  }
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
  const path = join(dir, 'journal.jsonl');
  const messages = replayJournal(path);
  // Compacted at start: the journal holds the live messages only.
  const queue = new Queue(file.name, file.created, file.attributes, new Journal(path, snapshotOf(messages)));
  for (const message of messages.values()) queue.messages.set(message.id, message);
  return queue;
}
