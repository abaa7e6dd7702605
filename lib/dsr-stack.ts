import { Duration, Stack, type StackProps } from 'aws-cdk-lib';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';

/** The svc-dsr stack: intake for data-subject requests and the workflow that answers them. */
export class DsrStack extends Stack {
  readonly key: kms.Key;
  readonly intakeQueue: sqs.Queue;
  readonly intakeDeadLetterQueue: sqs.Queue;
  readonly quarantineQueue: sqs.Queue;

  constructor(scope: Construct, id: string, props?: StackProps) {
    super(scope, id, props);

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
      visibilityTimeout: Duration.minutes(2),
      deadLetterQueue: { queue: this.intakeDeadLetterQueue, maxReceiveCount: 5 },
    });
  }
}
