// The reconciler Lambda: one scheduled pass within the invocation's time, then its heartbeat.
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { z } from 'zod';
import { AuditTrail } from '#shared/audit';
import { csv, gateEnvSchema, parseEnv } from '#shared/config';
import { DEFAULTS } from '#shared/defaults';
import { ConfigurationError } from '#shared/errors';
import { Ledger } from '#shared/ledger';
import { HEARTBEAT_METRICS, SITE_DIMENSION } from '#shared/metrics';
import { type ExportDrain, platformExportDrain } from '#shared/open-exports';
import { PlatformClient } from '#shared/platform-client';
import type { PlatformGate } from '#shared/platform-gate';
import { functionLogger, functionMetrics } from '#shared/powertools';
import { lambdaExportWaiters, platformGate } from '#shared/runtime';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import { secretsManagerReaders } from '#shared/secrets';
import { SITE_IDS_ENV, siteEnvironment, siteIdsEnvSchema } from '#shared/sites';
import { sfnStarter } from '../intake/aws.ts';
import { sfnLister, sfnLookup } from './aws.ts';
import { gateTableCursor } from './cursor.ts';
import { ApiPacer, documentedQuotas, QUOTA_SHARE, shareOf } from './quota.ts';
import {
  type ReconcileOptions,
  type ReconcilerDeps,
  type ReconcileSummary,
  reconcile,
} from './reconciler.ts';

/** Environment of the reconciler Lambda. */
export const reconcilerEnvSchema = z.object({
  TABLE_NAME: z.string().min(1),
  STATE_MACHINE_ARN: z
    .string()
    .regex(/^arn:[^:]+:states:[^:]*:\d*:stateMachine:[^:]+$/, 'expected a state machine ARN'),
  MAX_RESUMES: z.coerce.number().int().min(0).max(20).default(3),
  GRACE_SECONDS: z.coerce.number().int().min(0).default(600),
  /**
   * The share of the account's Step Functions quotas (ListExecutions, DescribeExecution,
   * StartExecution) the pass may use; the rest stays for every other caller in the account.
   */
  SFN_QUOTA_SHARE: z.coerce.number().min(QUOTA_SHARE.min).max(QUOTA_SHARE.max).default(QUOTA_SHARE.default),
  /** Set by Lambda: it picks the documented quotas (the largest Regions have larger buckets). */
  AWS_REGION: z.string().min(1).optional(),
  METRICS_NAMESPACE: z.string().min(1),
  METRICS_STACK: z.string().min(1),
  /** The audit bucket: the final record of a request the reconciler records failed goes there. */
  AUDIT_BUCKET: z.string().min(1),
  KMS_KEY_ID: z.string().min(1).optional(),
  ...gateEnvSchema.shape,
  /**
   * The platform, for the exports that ended requests left open (polled, then downloaded to
   * nowhere): set by the stack. Without them such an export's slot is held.
   */
  EXPORT_TOKEN_SECRET_ID: z.string().min(1).optional(),
  PLATFORM_BASE_URL: z.url().optional(),
  PLATFORM_EXPORT_URL: z.url().optional(),
  PLATFORM_ACTIVITY_URL: z.url().optional(),
  SPOT_ID: z.string().min(1).optional(),
  PLATFORM_TIMEOUT_MS: z.coerce.number().int().positive().default(DEFAULTS.platformTimeoutMs),
  DOWNLOAD_ALLOWED_HOSTS: csv,
});

/** The drain of exports left open, when the environment names the platform and the export token. */
function exportDrainFrom(
  env: z.infer<typeof reconcilerEnvSchema>,
  gate: PlatformGate,
  logger: ReturnType<typeof functionLogger>,
): ExportDrain | undefined {
  const { EXPORT_TOKEN_SECRET_ID: tokenId, PLATFORM_BASE_URL: baseUrl, PLATFORM_EXPORT_URL: exportUrl } = env;
  const { PLATFORM_ACTIVITY_URL: activityUrl, SPOT_ID: spotId } = env;
  if (!tokenId || !baseUrl || !exportUrl || !activityUrl || !spotId) return undefined;
  const { exportToken } = secretsManagerReaders({ exportToken: tokenId });
  if (exportToken === undefined) return undefined;
  const platform = new PlatformClient(
    { baseUrl, exportUrl, activityUrl, spotId, timeoutMs: env.PLATFORM_TIMEOUT_MS },
    { credentials: { exportToken }, logger, gate },
  );
  return platformExportDrain(platform, gate, {
    allowedHosts: env.DOWNLOAD_ALLOWED_HOSTS,
    insecureHosts: [],
    maxRedirects: 3,
  });
}

/** What the handler needs: the pass's, and its heartbeat. */
export type ReconcilerHandlerDeps = ReconcilerDeps &
  ReconcileOptions & {
    /** Publishes the pass's heartbeat; called only when the pass completes. */
    readonly heartbeat: () => void;
  };

/**
 * Time the pass leaves unused at the end of the invocation: the page under way when its budget
 * runs out finishes (a page takes about a second; a slow one, with many resumes, a few), and the
 * heartbeat goes out.
 */
export const PASS_MARGIN_MS = 30_000;

/** The part of the Lambda context the handler reads. */
const contextSchema = z.object({
  getRemainingTimeInMillis: z.custom<() => number>((value) => typeof value === 'function'),
});

/**
 * The scheduled handler: one reconciliation pass, within the invocation's remaining time less
 * PASS_MARGIN_MS (what it does not reach, the next pass goes on with from the cursor), then its
 * heartbeat (a pass that throws publishes none, and the heartbeat's alarm reads the silence); the
 * summary names request ids only.
 */
export function makeReconcilerHandler(deps: () => ReconcilerHandlerDeps) {
  return async (_event?: unknown, context?: unknown): Promise<ReconcileSummary> => {
    const all = deps();
    const lambda = contextSchema.safeParse(context);
    const remaining = lambda.success ? () => lambda.data.getRemainingTimeInMillis() : undefined;
    const summary = await reconcile(all, {
      maxResumes: all.maxResumes,
      graceSeconds: all.graceSeconds,
      ...(remaining === undefined ? {} : { timeLeftMs: () => remaining() - PASS_MARGIN_MS }),
    });
    all.heartbeat();
    return summary;
  };
}

let lambdaDeps: ReconcilerHandlerDeps | undefined;

function reconcilerLambdaDeps(): ReconcilerHandlerDeps {
  if (lambdaDeps === undefined) {
    const env = parseEnv(reconcilerEnvSchema, process.env);
    const sfn = prepareSdkClient(new SFNClient(CACHED_MIDDLEWARE));
    const dynamo = prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE));
    const logger = functionLogger();
    const metrics = functionMetrics(env.METRICS_NAMESPACE, env.METRICS_STACK);
    const ledger = new Ledger(dynamo, env.TABLE_NAME);
    const gate = platformGate(env, dynamo, logger, lambdaExportWaiters(env, logger));
    const drain = exportDrainFrom(env, gate, logger);
    // Every other site's gate, waiters and drain, from the environment as that site has it.
    const [first, ...others] = siteIdsEnvSchema.parse(process.env[SITE_IDS_ENV]);
    const sites = others.map((site) => {
      const own = parseEnv(reconcilerEnvSchema, siteEnvironment(process.env, site));
      const siteGate = platformGate(own, dynamo, logger, lambdaExportWaiters(own, logger, dynamo));
      const siteDrain = exportDrainFrom(own, siteGate, logger);
      return { site, gate: siteGate, ...(siteDrain === undefined ? {} : { drain: siteDrain }) };
    });
    lambdaDeps = {
      ledger,
      audit: new AuditTrail(
        {
          s3: prepareSdkClient(new S3Client(CACHED_MIDDLEWARE)),
          bucket: env.AUDIT_BUCKET,
          ...(env.KMS_KEY_ID ? { kmsKeyId: env.KMS_KEY_ID } : {}),
        },
        {
          // Its records carry no subject, so the reconciler holds no HMAC key.
          hmacKey: () => {
            throw new ConfigurationError('the reconciler writes no subject hashes and has no HMAC key');
          },
          heads: ledger,
        },
      ),
      gate,
      ...(drain === undefined ? {} : { drain }),
      ...(sites.length === 0 ? {} : { sites, ...(first === undefined ? {} : { site: first }) }),
      publish: (figures) => {
        metrics.addMetric('StuckRequests', MetricUnit.Count, figures.StuckRequests);
        metrics.addMetric('PlatformDownSeconds', MetricUnit.Seconds, figures.PlatformDownSeconds);
        metrics.addMetric('ExportSlotsHeld', MetricUnit.Count, figures.ExportSlotsHeld);
        metrics.publishStoredMetrics();
        // Each site's own circuit and slots, under its Site dimension (the per-site alarms).
        for (const [site, each] of Object.entries(figures.sites ?? {})) {
          const single = metrics.singleMetric();
          single.addDimension(SITE_DIMENSION, site);
          single.addMetric('PlatformDownSeconds', MetricUnit.Seconds, each.PlatformDownSeconds);
          single.addMetric('ExportSlotsHeld', MetricUnit.Count, each.ExportSlotsHeld);
          single.publishStoredMetrics();
        }
      },
      heartbeat: () => {
        metrics.addMetric(HEARTBEAT_METRICS.reconciler, MetricUnit.Count, 1);
        metrics.publishStoredMetrics();
      },
      cursor: gateTableCursor(dynamo, env.GATE_TABLE_NAME),
      list: sfnLister(sfn, env.STATE_MACHINE_ARN),
      describe: sfnLookup(sfn, env.STATE_MACHINE_ARN),
      // One pacer for the warm function: its buckets carry over from one pass to the next.
      pacer: new ApiPacer(shareOf(documentedQuotas(env.AWS_REGION), env.SFN_QUOTA_SHARE)),
      start: sfnStarter(sfn, env.STATE_MACHINE_ARN),
      clock: () => new Date(),
      logger,
      maxResumes: env.MAX_RESUMES,
      graceSeconds: env.GRACE_SECONDS,
    };
  }
  return lambdaDeps;
}

export const handler = makeReconcilerHandler(reconcilerLambdaDeps);
