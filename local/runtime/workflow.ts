import { randomBytes } from 'node:crypto';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  CreateBucketCommand,
  PutBucketVersioningCommand,
  PutObjectLockConfigurationCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import type { DeadlineCounts } from '../../lambdas/deadline-sweep/deadline-sweep.ts';
import { makeDeadlineSweepHandler } from '../../lambdas/deadline-sweep/handler.ts';
import { sqsQuarantine } from '../../lambdas/intake/aws.ts';
import { type IntakeObserver, makeIntakeHandler } from '../../lambdas/intake/handler.ts';
import type { IntakeDeps } from '../../lambdas/intake/intake.ts';
import type { SiteGate } from '../../lambdas/reconciler/reconciler.ts';
import { type AuditTrail, MINIMUM_RETENTION_MONTHS } from '../../lambdas/shared/audit.ts';
import { CALLERS, runAsCaller } from '../../lambdas/shared/call-recorder.ts';
import { type StepEnv, stepEnvSchema } from '../../lambdas/shared/config.ts';
import { EXPORT_WAITERS_QUEUE, ExportWaiters } from '../../lambdas/shared/export-waiters.ts';
import type { Ledger } from '../../lambdas/shared/ledger/index.ts';
import { createGateTable, createLedgerTable } from '../../lambdas/shared/ledger/table.ts';
import { type ExportDrain, platformExportDrain } from '../../lambdas/shared/open-exports.ts';
import { gateItemName, type PlatformGate } from '../../lambdas/shared/platform-gate.ts';
import { buildStepDeps, platformClient, sfnTaskSuccess, withSites } from '../../lambdas/shared/runtime.ts';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '../../lambdas/shared/sdk-clients.ts';
import {
  type SecretName,
  type SecretReader,
  type SecretValues,
  secretsManagerReaders,
} from '../../lambdas/shared/secrets.ts';
import {
  DEFAULT_SITE_ID,
  SITE_IDS_ENV,
  SITES_ENV,
  siteEnvironment,
  siteIdsEnvSchema,
} from '../../lambdas/shared/sites.ts';
import type { StepDeps, StepLogger } from '../../lambdas/shared/step-deps.ts';
import { type AnyStep, makeStepHandler } from '../../lambdas/shared/step-handler.ts';
import type { ExecutionInput } from '../../lambdas/shared/step-io.ts';
import { RECONCILER_TOKENS, STEP_TOKENS, STEPS, type StepName } from '../../lambdas/steps.ts';
import { resolveStateMachine } from '../../lib/asl.ts';
import { retentionDaysForMonths } from '../../lib/config.ts';
import type { AwsFaults } from '../aws/aws-faults.ts';
import type { AwsStandIns } from '../aws/aws-standins.ts';
import { startSecretsStandIn } from '../aws/secrets-standin.ts';
import { type SfnShim, startSfnShim } from '../aws/sfn-shim.ts';
import { openExecutions, type Registry } from './executions.ts';
import {
  DYNAMODB_UPDATE_ITEM,
  dynamoUpdateItem,
  SDK_DYNAMODB_UPDATE_ITEM,
  sdkDynamoUpdateItem,
} from './integrations.ts';
import {
  type ExecutionResult,
  type LocalIntegration,
  type LocalLambda,
  LocalStateMachine,
} from './sfn-runner.ts';
import {
  packageSettingsOf,
  SWEEP_CALLER,
  stepFunctionIds,
  stepVariableOf,
  sweepSettingsOf,
  verificationPolicyOf,
} from './template-settings.ts';

/** Where the platform (usually the emulator) is and the tokens it accepts. */
export interface PlatformEndpoint {
  readonly url: string;
  readonly spotId: string;
  readonly ssoAccessToken: string;
  readonly exportToken: string;
}

export interface LocalWorkflowOptions {
  readonly aws: AwsStandIns;
  readonly platform: PlatformEndpoint;
  /**
   * The tokens of each configured site but the first (the template's SITE_IDS, in order), whose
   * spot ids the template holds: the platform serves every site at `platform.url`.
   * @default the template's sites but the first have none, as a stack of one site
   */
  readonly siteTokens?: Readonly<
    Record<string, { readonly ssoAccessToken: string; readonly exportToken: string }>
  >;
  /** Every Wait lasts this many ms (the definition still says how long it would wait in AWS). @default 0 */
  readonly waitMs?: number;
  /** Every Retry interval lasts this many ms. @default 0 */
  readonly retryIntervalMs?: number;
  /** Step environment overrides (poll schedule, attempts, timeouts), as strings like Lambda env. */
  readonly env?: Readonly<Record<string, string>>;
  /** Receives every log line (JSON). @default discarded */
  readonly logSink?: (line: string) => void;
  /** The synthesized stack (`synthesizeTemplate`) whose state machine and step Lambdas run here. */
  readonly template: Record<string, unknown>;
  readonly fetch?: typeof fetch;
  /** The secrets' values; local mode keeps them per data dir so audit subject hashes stay stable. @default the emulator's tokens and a random key */
  readonly secrets?: SecretValues;
  /**
   * The ARN clients use for the state machine; its executions' ARNs start from it.
   * @default the runner's ARN for the template's state machine
   */
  readonly stateMachineArn?: string;
  /** A directory of its own for the execution records (see executions.ts). @default none (memory only) */
  readonly executionsDir?: string;
  /** Throttles a seeded share of Lambda invokes when it lists `lambda` (see aws-faults.ts). @default none */
  readonly awsFaults?: AwsFaults;
  /**
   * Replaces a step's Lambda, given the real one: lets a test make a function fail as Lambda
   * itself would (throttled, a service fault). @default the step's handler
   */
  readonly stepOverrides?: Partial<Record<StepName, (real: LocalLambda) => LocalLambda>>;
  /** Stands between the state machine's direct DynamoDB calls and the ledger, as `fetch` does for the platform. */
  readonly dynamoIntegration?: (real: LocalIntegration) => LocalIntegration;
}

/** The intake queue's visibility timeout and the receives before its dead-letter queue. */
export const INTAKE_QUEUE = { visibilitySeconds: 30, maxReceives: 5 } as const;

/** The local id of a token of a site other than the first, as the stack names the secrets it creates. */
export function localSiteSecretId(site: string, token: 'ssoAccessToken' | 'exportToken'): string {
  return `svc-dsr/sites/${site}/${token === 'ssoAccessToken' ? 'sso-access-token' : 'export-token'}`;
}

/** The local ids of the secrets, as the stack's secret ARNs in AWS. */
export const LOCAL_SECRET_IDS: Readonly<Record<SecretName, string>> = {
  ssoAccessToken: 'svc-dsr/sso-access-token',
  exportToken: 'svc-dsr/export-token',
  auditHmacKey: 'svc-dsr/audit-hmac-key',
};

/** Names of the local resources, mirroring the stack's. */
export const LOCAL_NAMES = {
  table: 'svc-dsr-ledger',
  gateTable: 'svc-dsr-gate',
  archiveBucket: 'svc-dsr-archive',
  auditBucket: 'svc-dsr-audit',
  intakeQueue: 'svc-dsr-intake',
  intakeDeadLetterQueue: 'svc-dsr-intake-dlq',
  quarantineQueue: 'svc-dsr-quarantine',
} as const;

/** The workflow running on one machine: the synthesized definition, the real handlers, local AWS. */
export interface LocalWorkflow {
  readonly ledger: Ledger;
  /** The controller's IANA time zone deadlines are counted in (`TIME_ZONE` in the env overrides). */
  readonly timeZone: string;
  readonly audit: AuditTrail;
  readonly s3: S3Client;
  readonly sqs: SQSClient;
  /** The DynamoDB client of the ledger and the gate table. */
  readonly dynamo: DynamoDBClient;
  /** The ledger as documents, as the report reads it (its own client: DynamoDB's document client takes no cached middleware). */
  readonly documents: DynamoDBDocumentClient;
  readonly queueUrls: {
    readonly intake: string;
    readonly quarantine: string;
    readonly intakeDeadLetter: string;
  };
  readonly machine: LocalStateMachine;
  readonly definition: Record<string, unknown>;
  readonly stepDeps: StepDeps;
  /** The platform gate every function shares, as they share its table in AWS. */
  readonly gate: PlatformGate;
  /** The reconciler's drain of exports that ended requests left open, with the export token only. */
  readonly exportDrain: ExportDrain;
  /** The first configured site's id (DEFAULT_SITE_ID without sites): `gate` and `exportDrain` are its. */
  readonly site: string;
  /** Every other configured site's gate and drain, as the reconciler Lambda builds them. */
  readonly siteGates: readonly SiteGate[];
  /** The intake Lambda's handler, wired to the local stores, starting executions in process. */
  readonly intake: (event: SQSEvent) => Promise<SQSBatchResponse>;
  /** The intake Lambda's handler starting executions with `startExecution`: local mode's goes through the Step Functions API. */
  intakeWith(
    startExecution: IntakeDeps['startExecution'],
    observe?: IntakeObserver,
  ): (event: SQSEvent) => Promise<SQSBatchResponse>;
  /** StartExecution in process: runs the machine in the background; a name already used is not started again. */
  startExecution(name: string, input: ExecutionInput): Promise<'started' | 'already_exists'>;
  /** Puts a new value in a secret, as put-secret-value does; functions see it once their cache lapses or they refresh. */
  rotateSecret(name: SecretName, value: string): void;
  /**
   * The deadline sweep as its schedule runs it in AWS: the daily audit manifests not written yet,
   * the retention pass, the deadline counts (logged: local mode has no CloudWatch).
   */
  sweep(): Promise<DeadlineCounts>;
  /** How often the stack's schedule runs the sweep, ms (`deadlineSweepMinutes`). */
  readonly sweepEveryMs: number;
  /** Every execution of the machine, the only record of them; the Step Functions shim serves it. */
  readonly executions: Registry;
  /** The Step Functions API over {@link executions}, on loopback. */
  readonly shim: SfnShim;
  /** Resolves when every execution started so far has ended, with what each came to, by name. */
  settled(): Promise<Map<string, ExecutionResult>>;
  /**
   * Closes the executions, then the clients and the stand-ins it started. In memory it waits for
   * every execution to end; with `executionsDir` it gives up as {@link Registry.close} does, after
   * `graceMs` (default 5000).
   */
  close(options?: { readonly graceMs?: number }): Promise<void>;
}

/** Builds the local workflow: resources on the stand-ins, the machine from the synthesized template. */
export async function startLocalWorkflow(options: LocalWorkflowOptions): Promise<LocalWorkflow> {
  const { aws, platform, template } = options;
  const s3 = prepareSdkClient(new S3Client(aws.clientConfig('s3')));
  const auditS3 = prepareSdkClient(new S3Client({ ...aws.clientConfig('s3'), ...CACHED_MIDDLEWARE }));
  const sqs = prepareSdkClient(new SQSClient({ ...aws.clientConfig('sqs'), ...CACHED_MIDDLEWARE }));
  const dynamoClient = prepareSdkClient(
    new DynamoDBClient({ ...aws.clientConfig('dynamodb'), ...CACHED_MIDDLEWARE }),
  );
  const documents = DynamoDBDocumentClient.from(
    prepareSdkClient(new DynamoDBClient(aws.clientConfig('dynamodb'))),
  );
  const queueUrls = await createLocalResources(s3, sqs, dynamoClient);
  const logger = jsonLogger(options.logSink ?? (() => {}));
  const secrets = await startLocalSecrets(aws, platform, options.secrets);
  for (const [site, tokens] of Object.entries(options.siteTokens ?? {})) {
    secrets.served[localSiteSecretId(site, 'ssoAccessToken')] = tokens.ssoAccessToken;
    secrets.served[localSiteSecretId(site, 'exportToken')] = tokens.exportToken;
  }
  const rawEnv = stepEnvironment(platform, template, options.env);
  const env = stepEnvSchema.parse(rawEnv);
  // The steps that give an export slot back wake a waiter as in AWS: its item from the gate table's
  // index, its token answered through the Step Functions API below (no execution runs before it is up).
  const exportWaiters = new ExportWaiters(
    dynamoClient,
    LOCAL_NAMES.gateTable,
    (token) => sfnTaskSuccess(sfn)(token),
    { logger },
  );
  const clients = { s3, auditS3, dynamo: dynamoClient, exportWaiters };
  const stepDeps = buildStepDeps(env, clients, { auditHmacKey: secrets.auditHmacKey }, logger, {
    sleep: async () => {},
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
  // Every other site's deps, as a Lambda builds them from its environment as that site has it
  // (lambdas/shared/sites.ts): its spot id, limits, gate items and tokens.
  const siteIds = stepVariableOf(template, 'StartExport', SITE_IDS_ENV);
  const siteVariables = stepVariableOf(template, 'StartExport', SITES_ENV);
  const configuredSites = siteIdsEnvSchema.parse(siteIds);
  const siteEnv = (site: string) =>
    stepEnvSchema.parse({
      ...siteEnvironment(
        {
          ...rawEnv,
          ...(siteIds === undefined ? {} : { [SITE_IDS_ENV]: siteIds }),
          ...(siteVariables === undefined ? {} : { [SITES_ENV]: siteVariables }),
        },
        site,
      ),
    });
  const siteDeps = new Map<string, { deps: ReturnType<typeof buildStepDeps>; env: StepEnv }>();
  const depsOfSite = (site: string) => {
    let own = siteDeps.get(site);
    if (own === undefined) {
      const ownEnv = siteEnv(site);
      const waiters = new ExportWaiters(
        dynamoClient,
        LOCAL_NAMES.gateTable,
        (token) => sfnTaskSuccess(sfn)(token),
        {
          logger,
          ...(ownEnv.GATE_SITE === undefined
            ? {}
            : { queue: gateItemName(EXPORT_WAITERS_QUEUE, ownEnv.GATE_SITE) }),
        },
      );
      own = {
        env: ownEnv,
        deps: buildStepDeps(
          ownEnv,
          { ...clients, exportWaiters: waiters },
          { auditHmacKey: secrets.auditHmacKey },
          logger,
          { sleep: async () => {}, ...(options.fetch ? { fetch: options.fetch } : {}) },
        ),
      };
      siteDeps.set(site, own);
    }
    return own;
  };
  const resolved = resolveStateMachine(template);
  const machine = new LocalStateMachine(resolved, {
    handlers: stepHandlers(
      options,
      stepDeps,
      (step) =>
        // One ledger and audit trail for every function; a platform client per function, with its tokens.
        platformClient(env, secrets.readersFor(STEP_TOKENS[step]), logger, options.fetch, stepDeps.gate),
      (step, site) => {
        const own = depsOfSite(site);
        // The first site's tokens are the function's own secrets, as in AWS.
        const readers =
          site === configuredSites[0]
            ? secrets.readersFor(STEP_TOKENS[step])
            : secrets.readersForIds(
                Object.fromEntries(STEP_TOKENS[step].map((token) => [token, localSiteSecretId(site, token)])),
              );
        return {
          ...own.deps,
          platform: platformClient(own.env, readers, logger, options.fetch, own.deps.gate),
        };
      },
    ),
    waitMs: options.waitMs ?? 0,
    retryIntervalMs: options.retryIntervalMs ?? 0,
    ...(options.awsFaults ? { awsFaults: options.awsFaults } : {}),
    integrations: directIntegrations(options, dynamoClient),
  });

  const executions = await openExecutions({
    machine,
    stateMachineArn: options.stateMachineArn ?? machine.stateMachineArn,
    ...(options.executionsDir === undefined ? {} : { dataDir: options.executionsDir }),
  });
  // The executions behind the Step Functions API: the steps answer waiters' tokens over it, and
  // intake, the reconciler and the CLI of local mode start and look up executions with it.
  const shim = await startSfnShim({
    executions,
    ...(options.awsFaults ? { awsFaults: options.awsFaults } : {}),
  });
  const sfn = prepareSdkClient(
    new SFNClient({
      region: aws.region,
      endpoint: shim.endpoint,
      credentials: aws.credentials,
      ...CACHED_MIDDLEWARE,
    }),
  );
  const startExecution = async (name: string, input: ExecutionInput) => {
    if (executions.find(name) !== undefined) return 'already_exists' as const;
    await executions.start(name, input);
    return 'started' as const;
  };
  const intakeWith = intakeFactory(stepDeps, sqsQuarantine(sqs, queueUrls.quarantine), logger, {
    timeZone: env.TIME_ZONE,
    verification: verificationPolicyOf(template),
    sites: configuredSites,
  });
  const sweepSettings = sweepSettingsOf(template);
  const sweepHandler = makeDeadlineSweepHandler(() => ({
    ledger: stepDeps.ledger,
    clock: () => new Date(),
    dueSoonDays: sweepSettings.dueSoonDays,
    timeZone: env.TIME_ZONE,
    // No CloudWatch here: the counts go to the log with the sweep's summary line.
    publish: () => {},
    logger,
    manifests: { s3: auditS3, bucket: LOCAL_NAMES.auditBucket },
    minimisation: { afterDays: sweepSettings.minimiseAfterDays, hmacKey: () => secrets.auditHmacKey() },
  }));
  return {
    ledger: stepDeps.ledger,
    timeZone: env.TIME_ZONE,
    audit: stepDeps.audit,
    s3,
    sqs,
    dynamo: dynamoClient,
    documents,
    queueUrls,
    machine,
    definition: resolved.definition,
    stepDeps,
    gate: stepDeps.gate,
    site: configuredSites[0] ?? DEFAULT_SITE_ID,
    siteGates: configuredSites.slice(1).map((site) => {
      const own = depsOfSite(site);
      const readers = secrets.readersForIds(
        Object.fromEntries(RECONCILER_TOKENS.map((token) => [token, localSiteSecretId(site, token)])),
      );
      return {
        site,
        gate: own.deps.gate,
        drain: platformExportDrain(
          platformClient(own.env, readers, logger, options.fetch, own.deps.gate),
          own.deps.gate,
          {
            allowedHosts: own.env.DOWNLOAD_ALLOWED_HOSTS,
            insecureHosts: own.env.DOWNLOAD_INSECURE_HOSTS,
            maxRedirects: 3,
          },
        ),
      };
    }),
    exportDrain: platformExportDrain(
      platformClient(env, secrets.readersFor(RECONCILER_TOKENS), logger, options.fetch, stepDeps.gate),
      stepDeps.gate,
      {
        allowedHosts: env.DOWNLOAD_ALLOWED_HOSTS,
        insecureHosts: env.DOWNLOAD_INSECURE_HOSTS,
        maxRedirects: 3,
      },
    ),
    intake: intakeWith(startExecution),
    intakeWith,
    startExecution,
    rotateSecret(name, value) {
      secrets.served[LOCAL_SECRET_IDS[name]] = value;
    },
    sweep: () => runAsCaller(SWEEP_CALLER, () => sweepHandler()),
    sweepEveryMs: sweepSettings.everyMinutes * 60_000,
    executions,
    shim,
    settled: () => executions.results(),
    async close(closeOptions = {}) {
      // Without records nothing would show an abandoned execution: wait for every one to end.
      if (options.executionsDir === undefined) await executions.idle();
      await executions.close(closeOptions.graceMs === undefined ? {} : { timeoutMs: closeOptions.graceMs });
      // The executions close first, while the shim answers that it is closing.
      await shim.close();
      sfn.destroy();
      s3.destroy();
      auditS3.destroy();
      sqs.destroy();
      dynamoClient.destroy();
      documents.destroy();
      await secrets.close();
    },
  };
}

/** What CloudFormation creates in AWS: the two tables, the two versioned buckets and the queues. */
async function createLocalResources(
  s3: S3Client,
  sqs: SQSClient,
  dynamoClient: DynamoDBClient,
): Promise<LocalWorkflow['queueUrls']> {
  return await runAsCaller(CALLERS.localRuntime, async () => {
    await createLedgerTable(dynamoClient, LOCAL_NAMES.table);
    await createGateTable(dynamoClient, LOCAL_NAMES.gateTable);
    for (const bucket of [LOCAL_NAMES.archiveBucket, LOCAL_NAMES.auditBucket]) {
      const audit = bucket === LOCAL_NAMES.auditBucket;
      await s3
        .send(
          new CreateBucketCommand({ Bucket: bucket, ...(audit ? { ObjectLockEnabledForBucket: true } : {}) }),
        )
        .catch(ignoreExisting);
      await s3.send(
        new PutBucketVersioningCommand({ Bucket: bucket, VersioningConfiguration: { Status: 'Enabled' } }),
      );
    }
    // The audit bucket locks each record as the stack's does by default: COMPLIANCE, for the minimum retention.
    await s3.send(
      new PutObjectLockConfigurationCommand({
        Bucket: LOCAL_NAMES.auditBucket,
        ObjectLockConfiguration: {
          ObjectLockEnabled: 'Enabled',
          Rule: {
            DefaultRetention: { Mode: 'COMPLIANCE', Days: retentionDaysForMonths(MINIMUM_RETENTION_MONTHS) },
          },
        },
      }),
    );
    return createQueues(sqs);
  });
}

/** The local Secrets Manager and the readers the functions get from it. */
interface LocalSecrets {
  /** The value each secret id serves; the stand-in reads it on every call, so a change is what it serves next. */
  readonly served: Record<string, string>;
  /** Readers of the named secrets only, as a function is given only the tokens it has in AWS (STEP_TOKENS). */
  readersFor(names: readonly SecretName[]): { [K in SecretName]?: SecretReader };
  /** Readers of the secrets of these ids (a site's tokens). */
  readersForIds(ids: Partial<Record<SecretName, string>>): { [K in SecretName]?: SecretReader };
  readonly auditHmacKey: SecretReader;
  close(): Promise<void>;
}

/** The functions read their secrets from a local Secrets Manager, as they do in Lambda. */
async function startLocalSecrets(
  aws: AwsStandIns,
  platform: PlatformEndpoint,
  given: SecretValues | undefined,
): Promise<LocalSecrets> {
  const values: SecretValues = given ?? {
    ssoAccessToken: platform.ssoAccessToken,
    exportToken: platform.exportToken,
    auditHmacKey: randomBytes(32).toString('hex'),
  };
  const served: Record<string, string> = Object.fromEntries(
    Object.entries(LOCAL_SECRET_IDS).map(([name, id]) => [id, values[name as SecretName]]),
  );
  const secretsManager = await startSecretsStandIn(served);
  const clientConfig = {
    region: aws.region,
    endpoint: secretsManager.endpoint,
    credentials: aws.credentials,
  };
  const readersFor = (names: readonly SecretName[]) =>
    secretsManagerReaders(Object.fromEntries(names.map((name) => [name, LOCAL_SECRET_IDS[name]])), {
      clientConfig,
    });
  const readersForIds = (ids: Partial<Record<SecretName, string>>) =>
    secretsManagerReaders(ids, { clientConfig });
  const { auditHmacKey } = readersFor(['auditHmacKey']);
  if (auditHmacKey === undefined) throw new Error('the local audit key has no reader');
  return { served, readersFor, readersForIds, auditHmacKey, close: () => secretsManager.close() };
}

/** The step functions' environment, as the stack sets it, pointed at the local names and the platform. */
function stepEnvironment(
  platform: PlatformEndpoint,
  template: Record<string, unknown>,
  overrides: Readonly<Record<string, string>> | undefined,
): Record<string, string | undefined> {
  const packageSettings = packageSettingsOf(template);
  const erasureArchiveKeepDays = stepVariableOf(template, 'VerifyErasure', 'ERASURE_ARCHIVE_KEEP_DAYS');
  const timeZone = stepVariableOf(template, 'BuildPackage', 'TIME_ZONE');
  return {
    TABLE_NAME: LOCAL_NAMES.table,
    GATE_TABLE_NAME: LOCAL_NAMES.gateTable,
    ARCHIVE_BUCKET: LOCAL_NAMES.archiveBucket,
    AUDIT_BUCKET: LOCAL_NAMES.auditBucket,
    AUDIT_KEY_SECRET_ID: LOCAL_SECRET_IDS.auditHmacKey,
    PLATFORM_BASE_URL: platform.url,
    PLATFORM_EXPORT_URL: platform.url,
    PLATFORM_ACTIVITY_URL: platform.url,
    SPOT_ID: platform.spotId,
    DOWNLOAD_INSECURE_HOSTS: new URL(platform.url).host,
    ...(packageSettings === undefined ? {} : { PACKAGE_SETTINGS: packageSettings }),
    ...(erasureArchiveKeepDays === undefined ? {} : { ERASURE_ARCHIVE_KEEP_DAYS: erasureArchiveKeepDays }),
    ...(timeZone === undefined ? {} : { TIME_ZONE: timeZone }),
    ...overrides,
  };
}

/** Each step's handler under its Lambda's logical id in the template, run as that function. */
function stepHandlers(
  options: LocalWorkflowOptions,
  stepDeps: StepDeps,
  platformFor: (step: StepName) => StepDeps['platform'],
  siteDepsFor: (step: StepName, site: string) => StepDeps,
): Record<string, LocalLambda> {
  const ids = stepFunctionIds(options.template);
  const handlers: Record<string, LocalLambda> = {};
  for (const step of Object.keys(ids) as StepName[]) {
    const definition: AnyStep = STEPS[step];
    const platform = platformFor(step);
    const deps = withSites({ ...stepDeps, platform }, (site) => siteDepsFor(step, site));
    const handler = makeStepHandler(definition, () => deps);
    const real: LocalLambda = (event, context) => runAsCaller(step, () => handler(event, context));
    handlers[ids[step]] = options.stepOverrides?.[step]?.(real) ?? real;
  }
  return handlers;
}

/** The state machine's own calls to DynamoDB (no Lambda between). */
function directIntegrations(
  options: LocalWorkflowOptions,
  dynamoClient: DynamoDBClient,
): Record<string, LocalIntegration> {
  const updateItem = dynamoUpdateItem(dynamoClient, options.template, LOCAL_NAMES.table);
  return {
    [DYNAMODB_UPDATE_ITEM]: options.dynamoIntegration?.(updateItem) ?? updateItem,
    [SDK_DYNAMODB_UPDATE_ITEM]: sdkDynamoUpdateItem(dynamoClient, options.template, {
      Ledger: LOCAL_NAMES.table,
      PlatformGate: LOCAL_NAMES.gateTable,
    }),
  };
}

/**
 * The intake Lambda's handler for a given StartExecution. Intake and the steps share one ledger and
 * one audit trail, as they share this process: the trail then knows every chain it wrote and need not
 * read it back from the bucket.
 */
function intakeFactory(
  stepDeps: StepDeps,
  quarantine: IntakeDeps['quarantine'],
  logger: StepLogger,
  settings: Required<Pick<IntakeDeps, 'timeZone' | 'verification' | 'sites'>>,
): LocalWorkflow['intakeWith'] {
  return (startExecution, observe) => {
    const intakeDeps: IntakeDeps = {
      ledger: stepDeps.ledger,
      audit: stepDeps.audit,
      quarantine,
      startExecution,
      logger,
      ...settings,
      // No CloudWatch here: the count goes to the log, where the warning beside it names the request.
      countMetric: (name, value) => logger.info('metric', { metric: name, value }),
    };
    const intakeHandler = makeIntakeHandler(() => intakeDeps, observe);
    return (event: SQSEvent) => runAsCaller('Intake', () => intakeHandler(event));
  };
}

async function createQueues(sqs: SQSClient) {
  const create = async (name: string, attributes: Record<string, string> = {}) => {
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
    if (QueueUrl === undefined) throw new Error(`the local SQS did not return a URL for ${name}`);
    return QueueUrl;
  };
  const intakeDeadLetter = await create(LOCAL_NAMES.intakeDeadLetterQueue);
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: intakeDeadLetter, AttributeNames: ['QueueArn'] }),
  );
  const dlqArn = Attributes?.QueueArn;
  if (dlqArn === undefined) throw new Error('the local SQS did not return the dead-letter queue ARN');
  const intake = await create(LOCAL_NAMES.intakeQueue, {
    VisibilityTimeout: String(INTAKE_QUEUE.visibilitySeconds),
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: INTAKE_QUEUE.maxReceives }),
  });
  const quarantine = await create(LOCAL_NAMES.quarantineQueue);
  return { intake, quarantine, intakeDeadLetter };
}

function ignoreExisting(error: unknown): void {
  if (
    error instanceof Error &&
    (error.name === 'BucketAlreadyOwnedByYou' || error.name === 'BucketAlreadyExists')
  )
    return;
  throw error;
}

/** A StepLogger that writes Powertools-shaped JSON lines to `sink`, with `keys` on every line. */
export function jsonLogger(sink: (line: string) => void, keys: Record<string, unknown> = {}): StepLogger {
  const log = (level: string) => (message: string, attributes?: Record<string, unknown>) =>
    sink(
      JSON.stringify({
        level,
        message,
        timestamp: new Date().toISOString(),
        service: 'svc-dsr',
        ...keys,
        ...attributes,
      }),
    );
  return {
    info: log('INFO'),
    warn: log('WARN'),
    error: log('ERROR'),
    debug: log('DEBUG'),
    child: (more) => jsonLogger(sink, { ...keys, ...more }),
  };
}
