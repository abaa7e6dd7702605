/** Runs on the thread services-thread.ts starts: the emulator and the AWS stand-ins. */
import { parentPort, workerData } from 'node:worker_threads';
import { type AwsStandIns, startAwsStandIns } from './aws-standins.ts';
import { EmulatorConfigError } from './emulator/config-file.ts';
import { type RunningEmulator, startEmulator } from './emulator/server.ts';
import { type LocalServicesOptions, type ServicesMessage, servicesCommandSchema } from './services-thread.ts';

const port = parentPort;
if (port === null) throw new Error('services-thread-main.ts runs only as a worker thread');
const send = (message: ServicesMessage) => port.postMessage(message);
const options = (workerData as { data: LocalServicesOptions }).data;

let emulator: RunningEmulator | undefined;
let aws: AwsStandIns | undefined;
try {
  emulator = await startEmulator(options.emulator);
  aws = await startAwsStandIns(options.aws);
} catch (error) {
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
    const { close } = servicesCommandSchema.parse(message);
    if (!open.delete(close)) return;
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
    },
    aws: { region: aws.region, credentials: aws.credentials, endpoints: aws.endpoints },
  });
}
