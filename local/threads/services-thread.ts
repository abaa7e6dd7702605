/**
 * The platform emulator and the AWS stand-ins on a worker thread of their own. Everything reaches
 * them over HTTP on loopback either way, so callers get the same {@link RunningEmulator} and
 * {@link AwsStandIns}; serving them beside the state machine and the step handlers, rather than on
 * the same event loop, lets local mode use a second core.
 */
import { once } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Worker } from 'node:worker_threads';
import type { DynamoDBRecord } from 'aws-lambda';
import { z } from 'zod';
import { type AwsStandIns, type AwsStandInsOptions, standInClientConfig } from '../aws/aws-standins.ts';
import type { LedgerStream } from '../aws/ledger-stream.ts';
import { EmulatorConfigError } from '../emulator/config-file.ts';
import type { EmulatorOptions, RunningEmulator } from '../emulator/server.ts';
import { startThread } from './thread.ts';

/** What the thread starts: both take only plain data, since it crosses a thread boundary. */
export interface LocalServicesOptions {
  readonly emulator: Omit<EmulatorOptions, 'now'>;
  readonly aws: AwsStandInsOptions;
  /**
   * Puts the ledger stream (ledger-stream.ts) in front of DynamoDB on the thread too, for this
   * table: its reads of every written item then cost the thread, not the steps' event loop.
   */
  readonly ledgerStream?: { readonly table: string };
}

export interface LocalServices {
  readonly emulator: RunningEmulator;
  readonly aws: AwsStandIns;
  /**
   * Runs a full garbage collection on the thread, for measurements (`npm run bench` reads RSS
   * after it); resolves with the thread's heap in use afterwards, in bytes.
   */
  collectGarbage(): Promise<number>;
  /** The thread's ledger stream, when asked for: records are handed to the consumer set here. */
  readonly ledgerStream?: ThreadLedgerStream;
}

/** The ledger stream served on the services thread; its records come back to this thread. */
export interface ThreadLedgerStream extends LedgerStream {
  /**
   * Who takes the records: a rejection is retried by the stream, as in-process; `onError` hears
   * of a batch given up on.
   */
  consume(consumer: (records: DynamoDBRecord[]) => Promise<void>, onError?: (error: Error) => void): void;
}

/** A command sent to the thread: stop a service (it exits once both are stopped), or answer the stream. */
export const servicesCommandSchema = z.union([
  z.object({ close: z.enum(['emulator', 'aws']) }),
  z.object({ consumed: z.number(), error: z.string().optional() }),
  z.object({ drain: z.number() }),
  z.object({ collect: z.number() }),
]);
export type ServicesCommand = z.infer<typeof servicesCommandSchema>;

const problemSchema = z.object({ field: z.string(), message: z.string() });

export const servicesMessageSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('ready'),
    emulator: z.object({
      url: z.string(),
      spotId: z.string(),
      ssoAccessToken: z.string(),
      exportToken: z.string(),
      sites: z.array(z.object({ spotId: z.string(), ssoAccessToken: z.string(), exportToken: z.string() })),
    }),
    aws: z.object({
      region: z.string(),
      credentials: z.object({ accessKeyId: z.string(), secretAccessKey: z.string() }),
      endpoints: z.object({ sqs: z.string(), s3: z.string(), dynamodb: z.string() }),
    }),
    ledgerStream: z.string().optional(),
  }),
  // Records are plain DynamoDB stream records; the consumer validates them, as a Lambda does.
  z.object({ kind: z.literal('records'), id: z.number(), records: z.array(z.custom<DynamoDBRecord>()) }),
  z.object({ kind: z.literal('drained'), id: z.number() }),
  z.object({ kind: z.literal('collected'), id: z.number(), heapUsed: z.number() }),
  z.object({ kind: z.literal('stream-error'), message: z.string() }),
  z.object({
    kind: z.literal('failed'),
    name: z.string(),
    message: z.string(),
    problems: z.array(problemSchema).optional(),
  }),
  z.object({ kind: z.literal('closed'), service: z.enum(['emulator', 'aws']) }),
]);
export type ServicesMessage = z.infer<typeof servicesMessageSchema>;

/**
 * Starts the emulator and the stand-ins on a new thread. A start failure is thrown here with the
 * thread's message (an invalid platform state keeps its EmulatorConfigError); a failure after the
 * start ends this process, as it would have with everything on one thread.
 */
export async function startLocalServices(options: LocalServicesOptions): Promise<LocalServices> {
  const worker = startThread('./services-thread-main.ts', options);
  const messages = new Map<string, () => void>();
  const [first] = await Promise.race([
    once(worker, 'message'),
    once(worker, 'exit').then(([code]) => {
      throw new Error(`the local services thread exited (code ${code}) before it started`);
    }),
  ]);
  const ready = servicesMessageSchema.parse(first);
  if (ready.kind !== 'ready') {
    await worker.terminate();
    if (ready.kind === 'failed' && ready.name === 'EmulatorConfigError') {
      throw new EmulatorConfigError(ready.message, ready.problems ?? []);
    }
    throw new Error(
      `the local services did not start: ${ready.kind === 'failed' ? ready.message : ready.kind}`,
    );
  }
  const stream = ready.ledgerStream === undefined ? undefined : threadStream(worker, ready.ledgerStream);
  const collections = new Map<
    number,
    { resolve: (heapUsed: number) => void; reject: (error: Error) => void }
  >();
  let ended = false;
  worker.once('exit', () => {
    ended = true;
    for (const { reject } of collections.values()) reject(new Error('the local services thread has ended'));
    collections.clear();
  });
  worker.on('message', (message: unknown) => {
    const parsed = servicesMessageSchema.safeParse(message);
    if (!parsed.success) return;
    if (parsed.data.kind === 'closed') messages.get(parsed.data.service)?.();
    else if (parsed.data.kind === 'collected') {
      collections.get(parsed.data.id)?.resolve(parsed.data.heapUsed);
      collections.delete(parsed.data.id);
    } else stream?.receive(parsed.data);
  });
  worker.on('error', (error) => {
    // The servers are gone: carrying on would only turn every request into a connection error.
    process.nextTick(() => {
      throw error;
    });
  });

  const closing = new Map<'emulator' | 'aws', Promise<void>>();
  const close = (service: 'emulator' | 'aws') => {
    let done = closing.get(service);
    if (done === undefined) {
      done = new Promise<void>((resolve) => {
        messages.set(service, resolve);
        // A thread already gone has nothing left to close.
        worker.once('exit', () => resolve());
        const command: ServicesCommand = { close: service };
        worker.postMessage(command);
      });
      closing.set(service, done);
    }
    return done;
  };

  const { region, credentials, endpoints } = ready.aws;
  let nextCollection = 0;
  return {
    collectGarbage() {
      const id = nextCollection++;
      if (ended) return Promise.reject(new Error('the local services thread has ended'));
      return new Promise<number>((resolve, reject) => {
        collections.set(id, { resolve, reject });
        const command: ServicesCommand = { collect: id };
        worker.postMessage(command);
      });
    },
    emulator: { ...ready.emulator, close: () => close('emulator') },
    aws: {
      region,
      credentials,
      endpoints,
      clientConfig: (service) => standInClientConfig(region, credentials, endpoints, service),
      close: () => close('aws'),
    },
    ...(stream ? { ledgerStream: stream.stream } : {}),
  };
}

/** This thread's side of the ledger stream: hands records to the consumer and answers for them. */
function threadStream(worker: Worker, endpoint: string) {
  let consumer: ((records: DynamoDBRecord[]) => Promise<void>) | undefined;
  let onError: ((error: Error) => void) | undefined;
  const waiting: { id: number; records: DynamoDBRecord[] }[] = [];
  const drains = new Map<number, () => void>();
  let nextDrain = 0;
  const answer = (command: ServicesCommand) => worker.postMessage(command);
  const hand = (batch: { id: number; records: DynamoDBRecord[] }) => {
    if (consumer === undefined) {
      waiting.push(batch);
      return;
    }
    consumer(batch.records).then(
      () => answer({ consumed: batch.id }),
      (error: unknown) =>
        answer({ consumed: batch.id, error: error instanceof Error ? error.message : String(error) }),
    );
  };
  const stream: ThreadLedgerStream = {
    endpoint,
    consume(next, errors) {
      consumer = next;
      onError = errors;
      for (const batch of waiting.splice(0)) hand(batch);
    },
    drained() {
      const id = nextDrain++;
      return new Promise<void>((resolve) => {
        drains.set(id, resolve);
        worker.once('exit', () => resolve());
        answer({ drain: id });
      });
    },
    // The stream stops with the stand-ins it fronts.
    close: async () => {},
  };
  return {
    stream,
    receive(message: ServicesMessage) {
      if (message.kind === 'records') hand(message);
      else if (message.kind === 'stream-error') onError?.(new Error(message.message));
      else if (message.kind === 'drained') {
        drains.get(message.id)?.();
        drains.delete(message.id);
      }
    },
  };
}

/** A full garbage collection of the calling thread's isolate, for measurements. */
export function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}
