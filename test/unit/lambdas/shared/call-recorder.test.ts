import { DynamoDBClient, QueryCommand } from '@aws-sdk/client-dynamodb';
import {
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { SFNClient, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, describe, expect, it } from 'vitest';
import { type RecordedCall, runAsCaller, setCallSink, setDefaultCaller } from '#shared/call-recorder';
import { prepareSdkClient } from '#shared/sdk-clients';

/** Answers every request with an error before it leaves the process: the recorder runs before that. */
const offline = {
  region: 'eu-west-1',
  credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
  requestHandler: { handle: async () => Promise.reject(new Error('offline')) },
};

let calls: RecordedCall[] = [];
afterEach(() => {
  setCallSink(undefined);
  setDefaultCaller('unscoped');
  calls = [];
});
const record = () => setCallSink((call) => calls.push(call));
const send = async (work: () => Promise<unknown>) => {
  await work().catch(() => undefined);
};

describe('the call recorder', () => {
  it('records nothing while no sink is installed', async () => {
    const s3 = prepareSdkClient(new S3Client(offline));
    await send(() => s3.send(new GetObjectCommand({ Bucket: 'b', Key: 'k' })));
    expect(calls).toEqual([]);
  });

  it('records the action, the object and the conditional-write header of an S3 PUT, by the caller in scope', async () => {
    record();
    const s3 = prepareSdkClient(new S3Client(offline));
    await runAsCaller('RecordOutcome', () =>
      send(() =>
        s3.send(
          new PutObjectCommand({ Bucket: 'audit', Key: 'audit/r/1.json', Body: '{}', IfNoneMatch: '*' }),
        ),
      ),
    );
    expect(calls).toEqual([
      {
        caller: 'RecordOutcome',
        operation: 'PutObject',
        action: 's3:PutObject',
        resource: { kind: 's3-object', bucket: 'audit', key: 'audit/r/1.json' },
        context: { 's3:if-none-match': '*' },
      },
    ]);
  });

  it('authorises HEAD as GetObject, a tagged multipart start as PutObject and PutObjectTagging, a listing on the bucket', async () => {
    record();
    setDefaultCaller('CLI');
    const s3 = prepareSdkClient(new S3Client(offline));
    await send(() => s3.send(new HeadObjectCommand({ Bucket: 'a', Key: 'x' })));
    await send(() => s3.send(new CreateMultipartUploadCommand({ Bucket: 'a', Key: 'x', Tagging: 't=v' })));
    await send(() => s3.send(new ListObjectsV2Command({ Bucket: 'a', Prefix: 'audit/r/' })));
    expect(
      calls.map(({ caller, action, resource, context }) => ({ caller, action, resource, context })),
    ).toEqual([
      {
        caller: 'CLI',
        action: 's3:GetObject',
        resource: { kind: 's3-object', bucket: 'a', key: 'x' },
        context: {},
      },
      {
        caller: 'CLI',
        action: 's3:PutObject',
        resource: { kind: 's3-object', bucket: 'a', key: 'x' },
        context: {},
      },
      {
        caller: 'CLI',
        action: 's3:PutObjectTagging',
        resource: { kind: 's3-object', bucket: 'a', key: 'x' },
        context: {},
      },
      {
        caller: 'CLI',
        action: 's3:ListBucket',
        resource: { kind: 's3-bucket', bucket: 'a' },
        context: { 's3:prefix': 'audit/r/' },
      },
    ]);
  });

  it("numbers each call's authorisations from 0, so a sink can count the calls themselves", async () => {
    const numbered: [string, number][] = [];
    setCallSink(({ action }, nth) => numbered.push([action, nth]));
    const s3 = prepareSdkClient(new S3Client(offline));
    await send(() => s3.send(new HeadObjectCommand({ Bucket: 'a', Key: 'x' })));
    await send(() => s3.send(new CreateMultipartUploadCommand({ Bucket: 'a', Key: 'x', Tagging: 't=v' })));
    expect(numbered).toEqual([
      ['s3:GetObject', 0],
      ['s3:PutObject', 0],
      ['s3:PutObjectTagging', 1],
    ]);
  });

  it('names the queue of a batch send, the index of a query and the execution a stop names', async () => {
    record();
    const sqs = prepareSdkClient(new SQSClient({ ...offline, endpoint: 'http://127.0.0.1:9' }));
    const dynamo = prepareSdkClient(new DynamoDBClient(offline));
    const sfn = prepareSdkClient(new SFNClient(offline));
    await send(() =>
      sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: 'https://sqs.eu-west-1.amazonaws.com/1/intake',
          Entries: [{ Id: '1', MessageBody: 'x' }],
        }),
      ),
    );
    await send(() => dynamo.send(new QueryCommand({ TableName: 'ledger', IndexName: 'open-by-due' })));
    await send(() =>
      sfn.send(new StopExecutionCommand({ executionArn: 'arn:aws:states:r:1:execution:m:e' })),
    );
    expect(calls.map(({ action, resource }) => ({ action, resource }))).toEqual([
      { action: 'sqs:SendMessage', resource: { kind: 'sqs-queue', queue: 'intake' } },
      {
        action: 'dynamodb:Query',
        resource: { kind: 'dynamodb-table', table: 'ledger', index: 'open-by-due' },
      },
      {
        action: 'states:StopExecution',
        resource: { kind: 'states-execution', arn: 'arn:aws:states:r:1:execution:m:e' },
      },
    ]);
  });

  it('records a DocumentClient command as the DynamoDB action it sends', async () => {
    record();
    const documents = DynamoDBDocumentClient.from(prepareSdkClient(new DynamoDBClient(offline)));
    await send(() =>
      documents.send(
        new UpdateCommand({
          TableName: 'ledger',
          Key: { request_id: 'r' },
          UpdateExpression: 'SET a = :a',
          ExpressionAttributeValues: { ':a': 1 },
        }),
      ),
    );
    expect(calls.map(({ action }) => action)).toEqual(['dynamodb:UpdateItem']);
  });
});
