/**
 * The ledger table's stream, for local mode: dynalite has no DynamoDB Streams, so local mode puts
 * this proxy between every client and dynalite. Writes to the ledger table (PutItem, UpdateItem,
 * DeleteItem) go one per item at a time, and a write that changed the item's status becomes a
 * stream record with its old and new images, handed in order to the consumer, as Lambda's stream
 * event source does in AWS. Everything else passes through untouched.
 *
 * The images cost no extra read in the usual case. The new image is the written item (PutItem),
 * nothing (DeleteItem), or what DynamoDB returns when the proxy asks an UpdateItem for `ALL_NEW`
 * (the caller still gets the answer it asked for). The old image is the new image of the item's
 * previous write, kept while it is recent: every write of the table passes here, so it is still
 * the stored item. An item not written since the proxy started is read first.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { DynamoDBRecord } from 'aws-lambda';
import { z } from 'zod';
import { CALLERS, runAsCaller } from '../../lambdas/shared/call-recorder.ts';
import { BodyTooLargeError, listenOnLoopback, readBody, safeJson } from '../http.ts';

export interface LedgerStream {
  /** `http://127.0.0.1:<port>`: give it to DynamoDB clients instead of dynalite's endpoint. */
  readonly endpoint: string;
  /** Resolves once every record so far has been consumed (or given up on). */
  drained(): Promise<void>;
  close(): Promise<void>;
}

export interface LedgerStreamOptions {
  /** dynalite's endpoint. */
  readonly target: string;
  readonly table: string;
  /** Takes a batch of records; a failure is retried, as the event source mapping retries. */
  readonly consume: (records: DynamoDBRecord[]) => Promise<void>;
  readonly onError?: (error: unknown) => void;
  /** Attempts per batch before it is given up on (logged). @default 5 */
  readonly attempts?: number;
}

const WRITES = new Set(['PutItem', 'UpdateItem', 'DeleteItem']);
/** DynamoDB's limit on one HTTP request (16 MB): a larger body is refused before it is held whole. */
export const MAX_REQUEST_BYTES = 16 * 1024 * 1024;
const writeInput = z
  .object({
    TableName: z.string(),
    Key: z.record(z.string(), z.unknown()).optional(),
    Item: z.object({ request_id: z.unknown() }).loose().optional(),
    ReturnValues: z.string().optional(),
  })
  .loose();
type WriteInput = z.infer<typeof writeInput>;
type Image = Record<string, unknown> | undefined;
const getItemOutput = z.object({ Item: z.record(z.string(), z.unknown()).optional() });
const updateOutput = z.object({ Attributes: z.record(z.string(), z.unknown()).optional() }).loose();
const BATCH = 100;
/** Items whose last image is kept; an item written less recently is read before its next write. */
const IMAGES_KEPT = 20_000;
/** The statuses of a request still under way: the items the workflow writes again soon. */
const OPEN_STATUSES: ReadonlySet<string> = new Set(['received', 'running']);

/** Whether an item's image is worth keeping for its next write: it is an open request's. */
function keepsImage(image: Image): boolean {
  const status = image?.status as { S?: unknown } | undefined;
  return typeof status?.S === 'string' && OPEN_STATUSES.has(status.S);
}

/** Starts the proxy in front of `target`. */
export async function startLedgerStream(
  options: LedgerStreamOptions,
): Promise<
  LedgerStream & { /** How many items' last images it holds: open requests' only. */ imagesKept(): number }
> {
  const stream = new StreamProxy(options);
  const server: Server = createServer((incoming, outgoing) => {
    stream.serve(incoming).then(
      (answer) => outgoing.writeHead(answer.status, answer.headers).end(answer.body),
      (error: unknown) => {
        options.onError?.(error);
        if (!outgoing.headersSent) outgoing.writeHead(500).end();
      },
    );
  });
  const listening = await listenOnLoopback(server);
  return {
    ...listening,
    drained: () => stream.records.drained(),
    imagesKept: () => stream.imagesKept,
  };
}

/** Stream records waiting for the consumer, handed over in order in batches, each retried. */
class RecordQueue {
  readonly #pending: DynamoDBRecord[] = [];
  #delivering: Promise<void> | undefined;
  #sequence = 0;

  constructor(readonly options: LedgerStreamOptions) {}

  /** Queues the record of a write that changed an item's status. */
  add(before: Image, after: Image): void {
    this.#sequence += 1;
    this.#pending.push({
      eventName: before === undefined ? 'INSERT' : after === undefined ? 'REMOVE' : 'MODIFY',
      dynamodb: {
        SequenceNumber: String(this.#sequence),
        ...(before === undefined ? {} : { OldImage: before as never }),
        ...(after === undefined ? {} : { NewImage: after as never }),
      },
    });
    this.#delivering ??= this.#deliver().finally(() => {
      this.#delivering = undefined;
    });
  }

  async drained(): Promise<void> {
    while (this.#delivering !== undefined) await this.#delivering;
  }

  async #deliver(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending.slice(0, BATCH);
      await this.#consume(batch);
      this.#pending.splice(0, batch.length);
    }
  }

  /** One batch, retried with backoff as the event source mapping retries, then given up on. */
  async #consume(batch: DynamoDBRecord[]): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.options.consume(batch);
        return;
      } catch (error) {
        if (attempt >= (this.options.attempts ?? 5)) {
          this.options.onError?.(error);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** attempt));
      }
    }
  }
}

/** The proxy's state: each item's lock and last image, and the records not yet consumed. */
class StreamProxy {
  readonly records: RecordQueue;
  readonly #locks = new Map<string, Promise<void>>();
  readonly #images = new Map<string, Image>();

  constructor(readonly options: LedgerStreamOptions) {
    this.records = new RecordQueue(options);
  }

  get imagesKept(): number {
    return this.#images.size;
  }

  /** Answers one request: passed through, or a ledger write recorded in the stream. */
  async serve(incoming: IncomingMessage): Promise<Answer> {
    const body = await readBody(incoming, MAX_REQUEST_BYTES).catch((error: unknown) => {
      if (!(error instanceof BodyTooLargeError)) throw error;
      return undefined;
    });
    if (body === undefined) return requestTooLarge();
    const operation = String(incoming.headers['x-amz-target'] ?? '').split('.')[1] ?? '';
    const input = WRITES.has(operation) ? writeInput.safeParse(safeJson(body)) : undefined;
    const write = input?.success && input.data.TableName === this.options.table ? input.data : undefined;
    const key = write?.Key ?? (write?.Item ? { request_id: write.Item.request_id } : undefined);
    if (write === undefined || key === undefined) return forward(this.options.target, incoming, body);
    return this.#oneAtATime(JSON.stringify(key), () =>
      this.#recordWrite(incoming, body, operation, write, key),
    );
  }

  /** One write per item at a time, so its old and new images are its own. */
  async #oneAtATime<T>(lockKey: string, work: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(lockKey) ?? Promise.resolve();
    let release = () => {};
    const mine = new Promise<void>((resolve) => {
      release = resolve;
    });
    const chained = previous.then(() => mine);
    this.#locks.set(lockKey, chained);
    await previous;
    try {
      return await work();
    } finally {
      release();
      if (this.#locks.get(lockKey) === chained) this.#locks.delete(lockKey);
    }
  }

  /** Forwards a ledger write and queues a record when it changed the item's status. */
  async #recordWrite(
    incoming: IncomingMessage,
    body: Buffer,
    operation: string,
    write: WriteInput,
    key: Record<string, unknown>,
  ): Promise<Answer> {
    const lockKey = JSON.stringify(key);
    const before = this.#images.has(lockKey)
      ? this.#images.get(lockKey)
      : await readItem(this.options.target, incoming, this.options.table, key);
    this.#images.delete(lockKey);
    const asked = askForNewImage(operation, write);
    const answer = await forward(this.options.target, incoming, asked?.body ?? body);
    if (answer.status === 200) {
      const after = asked
        ? asked.newImage(answer)
        : write.Item !== undefined && operation === 'PutItem'
          ? write.Item
          : operation === 'DeleteItem'
            ? undefined
            : await readItem(this.options.target, incoming, this.options.table, key);
      this.#remember(lockKey, after);
      if (before?.status === undefined || after?.status === undefined || !sameStatus(before, after)) {
        this.records.add(before, after);
      }
    } else if (answer.status === 400) {
      // A refused write (a condition that failed, a bad request) left the item as it was.
      this.#remember(lockKey, before);
    }
    return answer;
  }

  #remember(lockKey: string, image: Image): void {
    // An ended request is seldom written again (a retry, its minimisation): read it then.
    if (!keepsImage(image)) return;
    this.#images.set(lockKey, image);
    if (this.#images.size > IMAGES_KEPT) this.#images.delete(this.#images.keys().next().value ?? lockKey);
  }
}

/** What DynamoDB answers for a request over its size limit, before reading any item. */
function requestTooLarge(): Answer {
  return {
    status: 413,
    headers: { 'content-type': 'application/x-amz-json-1.0' },
    body: Buffer.from(
      JSON.stringify({
        __type: 'com.amazon.coral.validate#ValidationException',
        message: `Request size exceeded ${MAX_REQUEST_BYTES} bytes`,
      }),
    ),
  };
}

/**
 * An UpdateItem that asked for no item back, or for the new one, is sent asking for `ALL_NEW`:
 * that is its new image. The caller gets the answer it asked for, without the item when it asked
 * for none (and without the checksum of the answer it did not get). Undefined for other writes.
 */
function askForNewImage(
  operation: string,
  write: WriteInput,
): { body: string; newImage(answer: Answer): Image } | undefined {
  if (operation !== 'UpdateItem') return undefined;
  const returns = write.ReturnValues ?? 'NONE';
  if (returns !== 'NONE' && returns !== 'ALL_NEW') return undefined;
  return {
    body: JSON.stringify({ ...write, ReturnValues: 'ALL_NEW' }),
    newImage(answer) {
      const output = updateOutput.parse(JSON.parse(answer.body.toString('utf8')));
      if (returns === 'NONE') {
        const { Attributes: _, ...rest } = output;
        const body = Buffer.from(JSON.stringify(rest));
        answer.body = body;
        answer.headers = { ...answer.headers, 'content-length': String(body.length) };
        delete answer.headers['x-amz-crc32'];
      }
      return output.Attributes;
    },
  };
}

function sameStatus(before: Record<string, unknown>, after: Record<string, unknown>): boolean {
  return JSON.stringify(before.status) === JSON.stringify(after.status);
}

/** The item as stored (DynamoDB JSON), read consistently with the caller's own signature headers. */
async function readItem(
  target: string,
  incoming: IncomingMessage,
  table: string,
  key: Record<string, unknown>,
): Promise<Record<string, unknown> | undefined> {
  // dynalite checks that a request is signed, not the signature: the caller's headers serve.
  const body = JSON.stringify({ TableName: table, Key: key, ConsistentRead: true });
  const answer = await runAsCaller(CALLERS.localRuntime, () =>
    forward(target, incoming, body, 'DynamoDB_20120810.GetItem'),
  );
  if (answer.status !== 200)
    throw new Error(`the ledger stream could not read the item (HTTP ${answer.status})`);
  const item = getItemOutput.parse(JSON.parse(answer.body.toString('utf8'))).Item;
  return item?.status === undefined ? item : { ...item };
}

interface Answer {
  readonly status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

function forward(
  target: string,
  incoming: IncomingMessage,
  body: Buffer | string,
  amzTarget?: string,
): Promise<Answer> {
  const url = new URL(incoming.url ?? '/', target);
  const payload = typeof body === 'string' ? Buffer.from(body) : body;
  const headers: Record<string, string | string[] | undefined> = {
    ...incoming.headers,
    host: url.host,
    'content-length': String(payload.length),
  };
  if (amzTarget !== undefined) {
    headers['x-amz-target'] = amzTarget;
    delete headers['x-amz-crc32'];
  }
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(url, { method: incoming.method ?? 'POST', headers }, (response) => {
      void readAll(response).then((data) => {
        const answerHeaders = { ...response.headers };
        resolve({ status: response.statusCode ?? 500, headers: answerHeaders, body: data });
      }, reject);
    });
    outgoing.once('error', reject);
    outgoing.end(payload);
  });
}

async function readAll(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return Buffer.concat(chunks);
}
