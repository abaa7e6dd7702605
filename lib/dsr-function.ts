// The house-default Lambda function, with `bind…()` helpers that set an environment variable and its grant.
import { fileURLToPath } from 'node:url';
import { ArnFormat, Duration, RemovalPolicy, type Size, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { NodejsFunction, OutputFormat } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { AUDIT_PREFIX } from '../lambdas/shared/audit.ts';
import { MANIFEST_PREFIX } from '../lambdas/shared/audit-manifest.ts';
import { WAITERS_INDEX } from '../lambdas/shared/export-waiters.ts';
import { ENDED_INDEX, OPEN_DUE_INDEX } from '../lambdas/shared/ledger/index.ts';
import { SECRETS, type SecretName } from '../lambdas/shared/secrets.ts';
import { acknowledge, nagArn } from './nag.ts';

const PROJECT_ROOT = fileURLToPath(new URL('..', import.meta.url));
const PROJECT_LOCK_FILE = fileURLToPath(new URL('../package-lock.json', import.meta.url));

/** The Lambda runtime of every function: the newest Node.js LTS that Lambda offers. */
export const FUNCTION_RUNTIME = lambda.Runtime.NODEJS_24_X;

export interface DsrFunctionProps {
  /** Path of the handler module (lambdas/<dir>/handler.ts). */
  readonly entry: string;
  /** Plain settings; resources are added with the bind helpers, which grant access too. */
  readonly environment?: Record<string, string>;
  readonly description?: string;
  /** @default Duration.seconds(60) */
  readonly timeout?: Duration;
  /** @default 512 */
  readonly memorySize?: number;
  /** Local disk (/tmp) for work that spills out of memory. @default Lambda's 512 MiB */
  readonly ephemeralStorageSize?: Size;
  /** @default logs.RetentionDays.ONE_YEAR */
  readonly logRetention?: logs.RetentionDays;
  /** Encrypts the function's log group; the key must let CloudWatch Logs use it. @default AWS-owned key */
  readonly logKey?: kms.IKey;
  /** Constants esbuild replaces in the bundle (name -> JS expression), for settings too large for the environment. @default none */
  readonly define?: Readonly<Record<string, string>>;
}

/**
 * What a function does with the ledger: `steps` read and update their request's item; `intake`
 * also creates items; `sweep` only queries the status index.
 */
export type LedgerAccess = 'steps' | 'intake' | 'sweep' | 'reconciler' | 'operator' | 'api';

const LEDGER_ACTIONS: Readonly<Record<LedgerAccess, { items: string[]; query: boolean; writes: boolean }>> = {
  steps: { items: ['dynamodb:GetItem', 'dynamodb:UpdateItem'], query: false, writes: true },
  intake: {
    items: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'],
    query: false,
    writes: true,
  },
  // The retention pass minimises the ended requests past their retention (GetItem, UpdateItem);
  // GetItem also reads the open CCPA requests whose receipt confirmation may be late (the index
  // lacks confirm_by). No Scan: the daily audit manifest is built from the audit bucket.
  sweep: { items: ['dynamodb:GetItem', 'dynamodb:UpdateItem'], query: true, writes: true },
  reconciler: { items: ['dynamodb:GetItem', 'dynamodb:UpdateItem'], query: true, writes: true },
  // The operator function reads a request and applies an operator's ruled change to it.
  operator: { items: ['dynamodb:GetItem', 'dynamodb:UpdateItem'], query: false, writes: true },
  // The API function: the operator's changes, the pages of open requests it lists, and the report's
  // Scan of every request.
  api: {
    items: ['dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:UpdateItem', 'dynamodb:Scan'],
    query: true,
    writes: true,
  },
};
/**
 * What a function may do with archive objects. read: get objects; write: copy exports in
 * (ArchiveExport); package: read the archive's recorded version and put the subject package beside
 * it (BuildPackage); remove: delete an archive with every version (VerifyErasure, once the erasure
 * is verified).
 */
/**
 * What a function may do with archive objects: `read` them, `write` copies (ArchiveExport), build
 * a `package` from one, `remove` every version (cancel, deny, a verified erasure), or, for the
 * operator function, `operator`: remove, and read the recorded versions it hands out (presigned
 * links it signs) and re-hashes for verify.
 */
export type ArchiveAccess = 'read' | 'write' | 'package' | 'remove' | 'operator';

/**
 * A Lambda function with the house defaults: Node.js on arm64, its own role with no managed
 * policies, an explicit log group with retention, a minified ESM bundle with source maps and kept
 * names (error names are the ASL contract), and X-Ray tracing. Resources are attached with the
 * `bind…()` helpers, each of which sets the environment variable and grants exactly the actions the
 * shared modules call, scoped to the resource (and prefix) they use.
 */
export class DsrFunction extends Construct {
  readonly function: NodejsFunction;
  readonly logGroup: logs.LogGroup;
  readonly role: iam.Role;
  /** The role's policy, where every grant lands and where reviewed wildcards are acknowledged. */
  readonly policy: iam.Policy;
  readonly #environment = new Map<string, string>();

  constructor(scope: Construct, id: string, props: DsrFunctionProps) {
    super(scope, id);
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetention ?? logs.RetentionDays.ONE_YEAR,
      removalPolicy: RemovalPolicy.RETAIN,
      ...(props.logKey ? { encryptionKey: props.logKey } : {}),
    });
    this.role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `svc-dsr ${id} function`,
    });
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [this.logGroup.logGroupArn],
      }),
    );
    const policy = this.role.node.tryFindChild('DefaultPolicy');
    if (!(policy instanceof iam.Policy)) throw new Error(`${this.node.path}: the role has no default policy`);
    this.policy = policy;

    this.function = new NodejsFunction(this, 'Function', {
      entry: props.entry,
      // Found from this file, not the working directory, so synth works from anywhere.
      depsLockFilePath: PROJECT_LOCK_FILE,
      projectRoot: PROJECT_ROOT,
      handler: 'handler',
      ...(props.description ? { description: props.description } : {}),
      runtime: FUNCTION_RUNTIME,
      architecture: lambda.Architecture.ARM_64,
      memorySize: props.memorySize ?? 512,
      ...(props.ephemeralStorageSize === undefined
        ? {}
        : { ephemeralStorageSize: props.ephemeralStorageSize }),
      timeout: props.timeout ?? Duration.seconds(60),
      tracing: lambda.Tracing.ACTIVE,
      role: this.role,
      logGroup: this.logGroup,
      loggingFormat: lambda.LoggingFormat.JSON,
      environment: {
        NODE_OPTIONS: '--enable-source-maps',
        POWERTOOLS_SERVICE_NAME: 'svc-dsr',
      },
      bundling: {
        format: OutputFormat.ESM,
        minify: true,
        sourceMap: true,
        keepNames: true,
        target: 'node24',
        mainFields: ['module', 'main'],
        banner: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
        ...(props.define === undefined ? {} : { define: { ...props.define } }),
      },
    });
    acknowledge(
      this.policy,
      'AwsSolutions-IAM5',
      'X-Ray PutTraceSegments and PutTelemetryRecords do not support resource-level permissions',
      ['Resource::*'],
    );
    for (const [name, value] of Object.entries(props.environment ?? {})) this.bindEnvironment(name, value);
  }

  /** Sets a plain environment variable; a second, different value for the same name is a mistake. */
  bindEnvironment(name: string, value: string): this {
    const current = this.#environment.get(name);
    if (current !== undefined && current !== value) {
      throw new Error(`${this.node.path}: ${name} is already set to a different value`);
    }
    this.#environment.set(name, value);
    this.function.addEnvironment(name, value);
    return this;
  }

  /** TABLE_NAME, with exactly the ledger access `access` names (the IAM proof checks each is used). */
  bindLedger(table: dynamodb.ITable, access: LedgerAccess): this {
    this.bindEnvironment('TABLE_NAME', table.tableName);
    const { items, query, writes } = LEDGER_ACTIONS[access];
    if (items.length > 0) this.#allow(items, [table.tableArn]);
    if (query) {
      // The retention pass of the sweep reads the ended index as well.
      const indexes = access === 'sweep' ? [OPEN_DUE_INDEX, ENDED_INDEX] : [OPEN_DUE_INDEX];
      this.#allow(
        ['dynamodb:Query'],
        indexes.map((index) => `${table.tableArn}/index/${index}`),
      );
    }
    this.#allowKey(
      table.encryptionKey,
      writes
        ? ['kms:Decrypt', 'kms:DescribeKey', 'kms:Encrypt', 'kms:GenerateDataKey']
        : ['kms:Decrypt', 'kms:DescribeKey'],
      'dynamodb',
    );
    return this;
  }

  /**
   * GATE_TABLE_NAME, the platform gate's table: `admits` platform calls (reading and updating the
   * shared bucket and circuit), `slots` takes and gives back export slots, `wakes` hands a slot it
   * gives back to a waiting request (reading whether it holds one first), `reads` reads the state
   * (the reconciler), `callers` counts each person's calls to the API (lambdas/api/throttle.ts).
   */
  bindPlatformGate(
    table: dynamodb.ITable,
    use: {
      readonly admits: boolean;
      readonly slots: boolean;
      readonly wakes?: boolean;
      readonly reads?: boolean;
      readonly callers?: boolean;
    },
  ): this {
    this.bindEnvironment('GATE_TABLE_NAME', table.tableName);
    const actions = [
      ...(use.admits || use.reads || use.wakes || use.callers ? ['dynamodb:GetItem'] : []),
      ...(use.admits || use.slots || use.callers ? ['dynamodb:UpdateItem'] : []),
      // A request that takes a slot leaves the export-slot waiters (its waiter item).
      ...(use.slots ? ['dynamodb:DeleteItem'] : []),
    ];
    if (actions.length > 0) this.#allow(actions, [table.tableArn]);
    return this;
  }

  /**
   * ARCHIVE_BUCKET (and KMS_KEY_ID), with access to objects under `prefix`. Writing covers a
   * streamed multipart upload with SSE-KMS (GenerateDataKey, and Decrypt to complete it), tagging,
   * the ranged reads of verification and the delete of a copy that failed it.
   */
  bindArchiveBucket(bucket: s3.IBucket, access: ArchiveAccess, prefix = 'exports/'): this {
    this.bindEnvironment('ARCHIVE_BUCKET', bucket.bucketName);
    const objects = bucket.arnForObjects(`${prefix}*`);
    const ack = () =>
      acknowledge(
        this.policy,
        'AwsSolutions-IAM5',
        'Archive objects are named exports/<request_id>/attempt-<n>.zip; the grant is limited to that prefix of this bucket',
        [`Resource::${nagArn(bucket)}/${prefix}*`],
      );
    if (access === 'remove' || access === 'operator') {
      // Every version found, then deleted by its id (a cancelled or denied request's copies, an
      // erasure's archive once verified): never a plain delete marker. The operator function also
      // reads the recorded version (a HEAD and a presigned GET of it, a re-hash), and decrypts it:
      // a presigned GET is authorised as whoever signed it. ListBucket makes a missing object a 404.
      this.#allow(
        access === 'operator'
          ? ['s3:DeleteObjectVersion', 's3:GetObject', 's3:GetObjectVersion']
          : ['s3:DeleteObjectVersion'],
        [objects],
      );
      this.#allow(['s3:ListBucket', 's3:ListBucketVersions'], [bucket.bucketArn]);
      if (access === 'operator') this.#allowKey(bucket.encryptionKey, ['kms:Decrypt'], 's3');
      ack();
      return this;
    }
    this.#bindBucketKey(bucket);
    this.#allow(
      access === 'read'
        ? ['s3:GetObject']
        : access === 'package'
          ? [
              // The archive (its recorded version where the bucket keeps versions), re-hashed as it is read.
              's3:GetObject',
              's3:GetObjectVersion',
              // The package is uploaded in parts as it is written; a failed upload is aborted.
              's3:PutObject',
              's3:PutObjectTagging',
              's3:AbortMultipartUpload',
              // A package built for a request cancelled meanwhile is deleted with every version.
              's3:DeleteObject',
              's3:DeleteObjectVersion',
            ]
          : [
              's3:PutObject',
              's3:PutObjectTagging',
              's3:AbortMultipartUpload',
              // A copy carried across invocations checks its upload's parts (ListParts) first.
              's3:ListMultipartUploadParts',
              's3:GetObject',
              // The copy is proven with a HEAD of the version it created.
              's3:GetObjectVersion',
              's3:DeleteObject',
              // A copy made for a request cancelled meanwhile is deleted with every version.
              's3:DeleteObjectVersion',
            ],
      [objects],
    );
    // Without ListBucket a missing object answers 403 instead of 404, and verification could not
    // tell "the copy vanished" from "access denied". ListBucketVersions finds every version of a
    // copy to delete.
    this.#allow(access === 'read' ? ['s3:ListBucket'] : ['s3:ListBucket', 's3:ListBucketVersions'], [
      bucket.bucketArn,
    ]);
    this.#allowKey(
      bucket.encryptionKey,
      access === 'read' ? ['kms:Decrypt'] : ['kms:Decrypt', 'kms:GenerateDataKey'],
      's3',
    );
    acknowledge(
      this.policy,
      'AwsSolutions-IAM5',
      'Archive objects are named exports/<request_id>/attempt-<n>.zip; the grant is limited to that prefix of this bucket',
      [`Resource::${nagArn(bucket)}/${prefix}*`],
    );
    return this;
  }

  /**
   * AUDIT_BUCKET (and KMS_KEY_ID): append records under `audit/` (a PUT only with `If-None-Match: *`,
   * so no role can replace the current version of a record), read them and list that prefix. No
   * retention or delete permission: records get the bucket's default retention.
   */
  bindAuditBucket(bucket: s3.IBucket): this {
    this.bindEnvironment('AUDIT_BUCKET', bucket.bucketName);
    this.#bindBucketKey(bucket);
    this.policy.addStatements(...auditTrailStatements(bucket));
    this.#allowKey(bucket.encryptionKey, ['kms:Decrypt', 'kms:GenerateDataKey'], 's3');
    acknowledge(
      this.policy,
      'AwsSolutions-IAM5',
      'Audit records live under audit/<request_id>/; the grant is limited to that prefix of this bucket',
      [`Resource::${nagArn(bucket)}/${AUDIT_PREFIX}*`],
    );
    return this;
  }

  /**
   * What verify and the report read beside the records: the daily manifests (list and read, never
   * write) and the version history of the records and the manifests (a second version of a record
   * is an attempt to change it).
   */
  bindAuditEvidence(bucket: s3.IBucket): this {
    this.policy.addStatements(
      ...auditTrailStatements(bucket, MANIFEST_PREFIX).filter(
        (statement) => !statement.actions.includes('s3:PutObject'),
      ),
      new iam.PolicyStatement({
        actions: ['s3:ListBucketVersions'],
        resources: [bucket.bucketArn],
        conditions: { StringLike: { 's3:prefix': [`${AUDIT_PREFIX}*`, `${MANIFEST_PREFIX}*`] } },
      }),
    );
    acknowledge(
      this.policy,
      'AwsSolutions-IAM5',
      'Daily audit manifests live under manifests/<day>.json; the read is limited to that prefix of this bucket',
      [`Resource::${nagArn(bucket)}/${MANIFEST_PREFIX}*`],
    );
    return this;
  }

  /**
   * AUDIT_BUCKET (and KMS_KEY_ID) for the daily audit manifests: write a day's manifest under
   * `manifests/` (a PUT only with `If-None-Match: *`), read and list them; list and read the
   * records (never write them), which the manifest is built from.
   */
  bindAuditManifests(bucket: s3.IBucket): this {
    this.bindEnvironment('AUDIT_BUCKET', bucket.bucketName);
    this.#bindBucketKey(bucket);
    this.policy.addStatements(
      ...auditTrailStatements(bucket, MANIFEST_PREFIX),
      ...auditTrailStatements(bucket, AUDIT_PREFIX).filter(
        (statement) => !statement.actions.includes('s3:PutObject'),
      ),
    );
    this.#allowKey(bucket.encryptionKey, ['kms:Decrypt', 'kms:GenerateDataKey'], 's3');
    acknowledge(
      this.policy,
      'AwsSolutions-IAM5',
      'Daily audit manifests live under manifests/<day>.json and are built from the records under audit/; the grant is limited to those prefixes of this bucket',
      [`Resource::${nagArn(bucket)}/${MANIFEST_PREFIX}*`, `Resource::${nagArn(bucket)}/${AUDIT_PREFIX}*`],
    );
    return this;
  }

  /** The secret's id variable (`SECRETS[name].env`), with GetSecretValue on it and Decrypt of its key through Secrets Manager. */
  bindSecret(
    name: SecretName,
    secret: secretsmanager.ISecret,
    key: kms.IKey | undefined = secret.encryptionKey,
  ): this {
    this.bindEnvironment(SECRETS[name].env, secret.secretFullArn ?? secret.secretName);
    return this.grantSecret(secret, key);
  }

  /**
   * GetSecretValue on the secret and Decrypt of its key through Secrets Manager, without a variable:
   * for a site other than the first, whose secret ids are in SITES (lambdas/shared/sites.ts).
   */
  grantSecret(secret: secretsmanager.ISecret, key: kms.IKey | undefined = secret.encryptionKey): this {
    // A secret referenced by name has a partial ARN; its full ARN ends in six random characters.
    this.#allow(['secretsmanager:GetSecretValue'], [secret.secretFullArn ?? `${secret.secretArn}-??????`]);
    this.#allowKey(key, ['kms:Decrypt'], 'secretsmanager');
    return this;
  }

  /** `envName` = the queue URL, with SendMessage on it and the key use SQS needs for an encrypted queue. */
  bindQueue(queue: sqs.IQueue, access: 'send', envName: string): this {
    this.bindEnvironment(envName, queue.queueUrl);
    if (access === 'send') {
      this.#allow(['sqs:SendMessage'], [queue.queueArn]);
      this.#allowKey(queue.encryptionMasterKey, ['kms:Decrypt', 'kms:GenerateDataKey'], 'sqs');
    }
    return this;
  }

  /**
   * The queue an event source of this function gives up to (its on-failure destination): Lambda
   * sends the failed batch's description with the function's role, so the role may send to it and
   * use its key through SQS. No environment variable: the function itself never sends there.
   */
  bindFailureDestination(queue: sqs.IQueue): lambda.IEventSourceDlq {
    this.#allow(['sqs:SendMessage'], [queue.queueArn]);
    this.#allowKey(queue.encryptionMasterKey, ['kms:Decrypt', 'kms:GenerateDataKey'], 'sqs');
    return { bind: () => ({ destination: queue.queueArn }) };
  }

  /**
   * EXPORT_WAITERS_INDEX: the function wakes a request waiting for an export slot when it gives
   * one back. It reads the oldest waiters from the gate table's index, deletes the items of those
   * it answered or found abandoned, and answers a task token with SendTaskSuccess, an action IAM
   * scopes by no resource: the token itself is the capability.
   */
  bindExportWaiters(gateTable: dynamodb.ITable): this {
    this.bindEnvironment('EXPORT_WAITERS_INDEX', WAITERS_INDEX);
    this.#allow(['dynamodb:Query'], [`${gateTable.tableArn}/index/${WAITERS_INDEX}`]);
    this.#allow(['dynamodb:DeleteItem'], [gateTable.tableArn]);
    this.#allow(['states:SendTaskSuccess'], ['*']);
    acknowledge(
      this.policy,
      'AwsSolutions-IAM5',
      'states:SendTaskSuccess has no resource type in IAM; it answers only the task tokens read from the export-slot waiters in the gate table',
      ['Resource::*'],
    );
    return this;
  }

  /** STATE_MACHINE_ARN, with StartExecution on it; `key` is the state machine's own KMS key, if any. */
  bindStateMachine(
    stateMachine: sfn.StateMachine,
    access: 'start' | 'reconcile' | 'operator',
    key?: kms.IKey,
  ): this {
    this.bindEnvironment('STATE_MACHINE_ARN', stateMachine.stateMachineArn);
    if (access === 'reconcile' || access === 'operator') {
      // The reconciler reads whether a request's execution still runs, by its name.
      const executions = Stack.of(this).formatArn({
        service: 'states',
        resource: 'execution',
        resourceName: `${stateMachine.stateMachineName}:*`,
        arnFormat: ArnFormat.COLON_RESOURCE_NAME,
      });
      // The operator function also stops a cancelled or denied request's executions.
      this.#allow(
        access === 'operator'
          ? ['states:DescribeExecution', 'states:StopExecution']
          : ['states:DescribeExecution'],
        [executions],
      );
      if (access === 'reconcile') {
        // It lists the machine's running and ended executions, a thousand a page, rather than ask
        // about each open request: DescribeExecution's quota is small and shared with the account.
        this.#allow(['states:ListExecutions'], [stateMachine.stateMachineArn]);
      }
      acknowledge(
        this.policy,
        'AwsSolutions-IAM5',
        "DescribeExecution of this state machine's executions, each named after the request it runs",
        [
          `Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:${nagArn(stateMachine).replace(/\.Arn>$/, '.Name>')}:*`,
        ],
      );
    }
    if (access === 'start' || access === 'reconcile' || access === 'operator') {
      this.#allow(['states:StartExecution'], [stateMachine.stateMachineArn]);
      if (key !== undefined) {
        // Step Functions encrypts the execution input under this context.
        this.#allow(['kms:Decrypt', 'kms:GenerateDataKey'], [key.keyArn], {
          StringEquals: { 'kms:EncryptionContext:aws:states:stateMachineArn': stateMachine.stateMachineArn },
        });
      }
    }
    return this;
  }

  #bindBucketKey(bucket: s3.IBucket): void {
    if (bucket.encryptionKey !== undefined) this.bindEnvironment('KMS_KEY_ID', bucket.encryptionKey.keyArn);
  }

  #allow(actions: string[], resources: string[], conditions?: Record<string, unknown>): void {
    this.policy.addStatements(
      new iam.PolicyStatement({ actions, resources, ...(conditions ? { conditions } : {}) }),
    );
  }

  /** Key use only when it comes through `service` in this region: the key cannot be used directly. */
  #allowKey(key: kms.IKey | undefined, actions: string[], service: string): void {
    if (key === undefined) return;
    this.#allow(actions, [key.keyArn], {
      StringEquals: { 'kms:ViaService': `${service}.${Stack.of(this).region}.amazonaws.com` },
    });
  }
}

/**
 * What writing the audit trail takes: a PUT under `audit/` only as a conditional create, reading
 * records back and listing the prefix (a function finds the end of a chain it did not write).
 */
export function auditTrailStatements(
  bucket: s3.IBucket,
  prefix: string = AUDIT_PREFIX,
): iam.PolicyStatement[] {
  const records = bucket.arnForObjects(`${prefix}*`);
  return [
    new iam.PolicyStatement({
      actions: ['s3:PutObject'],
      resources: [records],
      conditions: { StringEquals: { 's3:if-none-match': '*' } },
    }),
    new iam.PolicyStatement({ actions: ['s3:GetObject'], resources: [records] }),
    new iam.PolicyStatement({
      actions: ['s3:ListBucket'],
      resources: [bucket.bucketArn],
      conditions: { StringLike: { 's3:prefix': [`${prefix}*`] } },
    }),
  ];
}
