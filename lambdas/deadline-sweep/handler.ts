import { Logger } from '@aws-lambda-powertools/logger';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { type ManifestStore, writeDailyManifests } from '#shared/audit-manifest';
import { minimisationEnvSchema, parseEnv } from '#shared/config';
import { Ledger } from '#shared/ledger';
import { powertoolsLogger } from '#shared/runtime';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import { functionSecretsFromEnv } from '#shared/secrets';
import type { StepLogger } from '#shared/step-deps';
import {
  type DeadlineCounts,
  type DeadlineSweepDeps,
  deadlineMetricsLine,
  sweepDeadlines,
} from './deadline-sweep.ts';

/** Environment of the deadline sweep Lambda. */
export const deadlineSweepEnvSchema = z.object({
  TABLE_NAME: z.string().min(1),
  DUE_SOON_DAYS: z.coerce.number().int().positive().default(7),
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
  readonly namespace: string;
  readonly stack: string;
  /** Writes one line where CloudWatch Logs picks up Embedded Metric Format. */
  readonly emit: (line: string) => void;
  readonly logger: StepLogger;
  /** The audit bucket: each run writes the daily manifests not written yet. */
  readonly manifests: ManifestStore;
  readonly ledger: DeadlineSweepDeps['ledger'] & Pick<Ledger, 'scan' | 'minimiseDue'>;
  /** The retention pass: days after a request ends, and the key of the hashes (read only when one is due). */
  readonly minimisation: { readonly afterDays: number; readonly hmacKey: () => Promise<string> };
}

/**
 * The scheduled handler: write the daily manifests, minimise the ended requests past their
 * retention, sweep, publish the counts as metrics, log a summary.
 */
export function makeDeadlineSweepHandler(deps: () => DeadlineSweepHandlerDeps) {
  return async (): Promise<DeadlineCounts> => {
    const sweepDeps = deps();
    const days = await writeDailyManifests({
      ...sweepDeps.manifests,
      ledger: sweepDeps.ledger,
      clock: sweepDeps.clock,
    });
    if (days.length > 0) sweepDeps.logger.info('audit manifests written', { days });
    const retention = await sweepDeps.ledger.minimiseDue(sweepDeps.minimisation);
    if (retention.minimised + retention.skipped > 0) {
      sweepDeps.logger.info('ended requests past their retention minimised', { ...retention });
    }
    const counts = await sweepDeadlines(sweepDeps, { dueSoonDays: sweepDeps.dueSoonDays });
    sweepDeps.emit(
      deadlineMetricsLine(counts, { namespace: sweepDeps.namespace, dimensions: { Stack: sweepDeps.stack } }),
    );
    const summary = { ...counts };
    if (counts.overdue > 0) sweepDeps.logger.warn('open requests are overdue', summary);
    else if (counts.receipts_overdue > 0) {
      sweepDeps.logger.warn('CCPA receipt confirmations are overdue', summary);
    } else sweepDeps.logger.info('deadline sweep', summary);
    return counts;
  };
}

let lambdaDeps: DeadlineSweepHandlerDeps | undefined;

function deadlineSweepLambdaDeps(): DeadlineSweepHandlerDeps {
  if (lambdaDeps === undefined) {
    const env = parseEnv(deadlineSweepEnvSchema, process.env);
    const dynamo = prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE));
    const { auditHmacKey } = functionSecretsFromEnv(process.env);
    lambdaDeps = {
      ledger: new Ledger(dynamo, env.TABLE_NAME),
      minimisation: { afterDays: env.MINIMISE_AFTER_DAYS, hmacKey: () => auditHmacKey() },
      clock: () => new Date(),
      dueSoonDays: env.DUE_SOON_DAYS,
      namespace: env.METRICS_NAMESPACE,
      stack: env.METRICS_STACK,
      // Straight to stdout, as Powertools Metrics does: the runtime's JSON log format wraps
      // console output, and a wrapped line is no longer read as Embedded Metric Format.
      emit: (line) => process.stdout.write(`${line}\n`),
      logger: powertoolsLogger(new Logger({ serviceName: 'svc-dsr' })),
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
