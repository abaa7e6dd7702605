// The status events Lambda: the ledger's stream records turned into changes and published on EventBridge.
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { EventBridgeClient, PutEventsCommand } from '@aws-sdk/client-eventbridge';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import type { DynamoDBStreamEvent } from 'aws-lambda';
import { z } from 'zod';
import { parseEnv } from '#shared/config';
import { functionLogger } from '#shared/powertools';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import type { StepLogger } from '#shared/step-deps';
import { type LedgerChange, type PutEntries, publishStatusChanges } from './status-events.ts';

/** Environment of the status events Lambda. */
export const statusEventsEnvSchema = z.object({
  /** The bus's name or ARN (a bus the stack was given may live in another account). */
  EVENT_BUS: z.string().min(1),
});

export interface StatusEventsDeps {
  readonly bus: string;
  readonly put: PutEntries;
  readonly logger: StepLogger;
}

/** The ledger stream's records as changes, images unmarshalled. */
export function changesOf(event: DynamoDBStreamEvent): LedgerChange[] {
  return event.Records.map((record) => {
    const { OldImage, NewImage } = record.dynamodb ?? {};
    return {
      ...(OldImage === undefined ? {} : { oldImage: unmarshall(OldImage as Record<string, AttributeValue>) }),
      ...(NewImage === undefined ? {} : { newImage: unmarshall(NewImage as Record<string, AttributeValue>) }),
    };
  });
}

/** The stream handler: every status change in the batch becomes one event, in order. */
export function makeStatusEventsHandler(deps: () => StatusEventsDeps) {
  return async (event: DynamoDBStreamEvent): Promise<void> => {
    const { bus, put, logger } = deps();
    const published = await publishStatusChanges(changesOf(event), { bus, put });
    logger.info('status events published', { records: event.Records.length, events: published.length });
  };
}

/** PutEvents through one client; answers how many entries EventBridge refused. */
export function eventBridgePut(client: EventBridgeClient): PutEntries {
  return async (entries) => {
    const answer = await client.send(new PutEventsCommand({ Entries: [...entries] }));
    return answer.FailedEntryCount ?? 0;
  };
}

let lambdaDeps: StatusEventsDeps | undefined;

function statusEventsLambdaDeps(): StatusEventsDeps {
  if (lambdaDeps === undefined) {
    const env = parseEnv(statusEventsEnvSchema, process.env);
    lambdaDeps = {
      bus: env.EVENT_BUS,
      put: eventBridgePut(prepareSdkClient(new EventBridgeClient(CACHED_MIDDLEWARE))),
      logger: functionLogger(),
    };
  }
  return lambdaDeps;
}

export const handler = makeStatusEventsHandler(statusEventsLambdaDeps);
