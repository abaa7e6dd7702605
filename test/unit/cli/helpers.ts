import { Readable } from 'node:stream';
import {
  type AttributeValue,
  ConditionalCheckFailedException,
  DynamoDBClient,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import {
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { SQSClient } from '@aws-sdk/client-sqs';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { type AwsClientStub, mockClient } from 'aws-sdk-client-mock';
import { beforeEach } from 'vitest';
import type { LedgerItem } from '#shared/ledger';
import { type CliContext, contextFromClients } from '../../../bin/cli/target.ts';
import type { StackNames } from '../../../lib/stack-outputs.ts';

export const NOW = new Date('2026-11-21T12:00:00.000Z');

export const NAMES: StackNames = {
  IntakeQueueUrl: 'https://sqs.eu-west-1.amazonaws.com/111122223333/intake',
  QuarantineQueueUrl: 'https://sqs.eu-west-1.amazonaws.com/111122223333/quarantine',
  LedgerTableName: 'ledger',
  ArchiveBucketName: 'archives',
  AuditBucketName: 'audit',
  StateMachineArn: 'arn:aws:states:eu-west-1:111122223333:stateMachine:dsr',
};

export const REQUEST_ID = '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f';
/** Subject identifiers a test greps the output for: they must never appear unless asked for. */
export const PRIMARY_KEY = 'site-user-pk-93817';
export const SVC_USER_ID = 'svc-uid-secret-5521';

const config = { region: 'eu-west-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } };

/** A context over fresh clients; tests mock them with aws-sdk-client-mock (or point them at dynalite). */
export function testContext(
  overrides: { dynamoClient?: DynamoDBClient; s3?: S3Client; names?: Partial<StackNames> } = {},
  clock: () => Date = () => NOW,
): CliContext {
  return contextFromClients(
    {
      target: 'aws',
      names: { ...NAMES, ...overrides.names },
      sqs: new SQSClient(config),
      s3: overrides.s3 ?? new S3Client(config),
      dynamoClient: overrides.dynamoClient ?? new DynamoDBClient(config),
      sfn: new SFNClient(config),
      operator: async () => OPERATOR,
    },
    clock,
  );
}

/** Who runs the commands in unit tests, as their audit records name them. */
export const OPERATOR = 'local-user:tester';

/** A stored ledger item (as DynamoDB returns it) for a running access request. */
export function ledgerRecord(overrides: Partial<LedgerItem> = {}): LedgerItem {
  return {
    request_id: REQUEST_ID,
    fingerprint: 'fp',
    status: 'running',
    step: 'exporting',
    type: 'access',
    regulation: 'gdpr',
    primary_key: PRIMARY_KEY,
    svc_user_id: SVC_USER_ID,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    reference: 'DSR-1042',
    due_at: '2026-12-20T09:00:00.000Z',
    extension_limit_at: '2027-02-20T09:00:00.000Z',
    confirm_by: null,
    extended: false,
    export_attempts: 1,
    export_attempts_base: 0,
    export_polls: 0,
    export_waited_seconds: 0,
    duplicates: 0,
    conflicts: 0,
    executions: 1,
    created_at: '2026-11-20T09:10:00.000Z',
    updated_at: '2026-11-20T09:10:00.000Z',
    ...overrides,
  };
}

/** An S3 GetObject body as the SDK hands it out in Node: a Readable with the SDK's helpers. */
export function s3Body(bytes: Buffer) {
  return Object.assign(Readable.from([bytes]), {
    transformToByteArray: async () => new Uint8Array(bytes),
    transformToString: async (encoding?: string) => bytes.toString(encoding === 'base64' ? 'base64' : 'utf8'),
    transformToWebStream: () => new Blob([new Uint8Array(bytes)]).stream(),
  });
}

/** A ledger item as DynamoDB stores it, for mocking the ledger's reads (GetItem, Query). */
export function storedItem(item: Partial<LedgerItem>): Record<string, AttributeValue> {
  return marshall(item, { removeUndefinedValues: true });
}

/** The ledger's answer to a conditional UpdateItem (ReturnValues ALL_NEW): the item as written. */
export function written(item: Partial<LedgerItem>): { Attributes: Record<string, AttributeValue> } {
  return { Attributes: storedItem(item) };
}

/** The UpdateItem calls a mocked DynamoDB client received: expressions, and values as plain data. */
export function ledgerWrites(
  mock: AwsClientStub<DynamoDBClient>,
): { update: string; condition: string; values: Record<string, unknown> }[] {
  return (
    mock
      .commandCalls(UpdateItemCommand)
      .map((call) => ({
        update: call.args[0].input.UpdateExpression ?? '',
        condition: call.args[0].input.ConditionExpression ?? '',
        values: unmarshall(call.args[0].input.ExpressionAttributeValues ?? {}),
      }))
      // The audit trail's own write of the chain head follows every record: not the command's change.
      .filter((write) => !write.update.includes('#head = :head'))
  );
}

/**
 * Mocks of the clients an operator command (cancel, retry, extend) writes through, reset before each
 * test: the ledger's DynamoDB client (its rules are tested in ledger/rules.test.ts), S3 holding an
 * empty audit chain (an operator action is appended to it and takes seq 0), and Step Functions.
 */
export function mockOperatorClients(): {
  ledgerMock: AwsClientStub<DynamoDBClient>;
  s3Mock: AwsClientStub<S3Client>;
  sfnMock: AwsClientStub<SFNClient>;
} {
  const ledgerMock = mockClient(DynamoDBClient);
  const s3Mock = mockClient(S3Client);
  const sfnMock = mockClient(SFNClient);
  beforeEach(() => {
    s3Mock.reset();
    s3Mock.on(ListObjectsV2Command).resolves({});
    s3Mock.on(PutObjectCommand).resolves({});
    s3Mock.on(ListObjectVersionsCommand).resolves({});
    ledgerMock.reset();
    sfnMock.reset();
  });
  return { ledgerMock, s3Mock, sfnMock };
}

/** What DynamoDB throws when a conditional write's condition does not hold. */
export function conditionalFailure(): ConditionalCheckFailedException {
  return new ConditionalCheckFailedException({ message: 'The conditional request failed', $metadata: {} });
}
