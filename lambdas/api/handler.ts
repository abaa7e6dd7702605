/**
 * The API function behind API Gateway's HTTP API: a JWT authorizer of the stack's user pool has
 * verified the person's token before the event arrives (its claims in
 * `requestContext.authorizer.jwt`), or, on the `/iam` routes, IAM authorization has checked a
 * system's SigV4 signature and execute-api:Invoke permission (`requestContext.authorizer.iam`).
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { z } from 'zod';
import { parseEnv, timeZoneSchema } from '#shared/config';
import { functionLogger } from '#shared/powertools';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import { operatorDepsOf, operatorEnvSchema } from '../operator/handler.ts';
import { type ApiResponse, handleApiEvent } from './api.ts';
import type { ApiDeps } from './deps.ts';
import { callerThrottle } from './throttle.ts';

/** Environment of the API function. */
export const apiEnvSchema = operatorEnvSchema.extend({
  GATE_TABLE_NAME: z.string().min(1),
  INTAKE_QUEUE_URL: z.string().min(1),
  /** The account the stack is in: its systems may call the `/iam` routes. */
  ACCOUNT_ID: z.string().regex(/^\d{12}$/),
  /** An AWS organisation (o-…) whose systems may call the `/iam` routes too; empty for none. */
  MACHINE_ORGANIZATION_ID: z.union([z.literal(''), z.string().regex(/^o-[a-z0-9]{10,32}$/)]).default(''),
  /** The controller's time zone: the report counts days in it. */
  TIME_ZONE: timeZoneSchema,
  /** Days each type's archive is kept (the archive bucket's lifecycle rules). */
  ACCESS_ARCHIVE_RETENTION_DAYS: z.coerce.number().int().positive(),
  ERASURE_ARCHIVE_RETENTION_DAYS: z.coerce.number().int().nonnegative(),
});

let deps: ApiDeps | undefined;

function apiDepsFromEnv(): ApiDeps {
  if (deps === undefined) {
    const env = parseEnv(apiEnvSchema, process.env);
    const dynamo = prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE));
    deps = {
      ...operatorDepsOf(env, dynamo),
      logger: functionLogger(),
      intake: { sqs: prepareSdkClient(new SQSClient(CACHED_MIDDLEWARE)), queueUrl: env.INTAKE_QUEUE_URL },
      throttle: callerThrottle(dynamo, env.GATE_TABLE_NAME),
      evidence: {
        // The document client takes no cached middleware: it has a client of its own.
        dynamo: DynamoDBDocumentClient.from(prepareSdkClient(new DynamoDBClient({}))),
        ledgerTableName: env.TABLE_NAME,
        timeZone: env.TIME_ZONE,
        accessArchiveRetentionDays: env.ACCESS_ARCHIVE_RETENTION_DAYS,
        erasureArchiveRetentionDays: env.ERASURE_ARCHIVE_RETENTION_DAYS,
      },
      account: {
        accountId: env.ACCOUNT_ID,
        ...(env.MACHINE_ORGANIZATION_ID === '' ? {} : { organization: env.MACHINE_ORGANIZATION_ID }),
      },
    };
  }
  return deps;
}

export async function handler(event: unknown): Promise<ApiResponse> {
  return await handleApiEvent(apiDepsFromEnv(), event);
}
