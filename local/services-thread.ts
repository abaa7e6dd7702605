/**
 * The platform emulator and the AWS stand-ins on a worker thread of their own. Everything reaches
 * them over HTTP on loopback either way, so callers get the same {@link RunningEmulator} and
 * {@link AwsStandIns}; serving them beside the state machine and the step handlers, rather than on
 * the same event loop, lets local mode use a second core.
 */
import { once } from 'node:events';
import { z } from 'zod';
import { type AwsStandIns, type AwsStandInsOptions, standInClientConfig } from './aws-standins.ts';
import { EmulatorConfigError } from './emulator/config-file.ts';
import type { EmulatorOptions, RunningEmulator } from './emulator/server.ts';
import { startThread } from './thread.ts';

/** What the thread starts: both take only plain data, since it crosses a thread boundary. */
export interface LocalServicesOptions {
  readonly emulator: Omit<EmulatorOptions, 'now'>;
  readonly aws: AwsStandInsOptions;
}

export interface LocalServices {
  readonly emulator: RunningEmulator;
  readonly aws: AwsStandIns;
}

/** A service to stop, sent to the thread; it exits once both are stopped. */
export const servicesCommandSchema = z.object({ close: z.enum(['emulator', 'aws']) });
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
    }),
    aws: z.object({
      region: z.string(),
      credentials: z.object({ accessKeyId: z.string(), secretAccessKey: z.string() }),
      endpoints: z.object({ sqs: z.string(), s3: z.string(), dynamodb: z.string() }),
    }),
  }),
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
  worker.on('message', (message: unknown) => {
    const parsed = servicesMessageSchema.safeParse(message);
    if (parsed.success && parsed.data.kind === 'closed') messages.get(parsed.data.service)?.();
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
  return {
    emulator: { ...ready.emulator, close: () => close('emulator') },
    aws: {
      region,
      credentials,
      endpoints,
      clientConfig: (service) => standInClientConfig(region, credentials, endpoints, service),
      close: () => close('aws'),
    },
  };
}
