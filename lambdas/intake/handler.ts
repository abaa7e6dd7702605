// The intake Lambda: reads request messages from SQS in a batch, where one message's failure fails no other.
import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { AuditTrail } from '#shared/audit';
import { intakeEnvSchema, parseEnv } from '#shared/config';
import { Ledger } from '#shared/ledger';
import { functionLogger, functionMetrics } from '#shared/powertools';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import { functionSecretsFromEnv } from '#shared/secrets';
import { sfnStarter, sqsQuarantine } from './aws.ts';
import { type IntakeDeps, type IntakeResult, intakeMessage } from './intake.ts';

/** Sees what became of each message; local mode uses it to report per input line. */
export type IntakeObserver = (message: SQSRecord, result: IntakeResult) => void;

/** The SQS handler: one message's failure never fails the others (partial batch response). */
export function makeIntakeHandler(deps: () => IntakeDeps, observe?: IntakeObserver) {
  return async (event: SQSEvent, context?: Context): Promise<SQSBatchResponse> => {
    const processor = new BatchProcessor(EventType.SQS);
    const intakeDeps = deps();
    const record = async (message: SQSRecord) => {
      const result = await intakeMessage(message.body, intakeDeps);
      observe?.(message, result);
      return result;
    };
    return processPartialResponse(event, record, processor, context ? { context } : {});
  };
}

let intakeDeps: IntakeDeps | undefined;

function lambdaIntakeDeps(): IntakeDeps {
  if (intakeDeps === undefined) {
    const env = parseEnv(intakeEnvSchema, process.env);
    const dynamo = prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE));
    const { auditHmacKey } = functionSecretsFromEnv(process.env);
    const ledger = new Ledger(dynamo, env.TABLE_NAME);
    const metrics = functionMetrics(env.METRICS_NAMESPACE, env.METRICS_STACK);
    intakeDeps = {
      ledger,
      audit: new AuditTrail(
        {
          s3: prepareSdkClient(new S3Client(CACHED_MIDDLEWARE)),
          bucket: env.AUDIT_BUCKET,
          ...(env.KMS_KEY_ID ? { kmsKeyId: env.KMS_KEY_ID } : {}),
        },
        { hmacKey: auditHmacKey, heads: ledger },
      ),
      quarantine: sqsQuarantine(prepareSdkClient(new SQSClient(CACHED_MIDDLEWARE)), env.QUARANTINE_QUEUE_URL),
      startExecution: sfnStarter(prepareSdkClient(new SFNClient(CACHED_MIDDLEWARE)), env.STATE_MACHINE_ARN),
      logger: functionLogger(),
      timeZone: env.TIME_ZONE,
      clock: () => new Date(),
      countMetric: (name, value) => {
        metrics.addMetric(name, MetricUnit.Count, value);
        metrics.publishStoredMetrics();
      },
      verification: env.VERIFICATION_POLICY,
      sites: env.SITE_IDS,
    };
  }
  return intakeDeps;
}

export const handler = makeIntakeHandler(lambdaIntakeDeps);
