import { isDeepStrictEqual } from 'node:util';
import { App } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ENDED_INDEX, LEGACY_STATUS_DUE_INDEX, OPEN_DUE_INDEX, OPEN_INDEX_ATTRIBUTES } from '#shared/ledger';
import { PACKAGE_SETTINGS_METADATA } from '../../lambdas/build-package/settings.ts';
import { DEADLINE_METRICS } from '../../lambdas/deadline-sweep/deadline-sweep.ts';
import { WAITERS_INDEX } from '../../lambdas/shared/export-waiters.ts';
import { GATE_KEY } from '../../lambdas/shared/platform-gate.ts';
import { SECRETS } from '../../lambdas/shared/secrets.ts';
import { STEP_DIRECTORIES, STEP_GATE, STEP_TOKENS, type StepName } from '../../lambdas/steps.ts';
import { packageSettings, parseStackConfig } from '../../lib/config.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { stackOutputsSchema } from '../../lib/stack-outputs.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

function synth(config: unknown): Template {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  return Template.fromStack(new DsrStack(app, 'Test', { config }));
}

const template = synth(productionConfig);
const resources = template.toJSON().Resources as Record<string, { Type: string; Properties: CfnObject }>;

function ofType(type: string): [string, CfnObject][] {
  return Object.entries(resources)
    .filter(([, resource]) => resource.Type === type)
    .map(([id, resource]) => [id, resource.Properties ?? {}]);
}
function idOf(type: string, prefix: string): string {
  const matches = ofType(type).filter(([id]) => id.startsWith(prefix));
  if (matches.length !== 1) throw new Error(`expected one ${type} named ${prefix}*, found ${matches.length}`);
  return matches[0]?.[0] ?? '';
}
const getAtt = (id: string, attribute = 'Arn') => ({ 'Fn::GetAtt': [id, attribute] });

const dataKey = idOf('AWS::KMS::Key', 'DataKey');
const operationsKey = idOf('AWS::KMS::Key', 'OperationsKey');
const archiveBucket = idOf('AWS::S3::Bucket', 'ArchiveBucket');
const auditBucket = idOf('AWS::S3::Bucket', 'AuditBucket');
const accessLogBucket = idOf('AWS::S3::Bucket', 'AccessLogBucket');
const stepNames = Object.keys(STEP_DIRECTORIES);
const functionNames = [
  ...stepNames,
  'Intake',
  'DeadlineSweep',
  'Reconciler',
  'StatusEvents',
  'Operator',
  'ApiFunction',
];

/** The statements of a function's role policy (`<name>Role…DefaultPolicy…`). */
function statementsOf(functionName: string): CfnObject[] {
  const id = idOf('AWS::IAM::Policy', `${functionName}RoleDefaultPolicy`);
  return resources[id]?.Properties.PolicyDocument.Statement ?? [];
}
const actionsOf = (statement: CfnObject): string[] => [statement.Action].flat();

describe('encryption', () => {
  it('rotates both customer-managed keys and keeps them on stack deletion', () => {
    // Assess
    const keys = template.findResources('AWS::KMS::Key');
    expect(Object.keys(keys).sort()).toEqual([dataKey, operationsKey].sort());
    for (const key of Object.values(keys)) {
      expect(key.Properties.EnableKeyRotation).toBe(true);
      expect(key.DeletionPolicy).toBe('Retain');
    }
  });

  it('encrypts every queue with the data key', () => {
    // Assess
    const queues = ofType('AWS::SQS::Queue');
    // Intake, its dead-letter queue, quarantine and the status events' failures.
    expect(queues).toHaveLength(4);
    for (const [, queue] of queues) expect(queue.KmsMasterKeyId).toEqual(getAtt(dataKey));
  });

  it('encrypts the ledger with the data key', () => {
    // Assess
    template.hasResourceProperties('AWS::DynamoDB::Table', {
      SSESpecification: { SSEEnabled: true, SSEType: 'KMS', KMSMasterKeyId: getAtt(dataKey) },
    });
  });

  it('encrypts archives and audit records with the data key (bucket keys on) and access logs with S3 keys', () => {
    // Assess
    for (const bucket of [archiveBucket, auditBucket]) {
      expect(resources[bucket]?.Properties.BucketEncryption.ServerSideEncryptionConfiguration).toEqual([
        {
          BucketKeyEnabled: true,
          ServerSideEncryptionByDefault: { SSEAlgorithm: 'aws:kms', KMSMasterKeyID: getAtt(dataKey) },
        },
      ]);
    }
    // Server access log delivery supports only SSE-S3 on the target bucket.
    expect(resources[accessLogBucket]?.Properties.BucketEncryption.ServerSideEncryptionConfiguration).toEqual(
      [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }],
    );
  });

  it('encrypts the platform secret, execution history, every log group and the alarm topic', () => {
    // Assess
    template.hasResourceProperties('AWS::SecretsManager::Secret', { KmsKeyId: getAtt(dataKey) });
    template.hasResourceProperties('AWS::StepFunctions::StateMachine', {
      EncryptionConfiguration: { Type: 'CUSTOMER_MANAGED_KMS_KEY', KmsKeyId: getAtt(dataKey) },
    });
    const logGroups = ofType('AWS::Logs::LogGroup');
    // Each function's, the state machine's and the API's access logs.
    expect(logGroups).toHaveLength(functionNames.length + 2);
    for (const [, logGroup] of logGroups) expect(logGroup.KmsKeyId).toEqual(getAtt(operationsKey));
    template.hasResourceProperties('AWS::SNS::Topic', { KmsMasterKeyId: getAtt(operationsKey) });
  });

  it('lets CloudWatch Logs use the operations key only for log groups of this account and region', () => {
    // Assess
    const policy = resources[operationsKey]?.Properties.KeyPolicy.Statement;
    const logsStatement = policy.find((statement: CfnObject) =>
      JSON.stringify(statement.Principal).includes('logs.'),
    );
    expect(logsStatement.Condition.ArnLike['kms:EncryptionContext:aws:logs:arn']).toBeDefined();
    expect(actionsOf(logsStatement).every((action) => !action.includes('*'))).toBe(true);
  });
});

describe('TLS only', () => {
  const deniesPlainHttp = (statements: CfnObject[]) =>
    statements.some(
      (statement) =>
        statement.Effect === 'Deny' && statement.Condition?.Bool?.['aws:SecureTransport'] === 'false',
    );

  it('refuses non-TLS access to every queue, bucket and the topic', () => {
    // Assess
    const policies = [
      ...ofType('AWS::SQS::QueuePolicy'),
      ...ofType('AWS::S3::BucketPolicy'),
      ...ofType('AWS::SNS::TopicPolicy'),
    ];
    expect(policies).toHaveLength(4 + 3 + 1);
    for (const [id, policy] of policies) {
      expect({ id, tlsOnly: deniesPlainHttp(policy.PolicyDocument.Statement) }).toEqual({
        id,
        tlsOnly: true,
      });
    }
  });
});

describe('queues', () => {
  it('sends intake messages to the dead-letter queue after five receives', () => {
    // Assess
    template.hasResourceProperties('AWS::SQS::Queue', {
      RedrivePolicy: {
        deadLetterTargetArn: getAtt(idOf('AWS::SQS::Queue', 'IntakeDeadLetterQueue')),
        maxReceiveCount: 5,
      },
    });
  });

  it('keeps dead letters and quarantined messages for 14 days', () => {
    // Assess
    for (const prefix of ['IntakeDeadLetterQueue', 'QuarantineQueue']) {
      expect(resources[idOf('AWS::SQS::Queue', prefix)]?.Properties.MessageRetentionPeriod).toBe(
        14 * 24 * 3600,
      );
    }
  });

  it('feeds intake from the queue with partial batch responses', () => {
    // Assess
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: getAtt(idOf('AWS::SQS::Queue', 'IntakeQueue')),
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      BatchSize: 10,
    });
  });
});

describe('ledger', () => {
  it('has point-in-time recovery, deletion protection, the sharded open index carrying only what listing reads, and the ended index of keys', () => {
    // Assess
    const ledger = template.findResources('AWS::DynamoDB::Table');
    const [table] = Object.values(ledger);
    expect(table?.DeletionPolicy).toBe('Retain');
    expect(table?.Properties).toMatchObject({
      PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
      DeletionProtectionEnabled: true,
      KeySchema: [{ AttributeName: 'request_id', KeyType: 'HASH' }],
      GlobalSecondaryIndexes: [
        {
          IndexName: OPEN_DUE_INDEX,
          KeySchema: [
            { AttributeName: 'open_shard', KeyType: 'HASH' },
            { AttributeName: 'due_at', KeyType: 'RANGE' },
          ],
          Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: [...OPEN_INDEX_ATTRIBUTES] },
        },
        {
          IndexName: ENDED_INDEX,
          KeySchema: [
            { AttributeName: 'ended_shard', KeyType: 'HASH' },
            { AttributeName: 'completed_at', KeyType: 'RANGE' },
          ],
          Projection: { ProjectionType: 'KEYS_ONLY' },
        },
      ],
    });
    expect(table?.Properties.GlobalSecondaryIndexes[0].Projection.NonKeyAttributes).not.toEqual(
      expect.arrayContaining(['primary_key']),
    );
  });

  it('keeps the index of older ledgers beside the open index only while ledgerLegacyStatusIndex is set', () => {
    // Act
    const migrating = synth({ ...productionConfig, ledgerLegacyStatusIndex: true });

    // Assess
    const [table] = Object.values(migrating.findResources('AWS::DynamoDB::Table'));

    expect(table?.Properties.GlobalSecondaryIndexes.map((index: CfnObject) => index.IndexName)).toEqual([
      OPEN_DUE_INDEX,
      LEGACY_STATUS_DUE_INDEX,
    ]);
    expect(table?.Properties.GlobalSecondaryIndexes[1].KeySchema).toEqual([
      { AttributeName: 'status', KeyType: 'HASH' },
      { AttributeName: 'due_at', KeyType: 'RANGE' },
    ]);
  });

  it('lets the functions query the open index, the sweep the ended index too, the wakers the waiters index, and nothing else', () => {
    // Assess
    const indexArn = (index: string) => ({
      'Fn::Join': ['', [getAtt(idOf('AWS::DynamoDB::Table', 'Ledger')), `/index/${index}`]],
    });
    const waitersIndex = {
      'Fn::Join': ['', [getAtt(idOf('AWS::DynamoDB::Table', 'PlatformGate')), `/index/${WAITERS_INDEX}`]],
    };
    const queried = (name: string) =>
      statementsOf(name)
        .filter((statement) => actionsOf(statement).includes('dynamodb:Query'))
        .flatMap((statement) => [statement.Resource].flat())
        .filter((resource) => !isDeepStrictEqual(resource, waitersIndex));

    expect(functionNames.flatMap(queried).length).toBeGreaterThan(0);
    for (const name of functionNames) {
      const expected =
        name === 'DeadlineSweep'
          ? [indexArn(OPEN_DUE_INDEX), indexArn(ENDED_INDEX)]
          : [indexArn(OPEN_DUE_INDEX)];
      const resources = queried(name);
      if (resources.length > 0) expect(resources).toEqual(expected);
    }
    expect(queried('DeadlineSweep')).toEqual([indexArn(OPEN_DUE_INDEX), indexArn(ENDED_INDEX)]);
  });

  it('lets only the functions that give export slots back read the waiters, oldest first, from the gate table', () => {
    // Assess
    template.hasResourceProperties('AWS::DynamoDB::Table', {
      KeySchema: [{ AttributeName: GATE_KEY, KeyType: 'HASH' }],
      GlobalSecondaryIndexes: [
        {
          IndexName: WAITERS_INDEX,
          KeySchema: [
            { AttributeName: 'queue', KeyType: 'HASH' },
            { AttributeName: 'since', KeyType: 'RANGE' },
          ],
          Projection: { ProjectionType: 'ALL' },
        },
      ],
    });
    const waitersIndex = {
      'Fn::Join': ['', [getAtt(idOf('AWS::DynamoDB::Table', 'PlatformGate')), `/index/${WAITERS_INDEX}`]],
    };
    const readers = functionNames
      .filter((name) =>
        statementsOf(name).some(
          (statement) =>
            actionsOf(statement).includes('dynamodb:Query') &&
            isDeepStrictEqual(statement.Resource, waitersIndex),
        ),
      )
      .sort();
    expect(readers).toEqual(['ArchiveExport', 'CheckExport', 'Reconciler', 'RecordFailure', 'RecordOutcome']);
  });
});

describe('buckets', () => {
  it('blocks public access on every bucket and keeps them on stack deletion', () => {
    // Assess
    const buckets = template.findResources('AWS::S3::Bucket');
    expect(Object.keys(buckets)).toHaveLength(3);
    for (const bucket of Object.values(buckets)) {
      expect(bucket.DeletionPolicy).toBe('Retain');
      expect(bucket.Properties.PublicAccessBlockConfiguration).toEqual({
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      });
      expect(bucket.Properties.OwnershipControls).toEqual({
        Rules: [{ ObjectOwnership: 'BucketOwnerEnforced' }],
      });
    }
  });

  it('versions archives and audit records and logs access to both into the log bucket', () => {
    // Assess
    for (const [bucket, prefix] of [
      [archiveBucket, 'archive/'],
      [auditBucket, 'audit/'],
    ] as const) {
      expect(resources[bucket]?.Properties).toMatchObject({
        VersioningConfiguration: { Status: 'Enabled' },
        LoggingConfiguration: { DestinationBucketName: { Ref: accessLogBucket }, LogFilePrefix: prefix },
      });
    }
  });

  it('locks audit records in compliance mode for at least 24 months by default', () => {
    // Assess
    expect(resources[auditBucket]?.Properties).toMatchObject({
      ObjectLockEnabled: true,
      ObjectLockConfiguration: {
        ObjectLockEnabled: 'Enabled',
        Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 731 } },
      },
    });
  });

  it('locks audit records for the configured number of months', () => {
    // Act
    const longer = synth({ ...productionConfig, auditRetentionMonths: 84 });

    // Assess
    longer.hasResourceProperties('AWS::S3::Bucket', {
      ObjectLockConfiguration: { Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 2557 } } },
    });
  });

  it('expires archives by their request-type tag, untagged ones at the longest retention, and purges leftovers', () => {
    // Assess
    const rules = resources[archiveBucket]?.Properties.LifecycleConfiguration.Rules;

    expect(rules).toEqual([
      {
        Id: 'expire-access-archives',
        Status: 'Enabled',
        TagFilters: [{ Key: 'request-type', Value: 'access' }],
        ExpirationInDays: 90,
      },
      {
        Id: 'expire-erasure-archives',
        Status: 'Enabled',
        TagFilters: [{ Key: 'request-type', Value: 'erasure' }],
        ExpirationInDays: 30,
      },
      { Id: 'expire-untyped-archives', Status: 'Enabled', Prefix: 'exports/', ExpirationInDays: 90 },
      {
        Id: 'purge-noncurrent-and-incomplete',
        Status: 'Enabled',
        NoncurrentVersionExpiration: { NoncurrentDays: 1 },
        AbortIncompleteMultipartUpload: { DaysAfterInitiation: 1 },
        ExpiredObjectDeleteMarker: true,
      },
    ]);
  });

  it('follows the configured archive retention per request type', () => {
    // Act
    const custom = synth({
      ...productionConfig,
      accessArchiveRetentionDays: 45,
      erasureArchiveRetentionDays: 200,
    });

    // Assess
    const bucket = Object.entries(custom.findResources('AWS::S3::Bucket')).find(([id]) =>
      id.startsWith('ArchiveBucket'),
    )?.[1];
    const days = Object.fromEntries(
      bucket?.Properties.LifecycleConfiguration.Rules.map((rule: CfnObject) => [
        rule.Id,
        rule.ExpirationInDays,
      ]),
    );

    expect(days).toMatchObject({
      'expire-access-archives': 45,
      'expire-erasure-archives': 200,
      'expire-untyped-archives': 200,
    });
  });

  it("lets VerifyErasure delete an erasure's archive by default, and not when the stack keeps it, which the lifecycle then expires", () => {
    // Assess
    const deletes = (statements: CfnObject[]) =>
      statements.filter((statement) => actionsOf(statement).some((action) => action.startsWith('s3:Delete')));
    expect(deletes(statementsOf('VerifyErasure'))).toEqual([
      expect.objectContaining({ Action: 's3:DeleteObjectVersion' }),
    ]);
    const kept = synth({ ...productionConfig, erasureArchiveKeepDays: 7 }).toJSON().Resources as Record<
      string,
      { Type: string; Properties: CfnObject }
    >;
    const keptPolicy = Object.entries(kept).find(([id]) =>
      id.startsWith('VerifyErasureRoleDefaultPolicy'),
    )?.[1];
    expect(deletes(keptPolicy?.Properties.PolicyDocument.Statement ?? [])).toEqual([]);
    const keptFunction = Object.values(kept).find(
      (resource) => resource.Properties.Environment?.Variables?.DSR_STEP === 'VerifyErasure',
    );
    expect(keptFunction?.Properties.Environment.Variables.ERASURE_ARCHIVE_KEEP_DAYS).toBeUndefined();
    const keptRules = Object.entries(kept).find(([id]) => id.startsWith('ArchiveBucket'))?.[1]?.Properties
      .LifecycleConfiguration.Rules;
    expect(keptRules).toContainEqual(
      expect.objectContaining({ Id: 'expire-erasure-archives', ExpirationInDays: 7 }),
    );
  });

  it('keeps access logs as long as the audit records and lets only the logging service write them', () => {
    // Assess
    expect(resources[accessLogBucket]?.Properties.LifecycleConfiguration.Rules).toContainEqual(
      expect.objectContaining({ Id: 'expire-access-logs', ExpirationInDays: 731 }),
    );
    const policy = ofType('AWS::S3::BucketPolicy').find(([, p]) => p.Bucket.Ref === accessLogBucket)?.[1];
    const allow = policy?.PolicyDocument.Statement.filter(
      (statement: CfnObject) => statement.Effect === 'Allow',
    );
    const fromBucket = (bucket: string) =>
      expect.objectContaining({
        Principal: { Service: 'logging.s3.amazonaws.com' },
        Action: 's3:PutObject',
        Condition: {
          ArnLike: { 'aws:SourceArn': getAtt(bucket) },
          StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } },
        },
      });
    expect(allow).toEqual([fromBucket(archiveBucket), fromBucket(auditBucket)]);
  });
});

describe('functions', () => {
  const functions = ofType('AWS::Lambda::Function');

  it('runs every function on Node.js 24 arm64, traced, logging JSON to its own log group', () => {
    // Assess
    expect(functions).toHaveLength(functionNames.length);
    for (const [id, fn] of functions) {
      expect({ id, fn }).toMatchObject({
        id,
        fn: {
          Runtime: 'nodejs24.x',
          Architectures: ['arm64'],
          TracingConfig: { Mode: 'Active' },
          LoggingConfig: { LogFormat: 'JSON', LogGroup: { Ref: expect.stringMatching(/Logs[0-9A-F]{8}$/) } },
          Environment: { Variables: { NODE_OPTIONS: '--enable-source-maps' } },
        },
      });
    }
  });

  it('keeps function logs for the configured retention', () => {
    // Act
    const retained = synth({ ...productionConfig, logRetentionDays: 90 });

    // Assess
    const groups = Object.values(retained.findResources('AWS::Logs::LogGroup'));
    expect(groups.map((group) => group.Properties.RetentionInDays)).toEqual(groups.map(() => 90));
  });

  it('marks each step Lambda with its DSR_STEP and gives it exactly the step environment', () => {
    // Assess
    const stepEnv = [
      'ARCHIVE_BUCKET',
      'AUDIT_BUCKET',
      'AUDIT_KEY_SECRET_ID',
      'DOWNLOAD_ALLOWED_HOSTS',
      'DSR_STEP',
      'EXPORT_MAX_ATTEMPTS',
      'GATE_TABLE_NAME',
      'KMS_KEY_ID',
      'NODE_OPTIONS',
      'OUTAGE_HORIZON_SECONDS',
      'PLATFORM_ACTIVITY_URL',
      'PLATFORM_BASE_URL',
      'PLATFORM_BURST',
      'PLATFORM_EXPORT_URL',
      'PLATFORM_MAX_OPEN_EXPORTS',
      'PLATFORM_REQUESTS_PER_SECOND',
      'POLL_BUDGET_SECONDS',
      'POLL_GROWTH_PERCENT',
      'POLL_INITIAL_SECONDS',
      'POLL_MAX_SECONDS',
      'POWERTOOLS_SERVICE_NAME',
      'SITE_IDS',
      'SPOT_ID',
      'SSO_TOKEN_HEADER',
      'TABLE_NAME',
      'USER_ID_FIELD',
    ];
    const steps = functions.filter(([, fn]) => fn.Environment.Variables.DSR_STEP !== undefined);
    expect(steps.map(([, fn]) => fn.Environment.Variables.DSR_STEP).sort()).toEqual([...stepNames].sort());
    for (const [, fn] of steps) {
      const tokens = STEP_TOKENS[fn.Environment.Variables.DSR_STEP as StepName].map(
        (token) => SECRETS[token].env,
      );
      // ArchiveExport alone is told its expansion cap; the package step alone the time zone (who
      // answers and the notice texts are bundled into its code).
      const step = fn.Environment.Variables.DSR_STEP;
      const own =
        step === 'ArchiveExport'
          ? ['ARCHIVE_MAX_EXPANDED_BYTES']
          : step === 'BuildPackage'
            ? ['TIME_ZONE']
            : step === 'VerifyErasure'
              ? ['ERASURE_ARCHIVE_KEEP_DAYS']
              : // StartExport alone publishes a metric: the platform's refusals for open exports.
                step === 'StartExport'
                ? ['METRICS_NAMESPACE', 'METRICS_STACK']
                : [];
      // The steps that give an export slot back hand it to a waiting request.
      const waiters = STEP_GATE[step as StepName].wakes ? ['EXPORT_WAITERS_INDEX'] : [];
      expect(Object.keys(fn.Environment.Variables).sort()).toEqual(
        [...stepEnv, ...tokens, ...own, ...waiters].sort(),
      );
    }
  });

  it("keeps the package settings, every law's texts, on BuildPackage alone as template metadata", () => {
    // Assess
    const withSettings = Object.values(template.findResources('AWS::Lambda::Function')).filter(
      (fn) => fn.Metadata?.[PACKAGE_SETTINGS_METADATA] !== undefined,
    );
    expect(withSettings.map((fn) => fn.Properties.Environment.Variables.DSR_STEP)).toEqual(['BuildPackage']);
    const settings = JSON.parse(withSettings[0]?.Metadata[PACKAGE_SETTINGS_METADATA]);
    expect(settings).toEqual(packageSettings(parseStackConfig(productionConfig)));
    expect(Object.keys(settings.information)).toEqual(['gdpr', 'ccpa']);
  });

  it('passes the archive expansion cap to ArchiveExport alone', () => {
    // Act
    const capped = synth({ ...productionConfig, archiveMaxExpandedBytes: 8 * 1024 ** 3 });

    // Assess
    const archiveExport = Object.values(capped.findResources('AWS::Lambda::Function')).find(
      (fn) => fn.Properties.Environment?.Variables?.DSR_STEP === 'ArchiveExport',
    );
    expect(archiveExport?.Properties.Environment.Variables.ARCHIVE_MAX_EXPANDED_BYTES).toBe(
      String(8 * 1024 ** 3),
    );
  });

  it('gives each function only the secrets its calls need', () => {
    // Assess
    const secretIds = (name: string) => {
      const [, fn] = functions.find(([id]) => id.startsWith(`${name}Function`)) ?? [];
      return Object.keys(fn?.Environment.Variables ?? {})
        .filter((key) => key.endsWith('_SECRET_ID'))
        .sort();
    };
    expect(secretIds('ResolveSubject')).toEqual(['AUDIT_KEY_SECRET_ID', 'SSO_TOKEN_SECRET_ID']);
    expect(secretIds('StartExport')).toEqual([
      'AUDIT_KEY_SECRET_ID',
      'EXPORT_TOKEN_SECRET_ID',
      'SSO_TOKEN_SECRET_ID',
    ]);
    expect(secretIds('EraseSubject')).toEqual(['AUDIT_KEY_SECRET_ID', 'SSO_TOKEN_SECRET_ID']);
    expect(secretIds('RecordOutcome')).toEqual(['AUDIT_KEY_SECRET_ID']);
    expect(secretIds('Intake')).toEqual(['AUDIT_KEY_SECRET_ID']);
    // The retention pass hashes with the audit HMAC key.
    expect(secretIds('DeadlineSweep')).toEqual(['AUDIT_KEY_SECRET_ID']);
    // Polls and downloads to nowhere the exports that ended requests left open; no HMAC key.
    expect(secretIds('Reconciler')).toEqual(['EXPORT_TOKEN_SECRET_ID']);
  });

  it('passes the platform settings and brand-name overrides through to the steps', () => {
    // Act
    const renamed = synth({ ...productionConfig, ssoTokenHeader: 'x-acme-sso', userIdField: 'acme_user_id' });

    // Assess
    renamed.hasResourceProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({
          DSR_STEP: 'ResolveSubject',
          SSO_TOKEN_HEADER: 'x-acme-sso',
          USER_ID_FIELD: 'acme_user_id',
          SPOT_ID: productionConfig.spotId,
          PLATFORM_BASE_URL: productionConfig.platformBaseUrl,
          DOWNLOAD_ALLOWED_HOSTS: 'downloads.comments.example.com,*.cdn.example.net',
        }),
      },
    });
  });

  it('gives ArchiveExport and BuildPackage 15 minutes and 1 GiB, and the other steps their worst chain (step-timeouts.test.ts)', () => {
    // Assess
    for (const [, fn] of functions) {
      const step = fn.Environment.Variables.DSR_STEP;
      if (step === 'ArchiveExport' || step === 'BuildPackage')
        expect(fn).toMatchObject({ Timeout: 900, MemorySize: 1024 });
      else if (step !== undefined) expect(fn.Timeout).toBeLessThan(900);
    }
  });

  it('gives BuildPackage 4 GiB of local disk for its sorts, and no other function more than the default', () => {
    // Assess
    for (const [, fn] of functions) {
      if (fn.Environment?.Variables?.DSR_STEP === 'BuildPackage') {
        expect(fn.EphemeralStorage).toEqual({ Size: 4096 });
      } else expect(fn.EphemeralStorage).toBeUndefined();
    }
  });
});

describe('IAM', () => {
  const policies = ofType('AWS::IAM::Policy');
  const allStatements = policies.flatMap(([id, policy]) =>
    policy.PolicyDocument.Statement.map((statement: CfnObject) => ({ id, statement })),
  );

  it('never grants a wildcard action', () => {
    // Assess
    for (const { id, statement } of allStatements) {
      const wild = actionsOf(statement).filter((action) => action.includes('*'));
      expect({ id, wild }).toEqual({ id, wild: [] });
    }
  });

  it('uses no managed policies', () => {
    // Assess
    for (const [id, role] of ofType('AWS::IAM::Role'))
      expect({ id, managed: role.ManagedPolicyArns }).toEqual({ id, managed: undefined });
  });

  it('grants Resource "*" only for X-Ray, log delivery, listing streams and answering task tokens, which have no resource-level permissions', () => {
    // Assess
    const unscoped = allStatements
      .filter(({ statement }) => [statement.Resource].flat().includes('*'))
      .flatMap(({ statement }) => actionsOf(statement));
    for (const action of new Set(unscoped)) {
      expect(action).toMatch(/^(xray|logs):|^dynamodb:ListStreams$|^states:SendTaskSuccess$/);
    }
    // Answering tokens: only the functions that give export slots back, which take the tokens from
    // the waiters in the gate table.
    const answering = allStatements
      .filter(({ statement }) => actionsOf(statement).includes('states:SendTaskSuccess'))
      .map(({ id }) => id.replace(/Role.*$/, ''))
      .sort();
    expect(answering).toEqual([
      'ArchiveExport',
      'CheckExport',
      'Reconciler',
      'RecordFailure',
      'RecordOutcome',
    ]);
  });

  it('lets only ArchiveExport and BuildPackage write archive objects, and only under exports/', () => {
    // Assess
    const archiveArn = JSON.stringify(getAtt(archiveBucket));
    const archiveWriters = allStatements.filter(
      ({ statement }) =>
        JSON.stringify(statement.Resource).includes(archiveArn) &&
        actionsOf(statement).includes('s3:PutObject'),
    );
    expect(archiveWriters.map(({ id }) => id)).toEqual([
      expect.stringMatching(/^ArchiveExportRole/),
      expect.stringMatching(/^BuildPackageRole/),
    ]);
    for (const { statement } of archiveWriters) {
      expect(statement.Resource).toEqual({ 'Fn::Join': ['', [getAtt(archiveBucket), '/exports/*']] });
    }
    // The package step reads the archive's recorded version and uploads its package in parts.
    expect(actionsOf(archiveWriters[1]?.statement).sort()).toEqual(
      [
        's3:AbortMultipartUpload',
        's3:DeleteObject',
        's3:DeleteObjectVersion',
        's3:GetObject',
        's3:GetObjectVersion',
        's3:PutObject',
        's3:PutObjectTagging',
      ].sort(),
    );
    // The copy also lists the parts of an upload it carries on from an earlier invocation.
    expect(actionsOf(archiveWriters[0]?.statement).sort()).toEqual(
      [
        's3:AbortMultipartUpload',
        's3:ListMultipartUploadParts',
        's3:DeleteObject',
        's3:DeleteObjectVersion',
        's3:GetObject',
        's3:GetObjectVersion',
        's3:PutObject',
        's3:PutObjectTagging',
      ].sort(),
    );
  });

  it('lets the audit writers put and read records under audit/ but never change retention or delete', () => {
    // Assess
    const auditArn = JSON.stringify(getAtt(auditBucket));
    for (const name of [...stepNames, 'Intake']) {
      const onAudit = statementsOf(name).filter((statement) =>
        JSON.stringify(statement.Resource).includes(auditArn),
      );
      expect(onAudit.flatMap(actionsOf).sort()).toEqual(['s3:GetObject', 's3:ListBucket', 's3:PutObject']);
      const list = onAudit.find((statement) => actionsOf(statement).includes('s3:ListBucket'));
      expect(list?.Condition).toEqual({ StringLike: { 's3:prefix': ['audit/*'] } });
    }
  });

  it('uses the data key only through the service that stores the data', () => {
    // Assess
    for (const name of functionNames) {
      const keyStatements = statementsOf(name).filter(
        (statement) =>
          JSON.stringify(statement.Resource) === JSON.stringify(getAtt(dataKey)) &&
          // The event sources' Decrypt grants (SQS for intake, the ledger stream for the status
          // events) are CDK's own, for the service that reads the queue or stream for the function.
          !((name === 'Intake' || name === 'StatusEvents') && statement.Condition === undefined),
      );
      for (const statement of keyStatements) {
        expect(Object.keys(statement.Condition?.StringEquals ?? {})).toEqual([
          expect.stringMatching(/^kms:(ViaService|EncryptionContext:aws:states:stateMachineArn)$/),
        ]);
      }
    }
  });

  it('lets the deadline sweep query the ledger, minimise items, read the audit records and write only the daily manifests of the audit bucket', () => {
    // Assess
    const statements = statementsOf('DeadlineSweep');
    const actions = statements.flatMap(actionsOf);
    expect(actions.filter((action) => action.startsWith('dynamodb:')).sort()).toEqual([
      'dynamodb:GetItem',
      'dynamodb:Query',
      'dynamodb:UpdateItem',
    ]);
    expect(actions.filter((action) => action.startsWith('secretsmanager:'))).toEqual([
      'secretsmanager:GetSecretValue',
    ]);
    const s3Resources = JSON.stringify(
      statements.filter((statement) => actionsOf(statement).some((action) => action.startsWith('s3:'))),
    );
    expect(s3Resources).toContain('manifests/');
    // The manifest is built from the records: it lists and reads them, and never writes one.
    const recordWrites = statements.filter(
      (statement) =>
        actionsOf(statement).includes('s3:PutObject') && JSON.stringify(statement).includes('audit/'),
    );
    expect(recordWrites).toEqual([]);
    expect(
      statements.some(
        (statement) =>
          actionsOf(statement).includes('s3:GetObject') && JSON.stringify(statement).includes('/audit/*'),
      ),
    ).toBe(true);
  });

  it('lets intake start the state machine and send to quarantine, nothing more on SQS and Step Functions', () => {
    // Assess
    const actions = statementsOf('Intake').flatMap(actionsOf);
    expect(actions.filter((action) => action.startsWith('states:'))).toEqual(['states:StartExecution']);
    expect(actions.filter((action) => action === 'sqs:SendMessage')).toHaveLength(1);
  });
});

describe('who reads archive content', () => {
  const operatorPolicy = idOf('AWS::IAM::ManagedPolicy', 'OperatorPolicy');
  const personStatements: CfnObject[] = resources[operatorPolicy]?.Properties.PolicyDocument.Statement ?? [];
  const onArchiveBucket = (statement: CfnObject) =>
    JSON.stringify(statement.Resource).includes(JSON.stringify(getAtt(archiveBucket)));

  it("gives the privacy team's policy no action on the archive bucket or its objects", () => {
    // Assess: packages and archives reach people only through the operator function.
    expect(personStatements.filter(onArchiveBucket)).toEqual([]);
    // Nor through a statement on every resource.
    const unscoped = personStatements.filter((statement) => [statement.Resource].flat().includes('*'));
    expect(unscoped.flatMap(actionsOf).filter((action) => action.startsWith('s3:'))).toEqual([]);
    // It still reads the audit records and manifests (verify), which hold no archive content.
    const reads = personStatements.filter((statement) => actionsOf(statement).includes('s3:GetObject'));
    expect(reads.map((statement) => statement.Resource)).toEqual([
      { 'Fn::Join': ['', [getAtt(auditBucket), '/audit/*']] },
      { 'Fn::Join': ['', [getAtt(auditBucket), '/manifests/*']] },
    ]);
  });

  it('lets the operator function read and decrypt archive objects under exports/ only, and delete versions', () => {
    // Assess
    const onObjects = statementsOf('Operator').filter(
      (statement) => onArchiveBucket(statement) && JSON.stringify(statement.Resource).includes('/exports/*'),
    );
    expect(onObjects.flatMap(actionsOf).sort()).toEqual([
      's3:DeleteObjectVersion',
      's3:GetObject',
      's3:GetObjectVersion',
    ]);
    for (const statement of onObjects) {
      expect(statement.Resource).toEqual({ 'Fn::Join': ['', [getAtt(archiveBucket), '/exports/*']] });
    }
    // A presigned GET it signs is decrypted with its permission: through S3 only (the audit
    // bucket's grant asks the same of the same key).
    const decrypt = statementsOf('Operator').filter(
      (statement) =>
        JSON.stringify(statement.Resource) === JSON.stringify(getAtt(dataKey)) &&
        actionsOf(statement).includes('kms:Decrypt') &&
        JSON.stringify(statement.Condition).includes('s3.'),
    );
    expect(decrypt.length).toBeGreaterThan(0);
    for (const statement of decrypt) {
      expect(statement.Condition).toEqual({
        StringEquals: {
          'kms:ViaService': { 'Fn::Join': ['', ['s3.', { Ref: 'AWS::Region' }, '.amazonaws.com']] },
        },
      });
    }
  });

  it("gives the operator function the archive copy's 15 minutes and 1,024 MB for verify's re-hash", () => {
    // Assess
    template.hasResourceProperties('AWS::Lambda::Function', {
      Description: Match.stringLikeRegexp('^svc-dsr operator:'),
      Timeout: 900,
      MemorySize: 1024,
    });
  });
});

describe('secrets', () => {
  it('creates the platform secret without putting any value in the template', () => {
    // Assess
    const [[, secret]] = ofType('AWS::SecretsManager::Secret') as [[string, CfnObject]];
    expect(secret.SecretString).toBeUndefined();
    expect(secret.GenerateSecretString?.SecretStringTemplate).toBeUndefined();
    const text = JSON.stringify(template.toJSON());
    expect(text).not.toMatch(/"(sso_access_token|export_token|audit_hmac_key)"\s*:/);
    for (const [, fn] of ofType('AWS::Lambda::Function')) {
      const names = Object.keys(fn.Environment.Variables);
      // Only the ids of secrets (`…_SECRET_ID`) and the token header's name may speak of them.
      const secretive = names.filter((name) => !name.endsWith('_SECRET_ID') && name !== 'SSO_TOKEN_HEADER');
      expect(secretive.filter((name) => /TOKEN|PASSWORD|HMAC|SECRET/.test(name))).toEqual([]);
    }
  });

  it('references existing secrets by name and grants only those secrets and their key', () => {
    // Act
    const existing = synth({
      ...productionConfig,
      existingSecrets: {
        ssoAccessToken: 'svc-dsr/sso',
        exportToken: 'svc-dsr/export',
        auditHmacKey: 'svc-dsr/audit',
        keyArn: 'arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab',
      },
    });

    // Assess
    existing.resourceCountIs('AWS::SecretsManager::Secret', 0);
    existing.hasResourceProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({
          DSR_STEP: 'ResolveSubject',
          SSO_TOKEN_SECRET_ID: 'svc-dsr/sso',
          AUDIT_KEY_SECRET_ID: 'svc-dsr/audit',
        }),
      },
    });
    const text = JSON.stringify(existing.toJSON());
    expect(text).toContain(':secret:svc-dsr/sso-??????');
    expect(text).toContain('"arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"');
  });
});

describe('state machine', () => {
  it('logs all events without execution data and is traced', () => {
    // Assess
    template.hasResourceProperties('AWS::StepFunctions::StateMachine', {
      LoggingConfiguration: {
        Level: 'ALL',
        IncludeExecutionData: false,
        Destinations: [
          { CloudWatchLogsLogGroup: { LogGroupArn: getAtt(idOf('AWS::Logs::LogGroup', 'WorkflowLogs')) } },
        ],
      },
      TracingConfiguration: { Enabled: true },
      StateMachineType: 'STANDARD',
    });
  });

  it('times out an execution no sooner than the longest a request stays open, with the export budget', () => {
    // Assess
    // A request may queue for an export slot until its deadline (92 days at the longest); an
    // execution that timed out sooner would be resumed a few times, then stranded.
    const definition = JSON.stringify(ofType('AWS::StepFunctions::StateMachine')[0]?.[1].DefinitionString);
    expect(definition).toContain(`\\"TimeoutSeconds\\":${93 * 86_400 + 259_200}`);
  });
});

describe('deadline sweep', () => {
  const sweep = ofType('AWS::Lambda::Function').find(([id]) => id.startsWith('DeadlineSweep'));

  it('runs on the configured schedule', () => {
    // Act
    const every15 = synth({ ...productionConfig, deadlineSweepMinutes: 15 });

    // Assess
    every15.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(15 minutes)' });
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 hour)',
      Targets: [Match.objectLike({ Arn: getAtt(sweep?.[0] ?? '') })],
    });
  });

  it('publishes to the metric the overdue alarm watches', () => {
    // Assess
    const env = sweep?.[1].Environment.Variables;
    expect(env).toMatchObject({ DUE_SOON_DAYS: '7', METRICS_NAMESPACE: 'svc-dsr', METRICS_STACK: 'Test' });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: env.METRICS_NAMESPACE,
      MetricName: DEADLINE_METRICS.overdue,
      // As Powertools Metrics writes them: the stack, and the service it adds.
      Dimensions: [
        { Name: 'Stack', Value: env.METRICS_STACK },
        { Name: 'service', Value: 'svc-dsr' },
      ],
      Period: 3600,
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
    });
  });
});

describe('reconciler', () => {
  const reconciler = ofType('AWS::Lambda::Function').find(([id]) => id.startsWith('Reconciler'));

  it('runs on the configured schedule with the configured resume limit', () => {
    // Assess
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(15 minutes)',
      Targets: [Match.objectLike({ Arn: getAtt(reconciler?.[0] ?? '') })],
    });
    expect(reconciler?.[1].Environment.Variables).toMatchObject({ MAX_RESUMES: '3', SFN_QUOTA_SHARE: '0.5' });
    const every30 = synth({
      ...productionConfig,
      reconcileMinutes: 30,
      reconcileMaxResumes: 5,
      reconcileQuotaShare: 0.2,
    });
    every30.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(30 minutes)' });
    every30.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ MAX_RESUMES: '5', SFN_QUOTA_SHARE: '0.2' }) },
    });
  });

  it('may read executions, start them, answer export-slot waiters, read and write the ledger and the export slots, append audit records and read the export token, nothing else on those services', () => {
    // Assess
    const actions = [...new Set(statementsOf('Reconciler').flatMap(actionsOf))];
    expect(actions.filter((action) => action.startsWith('states:')).sort()).toEqual([
      'states:DescribeExecution',
      'states:ListExecutions',
      'states:SendTaskSuccess',
      'states:StartExecution',
    ]);
    // It lists the executions of its own state machine only.
    const machineId = ofType('AWS::StepFunctions::StateMachine')[0]?.[0] ?? '';
    const listing = statementsOf('Reconciler').filter((statement) =>
      actionsOf(statement).includes('states:ListExecutions'),
    );
    expect(listing.map((statement) => statement.Resource)).toEqual([{ Ref: machineId }]);
    expect(actions.filter((action) => action.startsWith('dynamodb:')).sort()).toEqual([
      'dynamodb:DeleteItem',
      'dynamodb:GetItem',
      'dynamodb:Query',
      'dynamodb:UpdateItem',
    ]);
    // The final record of a request it records failed: audit records only, and no HMAC key.
    expect(actions.filter((action) => action.startsWith('s3:')).sort()).toEqual([
      's3:GetObject',
      's3:ListBucket',
      's3:PutObject',
    ]);
    expect(JSON.stringify(statementsOf('Reconciler'))).not.toContain('exports/');
    // The export token alone: it drains exports that ended requests left open on the platform.
    expect(actions.filter((action) => action.startsWith('secretsmanager:'))).toEqual([
      'secretsmanager:GetSecretValue',
    ]);
  });
});

describe('alarms', () => {
  const alarms = ofType('AWS::CloudWatch::Alarm');
  const topic = idOf('AWS::SNS::Topic', 'AlarmsTopic');

  it('sends every alarm and its recovery to the alarm topic', () => {
    // Assess
    for (const [id, alarm] of alarms) {
      expect({ id, actions: alarm.AlarmActions, ok: alarm.OKActions }).toEqual({
        id,
        actions: [{ Ref: topic }],
        ok: [{ Ref: topic }],
      });
    }
  });

  it('watches the reconciler: stuck requests at once, a platform down for 15 minutes', () => {
    // Assess
    const byMetric = (name: string) => alarms.find(([, alarm]) => alarm.MetricName === name)?.[1];
    expect(byMetric('StuckRequests')).toMatchObject({ Threshold: 1, Namespace: 'svc-dsr' });
    expect(byMetric('PlatformDownSeconds')).toMatchObject({ Threshold: 900, Namespace: 'svc-dsr' });
  });

  it('watches the dead-letter and quarantine queues, failed and timed-out executions', () => {
    // Assess
    const watched = alarms.map(([, alarm]) => alarm.MetricName);
    expect(watched.filter((name) => name === 'ApproximateNumberOfMessagesVisible')).toHaveLength(3);
    expect(watched).toContain('ExecutionsFailed');
    expect(watched).toContain('ExecutionsTimedOut');
    for (const queue of ['IntakeDeadLetterQueue', 'QuarantineQueue', 'StatusEventsFailureQueue']) {
      template.hasResourceProperties('AWS::CloudWatch::Alarm', {
        MetricName: 'ApproximateNumberOfMessagesVisible',
        Dimensions: [{ Name: 'QueueName', Value: getAtt(idOf('AWS::SQS::Queue', queue), 'QueueName') }],
      });
    }
  });

  it('warns before it is too late: due-soon requests, a stalled intake queue, throttled or aborted executions, growing queues', () => {
    // Assess
    const watched = alarms.map(([, alarm]) => alarm.MetricName);
    expect(watched).toEqual(
      expect.arrayContaining(['DueSoonRequests', 'ExecutionThrottled', 'ExecutionsAborted']),
    );
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ApproximateAgeOfOldestMessage',
      Threshold: 15 * 60,
      Dimensions: [{ Name: 'QueueName', Value: getAtt(idOf('AWS::SQS::Queue', 'IntakeQueue'), 'QueueName') }],
    });
    const growth = alarms.filter(([, alarm]) =>
      (alarm.Metrics ?? []).some((metric: CfnObject) => metric.Expression === 'DIFF(visible)'),
    );
    expect(growth).toHaveLength(2);
    for (const [, alarm] of growth)
      expect(alarm).toMatchObject({ EvaluationPeriods: 3, DatapointsToAlarm: 3 });
  });

  it('alarms at once when a CCPA receipt confirmation is past its confirm-by date, from the sweep', () => {
    // Assess
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ReceiptConfirmationsOverdue',
      Namespace: 'svc-dsr',
      Statistic: 'Maximum',
      Threshold: 1,
      EvaluationPeriods: 1,
      Dimensions: [
        { Name: 'Stack', Value: 'Test' },
        { Name: 'service', Value: 'svc-dsr' },
      ],
      AlarmActions: [{ Ref: topic }],
    });
  });

  it('alarms at once on a request that arrived already overdue, and counts deadlines in the configured zone', () => {
    // Assess
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'OverdueAtIntake',
      Namespace: 'svc-dsr',
      Statistic: 'Sum',
      Threshold: 1,
      Dimensions: [
        { Name: 'Stack', Value: 'Test' },
        { Name: 'service', Value: 'svc-dsr' },
      ],
    });
    const berlin = synth({ ...productionConfig, timeZone: 'Europe/Berlin' });
    berlin.hasResourceProperties('AWS::Lambda::Function', {
      Description: Match.stringLikeRegexp('svc-dsr intake'),
      Environment: {
        Variables: Match.objectLike({ TIME_ZONE: 'Europe/Berlin', METRICS_STACK: 'Test' }),
      },
    });
    berlin.hasOutput('TimeZone', { Value: 'Europe/Berlin' });
  });

  it('takes a mass drop in at a steady pace: the intake event source has a maximum concurrency', () => {
    // Assess
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      ScalingConfig: { MaximumConcurrency: 5 },
      FunctionResponseTypes: ['ReportBatchItemFailures'],
    });
    synth({ ...productionConfig, intakeMaxConcurrency: 50 }).hasResourceProperties(
      'AWS::Lambda::EventSourceMapping',
      { ScalingConfig: { MaximumConcurrency: 50 } },
    );
  });

  it('watches errors and throttles of every function', () => {
    // Assess
    for (const metric of ['Errors', 'Throttles']) {
      const watchedFunctions = alarms
        .filter(([, alarm]) => alarm.MetricName === metric && alarm.Namespace === 'AWS/Lambda')
        .map(([, alarm]) => alarm.Dimensions[0].Value.Ref);
      expect(watchedFunctions.sort()).toEqual(
        ofType('AWS::Lambda::Function')
          .map(([id]) => id)
          .sort(),
      );
    }
  });

  it('subscribes the configured e-mail address, and nobody without one', () => {
    // Assess
    template.hasResourceProperties('AWS::SNS::Subscription', {
      Protocol: 'email',
      Endpoint: productionConfig.alarmEmail,
      TopicArn: { Ref: topic },
    });
    const { alarmEmail: _none, ...withoutEmail } = productionConfig;
    synth(withoutEmail).resourceCountIs('AWS::SNS::Subscription', 0);
  });
});

describe('status events', () => {
  it('publishes every status change of the ledger, read from its stream, on a bus the stack creates', () => {
    // Assess
    template.hasResourceProperties('AWS::DynamoDB::Table', {
      StreamSpecification: { StreamViewType: 'NEW_AND_OLD_IMAGES' },
    });
    const bus = idOf('AWS::Events::EventBus', 'StatusEventBus');
    template.hasResourceProperties('AWS::Events::EventBus', { Name: 'Test-status-events' });
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: getAtt(idOf('AWS::DynamoDB::Table', 'Ledger'), 'StreamArn'),
      StartingPosition: 'TRIM_HORIZON',
      BisectBatchOnFunctionError: true,
    });
    template.hasResourceProperties('AWS::Lambda::Function', {
      Description: Match.stringLikeRegexp('svc-dsr status events'),
      Environment: { Variables: Match.objectLike({ EVENT_BUS: getAtt(bus) }) },
    });
    const putters = ofType('AWS::IAM::Policy').filter(([, policy]) =>
      policy.PolicyDocument.Statement.some((statement: CfnObject) =>
        [statement.Action].flat().includes('events:PutEvents'),
      ),
    );
    expect(putters.map(([id]) => id)).toEqual([expect.stringMatching(/^StatusEvents/)]);
  });

  it('publishes on the bus it is given instead, and creates none', () => {
    // Act
    const given = synth({
      ...productionConfig,
      eventBusArn: 'arn:aws:events:eu-west-1:111122223333:event-bus/privacy',
    });

    // Assess
    given.resourceCountIs('AWS::Events::EventBus', 0);
    given.hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Action: 'events:PutEvents',
            Resource: 'arn:aws:events:eu-west-1:111122223333:event-bus/privacy',
          }),
        ]),
      },
    });
  });
});

describe('outputs', () => {
  it('exports everything the CLI needs', () => {
    // Assess
    const outputs = template.toJSON().Outputs as Record<string, { Value: unknown }>;
    expect(Object.keys(outputs).sort()).toEqual(
      [
        'AlarmTopicArn',
        'ArchiveBucketName',
        'AuditBucketName',
        'DataKeyArn',
        'IntakeDeadLetterQueueUrl',
        'IntakeQueueUrl',
        'LedgerTableName',
        'SsoTokenSecretArn',
        'ExportTokenSecretArn',
        'AuditKeySecretArn',
        'QuarantineQueueUrl',
        'Region',
        'StateMachineArn',
        'TimeZone',
        'AccessArchiveRetentionDays',
        'ErasureArchiveRetentionDays',
        'EventBusArn',
        'OperatorUrl',
        'ApiUrl',
        'UserPoolId',
        'UserPoolClientId',
      ].sort(),
    );
    // The one schema the CLI and local mode read them by names every output, and no other.
    expect(Object.keys(outputs).sort()).toEqual(Object.keys(stackOutputsSchema.shape).sort());
    expect(outputs.TimeZone?.Value).toBe('UTC');
    // verify reads an archive gone after these days as expired by policy, not missing.
    expect(outputs.AccessArchiveRetentionDays?.Value).toBe('90');
    expect(outputs.ErasureArchiveRetentionDays?.Value).toBe('30');
    expect(outputs.Region?.Value).toEqual({ Ref: 'AWS::Region' });
    expect(outputs.IntakeQueueUrl?.Value).toEqual({ Ref: idOf('AWS::SQS::Queue', 'IntakeQueue') });
  });
});
