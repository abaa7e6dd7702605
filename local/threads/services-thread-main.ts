/** Runs on the thread services-thread.ts starts: the emulator and the AWS stand-ins. */
import { parentPort, workerData } from 'node:worker_threads';
import { type AwsStandIns, startAwsStandIns } from '../aws/aws-standins.ts';
import { type LedgerStream, startLedgerStream } from '../aws/ledger-stream.ts';
import { EmulatorConfigError } from '../emulator/config-file.ts';
import { type RunningEmulator, startEmulator } from '../emulator/server.ts';
import {
  collectGarbage,
  type LocalServicesOptions,
  type ServicesMessage,
  servicesCommandSchema,
} from './services-thread.ts';

const port = parentPort;
if (port === null) throw new Error('services-thread-main.ts runs only as a worker thread');
const send = (message: ServicesMessage) => port.postMessage(message);
const options = (workerData as { data: LocalServicesOptions }).data;

let emulator: RunningEmulator | undefined;
let aws: AwsStandIns | undefined;
let stream: LedgerStream | undefined;
// Batches handed to the other thread, by id: each settles when that thread says it consumed it.
const handed = new Map<number, { resolve: () => void; reject: (error: Error) => void }>();
let nextBatch = 0;
try {
  emulator = await startEmulator(options.emulator);
  aws = await startAwsStandIns(options.aws);
  if (options.ledgerStream !== undefined) {
    stream = await startLedgerStream({
      target: aws.endpoints.dynamodb,
      table: options.ledgerStream.table,
      consume: (records) =>
        new Promise<void>((resolve, reject) => {
          const id = nextBatch++;
          handed.set(id, { resolve, reject });
          send({ kind: 'records', id, records });
        }),
      onError: (error) =>
        send({ kind: 'stream-error', message: error instanceof Error ? error.message : String(error) }),
    });
  }
} catch (error) {
  await stream?.close();
  await aws?.close();
  await emulator?.close();
  send({
    kind: 'failed',
    name: error instanceof Error ? error.name : 'Error',
    message: error instanceof Error ? error.message : String(error),
    ...(error instanceof EmulatorConfigError ? { problems: error.problems } : {}),
  });
  port.close();
}

if (emulator !== undefined && aws !== undefined) {
  const services = { emulator, aws };
  const open = new Set<'emulator' | 'aws'>(['emulator', 'aws']);
  port.on('message', async (message: unknown) => {
    const command = servicesCommandSchema.parse(message);
    if ('consumed' in command) {
      const batch = handed.get(command.consumed);
      handed.delete(command.consumed);
      if (command.error === undefined) batch?.resolve();
      else batch?.reject(new Error(command.error));
      return;
    }
    if ('collect' in command) {
      collectGarbage();
      send({ kind: 'collected', id: command.collect, heapUsed: process.memoryUsage().heapUsed });
      return;
    }
    if ('drain' in command) {
      await stream?.drained();
      send({ kind: 'drained', id: command.drain });
      return;
    }
    const { close } = command;
    if (!open.delete(close)) return;
    if (close === 'aws') await stream?.close();
    await services[close].close();
    send({ kind: 'closed', service: close });
    if (open.size === 0) port.close();
  });
  send({
    kind: 'ready',
    emulator: {
      url: emulator.url,
      spotId: emulator.spotId,
      ssoAccessToken: emulator.ssoAccessToken,
      exportToken: emulator.exportToken,
      sites: emulator.sites,
    },
    aws: { region: aws.region, credentials: aws.credentials, endpoints: aws.endpoints },
    ...(stream ? { ledgerStream: stream.endpoint } : {}),
  });
}
