import { fileURLToPath } from 'node:url';
import { CfnOutput, Duration, RemovalPolicy, Stack, type StackProps } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as kms from 'aws-cdk-lib/aws-kms';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { STATUS_DUE_INDEX } from '../lambdas/shared/ledger.ts';
import { STEP_DIRECTORIES, type StepName } from '../lambdas/steps.ts';
import { parseStackConfig, type StackConfig } from './config.ts';
import { DsrFunction } from './dsr-function.ts';
import { DsrWorkflow } from './dsr-workflow.ts';

const lambdasDir = fileURLToPath(new URL('../lambdas/', import.meta.url));

export interface DsrStackProps extends StackProps {
  /** Configuration; when omitted it is read from the `svc-dsr` context key. */
  readonly config?: unknown;
}

/** The svc-dsr stack: intake for data-subject requests and the workflow that answers them. */
export class DsrStack extends Stack {
  readonly config: StackConfig;
  readonly key: kms.Key;
  readonly intakeQueue: sqs.Queue;
  readonly intakeDeadLetterQueue: sqs.Queue;
  readonly quarantineQueue: sqs.Queue;
  readonly ledger: dynamodb.Table;
  readonly archiveBucket: s3.Bucket;
  readonly auditBucket: s3.Bucket;
  readonly secret: secretsmanager.ISecret;
  readonly workflow: DsrWorkflow;

  constructor(scope: Construct, id: string, props: DsrStackProps = {}) {
    super(scope, id, props);
    this.config = parseStackConfig(props.config ?? this.node.tryGetContext('svc-dsr'));
    const config = this.config;

    this.key = new kms.Key(this, 'DataKey', {
      description: 'svc-dsr: encrypts requests, ledger, archives and audit records',
      enableKeyRotation: true,
    });

    const queueDefaults = {
      encryption: sqs.QueueEncryption.KMS,
      encryptionMasterKey: this.key,
      enforceSSL: true,
    } as const;
    this.intakeDeadLetterQueue = new sqs.Queue(this, 'IntakeDeadLetterQueue', {
      ...queueDefaults,
      retentionPeriod: Duration.days(14),
    });
    this.quarantineQueue = new sqs.Queue(this, 'QuarantineQueue', {
      ...queueDefaults,
      retentionPeriod: Duration.days(14),
    });
    this.intakeQueue = new sqs.Queue(this, 'IntakeQueue', {
      ...queueDefaults,
      visibilityTimeout: Duration.minutes(6),
      deadLetterQueue: { queue: this.intakeDeadLetterQueue, maxReceiveCount: 5 },
    });

    this.ledger = new dynamodb.Table(this, 'Ledger', {
      partitionKey: { name: 'request_id', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: dynamodb.TableEncryption.CUSTOMER_MANAGED,
      encryptionKey: this.key,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      deletionProtection: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.ledger.addGlobalSecondaryIndex({
      indexName: STATUS_DUE_INDEX,
      partitionKey: { name: 'status', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'due_at', type: dynamodb.AttributeType.STRING },
    });

    const bucketDefaults = {
      encryption: s3.BucketEncryption.KMS,
      encryptionKey: this.key,
      bucketKeyEnabled: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      versioned: true,
      removalPolicy: RemovalPolicy.RETAIN,
    } as const;
    this.archiveBucket = new s3.Bucket(this, 'ArchiveBucket', {
      ...bucketDefaults,
      lifecycleRules: [
        {
          noncurrentVersionExpiration: Duration.days(1),
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
      ],
    });
    this.auditBucket = new s3.Bucket(this, 'AuditBucket', {
      ...bucketDefaults,
      objectLockEnabled: true,
      objectLockDefaultRetention: s3.ObjectLockRetention.compliance(
        Duration.days(Math.ceil(config.auditRetentionMonths * 30.5)),
      ),
    });

    this.secret = config.platformSecretName
      ? secretsmanager.Secret.fromSecretNameV2(this, 'PlatformSecret', config.platformSecretName)
      : new secretsmanager.Secret(this, 'PlatformSecret', {
          description: 'svc-dsr: JSON with sso_access_token, export_token and audit_hmac_key',
          encryptionKey: this.key,
        });

    const stepEnvironment: Record<string, string> = {
      TABLE_NAME: this.ledger.tableName,
      ARCHIVE_BUCKET: this.archiveBucket.bucketName,
      AUDIT_BUCKET: this.auditBucket.bucketName,
      KMS_KEY_ID: this.key.keyArn,
      PLATFORM_SECRET_ID: this.secret.secretArn,
      PLATFORM_BASE_URL: config.platformBaseUrl,
      PLATFORM_EXPORT_URL: config.platformExportUrl,
      PLATFORM_ACTIVITY_URL: config.platformActivityUrl,
      SPOT_ID: config.spotId,
      DOWNLOAD_ALLOWED_HOSTS: config.downloadAllowedHosts.join(','),
      POLL_INITIAL_SECONDS: String(config.pollInitialSeconds),
      POLL_MAX_SECONDS: String(config.pollMaxSeconds),
      POLL_BUDGET_SECONDS: String(config.pollBudgetSeconds),
      EXPORT_MAX_ATTEMPTS: String(config.exportMaxAttempts),
    };
    const stepFunctions = Object.fromEntries(
      Object.entries(STEP_DIRECTORIES).map(([step, dir]) => {
        const fn = new DsrFunction(this, step, {
          entry: `${lambdasDir}${dir}/handler.ts`,
          environment: { ...stepEnvironment, DSR_STEP: step },
          timeout: step === 'ArchiveExport' ? Duration.minutes(15) : Duration.minutes(1),
          memorySize: step === 'ArchiveExport' ? 1024 : 512,
        });
        this.ledger.grantReadWriteData(fn.function);
        this.auditBucket.grantReadWrite(fn.function);
        this.secret.grantRead(fn.function);
        if (step === 'ArchiveExport') this.archiveBucket.grantReadWrite(fn.function);
        return [step, fn.function];
      }),
    ) as Record<StepName, DsrFunction['function']>;

    this.workflow = new DsrWorkflow(this, 'Workflow', {
      functions: stepFunctions,
      executionTimeout: Duration.seconds(config.pollBudgetSeconds).plus(Duration.days(1)),
    });

    const intake = new DsrFunction(this, 'Intake', {
      entry: `${lambdasDir}intake/handler.ts`,
      timeout: Duration.minutes(1),
      environment: {
        TABLE_NAME: this.ledger.tableName,
        AUDIT_BUCKET: this.auditBucket.bucketName,
        KMS_KEY_ID: this.key.keyArn,
        PLATFORM_SECRET_ID: this.secret.secretArn,
        STATE_MACHINE_ARN: this.workflow.stateMachine.stateMachineArn,
        QUARANTINE_QUEUE_URL: this.quarantineQueue.queueUrl,
      },
    });
    this.ledger.grantReadWriteData(intake.function);
    this.auditBucket.grantReadWrite(intake.function);
    this.secret.grantRead(intake.function);
    this.quarantineQueue.grantSendMessages(intake.function);
    this.workflow.stateMachine.grantStartExecution(intake.function);
    intake.function.addEventSource(
      new SqsEventSource(this.intakeQueue, { batchSize: 10, reportBatchItemFailures: true }),
    );

    new CfnOutput(this, 'IntakeQueueUrl', { value: this.intakeQueue.queueUrl });
    new CfnOutput(this, 'QuarantineQueueUrl', { value: this.quarantineQueue.queueUrl });
    new CfnOutput(this, 'LedgerTableName', { value: this.ledger.tableName });
    new CfnOutput(this, 'ArchiveBucketName', { value: this.archiveBucket.bucketName });
    new CfnOutput(this, 'AuditBucketName', { value: this.auditBucket.bucketName });
    new CfnOutput(this, 'StateMachineArn', { value: this.workflow.stateMachine.stateMachineArn });
  }
}
