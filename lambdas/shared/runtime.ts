// A step Lambda's dependencies built from AWS clients: ledger, archive, platform client, gate, audit.
import { setTimeout as delay } from 'node:timers/promises';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  DeleteObjectCommand,
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { SendTaskSuccessCommand, SFNClient } from '@aws-sdk/client-sfn';
import { bundledPackageSettings, packageSettingsFromEnv } from '../build-package/settings.ts';
import {
  abortUpload,
  copyExportContinuable,
  putPackageStream,
  readVerifiedStream,
  verifyContinuedCopy,
  verifyCopy,
} from './archive/index.ts';
import { REQUEST_TYPE_TAG } from './archive-tags.ts';
import { AuditTrail } from './audit.ts';
import { type GateEnv, parseEnv, type StepEnv, stepEnvSchema } from './config.ts';
import type { DownloadPolicy } from './download-policy.ts';
import { EXPORT_WAITERS_QUEUE, ExportWaiters, type TaskTokenSuccess } from './export-waiters.ts';
import { Ledger } from './ledger/index.ts';
import { type PlatformCallGate, PlatformClient } from './platform-client.ts';
import { gateItemName, PlatformGate } from './platform-gate.ts';
import { functionLogger, functionMetrics, traced } from './powertools.ts';
import { CACHED_MIDDLEWARE, prepareSdkClient } from './sdk-clients.ts';
import { type FunctionSecrets, functionSecretsFromEnv } from './secrets.ts';
import { siteEnvironment } from './sites.ts';
import type { ArchiveStore, StepDeps, StepLogger } from './step-deps.ts';

/** The AWS clients a step needs; in Lambda they are module singletons, locally they point at stand-ins. */
export interface AwsClients {
  readonly s3: S3Client;
  /** DynamoDB for the ledger, which sends only plain DynamoDB commands: in Lambda it is built with {@link CACHED_MIDDLEWARE}. */
  readonly dynamo: DynamoDBClient;
  /** S3 for the audit trail alone, built with {@link CACHED_MIDDLEWARE}. @default s3 */
  readonly auditS3?: S3Client;
  /** Wakes requests waiting for an export slot when the gate gives one back. @default none */
  readonly exportWaiters?: ExportWaiters;
}

/** Builds the archive store over S3: copy, verify, and delete what fails verification. */
export function s3ArchiveStore(
  s3: S3Client,
  options: {
    bucket: string;
    kmsKeyId?: string;
    policy: DownloadPolicy;
    idleTimeoutMs?: number;
    /** The multipart part size. @default 8 MiB (more for an archive that would need over 10,000 parts) */
    partSizeBytes?: number;
    /** How often a continuable copy records where it stands. @default 30 s */
    checkpointEveryMs?: number;
    /** The archive's expansion cap (stack setting archiveMaxExpandedBytes). @default 4 GiB */
    maxExpandedBytes?: number;
  },
): ArchiveStore {
  const limits =
    options.maxExpandedBytes === undefined ? {} : { maxUncompressedBytes: options.maxExpandedBytes };
  const target = (key: string) => ({
    s3,
    bucket: options.bucket,
    key,
    ...(options.kmsKeyId ? { kmsKeyId: options.kmsKeyId } : {}),
  });
  return {
    async copy(link, key, requestType, continuable) {
      const result = await traced('archive.copy', async (annotate) => {
        const outcome = await copyExportContinuable(
          link,
          { ...target(key), tags: { [REQUEST_TYPE_TAG]: requestType } },
          {
            policy: options.policy,
            verify: limits,
            ...(options.idleTimeoutMs ? { idleTimeoutMs: options.idleTimeoutMs } : {}),
            ...(options.partSizeBytes ? { partSizeBytes: options.partSizeBytes } : {}),
            ...(options.checkpointEveryMs === undefined
              ? {}
              : { checkpointEveryMs: options.checkpointEveryMs }),
            ...(continuable.checkpoint ? { checkpoint: continuable.checkpoint } : {}),
            shouldStop: continuable.shouldStop,
            onCheckpoint: continuable.onCheckpoint,
            ...(continuable.onDownloadOpened ? { onDownloadOpened: continuable.onDownloadOpened } : {}),
          },
        );
        if ('done' in outcome) annotate('bytes', outcome.done.bytes);
        return outcome;
      });
      if ('paused' in result) {
        return {
          kind: 'paused',
          checkpoint: result.paused,
          ...(result.restarted ? { restarted: result.restarted } : {}),
        };
      }
      const { done } = result;
      if (result.continued) {
        return {
          kind: 'continued',
          stored: {
            bytes: done.bytes,
            checksumCrc32: done.checksumCrc32,
            ...(done.versionId ? { versionId: done.versionId } : {}),
          },
        };
      }
      return {
        kind: 'copied',
        copied: {
          bytes: result.done.bytes,
          sha256: result.done.sha256,
          checksumCrc32: result.done.checksumCrc32,
          ...(result.done.archive ? { archive: result.done.archive } : {}),
          ...(result.done.versionId ? { versionId: result.done.versionId } : {}),
        },
        ...(result.restarted ? { restarted: result.restarted } : {}),
      };
    },
    async verifyContinued(key, stored) {
      try {
        const verified = await traced('archive.verify', () =>
          verifyContinuedCopy(target(key), stored, limits),
        );
        return { entries: verified.entries.length, sha256: verified.sha256 };
      } catch (error) {
        await s3.send(new DeleteObjectCommand({ Bucket: options.bucket, Key: key }));
        throw error;
      }
    },
    abandonUpload: (key, uploadId) => abortUpload(target(key), uploadId),
    async verify(key, copied) {
      try {
        const verified = await traced('archive.verify', () => verifyCopy(target(key), copied, limits));
        return { entries: verified.entries.length };
      } catch (error) {
        // A copy that fails verification must not linger where it could be mistaken for the archive.
        await s3.send(new DeleteObjectCommand({ Bucket: options.bucket, Key: key }));
        throw error;
      }
    },
    remove: (key) => removeAllVersions(s3, options.bucket, key),
    read: (key, expected) => readVerifiedStream(target(key), expected),
    storePackage: (key, body, fileName) =>
      putPackageStream({ ...target(key), tags: { [REQUEST_TYPE_TAG]: 'access' } }, body, { fileName }),
  };
}

/**
 * Deletes every version and delete marker of `key` (or, with `{ prefix: true }`, of every key that
 * starts with it) in a versioned bucket: a plain DeleteObject would only hide the data behind a
 * marker. Answers how many versions went.
 */
export async function removeAllVersions(
  s3: S3Client,
  bucket: string,
  key: string,
  options: { prefix?: boolean } = {},
): Promise<number> {
  let removed = 0;
  let markers: { KeyMarker?: string; VersionIdMarker?: string } = {};
  for (;;) {
    const page = await s3.send(new ListObjectVersionsCommand({ Bucket: bucket, Prefix: key, ...markers }));
    for (const version of [...(page.Versions ?? []), ...(page.DeleteMarkers ?? [])]) {
      if (version.Key === undefined || (options.prefix !== true && version.Key !== key)) continue;
      await s3.send(
        new DeleteObjectCommand({
          Bucket: bucket,
          Key: version.Key,
          ...(version.VersionId === undefined ? {} : { VersionId: version.VersionId }),
        }),
      );
      removed += 1;
    }
    if (page.IsTruncated !== true) break;
    markers = {
      ...(page.NextKeyMarker ? { KeyMarker: page.NextKeyMarker } : {}),
      ...(page.NextVersionIdMarker ? { VersionIdMarker: page.NextVersionIdMarker } : {}),
    };
  }
  // A store that lists no versions (a local stand-in) still holds the object: delete what is left.
  let token: string | undefined;
  do {
    const page = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: key, ContinuationToken: token }),
    );
    for (const object of page.Contents ?? []) {
      if (object.Key === undefined || (options.prefix !== true && object.Key !== key)) continue;
      await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: object.Key }));
      removed += 1;
    }
    token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
  } while (token !== undefined);
  return removed;
}

/** Wires the domain's dependencies from a validated environment. */
export function buildStepDeps(
  env: StepEnv,
  clients: AwsClients,
  secrets: FunctionSecrets,
  logger: StepLogger,
  overrides: Partial<Pick<StepDeps, 'sleep' | 'clock'>> & { fetch?: typeof fetch } = {},
): StepDeps & { readonly audit: AuditTrail; readonly gate: PlatformGate } {
  const clock = overrides.clock ?? (() => new Date());
  const gate = platformGate(env, clients.dynamo, logger, clients.exportWaiters);
  const platform = platformClient(env, secrets, logger, overrides.fetch, gate);
  const ledger = new Ledger(clients.dynamo, env.TABLE_NAME, clock);
  return {
    ledger,
    audit: new AuditTrail(
      {
        s3: clients.auditS3 ?? clients.s3,
        bucket: env.AUDIT_BUCKET,
        ...(env.KMS_KEY_ID ? { kmsKeyId: env.KMS_KEY_ID } : {}),
      },
      { hmacKey: secrets.auditHmacKey, clock, heads: ledger },
    ),
    platform,
    gate,
    archive: s3ArchiveStore(clients.s3, {
      bucket: env.ARCHIVE_BUCKET,
      ...(env.KMS_KEY_ID ? { kmsKeyId: env.KMS_KEY_ID } : {}),
      policy: {
        allowedHosts: env.DOWNLOAD_ALLOWED_HOSTS,
        insecureHosts: env.DOWNLOAD_INSECURE_HOSTS,
        maxRedirects: 3,
      },
      maxExpandedBytes: env.ARCHIVE_MAX_EXPANDED_BYTES,
    }),
    subjectPackage: {
      ...packageSettingsFromEnv(bundledPackageSettings() ?? env.PACKAGE_SETTINGS),
      timeZone: env.TIME_ZONE,
    },
    schedule: {
      initialSeconds: env.POLL_INITIAL_SECONDS,
      maxSeconds: env.POLL_MAX_SECONDS,
      budgetSeconds: env.POLL_BUDGET_SECONDS,
      growthPercent: env.POLL_GROWTH_PERCENT,
    },
    exportMaxAttempts: env.EXPORT_MAX_ATTEMPTS,
    ...(env.ERASURE_ARCHIVE_KEEP_DAYS === undefined
      ? {}
      : { erasureArchiveKeepDays: env.ERASURE_ARCHIVE_KEEP_DAYS }),
    retryAfterCapSeconds: env.RETRY_AFTER_CAP_SECONDS,
    clock,
    sleep: overrides.sleep ?? ((ms) => delay(ms)),
    logger,
  };
}

/** The shared platform gate, as the environment configures it. */
export function platformGate(
  env: GateEnv,
  dynamo: DynamoDBClient,
  logger: StepLogger,
  waiters?: ExportWaiters,
): PlatformGate {
  return new PlatformGate(
    dynamo,
    env.GATE_TABLE_NAME,
    {
      requestsPerSecond: env.PLATFORM_REQUESTS_PER_SECOND,
      burst: env.PLATFORM_BURST,
      maxOpenExports: env.PLATFORM_MAX_OPEN_EXPORTS,
      outageHorizonSeconds: env.OUTAGE_HORIZON_SECONDS,
      maxSleepMs: env.PLATFORM_MAX_SLEEP_SECONDS * 1000,
    },
    {
      logger,
      ...(waiters ? { waiters } : {}),
      ...(env.GATE_SITE === undefined ? {} : { site: env.GATE_SITE }),
    },
  );
}

/**
 * The export-slot waiters of a function in AWS Lambda, when the stack lets it wake them: the gate
 * table's index to find the oldest, Step Functions to answer its token.
 */
export function lambdaExportWaiters(
  env: GateEnv,
  logger: StepLogger,
  dynamo: DynamoDBClient = prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE)),
): ExportWaiters | undefined {
  if (env.EXPORT_WAITERS_INDEX === undefined) return undefined;
  const sfn = prepareSdkClient(new SFNClient(CACHED_MIDDLEWARE));
  return new ExportWaiters(dynamo, env.GATE_TABLE_NAME, sfnTaskSuccess(sfn), {
    logger,
    ...(env.GATE_SITE === undefined ? {} : { queue: gateItemName(EXPORT_WAITERS_QUEUE, env.GATE_SITE) }),
  });
}

/** SendTaskSuccess with an empty output: the waiter only needs to know that it may go. */
export function sfnTaskSuccess(sfn: Pick<SFNClient, 'send'>): TaskTokenSuccess {
  return async (token) => {
    await sfn.send(new SendTaskSuccessCommand({ taskToken: token, output: '{}' }));
  };
}

/** The platform client of a function, with the tokens that function is given, behind the gate. */
export function platformClient(
  env: StepEnv,
  secrets: Pick<FunctionSecrets, 'ssoAccessToken' | 'exportToken'>,
  logger: StepLogger,
  fetch?: typeof globalThis.fetch,
  gate?: PlatformCallGate,
): PlatformClient {
  return new PlatformClient(
    {
      baseUrl: env.PLATFORM_BASE_URL,
      exportUrl: env.PLATFORM_EXPORT_URL,
      activityUrl: env.PLATFORM_ACTIVITY_URL,
      spotId: env.SPOT_ID,
      timeoutMs: env.PLATFORM_TIMEOUT_MS,
      ssoTokenHeader: env.SSO_TOKEN_HEADER,
      userIdField: env.USER_ID_FIELD,
    },
    {
      credentials: {
        ...(secrets.ssoAccessToken ? { ssoAccessToken: secrets.ssoAccessToken } : {}),
        ...(secrets.exportToken ? { exportToken: secrets.exportToken } : {}),
      },
      logger,
      ...(fetch ? { fetch } : {}),
      ...(gate ? { gate } : {}),
    },
  );
}

let lambdaDeps: StepDeps | undefined;

/**
 * The deps of a step running in AWS Lambda: built once per container from its environment, and
 * once for each other site the container's requests run on, from its environment as that site has
 * it (sites.ts siteEnvironment): the site's spot id, tokens, limits and gate items.
 */
export function lambdaStepDeps(): StepDeps {
  if (lambdaDeps === undefined) {
    const logger = functionLogger();
    const clients = {
      s3: prepareSdkClient(new S3Client({})),
      auditS3: prepareSdkClient(new S3Client(CACHED_MIDDLEWARE)),
      dynamo: prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE)),
    };
    const depsOf = (raw: Record<string, string | undefined>): StepDeps => {
      const env = parseEnv(stepEnvSchema, raw);
      const exportWaiters = lambdaExportWaiters(env, logger, clients.dynamo);
      const deps = buildStepDeps(
        env,
        { ...clients, ...(exportWaiters ? { exportWaiters } : {}) },
        functionSecretsFromEnv(raw),
        logger,
      );
      if (env.METRICS_STACK === undefined) return deps;
      const metrics = functionMetrics(env.METRICS_NAMESPACE, env.METRICS_STACK);
      return {
        ...deps,
        countMetric: (name, value) => {
          metrics.addMetric(name, MetricUnit.Count, value);
          metrics.publishStoredMetrics();
        },
      };
    };
    lambdaDeps = withSites(depsOf(process.env), (site) => depsOf(siteEnvironment(process.env, site)));
  }
  return lambdaDeps;
}

/**
 * `deps` answering `forSite` with the deps of each site, built by `build` the first time a request
 * of that site runs and kept for the container's life.
 */
export function withSites(deps: StepDeps, build: (site: string) => StepDeps): StepDeps {
  const bySite = new Map<string, StepDeps>();
  return {
    ...deps,
    forSite: (site) => {
      let own = bySite.get(site);
      if (own === undefined) {
        own = build(site);
        bySite.set(site, own);
      }
      return own;
    },
  };
}
