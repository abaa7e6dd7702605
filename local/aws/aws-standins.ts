/**
 * Local stand-ins for the AWS services svc-dsr uses, speaking the real wire protocols on loopback:
 * SQS with its queues in memory or in journals on disk (`sqs/server.ts`), S3 as plain files on disk
 * (`s3-disk.ts`: in the data dir, or in a temporary folder that goes with the stand-ins), and
 * dynalite for DynamoDB (in memory or on LevelDB). Local mode and the test suites run on these
 * same stand-ins; the same SDK code paths run against them as against AWS, and only the client
 * config differs.
 */

import { mkdtemp, rm } from 'node:fs/promises';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { closeServer, LOOPBACK, listen, trackSockets } from '../http.ts';
import { type AwsFaults, AwsThrottle, throttleServer } from './aws-faults.ts';
import { createDynalite } from './dynalite-index.ts';
import { type DiskS3, startDiskS3 } from './s3-disk.ts';
import { type DiskSqs, startDiskSqs } from './sqs/server.ts';

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
   * @default a temporary folder, removed on close
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

/** Starts the SQS stand-in, dynalite and the disk S3, on free loopback ports. */
export async function startAwsStandIns(options: AwsStandInsOptions = {}): Promise<AwsStandIns> {
  const throttle = new AwsThrottle(options.faults);
  // Without a data folder, S3's files go to a temporary one that goes with the stand-ins.
  const temporaryS3 = options.s3Root === undefined ? await mkdtemp(join(tmpdir(), 'svc-dsr-s3-')) : undefined;
  const removeTemporaryS3 = async () => {
    if (temporaryS3 !== undefined) await rm(temporaryS3, { recursive: true, force: true });
  };
  let sqs: DiskSqs | undefined;
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
    const dynalite = createDynalite(
      options.dynamoPath === undefined ? DYNALITE_OPTIONS : { ...DYNALITE_OPTIONS, path: options.dynamoPath },
    );
    dynamo = dynalite.server;
    await dynalite.ready;
    throttleServer(dynamo, throttle, () => 'dynamodb');
    const dynamoSockets = trackSockets(dynamo);
    const { endpoint: dynamoUrl } = await listen(dynamo);
    const dynamoServer = dynamo;
    diskS3 = await startDiskS3({
      root: options.s3Root ?? temporaryS3 ?? '',
      wrapServer: (server) => throttleServer(server, throttle, () => 's3'),
    });
    const s3Server = diskS3;
    const endpoints = { sqs: sqsServer.endpoint, s3: s3Server.endpoint, dynamodb: dynamoUrl };
    let closing: Promise<void> | undefined;

    return {
      region: REGION,
      credentials: CREDENTIALS,
      endpoints,
      clientConfig: (service) => standInClientConfig(REGION, CREDENTIALS, endpoints, service),
      close() {
        closing ??= Promise.all([
          sqsServer.close(),
          closeServer(dynamoServer, dynamoSockets),
          s3Server.close(),
        ]).then(removeTemporaryS3);
        return closing;
      },
    };
  } catch (error) {
    await sqs?.close();
    if (dynamo?.listening) await closeServer(dynamo, new Set());
    await diskS3?.close();
    await removeTemporaryS3();
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
