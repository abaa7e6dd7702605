import { join } from 'node:path';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { DynamoDBRecord } from 'aws-lambda';
import { runAsCaller } from '../../lambdas/shared/call-recorder.ts';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '../../lambdas/shared/sdk-clients.ts';
import type { StepLogger } from '../../lambdas/shared/step-deps.ts';
import { eventBridgePut, makeStatusEventsHandler } from '../../lambdas/status-events/handler.ts';
import { type AwsStandIns, standInClientConfig } from '../aws/aws-standins.ts';
import { type LocalEvent, startEventsStandIn } from '../aws/events-standin.ts';
import { type LedgerStream, startLedgerStream } from '../aws/ledger-stream.ts';
import type { ThreadLedgerStream } from '../threads/services-thread.ts';

/** The status events function's caller name, as its Lambda's in the IAM proof. */
export const STATUS_EVENTS_CALLER = 'StatusEvents';
/** The local bus's name, which the IAM proof maps to the deployed bus. */
export const LOCAL_EVENT_BUS = 'svc-dsr-status-events';
/** Where local mode keeps the events, under the data dir: one JSON line each, a file per day. */
export const EVENTS_DIR = 'events';

/** Local mode's status events: the ledger's stream, the status events function, a local bus. */
export interface LocalStatusEvents {
  /** The AWS stand-ins with DynamoDB reached through the ledger stream. */
  readonly aws: AwsStandIns;
  /** Resolves once every status change so far is published. */
  drained(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Starts the status events as they run in AWS: every write to the ledger goes through the ledger
 * stream, and the status events handler publishes each status change on the local bus, which
 * keeps it under `<dataDir>/events/` and hands it to `onEvent`. The stream is `served` by the
 * services thread when given, or started here.
 */
export async function startLocalStatusEvents(
  dataDir: string,
  aws: AwsStandIns,
  table: string,
  logger: StepLogger,
  onEvent?: (event: LocalEvent) => void,
  served?: ThreadLedgerStream,
): Promise<LocalStatusEvents> {
  const bus = await startEventsStandIn(join(dataDir, EVENTS_DIR), onEvent);
  const client = prepareSdkClient(
    new EventBridgeClient({
      region: aws.region,
      credentials: aws.credentials,
      endpoint: bus.endpoint,
      ...CACHED_MIDDLEWARE,
    }),
  );
  const handler = makeStatusEventsHandler(() => ({
    bus: LOCAL_EVENT_BUS,
    put: eventBridgePut(client),
    logger,
  }));
  const consume = (records: DynamoDBRecord[]) =>
    runAsCaller(STATUS_EVENTS_CALLER, () => handler({ Records: records }));
  const onError = (error: unknown) =>
    logger.error('status events could not be published', {
      error: error instanceof Error ? error.message : String(error),
    });
  let stream: LedgerStream;
  if (served === undefined) {
    stream = await startLedgerStream({ target: aws.endpoints.dynamodb, table, consume, onError });
  } else {
    served.consume(consume, onError);
    stream = served;
  }
  const endpoints = { ...aws.endpoints, dynamodb: stream.endpoint };
  return {
    aws: {
      ...aws,
      endpoints,
      clientConfig: (service) => standInClientConfig(aws.region, aws.credentials, endpoints, service),
    },
    drained: () => stream.drained(),
    async close() {
      await stream.drained();
      await stream.close();
      client.destroy();
      await bus.close();
    },
  };
}
