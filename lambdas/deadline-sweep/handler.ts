// The deadline sweep Lambda: the counts first, then the daily manifests and the minimising.
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { type ManifestStore, writeDailyManifests } from '#shared/audit-manifest';
import { minimisationEnvSchema, parseEnv } from '#shared/config';
import { Ledger } from '#shared/ledger';
import { functionLogger, functionMetrics } from '#shared/powertools';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import { functionSecretsFromEnv } from '#shared/secrets';
import type { StepLogger } from '#shared/step-deps';
import {
  type DeadlineCounts,
  type DeadlineSweepDeps,
  publishDeadlineMetrics,
  sweepDeadlines,
} from './deadline-sweep.ts';

/** Environment of the deadline sweep Lambda. */
export const deadlineSweepEnvSchema = z.object({
  TABLE_NAME: z.string().min(1),
  DUE_SOON_DAYS: z.coerce.number().int().positive().default(7),
  /** The zone whose business days the CCPA receipt warning counts. */
  TIME_ZONE: z.string().min(1).default('UTC'),
  METRICS_NAMESPACE: z.string().min(1).default('svc-dsr'),
  /** The `Stack` dimension, so two deployments in one account keep apart. */
  METRICS_STACK: z.string().min(1),
  /** The audit bucket, where the daily manifest of chain heads goes. */
  AUDIT_BUCKET: z.string().min(1),
  KMS_KEY_ID: z.string().min(1).optional(),
  ...minimisationEnvSchema.shape,
});

/** What the handler needs besides the ledger. */
export interface DeadlineSweepHandlerDeps extends DeadlineSweepDeps {
  readonly dueSoonDays: number;
  /** The zone whose business days the receipt warning counts. @default UTC */
  readonly timeZone?: string;
  /** Publishes the counts as metrics (publishDeadlineMetrics in Lambda). */
  readonly publish: (counts: DeadlineCounts) => void;
  readonly logger: StepLogger;
  /** The audit bucket: each run writes the daily manifests not written yet, from the records in it. */
  readonly manifests: ManifestStore;
  readonly ledger: DeadlineSweepDeps['ledger'] & Pick<Ledger, 'minimiseDue'>;
  /** The retention pass: days after a request ends, and the key of the hashes (read only when one is due). */
  readonly minimisation: { readonly afterDays: number; readonly hmacKey: () => Promise<string> };
}

/**
 * The scheduled handler: sweep the open requests and publish the counts as metrics (with the
 * heartbeat) first, from the open index alone, so the deadline alarms hear from every run whatever
 * the rest costs; then write the daily manifests and minimise the ended requests past their
 * retention. A failure there fails the invocation (the function's error alarm) after the counts
 * are out.
 */
export function makeDeadlineSweepHandler(deps: () => DeadlineSweepHandlerDeps) {
  return async (): Promise<DeadlineCounts> => {
    const sweepDeps = deps();
    const counts = await sweepDeadlines(sweepDeps, {
      dueSoonDays: sweepDeps.dueSoonDays,
      ...(sweepDeps.timeZone === undefined ? {} : { timeZone: sweepDeps.timeZone }),
    });
    sweepDeps.publish(counts);
    const summary = { ...counts };
    if (counts.overdue > 0) sweepDeps.logger.warn('open requests are overdue', summary);
    else if (counts.notices_overdue > 0) {
      sweepDeps.logger.warn('response or denial notices are overdue', summary);
    } else if (counts.receipts_overdue > 0) {
      sweepDeps.logger.warn('CCPA receipt confirmations are overdue', summary);
    } else if (counts.receipts_due_soon > 0) {
      sweepDeps.logger.warn('CCPA receipt confirmations are due soon', summary);
    } else if (counts.notices_due_soon > 0) {
      sweepDeps.logger.warn('response or denial notices are due soon', summary);
    } else sweepDeps.logger.info('deadline sweep', summary);
    const days = await writeDailyManifests({ ...sweepDeps.manifests, clock: sweepDeps.clock });
    if (days.length > 0) sweepDeps.logger.info('audit manifests written', { days });
    const retention = await sweepDeps.ledger.minimiseDue(sweepDeps.minimisation);
    if (retention.minimised + retention.skipped > 0) {
      sweepDeps.logger.info('ended requests past their retention minimised', { ...retention });
    }
    return counts;
  };
}

let lambdaDeps: DeadlineSweepHandlerDeps | undefined;

function deadlineSweepLambdaDeps(): DeadlineSweepHandlerDeps {
  if (lambdaDeps === undefined) {
    const env = parseEnv(deadlineSweepEnvSchema, process.env);
    const dynamo = prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE));
    const { auditHmacKey } = functionSecretsFromEnv(process.env);
    const metrics = functionMetrics(env.METRICS_NAMESPACE, env.METRICS_STACK);
    lambdaDeps = {
      ledger: new Ledger(dynamo, env.TABLE_NAME),
      minimisation: { afterDays: env.MINIMISE_AFTER_DAYS, hmacKey: () => auditHmacKey() },
      clock: () => new Date(),
      dueSoonDays: env.DUE_SOON_DAYS,
      timeZone: env.TIME_ZONE,
      publish: (counts) => publishDeadlineMetrics(metrics, counts),
      logger: functionLogger(),
      manifests: {
        s3: prepareSdkClient(new S3Client(CACHED_MIDDLEWARE)),
        bucket: env.AUDIT_BUCKET,
        ...(env.KMS_KEY_ID ? { kmsKeyId: env.KMS_KEY_ID } : {}),
      },
    };
  }
  return lambdaDeps;
}

export const handler = makeDeadlineSweepHandler(deadlineSweepLambdaDeps);
