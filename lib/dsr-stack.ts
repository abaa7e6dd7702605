// The svc-dsr stack: keys, queues, ledger, buckets, secrets, the functions, workflow, schedules, alarms.
import { fileURLToPath } from 'node:url';
import {
  Annotations,
  Aws,
  CfnOutput,
  CfnRule,
  Duration,
  Fn,
  RemovalPolicy,
  Size,
  Stack,
  type StackProps,
  Tags,
} from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { DynamoEventSource, SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import type { Construct, IConstruct } from 'constructs';
import { PACKAGE_SETTINGS_DEFINE, PACKAGE_SETTINGS_METADATA } from '../lambdas/build-package/settings.ts';
import { DEADLINE_METRICS } from '../lambdas/deadline-sweep/deadline-sweep.ts';
import { OPERATOR_TIMEOUT_SECONDS } from '../lambdas/operator/commands.ts';
import { REQUEST_TYPE_TAG } from '../lambdas/shared/archive-tags.ts';
import { AUDIT_PREFIX } from '../lambdas/shared/audit.ts';
import { MANIFEST_PREFIX } from '../lambdas/shared/audit-manifest.ts';
import {
  WAITERS_INDEX,
  WAITERS_QUEUE_ATTRIBUTE,
  WAITERS_SINCE_ATTRIBUTE,
} from '../lambdas/shared/export-waiters.ts';
import {
  ENDED_INDEX,
  ENDED_SHARD_ATTRIBUTE,
  LEGACY_STATUS_DUE_INDEX,
  OPEN_DUE_INDEX,
  OPEN_INDEX_ATTRIBUTES,
  OPEN_SHARD_ATTRIBUTE,
} from '../lambdas/shared/ledger/index.ts';
import {
  EXPORT_METRICS,
  HEARTBEAT_METRICS,
  INTAKE_METRICS,
  metricDimensions,
  siteMetricDimensions,
} from '../lambdas/shared/metrics.ts';
import { GATE_KEY } from '../lambdas/shared/platform-gate.ts';
import type { PlatformToken } from '../lambdas/shared/platform-schemas.ts';
import { SECRETS, type SecretName } from '../lambdas/shared/secrets.ts';
import {
  DEFAULT_SITE_ID,
  MAX_SITES,
  SITE_IDS_ENV,
  SITE_SECRET_SUFFIX,
  SITE_SECRETS_PREFIX_ENV,
  SITES_ENV,
  type SiteVariables,
} from '../lambdas/shared/sites.ts';
import { workflowExecutionTimeoutSeconds } from '../lambdas/shared/step-handler.ts';
import { VERIFICATION_POLICY_ENV } from '../lambdas/shared/verification.ts';
import {
  RECONCILER_TOKENS,
  STEP_DIRECTORIES,
  STEP_GATE,
  STEP_TOKENS,
  type StepName,
} from '../lambdas/steps.ts';
import {
  CONFIG_CONTEXT_KEY,
  configuredSites,
  packageSettings,
  parseStackConfig,
  placeholderKeys,
  placeholderNoticeItems,
  retentionDaysForMonths,
  type SiteConfig,
  type StackConfig,
  StackConfigError,
} from './config.ts';
import { alarmSourceConditions, DsrAlarms } from './dsr-alarms.ts';
import { DsrApi } from './dsr-api.ts';
import { DsrFunction } from './dsr-function.ts';
import { DsrWorkflow } from './dsr-workflow.ts';
import {
  environmentBudgetErrors,
  environmentBudgets,
  LAMBDA_ENVIRONMENT_LIMIT_BYTES,
} from './environment-budget.ts';
import {
  HISTORY_EVENT_LIMIT,
  SAFE_HISTORY_FRACTION,
  statesOfDefinition,
  worstCaseHistory,
} from './history-budget.ts';
import { acknowledge, nagArn } from './nag.ts';
import type { StackOutputName } from './stack-outputs.ts';
import { LAMBDA_MAX_TIMEOUT_SECONDS, stepTimeout } from './step-timeouts.ts';

const lambdasDir = fileURLToPath(new URL('../lambdas/', import.meta.url));

/** One site's two platform tokens, and the id a function reads each by: its name, or its ARN. */
export interface SiteSecrets {
  readonly secrets: Readonly<Record<PlatformToken, secretsmanager.ISecret>>;
  readonly ids: Readonly<Record<PlatformToken, string>>;
}

/** The prefix of the names of the token secrets the stack creates for its sites. */
function siteSecretsPrefix(stackName: string): string {
  return `${stackName}/sites/`;
}

/** The name of a token's secret the stack creates for a site other than DEFAULT_SITE_ID (lambdas/shared/sites.ts). */
export function siteSecretName(stackName: string, site: string, token: PlatformToken): string {
  return `${siteSecretsPrefix(stackName)}${site}/${SITE_SECRET_SUFFIX[token]}`;
}

function pascalCase(id: string): string {
  return id
    .split('-')
    .map((part) => part.charAt(0).toUpperCase() + part.slice(1))
    .join('');
}

/**
 * BuildPackage's local disk: the archive and the sorts' runs (lambdas/build-package/spill-sort.ts),
 * about 1.5 KB per comment at the peak, so a subject with a million comments needs about 1.5 GiB.
 */
export const PACKAGE_SCRATCH_SIZE = Size.gibibytes(4);

/** The object writes the audit bucket refuses to every role but the record writers'. */
export const AUDIT_OBJECT_WRITES = [
  's3:PutObject',
  's3:PutObjectRetention',
  's3:PutObjectLegalHold',
  's3:DeleteObject',
  's3:DeleteObjectVersion',
] as const;

/** The tags every taggable resource of the stack carries. */
export const TAG_KEYS = {
  project: 'project',
  stage: 'stage',
  dataClassification: 'data-classification',
} as const;

/** Namespace of the metrics the deadline sweep publishes. */
export const METRICS_NAMESPACE = 'svc-dsr';

export interface DsrStackProps extends StackProps {
  /** Configuration; when omitted it is read from the `svc-dsr` context key. */
  readonly config?: unknown;
}

/** The svc-dsr stack: intake for data-subject requests and the workflow that answers them. */
export class DsrStack extends Stack {
  readonly config: StackConfig;
  /** Encrypts personal data: queues, ledger, archives, audit records, the secret, execution history. */
  readonly key: kms.Key;
  /** Encrypts operational data: log groups and the alarm topic. */
  readonly operationsKey: kms.Key;
  readonly intakeQueue: sqs.Queue;
  readonly intakeDeadLetterQueue: sqs.Queue;
  readonly quarantineQueue: sqs.Queue;
  /** Where the status-events source leaves the batches of ledger changes it could not publish. */
  readonly statusEventsFailureQueue: sqs.Queue;
  readonly ledger: dynamodb.Table;
  /**
   * The platform gate's state: the shared rate limit, the circuit, the export slots and the
   * requests waiting for one (oldest first, through its waiters index).
   */
  readonly platformGate: dynamodb.Table;
  readonly archiveBucket: s3.Bucket;
  readonly auditBucket: s3.Bucket;
  readonly accessLogBucket: s3.Bucket;
  /** The first site's two platform tokens and the audit HMAC key, one secret each. */
  readonly secrets: Readonly<Record<SecretName, secretsmanager.ISecret>>;
  /** The configured sites, in order (lib/config.ts configuredSites). */
  readonly sites: readonly SiteConfig[];
  /** Each site's two platform tokens, by site id, with the id each function reads it by. */
  readonly siteSecrets: ReadonlyMap<string, SiteSecrets>;
  readonly workflow: DsrWorkflow;
  readonly functions: Readonly<
    Record<
      StepName | 'Intake' | 'DeadlineSweep' | 'Reconciler' | 'StatusEvents' | 'Operator' | 'Api',
      DsrFunction
    >
  >;
  /** The API for people (the user pool's JWTs) and systems (SigV4 on its /iam routes): lib/dsr-api.ts. */
  readonly api: DsrApi;
  /** The operator function's URL (AWS_IAM auth): the one way a person changes a request. */
  readonly operatorUrl: lambda.FunctionUrl;
  /** Where the status events go: the bus the stack created, or the one `eventBusArn` names. */
  readonly eventBus: events.IEventBus;
  readonly alarms: DsrAlarms;
  /** What the operator CLI needs; attach it to the privacy team's role (docs/deploy.md). */
  readonly operatorPolicy: iam.ManagedPolicy;

  constructor(scope: Construct, id: string, props: DsrStackProps = {}) {
    super(scope, id, props);
    // Access-log delivery by bucket policy rather than the legacy LogDeliveryWrite ACL, whatever
    // the app's cdk.json says: ACLs stay disabled on every bucket.
    this.node.setContext('@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy', true);
    this.config = parseStackConfig(props.config ?? this.node.tryGetContext(CONFIG_CONTEXT_KEY));
    const config = this.config;
    this.#refuseDeployWithPlaceholders(config);

    const keys = this.#keys();
    this.key = keys.data;
    this.operationsKey = keys.operations;
    const queues = this.#queues();
    this.intakeDeadLetterQueue = queues.deadLetter;
    this.quarantineQueue = queues.quarantine;
    this.intakeQueue = queues.intake;
    this.statusEventsFailureQueue = queues.statusEventsFailures;
    const tables = this.#tables(config);
    this.ledger = tables.ledger;
    this.platformGate = tables.gate;
    const buckets = this.#buckets(config);
    this.accessLogBucket = buckets.accessLog;
    this.archiveBucket = buckets.archive;
    this.auditBucket = buckets.audit;
    // Secrets: one each, so a function is granted only the ones its calls need.
    this.sites = configuredSites(config);
    const secrets = this.#secrets(config, this.sites);
    this.secrets = secrets.shared;
    this.siteSecrets = secrets.bySite;

    const context = this.#functionContext(config);
    const steps = this.#steps(context);
    this.workflow = this.#workflow(config, steps, context.defaults.logRetention);
    this.#guardHistoryBudget(config);
    const intake = this.#intake(context);
    const sweep = this.#deadlineSweep(context);
    const reconciler = this.#reconciler(context);
    this.eventBus = this.#eventBus(config);
    const statusEvents = this.#statusEvents(context);
    const operator = this.#operator(context);
    this.operatorUrl = operator.url;
    this.api = new DsrApi(this, 'Api', {
      ledger: this.ledger,
      gate: this.platformGate,
      archiveBucket: this.archiveBucket,
      auditBucket: this.auditBucket,
      intakeQueue: this.intakeQueue,
      stateMachine: this.workflow.stateMachine,
      stateMachineKey: this.key,
      defaults: context.defaults,
      ...(config.userPoolId === undefined ? {} : { userPoolId: config.userPoolId }),
      consoleOrigins: config.consoleOrigins,
      ...(config.machineOrganizationId === undefined
        ? {}
        : { machineOrganizationId: config.machineOrganizationId }),
      evidence: {
        timeZone: config.timeZone,
        accessArchiveRetentionDays: config.accessArchiveRetentionDays,
        erasureArchiveRetentionDays:
          config.erasureArchiveKeepDays > 0
            ? config.erasureArchiveKeepDays
            : config.erasureArchiveRetentionDays,
      },
    });
    this.functions = {
      ...steps,
      Intake: intake,
      DeadlineSweep: sweep,
      Reconciler: reconciler,
      StatusEvents: statusEvents,
      Operator: operator.fn,
      Api: this.api.fn,
    };
    // Only the functions that append records may write the audit bucket, whatever else a role holds.
    this.#lockAuditWrites([...Object.values(steps), intake, sweep, reconciler, operator.fn, this.api.fn]);

    this.alarms = this.#alarms(config);
    this.operatorPolicy = this.#operatorPolicy();
    this.#tag(config.stage, [
      this.key,
      this.intakeQueue,
      this.intakeDeadLetterQueue,
      this.quarantineQueue,
      this.ledger,
      this.archiveBucket,
      this.auditBucket,
      this.secrets.auditHmacKey,
      this.api.userPool,
      ...[...this.siteSecrets.values()].flatMap(({ secrets: site }) => Object.values(site)),
    ]);
    this.#outputs(config);
    this.#guardEnvironmentSizes();
  }

  /** The data key (requests, ledger, archives, audit, secrets, history) and the operations key (logs, alarms). */
  #keys(): { data: kms.Key; operations: kms.Key } {
    const data = new kms.Key(this, 'DataKey', {
      description:
        'svc-dsr: encrypts requests, ledger, archives, audit records, the secret and execution history',
      enableKeyRotation: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    const operations = new kms.Key(this, 'OperationsKey', {
      description: 'svc-dsr: encrypts log groups and alarm notifications',
      enableKeyRotation: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.#letServicesUseOperationsKey(operations);
    return { data, operations };
  }

  /**
   * The intake queue, its dead-letter queue, the quarantine queue and the status events' failure
   * queue, encrypted with the data key.
   */
  #queues(): {
    intake: sqs.Queue;
    deadLetter: sqs.Queue;
    quarantine: sqs.Queue;
    statusEventsFailures: sqs.Queue;
  } {
    const queueDefaults = {
      encryption: sqs.QueueEncryption.KMS,
      encryptionMasterKey: this.key,
      enforceSSL: true,
    } as const;
    const deadLetter = new sqs.Queue(this, 'IntakeDeadLetterQueue', {
      ...queueDefaults,
      retentionPeriod: Duration.days(14),
    });
    const quarantine = new sqs.Queue(this, 'QuarantineQueue', {
      ...queueDefaults,
      retentionPeriod: Duration.days(14),
    });
    acknowledge(
      quarantine,
      'AwsSolutions-SQS3',
      'The quarantine queue is itself the end of the line for messages intake could not accept; operators read it, nothing consumes it automatically, and it is alarmed',
    );
    const intake = new sqs.Queue(this, 'IntakeQueue', {
      ...queueDefaults,
      visibilityTimeout: Duration.minutes(6),
      deadLetterQueue: { queue: deadLetter, maxReceiveCount: 5 },
    });
    // What the status-events source gives up on (a batch that failed every retry, or records older
    // than a day): each message names the shard and sequence numbers, never the records. Alarmed.
    const statusEventsFailures = new sqs.Queue(this, 'StatusEventsFailureQueue', {
      ...queueDefaults,
      retentionPeriod: Duration.days(14),
    });
    acknowledge(
      statusEventsFailures,
      'AwsSolutions-SQS3',
      'It is itself the failure destination of the status-events stream source; operators read it, nothing consumes it automatically, and it is alarmed',
    );
    return { intake, deadLetter, quarantine, statusEventsFailures };
  }

  /** The ledger, with its open-requests index, and the platform gate's table. */
  #tables(config: StackConfig): { ledger: dynamodb.Table; gate: dynamodb.Table } {
    const ledger = new dynamodb.Table(this, 'Ledger', {
      partitionKey: { name: 'request_id', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: dynamodb.TableEncryption.CUSTOMER_MANAGED,
      encryptionKey: this.key,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      deletionProtection: true,
      removalPolicy: RemovalPolicy.RETAIN,
      // Every change, old and new: the status events read it (docs/events.md).
      stream: dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
    });
    // Load control shared by every step (lambdas/shared/platform-gate.ts): two small items that
    // change on every platform call, and an item per request waiting for an export slot. They hold
    // request ids, task tokens and times, nothing about a subject, so DynamoDB's own encryption
    // does; losing them loses nothing but the pace and the waiters' order, so no backup and no
    // retention.
    const gate = new dynamodb.Table(this, 'PlatformGate', {
      partitionKey: { name: GATE_KEY, type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: dynamodb.TableEncryption.DEFAULT,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    acknowledge(
      gate,
      'AwsSolutions-DDB3',
      'The platform gate holds only the live pace of platform calls, who holds an export slot and who waits for one; a restore would bring back stale slots and waiters, so it has no point-in-time recovery',
    );
    // The requests waiting for an export slot, oldest first and complete (export-waiters.ts): a
    // freed slot goes to the one that has waited longest.
    gate.addGlobalSecondaryIndex({
      indexName: WAITERS_INDEX,
      partitionKey: { name: WAITERS_QUEUE_ATTRIBUTE, type: dynamodb.AttributeType.STRING },
      sortKey: { name: WAITERS_SINCE_ATTRIBUTE, type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.ALL,
    });
    // Open requests only (the key is set while a request is owed an answer), sharded so that a
    // mass drop with one status and one due date lands on many partitions.
    ledger.addGlobalSecondaryIndex({
      indexName: OPEN_DUE_INDEX,
      partitionKey: { name: OPEN_SHARD_ATTRIBUTE, type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'due_at', type: dynamodb.AttributeType.STRING },
      projectionType: dynamodb.ProjectionType.INCLUDE,
      nonKeyAttributes: [...OPEN_INDEX_ATTRIBUTES],
    });
    // Ended requests not yet minimised (the key is set when a request ends, removed when the
    // retention pass minimises it), by end time: the retention pass reads only the ones due. A
    // ledger still migrating to the open index gets it on the next deploy (one index per update).
    if (!config.ledgerLegacyStatusIndex) {
      ledger.addGlobalSecondaryIndex({
        indexName: ENDED_INDEX,
        partitionKey: { name: ENDED_SHARD_ATTRIBUTE, type: dynamodb.AttributeType.STRING },
        sortKey: { name: 'completed_at', type: dynamodb.AttributeType.STRING },
        projectionType: dynamodb.ProjectionType.KEYS_ONLY,
      });
    }
    if (config.ledgerLegacyStatusIndex) {
      // The index of ledgers created before the open index, kept for one deploy while they migrate
      // (DynamoDB adds or drops one index per update; docs/deploy.md).
      ledger.addGlobalSecondaryIndex({
        indexName: LEGACY_STATUS_DUE_INDEX,
        partitionKey: { name: 'status', type: dynamodb.AttributeType.STRING },
        sortKey: { name: 'due_at', type: dynamodb.AttributeType.STRING },
      });
    }
    return { ledger, gate };
  }

  /** The access-log bucket, the archive bucket (lifecycle per request type) and the object-locked audit bucket. */
  #buckets(config: StackConfig): { accessLog: s3.Bucket; archive: s3.Bucket; audit: s3.Bucket } {
    const auditRetentionDays = retentionDaysForMonths(config.auditRetentionMonths);
    const accessLog = new s3.Bucket(this, 'AccessLogBucket', {
      // S3 server access logging can only deliver to a bucket encrypted with S3-managed keys.
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      removalPolicy: RemovalPolicy.RETAIN,
      // Who read an archive is evidence too: kept as long as the audit records.
      lifecycleRules: [
        { id: 'expire-access-logs', expiration: Duration.days(auditRetentionDays) },
        { id: 'abort-incomplete-uploads', abortIncompleteMultipartUploadAfter: Duration.days(1) },
      ],
    });
    const bucketDefaults = {
      encryption: s3.BucketEncryption.KMS,
      encryptionKey: this.key,
      bucketKeyEnabled: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      versioned: true,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      serverAccessLogsBucket: accessLog,
      removalPolicy: RemovalPolicy.RETAIN,
    } as const;
    const longestArchiveDays = Math.max(
      config.accessArchiveRetentionDays,
      config.erasureArchiveRetentionDays,
      config.erasureArchiveKeepDays,
    );
    const archive = new s3.Bucket(this, 'ArchiveBucket', {
      ...bucketDefaults,
      serverAccessLogsPrefix: 'archive/',
      lifecycleRules: [
        {
          id: 'expire-access-archives',
          tagFilters: { [REQUEST_TYPE_TAG]: 'access' },
          expiration: Duration.days(config.accessArchiveRetentionDays),
        },
        {
          id: 'expire-erasure-archives',
          tagFilters: { [REQUEST_TYPE_TAG]: 'erasure' },
          // Kept on purpose, from when it was stored; otherwise VerifyErasure deletes it, and this
          // bounds only an archive whose erasure was never verified.
          expiration: Duration.days(
            config.erasureArchiveKeepDays > 0
              ? config.erasureArchiveKeepDays
              : config.erasureArchiveRetentionDays,
          ),
        },
        {
          // An archive without its type tag still never outlives the longest configured retention.
          id: 'expire-untyped-archives',
          prefix: 'exports/',
          expiration: Duration.days(longestArchiveDays),
        },
        {
          // Expiry leaves the data as a noncurrent version; it goes a day later, with half-done uploads.
          id: 'purge-noncurrent-and-incomplete',
          noncurrentVersionExpiration: Duration.days(1),
          abortIncompleteMultipartUploadAfter: Duration.days(1),
          expiredObjectDeleteMarker: true,
        },
      ],
    });
    const audit = new s3.Bucket(this, 'AuditBucket', {
      ...bucketDefaults,
      serverAccessLogsPrefix: 'audit/',
      objectLockEnabled: true,
      objectLockDefaultRetention:
        config.auditLockMode === 'GOVERNANCE'
          ? s3.ObjectLockRetention.governance(Duration.days(auditRetentionDays))
          : s3.ObjectLockRetention.compliance(Duration.days(auditRetentionDays)),
    });
    if (config.auditLockMode === 'GOVERNANCE') {
      Annotations.of(this).addWarningV2(
        'svc-dsr:governance-audit-lock',
        `svc-dsr stage "${config.stage}" locks audit records in GOVERNANCE mode (auditLockMode): anyone allowed s3:BypassGovernanceRetention can delete them, so they are not evidence. ` +
          'Fix: only for a test stage; production stages use COMPLIANCE, the default.',
      );
    }
    return { accessLog, archive, audit };
  }

  /** What every function shares: log settings, the platform gate's limits, the key of existing secrets. */
  #functionContext(config: StackConfig): FunctionContext {
    const [first] = this.sites;
    if (first === undefined) throw new Error('a configuration has at least one site');
    const gateSettings = {
      PLATFORM_REQUESTS_PER_SECOND: String(first.platformRequestsPerSecond),
      PLATFORM_BURST: String(first.platformBurst),
      PLATFORM_MAX_OPEN_EXPORTS: String(first.platformMaxOpenExports),
      OUTAGE_HORIZON_SECONDS: String(config.retryHorizonHours * 3600),
    };
    return {
      config,
      defaults: { logRetention: retentionDays(config.logRetentionDays), logKey: this.operationsKey },
      // The platform gate's limits, for every function that uses it (lambdas/shared/platform-gate.ts).
      gateSettings,
      secretKey:
        config.existingSecrets?.keyArn === undefined
          ? undefined
          : kms.Key.fromKeyArn(this, 'ExistingSecretsKey', config.existingSecrets.keyArn),
    };
  }

  /** One function per workflow step, each granted only what its step does. */
  #steps({ config, defaults, gateSettings, secretKey }: FunctionContext): Record<StepName, DsrFunction> {
    const [first] = this.sites;
    if (first === undefined) throw new Error('a configuration has at least one site');
    const stepSettings: Record<string, string> = {
      PLATFORM_BASE_URL: config.platformBaseUrl,
      PLATFORM_EXPORT_URL: config.platformExportUrl,
      PLATFORM_ACTIVITY_URL: config.platformActivityUrl,
      SPOT_ID: first.spotId,
      SSO_TOKEN_HEADER: config.ssoTokenHeader,
      USER_ID_FIELD: config.userIdField,
      DOWNLOAD_ALLOWED_HOSTS: config.downloadAllowedHosts.join(','),
      POLL_INITIAL_SECONDS: String(config.pollInitialSeconds),
      POLL_MAX_SECONDS: String(config.pollMaxSeconds),
      POLL_BUDGET_SECONDS: String(config.pollBudgetSeconds),
      POLL_GROWTH_PERCENT: String(config.pollGrowthPercent),
      EXPORT_MAX_ATTEMPTS: String(config.exportMaxAttempts),
      ...gateSettings,
    };
    return mapRecord(STEP_DIRECTORIES, (dir, step) => {
      const archives = step === 'ArchiveExport';
      // Reads every activity page (with retries), and sorts the subject's comments on local disk.
      const packages = step === 'BuildPackage';
      // With several sites, RecordOutcome ends a request's last part and builds the package over
      // its sites (lambdas/build-package/sites-package.ts): it reads and writes as BuildPackage does.
      const sitePackages = step === 'RecordOutcome' && this.sites.length > 1;
      const settings = packages || sitePackages ? JSON.stringify(packageSettings(config)) : undefined;
      const fn = new DsrFunction(this, step, {
        ...defaults,
        entry: `${lambdasDir}${dir}/handler.ts`,
        description: `svc-dsr workflow step ${step}`,
        environment: {
          ...stepSettings,
          DSR_STEP: step,
          ...(archives ? { ARCHIVE_MAX_EXPANDED_BYTES: String(config.archiveMaxExpandedBytes) } : {}),
        },
        // From the step's worst chain of platform calls and retries: a Lambda timeout is not retried.
        timeout: sitePackages ? Duration.seconds(LAMBDA_MAX_TIMEOUT_SECONDS) : stepTimeout(step),
        memorySize: archives || packages || sitePackages ? 1024 : 512,
        ...(packages || sitePackages ? { ephemeralStorageSize: PACKAGE_SCRATCH_SIZE } : {}),
        // The notice texts (up to 13 x 2,000 characters) are bundled into the code: Lambda allows
        // 4 KB of environment in all.
        ...(settings === undefined
          ? {}
          : { define: { [PACKAGE_SETTINGS_DEFINE]: JSON.stringify(settings) } }),
      });
      // The same JSON in the template, where local mode and the tests read it.
      const resource = fn.function.node.defaultChild;
      if (packages && settings !== undefined && resource instanceof lambda.CfnFunction) {
        resource.addMetadata(PACKAGE_SETTINGS_METADATA, settings);
      }
      fn.bindLedger(this.ledger, 'steps')
        .bindPlatformGate(this.platformGate, STEP_GATE[step])
        .bindAuditBucket(this.auditBucket)
        .bindSecret('auditHmacKey', this.secrets.auditHmacKey, secretKey);
      for (const token of STEP_TOKENS[step]) fn.bindSecret(token, this.secrets[token], secretKey);
      this.#bindSites(fn, STEP_TOKENS[step], secretKey);
      // StartExport counts the starts the platform refused for too many open exports (ExportCapAbovePlatform).
      if (step === 'StartExport') {
        fn.bindEnvironment('METRICS_NAMESPACE', METRICS_NAMESPACE);
        fn.bindEnvironment('METRICS_STACK', this.stackName);
      }
      if (STEP_GATE[step].wakes) fn.bindExportWaiters(this.platformGate);
      if (archives) fn.bindArchiveBucket(this.archiveBucket, 'write');
      else if (step === 'VerifyErasure' && config.erasureArchiveKeepDays === 0) {
        fn.bindArchiveBucket(this.archiveBucket, 'remove');
        fn.bindEnvironment('ERASURE_ARCHIVE_KEEP_DAYS', '0');
      } else if (packages || sitePackages) {
        fn.bindArchiveBucket(this.archiveBucket, 'package');
        fn.bindEnvironment('TIME_ZONE', config.timeZone);
      }
      // The shared step environment names the archive bucket for every step; only ArchiveExport
      // and BuildPackage (and with several sites RecordOutcome) are granted access to it.
      else fn.bindEnvironment('ARCHIVE_BUCKET', this.archiveBucket.bucketName);
      return fn;
    });
  }

  /** The state machine, with its encrypted, retained log group. */
  #workflow(
    config: StackConfig,
    steps: Record<StepName, DsrFunction>,
    logRetention: logs.RetentionDays,
  ): DsrWorkflow {
    const workflowLogs = new logs.LogGroup(this, 'WorkflowLogs', {
      // The vendedlogs prefix keeps the log delivery resource policy small however many machines log.
      // The group is retained, so its name carries the GUID of this stack's creation: after
      // `cdk destroy` a new stack of the same name gets a new group instead of colliding with the
      // one kept.
      logGroupName: Fn.join('', [
        `/aws/vendedlogs/states/${this.stackName}-workflow-`,
        Fn.select(2, Fn.split('/', Aws.STACK_ID)),
      ]),
      retention: logRetention,
      encryptionKey: this.operationsKey,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    return new DsrWorkflow(this, 'Workflow', {
      functions: mapRecord(steps, (fn) => fn.function),
      // An explicit name: the role's KMS condition on the execution data names the machine's ARN,
      // which CDK cannot write for a machine whose name CloudFormation has yet to generate.
      stateMachineName: `${this.stackName}-workflow`,
      executionTimeout: Duration.seconds(workflowExecutionTimeoutSeconds(config.pollBudgetSeconds)),
      retryHorizon: Duration.hours(config.retryHorizonHours),
      ledger: this.ledger,
      exportWaiters: this.platformGate,
      logDestination: workflowLogs,
      encryptionKey: this.key,
      tracing: true,
    });
  }

  /** Intake: validates each queued request, records it and starts its execution. */
  #intake({ config, defaults, secretKey }: FunctionContext): DsrFunction {
    const intake = new DsrFunction(this, 'Intake', {
      ...defaults,
      entry: `${lambdasDir}intake/handler.ts`,
      description: 'svc-dsr intake: validates requests, records them, starts their executions',
      timeout: Duration.minutes(1),
      environment: { TIME_ZONE: config.timeZone, METRICS_NAMESPACE, METRICS_STACK: this.stackName },
    });
    intake
      .bindLedger(this.ledger, 'intake')
      .bindAuditBucket(this.auditBucket)
      .bindSecret('auditHmacKey', this.secrets.auditHmacKey, secretKey)
      .bindQueue(this.quarantineQueue, 'send', 'QUARANTINE_QUEUE_URL')
      .bindStateMachine(this.workflow.stateMachine, 'start', this.key);
    // The verification gate: the closed list of methods, the types each is accepted for, the maximum age.
    intake.function.addEnvironment(VERIFICATION_POLICY_ENV, JSON.stringify(config.verification));
    intake.bindEnvironment(SITE_IDS_ENV, this.sites.map((site) => site.id).join(','));
    intake.function.addEventSource(
      new SqsEventSource(this.intakeQueue, {
        batchSize: 10,
        reportBatchItemFailures: true,
        // A mass drop is taken in at a steady pace; the queue holds the rest.
        maxConcurrency: config.intakeMaxConcurrency,
      }),
    );
    return intake;
  }

  /** The deadline sweep and its schedule. */
  #deadlineSweep({ config, defaults, secretKey }: FunctionContext): DsrFunction {
    const sweep = new DsrFunction(this, 'DeadlineSweep', {
      ...defaults,
      entry: `${lambdasDir}deadline-sweep/handler.ts`,
      description:
        'svc-dsr deadline sweep: publishes counts of overdue and due-soon requests, writes the daily audit manifest, minimises ended requests past their retention',
      timeout: Duration.minutes(2),
      memorySize: 256,
      environment: {
        DUE_SOON_DAYS: String(config.deadlineDueSoonDays),
        TIME_ZONE: config.timeZone,
        MINIMISE_AFTER_DAYS: String(config.ledgerMinimiseAfterDays),
        METRICS_NAMESPACE,
        METRICS_STACK: this.stackName,
      },
    });
    sweep
      .bindLedger(this.ledger, 'sweep')
      .bindAuditManifests(this.auditBucket)
      .bindSecret('auditHmacKey', this.secrets.auditHmacKey, secretKey);
    const sweepEvery = Duration.minutes(config.deadlineSweepMinutes);
    new events.Rule(this, 'DeadlineSweepSchedule', {
      description: 'svc-dsr: counts open requests by deadline',
      schedule: events.Schedule.rate(sweepEvery),
      targets: [
        new targets.LambdaFunction(sweep.function, { retryAttempts: 2, maxEventAge: Duration.hours(1) }),
      ],
    });
    return sweep;
  }

  /**
   * The reconciler and its schedule: its own function rather than part of the sweep, because the
   * reconciler starts executions, and that grant stays with it (the sweep writes the ledger only to
   * minimise).
   */
  #reconciler({ config, defaults, gateSettings, secretKey }: FunctionContext): DsrFunction {
    const reconciler = new DsrFunction(this, 'Reconciler', {
      ...defaults,
      entry: `${lambdasDir}reconciler/handler.ts`,
      description: 'svc-dsr reconciler: resumes open requests left without a running execution',
      timeout: Duration.minutes(5),
      memorySize: 256,
      environment: {
        MAX_RESUMES: String(config.reconcileMaxResumes),
        SFN_QUOTA_SHARE: String(config.reconcileQuotaShare),
        METRICS_NAMESPACE,
        METRICS_STACK: this.stackName,
        ...gateSettings,
        // An export an ended request left open is polled and downloaded to nowhere, so the
        // platform stops counting it and its slot can be given back (lambdas/shared/open-exports.ts).
        PLATFORM_BASE_URL: config.platformBaseUrl,
        PLATFORM_EXPORT_URL: config.platformExportUrl,
        PLATFORM_ACTIVITY_URL: config.platformActivityUrl,
        SPOT_ID: this.sites[0]?.spotId ?? config.spotId,
        DOWNLOAD_ALLOWED_HOSTS: config.downloadAllowedHosts.join(','),
      },
    });
    for (const token of RECONCILER_TOKENS) reconciler.bindSecret(token, this.secrets[token], secretKey);
    this.#bindSites(reconciler, RECONCILER_TOKENS, secretKey);
    reconciler
      .bindLedger(this.ledger, 'reconciler')
      .bindAuditBucket(this.auditBucket)
      .bindPlatformGate(this.platformGate, { admits: false, slots: true, wakes: true, reads: true })
      .bindExportWaiters(this.platformGate)
      .bindStateMachine(this.workflow.stateMachine, 'reconcile', this.key);
    new events.Rule(this, 'ReconcilerSchedule', {
      description: 'svc-dsr: resumes open requests that no execution is running',
      schedule: events.Schedule.rate(Duration.minutes(config.reconcileMinutes)),
      targets: [
        new targets.LambdaFunction(reconciler.function, { retryAttempts: 2, maxEventAge: Duration.hours(1) }),
      ],
    });
    return reconciler;
  }

  /**
   * The operator function: every change a person makes to a request (cancel, deny, extend, retry,
   * notice) under the ledger's rules, with the locked record naming the caller's IAM principal, and
   * every read of archive content a person can cause: a package handed out (a presigned link it
   * signs once the hand-out is recorded) and verify's re-hash. Reached only through its function
   * URL with AWS_IAM auth, which is how it learns that principal (docs/security.md).
   */
  #operator({ defaults }: FunctionContext): { fn: DsrFunction; url: lambda.FunctionUrl } {
    const fn = new DsrFunction(this, 'Operator', {
      ...defaults,
      entry: `${lambdasDir}operator/handler.ts`,
      description:
        "svc-dsr operator: applies an operator's change under the ledger's rules, hands out packages, and records who acted",
      // Most commands are a ledger write, a record or two and a few calls; verify's re-hash streams
      // a whole archive, which is never slower than ArchiveExport's copy of it: its 15 minutes and
      // its 1,024 MB (network and CPU grow with memory).
      timeout: Duration.seconds(OPERATOR_TIMEOUT_SECONDS),
      memorySize: 1024,
    });
    fn.bindLedger(this.ledger, 'operator')
      .bindAuditBucket(this.auditBucket)
      .bindArchiveBucket(this.archiveBucket, 'operator')
      .bindStateMachine(this.workflow.stateMachine, 'operator', this.key);
    const url = fn.function.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.AWS_IAM });
    return { fn, url };
  }

  /**
   * The audit bucket's policy refuses every object write (a record, a retention or legal hold, a
   * delete marker) to any principal but the roles of the functions that append records: an
   * administrator's or the privacy team's role cannot add or hide a record, whatever their own
   * policies allow. CloudFormation and the deploy write no objects there (the bucket is retained,
   * without auto-delete), so nothing that manages the stack is locked out; bucket settings stay
   * open to them.
   */
  #lockAuditWrites(writers: readonly DsrFunction[]): void {
    this.auditBucket.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'OnlyRecordWritersWriteObjects',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: [...AUDIT_OBJECT_WRITES],
        resources: [this.auditBucket.arnForObjects('*')],
        conditions: { ArnNotEquals: { 'aws:PrincipalArn': writers.map((fn) => fn.role.roleArn) } },
      }),
    );
  }

  /** Where the status events go: a bus of the stack's own, or the one the config names. */
  #eventBus(config: StackConfig): events.IEventBus {
    return config.eventBusArn === undefined
      ? new events.EventBus(this, 'StatusEventBus', {
          eventBusName: `${this.stackName}-status-events`,
          description:
            'svc-dsr: a "svc-dsr Request Status Changed" event for every status change (docs/events.md)',
        })
      : events.EventBus.fromEventBusArn(this, 'StatusEventBus', config.eventBusArn);
  }

  /**
   * Status events: every status change in the ledger, whoever wrote it (a step, intake, the state
   * machine's own failure write, the reconciler, an operator), read from the table's stream.
   */
  #statusEvents({ defaults }: FunctionContext): DsrFunction {
    const statusEvents = new DsrFunction(this, 'StatusEvents', {
      ...defaults,
      entry: `${lambdasDir}status-events/handler.ts`,
      description: 'svc-dsr status events: publishes every status change of the ledger on EventBridge',
      timeout: Duration.minutes(1),
      memorySize: 256,
      environment: { EVENT_BUS: this.eventBus.eventBusArn },
    });
    this.eventBus.grantPutEventsTo(statusEvents.function);
    statusEvents.function.addEventSource(
      new DynamoEventSource(this.ledger, {
        startingPosition: lambda.StartingPosition.TRIM_HORIZON,
        batchSize: 100,
        // A batch EventBridge refuses is split and retried; records keep their order per item.
        bisectBatchOnError: true,
        retryAttempts: 20,
        maxRecordAge: Duration.days(1),
        // What is given up is recorded and alarmed, never dropped silently.
        onFailure: statusEvents.bindFailureDestination(this.statusEventsFailureQueue),
      }),
    );
    return statusEvents;
  }

  /** The alarms, on the sweep's and the reconciler's metrics, the queues, the machine and every function. */
  #alarms(config: StackConfig): DsrAlarms {
    const sweepEvery = Duration.minutes(config.deadlineSweepMinutes);
    const sweepMetric = (metricName: string) =>
      new cloudwatch.Metric({
        namespace: METRICS_NAMESPACE,
        metricName,
        dimensionsMap: metricDimensions(this.stackName),
        statistic: 'Maximum',
        period: sweepEvery,
      });
    const reconcilerMetric = (metricName: string) =>
      new cloudwatch.Metric({
        namespace: METRICS_NAMESPACE,
        metricName,
        dimensionsMap: metricDimensions(this.stackName),
        statistic: 'Maximum',
        period: Duration.minutes(config.reconcileMinutes),
      });
    return new DsrAlarms(this, 'Alarms', {
      topicKey: this.operationsKey,
      ...(config.alarmEmail ? { email: config.alarmEmail } : {}),
      intakeQueue: this.intakeQueue,
      intakeQueueMaxAge: Duration.minutes(config.intakeQueueAgeAlarmMinutes),
      intakeDeadLetterQueue: this.intakeDeadLetterQueue,
      quarantineQueue: this.quarantineQueue,
      stateMachine: this.workflow.stateMachine,
      functions: mapRecord(this.functions, (fn) => fn.function),
      overdueRequests: sweepMetric(DEADLINE_METRICS.overdue),
      overdueAtIntake: new cloudwatch.Metric({
        namespace: METRICS_NAMESPACE,
        metricName: INTAKE_METRICS.overdueAtIntake,
        dimensionsMap: metricDimensions(this.stackName),
        statistic: 'Sum',
        period: Duration.minutes(5),
      }),
      dueSoonRequests: sweepMetric(DEADLINE_METRICS.dueSoon),
      receiptsOverdue: sweepMetric(DEADLINE_METRICS.receiptsOverdue),
      receiptsDueSoon: sweepMetric(DEADLINE_METRICS.receiptsDueSoon),
      noticesDueSoon: sweepMetric(DEADLINE_METRICS.noticesDueSoon),
      noticesOverdue: sweepMetric(DEADLINE_METRICS.noticesOverdue),
      stuckRequests: reconcilerMetric('StuckRequests'),
      platformDownSeconds: reconcilerMetric('PlatformDownSeconds'),
      platformDownBySite: Object.fromEntries(
        this.sites.map((site) => [
          `Site${pascalCase(site.id)}`,
          {
            site: site.id,
            metric: new cloudwatch.Metric({
              namespace: METRICS_NAMESPACE,
              metricName: 'PlatformDownSeconds',
              dimensionsMap: siteMetricDimensions(this.stackName, site.id),
              statistic: 'Maximum',
              period: Duration.minutes(config.reconcileMinutes),
            }),
          },
        ]),
      ),
      platformExportRefusals: new cloudwatch.Metric({
        namespace: METRICS_NAMESPACE,
        metricName: EXPORT_METRICS.platformRefusals,
        dimensionsMap: metricDimensions(this.stackName),
        statistic: 'Sum',
        period: Duration.hours(1),
      }),
      // Every scheduled function of the stack (the two rules above) publishes one.
      heartbeats: {
        DeadlineSweep: { metric: sweepMetric(HEARTBEAT_METRICS.deadlineSweep), every: sweepEvery },
        Reconciler: {
          metric: reconcilerMetric(HEARTBEAT_METRICS.reconciler),
          every: Duration.minutes(config.reconcileMinutes),
        },
      },
      statusEventsFailureQueue: this.statusEventsFailureQueue,
      statusEventsFunction: this.functions.StatusEvents.function,
    });
  }

  /** What the CLI reads (cdk deploy --outputs-file outputs.json): lib/stack-outputs.ts names them. */
  #outputs(config: StackConfig): void {
    const outputs: Record<StackOutputName, string> = {
      IntakeQueueUrl: this.intakeQueue.queueUrl,
      IntakeDeadLetterQueueUrl: this.intakeDeadLetterQueue.queueUrl,
      QuarantineQueueUrl: this.quarantineQueue.queueUrl,
      LedgerTableName: this.ledger.tableName,
      ArchiveBucketName: this.archiveBucket.bucketName,
      AuditBucketName: this.auditBucket.bucketName,
      StateMachineArn: this.workflow.stateMachine.stateMachineArn,
      SsoTokenSecretArn: this.secrets.ssoAccessToken.secretArn,
      ExportTokenSecretArn: this.secrets.exportToken.secretArn,
      AuditKeySecretArn: this.secrets.auditHmacKey.secretArn,
      DataKeyArn: this.key.keyArn,
      AlarmTopicArn: this.alarms.topic.topicArn,
      Region: this.region,
      TimeZone: config.timeZone,
      AccessArchiveRetentionDays: String(config.accessArchiveRetentionDays),
      ErasureArchiveRetentionDays: String(
        config.erasureArchiveKeepDays > 0
          ? config.erasureArchiveKeepDays
          : config.erasureArchiveRetentionDays,
      ),
      EventBusArn: this.eventBus.eventBusArn,
      OperatorUrl: this.operatorUrl.url,
      ApiUrl: this.api.api.apiEndpoint,
      UserPoolId: this.api.userPool.userPoolId,
      UserPoolClientId: this.api.client.userPoolClientId,
    };
    for (const [name, value] of Object.entries(outputs)) new CfnOutput(this, name, { value });
  }

  /**
   * The audit HMAC key and each site's two tokens: created empty for an operator to set, or the
   * existing ones the config names. The site of a configuration without `sites` (DEFAULT_SITE_ID)
   * keeps the ids its secrets have always had; every other site's carry its id, and a secret
   * created for one is named after the stack and the site, which is how the functions find it.
   */
  #secrets(
    config: StackConfig,
    sites: readonly SiteConfig[],
  ): { shared: Record<SecretName, secretsmanager.ISecret>; bySite: Map<string, SiteSecrets> } {
    const secret = (id: string, name: SecretName, existing: string | undefined, secretName?: string) => {
      if (existing !== undefined) return secretsmanager.Secret.fromSecretNameV2(this, id, existing);
      const created = new secretsmanager.Secret(this, id, {
        description: `svc-dsr: ${SECRETS[name].what} (a plain string of at least ${SECRETS[name].minLength} characters); set with put-secret-value`,
        encryptionKey: this.key,
        removalPolicy: RemovalPolicy.RETAIN,
        ...(secretName === undefined ? {} : { secretName }),
      });
      acknowledge(
        created,
        'AwsSolutions-SMG4',
        name === 'auditHmacKey'
          ? 'Rotating the audit HMAC key would change every subject hash; it is kept for the life of the audit records (docs/audit.md)'
          : 'The tokens are issued by the comment platform, which offers no API to rotate them; rotation is the manual procedure in docs/deploy.md',
      );
      return created;
    };
    const audit = secret('AuditKeySecret', 'auditHmacKey', config.existingSecrets?.auditHmacKey);
    const bySite = new Map<string, SiteSecrets>();
    for (const site of sites) {
      const own = site.id === DEFAULT_SITE_ID;
      const tokens = { ssoAccessToken: 'SsoTokenSecret', exportToken: 'ExportTokenSecret' } as const;
      const made = mapRecord(tokens, (id, name) => {
        const existing = site.existingSecrets?.[name];
        const secretName =
          own || existing !== undefined ? undefined : siteSecretName(this.stackName, site.id, name);
        const made = secret(own ? id : `Site${pascalCase(site.id)}${id}`, name, existing, secretName);
        return { secret: made, id: existing ?? secretName ?? made.secretArn };
      });
      bySite.set(site.id, {
        secrets: mapRecord(made, ({ secret: value }) => value),
        ids: mapRecord(made, ({ id }) => id),
      });
    }
    const first = bySite.get(sites[0]?.id ?? DEFAULT_SITE_ID);
    if (first === undefined) throw new Error('a configuration has at least one site');
    return { shared: { ...first.secrets, auditHmacKey: audit }, bySite };
  }

  /**
   * SITE_IDS, the configured sites in order, and SITES, what differs for every site but the first
   * (its spot id, limits and the ids of the `tokens` the function reads), with GetSecretValue on
   * those tokens (lambdas/shared/sites.ts siteEnvironment).
   */
  #bindSites(fn: DsrFunction, tokens: readonly PlatformToken[], secretKey: kms.IKey | undefined): void {
    fn.bindEnvironment(SITE_IDS_ENV, this.sites.map((site) => site.id).join(','));
    const [first, ...others] = this.sites;
    if (first === undefined || others.length === 0) return;
    const variables: Record<string, SiteVariables> = {};
    for (const site of others) {
      const secrets = this.siteSecrets.get(site.id);
      if (secrets === undefined) throw new Error(`site "${site.id}" has no secrets`);
      const own: { -readonly [K in keyof SiteVariables]: SiteVariables[K] } = { spot: site.spotId };
      for (const token of tokens) {
        const id = secrets.ids[token];
        // A secret the stack made for the site is found by its name; any other is named here.
        if (id !== siteSecretName(this.stackName, site.id, token)) {
          own[token === 'ssoAccessToken' ? 'sso' : 'export'] = id;
        }
        fn.grantSecret(secrets.secrets[token], secretKey);
      }
      if (site.platformRequestsPerSecond !== first.platformRequestsPerSecond)
        own.rps = String(site.platformRequestsPerSecond);
      if (site.platformBurst !== first.platformBurst) own.burst = String(site.platformBurst);
      if (site.platformMaxOpenExports !== first.platformMaxOpenExports)
        own.cap = String(site.platformMaxOpenExports);
      variables[site.id] = own;
    }
    if (tokens.length > 0) fn.bindEnvironment(SITE_SECRETS_PREFIX_ENV, siteSecretsPrefix(this.stackName));
    fn.bindEnvironment(SITES_ENV, this.toJsonString(variables));
  }

  /**
   * The operator CLI's permissions, exactly the calls its commands make (the IAM proof checks both
   * ways): submit to the intake queue; read, list and scan the ledger; read the audit trail and the
   * manifests; and invoke the operator function through its URL, which makes every change and is
   * the only way to archive content: it hands packages out (recording each) and re-hashes them for
   * verify. No read of the archive bucket, and no write to the ledger or the audit bucket.
   */
  #operatorPolicy(): iam.ManagedPolicy {
    const viaService = (service: string) => ({
      StringEquals: { 'kms:ViaService': `${service}.${this.region}.amazonaws.com` },
    });
    const operatorFunction = this.functions.Operator.function.functionArn;
    const statements = [
      new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [this.intakeQueue.queueArn] }),
      // Every change goes through the operator function's URL, which authenticates the caller.
      new iam.PolicyStatement({
        actions: ['lambda:InvokeFunctionUrl'],
        resources: [operatorFunction],
        conditions: { StringEquals: { 'lambda:FunctionUrlAuthType': 'AWS_IAM' } },
      }),
      // Lambda asks for InvokeFunction too on a URL call; a direct Invoke, whose event the caller
      // writes (a forged principal with it), is refused.
      new iam.PolicyStatement({
        actions: ['lambda:InvokeFunction'],
        resources: [operatorFunction],
        conditions: { Bool: { 'lambda:InvokedViaFunctionUrl': 'true' } },
      }),
      new iam.PolicyStatement({
        actions: ['dynamodb:GetItem', 'dynamodb:Scan'],
        resources: [this.ledger.tableArn],
      }),
      // The open index (open requests only): list and retry --status read it with one scan.
      new iam.PolicyStatement({
        actions: ['dynamodb:Scan'],
        resources: [`${this.ledger.tableArn}/index/${OPEN_DUE_INDEX}`],
      }),
      // verify: read the records and find the chains.
      new iam.PolicyStatement({
        actions: ['s3:GetObject'],
        resources: [this.auditBucket.arnForObjects(`${AUDIT_PREFIX}*`)],
      }),
      new iam.PolicyStatement({
        actions: ['s3:ListBucket'],
        resources: [this.auditBucket.bucketArn],
        conditions: { StringLike: { 's3:prefix': [`${AUDIT_PREFIX}*`] } },
      }),
      // verify --all: read the daily manifests, and list every version of the records and manifests.
      new iam.PolicyStatement({
        actions: ['s3:GetObject'],
        resources: [this.auditBucket.arnForObjects(`${MANIFEST_PREFIX}*`)],
      }),
      new iam.PolicyStatement({
        actions: ['s3:ListBucket'],
        resources: [this.auditBucket.bucketArn],
        conditions: { StringLike: { 's3:prefix': [`${MANIFEST_PREFIX}*`] } },
      }),
      new iam.PolicyStatement({
        actions: ['s3:ListBucketVersions'],
        resources: [this.auditBucket.bucketArn],
        conditions: { StringLike: { 's3:prefix': [`${AUDIT_PREFIX}*`, `${MANIFEST_PREFIX}*`] } },
      }),
      new iam.PolicyStatement({
        actions: ['kms:Decrypt', 'kms:DescribeKey'],
        resources: [this.key.keyArn],
        conditions: viaService('dynamodb'),
      }),
      new iam.PolicyStatement({
        actions: ['kms:Decrypt', 'kms:GenerateDataKey'],
        resources: [this.key.keyArn],
        conditions: {
          StringEquals: { 'kms:ViaService': ['sqs', 's3'].map((s) => `${s}.${this.region}.amazonaws.com`) },
        },
      }),
    ];
    const policy = new iam.ManagedPolicy(this, 'OperatorPolicy', {
      description: 'svc-dsr: what the svc-dsr CLI needs; attach it to the privacy team role',
      statements,
    });
    acknowledge(
      policy,
      'AwsSolutions-IAM5',
      'Operators read audit records and manifests by request id and day under their prefixes',
      [
        `Resource::${nagArn(this.auditBucket)}/audit/*`,
        `Resource::${nagArn(this.auditBucket)}/${MANIFEST_PREFIX}*`,
      ],
    );
    return policy;
  }

  /**
   * A request is answered on every site it covers, in one package and one evidence check: until
   * the subject package, local mode and verify --all serve several sites, synth refuses a
   * configuration of more than one (docs/design.md "Sites").
   */
  /**
   * Synth accepts the placeholder defaults (tests and `npm run synth` need no configuration), but a
   * deployment with them would talk to hosts that do not exist. A template rule makes
   * CloudFormation refuse it before any resource is created, and synth warns.
   */
  #refuseDeployWithPlaceholders(config: StackConfig): void {
    const keys = placeholderKeys(config);
    if (keys.length === 0) return;
    const message =
      `svc-dsr is not configured for deployment: ${keys
        .map((key) =>
          key === 'accessNotice'
            ? `accessNotice (${placeholderNoticeItems(config.accessNotice).join(', ')})`
            : key,
        )
        .join(', ')} still hold placeholder values. ` +
      `Fix: set them under context "${CONFIG_CONTEXT_KEY}" in cdk.json (docs/deploy.md lists every key), then deploy again.`;
    Annotations.of(this).addWarningV2('svc-dsr:placeholder-config', message);
    new CfnRule(this, 'RequireDeploymentConfig', {
      assertions: [{ assert: Fn.conditionEquals('placeholder', 'configured'), assertDescription: message }],
    });
  }

  /**
   * Step Functions fails a Standard execution at 25,000 history events. The worst case of the poll
   * schedule and the workflow's retries is printed at synth, and synth refuses a schedule that
   * could use more than half of the limit.
   */
  #guardHistoryBudget(config: StackConfig): void {
    const definition = this.workflow.stateMachine.node.defaultChild;
    if (!(definition instanceof sfn.CfnStateMachine)) throw new Error('the workflow has no state machine');
    const budget = worstCaseHistory({
      schedule: {
        initialSeconds: config.pollInitialSeconds,
        maxSeconds: config.pollMaxSeconds,
        budgetSeconds: config.pollBudgetSeconds,
        growthPercent: config.pollGrowthPercent,
      },
      exportMaxAttempts: config.exportMaxAttempts,
      states: statesOfDefinition(this.resolve(definition.definitionString)),
    });
    const events = budget.events.toLocaleString('en-US');
    const limit = HISTORY_EVENT_LIMIT.toLocaleString('en-US');
    Annotations.of(this).addInfo(
      `svc-dsr: worst case ${events} events per execution of ${limit} (${budget.polls} export polls)`,
    );
    // Each site's part of a request runs in an execution of its own (docs/design.md "Sites"), so
    // neither the history nor the timeout of an execution grows with the number of sites.
    const timeout = workflowExecutionTimeoutSeconds(config.pollBudgetSeconds).toLocaleString('en-US');
    const sites = this.sites.length;
    Annotations.of(this).addInfo(
      `svc-dsr: ${sites} site${sites === 1 ? '' : 's'}: every site's part of a request runs in an execution of its own, with at most ${events} events and ${timeout} s (AWS allows ${limit} events and one year), the same for 1 to ${MAX_SITES} sites`,
    );
    if (budget.fraction > SAFE_HISTORY_FRACTION) {
      throw new StackConfigError([
        `svc-dsr config: the poll schedule allows up to ${events} history events per execution (${budget.polls} export polls), ` +
          `more than ${SAFE_HISTORY_FRACTION * 100}% of the ${limit} Step Functions allows (received pollInitialSeconds ${config.pollInitialSeconds}, ` +
          `pollMaxSeconds ${config.pollMaxSeconds}, pollBudgetSeconds ${config.pollBudgetSeconds}, pollGrowthPercent ${config.pollGrowthPercent}, exportMaxAttempts ${config.exportMaxAttempts}, retryHorizonHours ${config.retryHorizonHours}). ` +
          `Fix: raise "pollMaxSeconds", "pollInitialSeconds" or "pollGrowthPercent", or lower "pollBudgetSeconds", "exportMaxAttempts" or "retryHorizonHours", in cdk.json "context": { "${CONFIG_CONTEXT_KEY}": { ... } }.`,
      ]);
    }
  }

  /**
   * Lambda refuses an environment above 4 KB at deploy time, once CloudFormation has put the
   * resource names in: synth measures every function's with each name at its longest, prints the
   * largest and fails on any above the limit (after every bind, as a validation).
   */
  #guardEnvironmentSizes(): void {
    this.node.addValidation({ validate: () => environmentBudgetErrors(this) });
    const largest = environmentBudgets(this).sort((a, b) => b.bytes - a.bytes)[0];
    if (largest !== undefined) {
      Annotations.of(this).addInfo(
        `svc-dsr: the largest function environment is ${largest.path.split('/')[1]}'s, ${largest.bytes.toLocaleString('en-US')} of ${LAMBDA_ENVIRONMENT_LIMIT_BYTES.toLocaleString('en-US')} bytes with names at their longest`,
      );
    }
  }

  /**
   * Tags every taggable resource with the project, the stage and its data classification:
   * `personal` on the stores that hold personal data, `operational` on everything else.
   */
  #tag(stage: string, personalStores: readonly IConstruct[]): void {
    Tags.of(this).add(TAG_KEYS.project, 'svc-dsr');
    Tags.of(this).add(TAG_KEYS.stage, stage);
    Tags.of(this).add(TAG_KEYS.dataClassification, 'operational');
    // Applied deeper in the tree, so it wins over the stack-wide value at the same priority.
    for (const store of personalStores) Tags.of(store).add(TAG_KEYS.dataClassification, 'personal');
  }

  /** CloudWatch Logs encrypts this stack's log groups and CloudWatch publishes alarms to the encrypted topic. */
  #letServicesUseOperationsKey(operationsKey: kms.Key): void {
    operationsKey.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [new iam.ServicePrincipal(`logs.${this.region}.amazonaws.com`)],
        actions: [
          'kms:Encrypt',
          'kms:Decrypt',
          'kms:ReEncryptFrom',
          'kms:ReEncryptTo',
          'kms:GenerateDataKey',
          'kms:DescribeKey',
        ],
        resources: ['*'],
        conditions: {
          ArnLike: {
            'kms:EncryptionContext:aws:logs:arn': `arn:${this.partition}:logs:${this.region}:${this.account}:log-group:*`,
          },
        },
      }),
    );
    operationsKey.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey'],
        resources: ['*'],
        conditions: alarmSourceConditions(this),
      }),
    );
  }
}

/** What every function of the stack shares. */
interface FunctionContext {
  readonly config: StackConfig;
  readonly defaults: { readonly logRetention: logs.RetentionDays; readonly logKey: kms.IKey };
  readonly gateSettings: Readonly<Record<string, string>>;
  /** The key of the existing secrets the config names, when they have their own. */
  readonly secretKey: kms.IKey | undefined;
}

/** The same keys, each value mapped. */
function mapRecord<K extends string, T, U>(
  record: Readonly<Record<K, T>>,
  map: (value: T, key: K) => U,
): Record<K, U> {
  const mapped: Partial<Record<K, U>> = {};
  for (const [key, value] of Object.entries(record) as [K, T][]) mapped[key] = map(value, key);
  return mapped as Record<K, U>;
}

function retentionDays(days: number): logs.RetentionDays {
  const match = Object.values(logs.RetentionDays).find(
    (value): value is logs.RetentionDays => typeof value === 'number' && value === days,
  );
  if (match === undefined) throw new Error(`CloudWatch Logs has no retention of ${days} days`);
  return match;
}
