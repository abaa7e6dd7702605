/**
 * Local stand-ins for the AWS services svc-dsr uses, speaking the real wire protocols on loopback:
 * SQS with its queues in memory or in journals on disk (`sqs-disk.ts`), S3 either in fauxqs's
 * memory or as plain files on disk (`s3-disk.ts`), and dynalite for DynamoDB (in memory or on
 * LevelDB). The same SDK code paths run against them as
 * against AWS; only the client config differs.
 */

import type { Server } from 'node:http';
import { buildApp } from 'fauxqs';
import { ConfigurationError } from '#shared/errors';
import { closeServer, LOOPBACK, listen, trackSockets } from '../http.ts';
import { type AwsFaults, AwsThrottle, throttleServer } from './aws-faults.ts';
import { createDynalite } from './dynalite-index.ts';
import { type DiskS3, startDiskS3 } from './s3-disk.ts';
import { type DiskSqs, startDiskSqs } from './sqs-disk.ts';

/** The services the stand-ins answer for. */
export type AwsService = 'sqs' | 's3' | 'dynamodb';

/** Dummy credentials: the stand-ins accept any, but the SDK refuses to sign without some. */
export interface AwsStandInCredentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
}

/** What an SDK v3 client needs to talk to a stand-in; spread it into the client's constructor. */
export interface AwsClientConfig {
  readonly region: string;
  readonly endpoint: string;
  readonly credentials: AwsStandInCredentials;
  /** S3 only: the stand-in cannot serve virtual-hosted bucket names (`<bucket>.localhost` does not resolve). */
  readonly forcePathStyle?: boolean;
}

/** Running stand-ins; `close()` stops every server and releases every handle. */
export interface AwsStandIns {
  readonly region: string;
  readonly credentials: AwsStandInCredentials;
  readonly endpoints: { readonly sqs: string; readonly s3: string; readonly dynamodb: string };
  /**
   * SDK client config for one service. The SQS config carries an explicit endpoint, which also makes
   * the SDK ignore the host of a QueueUrl (the stand-in hands out `sqs.<region>.localhost` URLs,
   * stable across restarts, that do not resolve) and send every call to the stand-in.
   */
  clientConfig(service: AwsService): AwsClientConfig;
  close(): Promise<void>;
}

/** Options for {@link startAwsStandIns}. */
export interface AwsStandInsOptions {
  /** Directory for dynalite's LevelDB store, so the ledger survives a restart. @default in memory */
  readonly dynamoPath?: string;
  /**
   * Data folder for S3: each object becomes the file `<s3Root>/<bucket>/<key>`, kept across restarts.
   * @default in memory, in fauxqs
   */
  readonly s3Root?: string;
  /**
   * Throttles a seeded share of the calls to the services it lists (`dynamodb`, `s3`, `sqs`) with
   * the service's own throttling answer. Plain data, so it crosses to the services thread.
   * @default no throttling
   */
  readonly faults?: AwsFaults;
  /**
   * Data folder for SQS: each queue's messages are journaled under `<sqsRoot>/<queue>/`, so what was
   * sent and not yet deleted survives a kill. @default in memory
   */
  readonly sqsRoot?: string;
}

const REGION = 'us-east-1';
const CREDENTIALS: AwsStandInCredentials = { accessKeyId: 'local', secretAccessKey: 'local' };

/** Starts the SQS stand-in, dynalite, and S3 on disk (with `s3Root`) or in fauxqs, on free loopback ports. */
export async function startAwsStandIns(options: AwsStandInsOptions = {}): Promise<AwsStandIns> {
  // startFauxqs() always binds 0.0.0.0; building the app and listening ourselves keeps it on loopback.
  const fauxqs =
    options.s3Root === undefined ? buildApp({ logger: false, defaultRegion: REGION }) : undefined;
  let sqs: DiskSqs | undefined;
  const throttle = new AwsThrottle(options.faults);
  // fauxqs serves only S3 here (in memory); SQS is our own stand-in.
  if (fauxqs !== undefined) throttleServer(fauxqs.server, throttle, () => 's3');
  let dynamo: Server | undefined;
  let diskS3: DiskS3 | undefined;
  try {
    sqs = await startDiskSqs({
      region: REGION,
      host: LOOPBACK,
      wrapServer: (server) => throttleServer(server, throttle, () => 'sqs'),
      ...(options.sqsRoot !== undefined ? { root: options.sqsRoot } : {}),
    });
    const sqsServer = sqs;
    const fauxqsUrl = await fauxqs?.listen({ port: 0, host: LOOPBACK });
    const dynalite = createDynalite(
      options.dynamoPath === undefined ? DYNALITE_OPTIONS : { ...DYNALITE_OPTIONS, path: options.dynamoPath },
    );
    dynamo = dynalite.server;
    await dynalite.ready;
    throttleServer(dynamo, throttle, () => 'dynamodb');
    const dynamoSockets = trackSockets(dynamo);
    const { endpoint: dynamoUrl } = await listen(dynamo);
    const dynamoServer = dynamo;
    if (options.s3Root !== undefined) {
      diskS3 = await startDiskS3({
        root: options.s3Root,
        wrapServer: (server) => throttleServer(server, throttle, () => 's3'),
      });
    }
    const s3Endpoint = diskS3?.endpoint ?? fauxqsUrl;
    if (s3Endpoint === undefined) throw new ConfigurationError('No S3 stand-in was started');
    const s3Server = diskS3;
    const endpoints = { sqs: sqsServer.endpoint, s3: s3Endpoint, dynamodb: dynamoUrl };
    let closing: Promise<void> | undefined;

    return {
      region: REGION,
      credentials: CREDENTIALS,
      endpoints,
      clientConfig: (service) => standInClientConfig(REGION, CREDENTIALS, endpoints, service),
      close() {
        closing ??= Promise.all([
          sqsServer.close(),
          fauxqs?.close(),
          closeServer(dynamoServer, dynamoSockets),
          s3Server?.close(),
        ]).then(() => undefined);
        return closing;
      },
    };
  } catch (error) {
    await sqs?.close();
    await fauxqs?.close();
    if (dynamo?.listening) await closeServer(dynamo, new Set());
    await diskS3?.close();
    throw error;
  }
}

/** The SDK client config for one service of stand-ins running at `endpoints`. */
export function standInClientConfig(
  region: string,
  credentials: AwsStandInCredentials,
  endpoints: AwsStandIns['endpoints'],
  service: AwsService,
): AwsClientConfig {
  const base = { region, endpoint: endpoints[service], credentials: { ...credentials } };
  return service === 's3' ? { ...base, forcePathStyle: true } : base;
}

const DYNALITE_OPTIONS = {
  // Tables are ACTIVE at once: nothing here is worth the 500 ms dynalite spends in CREATING by default.
  createTableMs: 0,
  deleteTableMs: 0,
  updateTableMs: 0,
};
