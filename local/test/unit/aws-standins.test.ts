import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ConditionalCheckFailedException,
  DescribeTableCommand,
  DynamoDBClient,
} from '@aws-sdk/client-dynamodb';
import {
  CreateBucketCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import {
  CreateQueueCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient, GetCommand, PutCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { Upload } from '@aws-sdk/lib-storage';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsStandIns, startAwsStandIns } from '#local/aws/aws-standins';
import { createTable, legacyLedgerTable } from '../helpers/dynamo.ts';

let standIns: AwsStandIns;
let sqs: SQSClient;
let s3: S3Client;
let dynamo: DynamoDBClient;
let documents: DynamoDBDocumentClient;

beforeAll(async () => {
  standIns = await startAwsStandIns();
  sqs = new SQSClient(standIns.clientConfig('sqs'));
  s3 = new S3Client(standIns.clientConfig('s3'));
  dynamo = new DynamoDBClient(standIns.clientConfig('dynamodb'));
  documents = DynamoDBDocumentClient.from(dynamo);
});

afterAll(async () => {
  sqs.destroy();
  s3.destroy();
  dynamo.destroy();
  await standIns.close();
});

function sha256(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

describe('startAwsStandIns', () => {
  it('listens on loopback only, on free ports, and hands out dummy credentials', () => {
    // Prepare / Act
    const { endpoints } = standIns;

    // Assess
    for (const endpoint of Object.values(endpoints)) expect(endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(new Set(Object.values(endpoints)).size).toBe(3);
    expect(standIns.region).toBe('us-east-1');
    expect(standIns.credentials.accessKeyId.length).toBeGreaterThan(0);
  });

  it('binds the loopback address itself, not every interface', async () => {
    // Prepare: 127.0.0.2 is loopback too, so a server bound to 0.0.0.0 would accept it
    const ports = [standIns.endpoints.sqs, standIns.endpoints.dynamodb].map((endpoint) =>
      Number(new URL(endpoint).port),
    );
    const attempt = (port: number) =>
      new Promise<string>((resolve) => {
        const socket = connect({ host: '127.0.0.2', port });
        socket.once('connect', () => {
          socket.destroy();
          resolve('connected');
        });
        socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
      });

    // Act
    const outcomes = await Promise.all(ports.map(attempt));

    // Assess
    expect(outcomes).toEqual(['ECONNREFUSED', 'ECONNREFUSED']);
  });

  it('gives each service a client config with its endpoint, and path-style addressing for S3 only', () => {
    // Prepare / Act
    const sqsConfig = standIns.clientConfig('sqs');
    const s3Config = standIns.clientConfig('s3');
    const dynamoConfig = standIns.clientConfig('dynamodb');

    // Assess
    expect(sqsConfig).toEqual({
      region: 'us-east-1',
      endpoint: standIns.endpoints.sqs,
      credentials: standIns.credentials,
    });
    expect(s3Config).toMatchObject({ endpoint: standIns.endpoints.s3, forcePathStyle: true });
    expect(dynamoConfig.endpoint).toBe(standIns.endpoints.dynamodb);
    expect(dynamoConfig).not.toHaveProperty('forcePathStyle');
  });
});

describe('SQS stand-in', () => {
  it('uses the queue URLs it returns even though their host does not resolve', async () => {
    // Prepare
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'url-host' }));

    // Act
    const sent = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'first' }));

    // Assess
    expect(new URL(QueueUrl ?? '').hostname).toBe('sqs.us-east-1.localhost');
    expect(sent.MessageId).toBeTruthy();
  });

  it('accepts what SQS accepts: an emoji and other characters above U+FFFF, alone or in a batch', async () => {
    // Prepare
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'astral' }));
    const body = '{"primary_key":"u-😀-𝒳-\u{10FFFD}"}';

    // Act
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: body }));
    const batch = await sqs.send(
      new SendMessageBatchCommand({ QueueUrl, Entries: [{ Id: 'one', MessageBody: `${body} again` }] }),
    );
    const received = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10 }));

    // Assess: the SDK also checks each MD5 against the body it sent and received.
    expect(batch.Failed ?? []).toEqual([]);
    expect((received.Messages ?? []).map((message) => message.Body).sort()).toEqual([body, `${body} again`]);
  });

  it('refuses what SQS refuses: a NUL, a lone surrogate, U+FFFE', async () => {
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'invalid-chars' }));
    const answer = await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl,
        Entries: ['nul \u0000', 'lone \ud83d', 'nonchar \ufffe'].map((MessageBody, index) => ({
          Id: `e${index}`,
          MessageBody,
        })),
      }),
    );
    expect((answer.Failed ?? []).map((failure) => failure.Code)).toEqual([
      'InvalidMessageContents',
      'InvalidMessageContents',
      'InvalidMessageContents',
    ]);
  });

  it('wakes a long poll when a message arrives, and deleting it removes it for good', async () => {
    // Prepare
    const { QueueUrl } = await sqs.send(
      new CreateQueueCommand({ QueueName: 'long-poll', Attributes: { VisibilityTimeout: '0' } }),
    );
    const started = Date.now();
    const polling = sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 5 }));
    await new Promise((resolve) => setTimeout(resolve, 150));

    // Act
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: '{"request_id":"r-1"}' }));
    const received = await polling;
    const elapsed = Date.now() - started;
    const message = received.Messages?.[0];
    await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: message?.ReceiptHandle }));
    const again = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 0 }));

    // Assess
    expect(message?.Body).toBe('{"request_id":"r-1"}');
    expect(elapsed).toBeGreaterThanOrEqual(100);
    expect(elapsed).toBeLessThan(4_000);
    expect(again.Messages ?? []).toHaveLength(0);
  });

  it('moves a message to the dead-letter queue once it was received more than maxReceiveCount times', async () => {
    // Prepare
    const { QueueUrl: dlqUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'redrive-dlq' }));
    const dlqArn = (
      await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlqUrl, AttributeNames: ['QueueArn'] }))
    ).Attributes?.QueueArn;
    const { QueueUrl } = await sqs.send(
      new CreateQueueCommand({
        QueueName: 'redrive-source',
        Attributes: {
          VisibilityTimeout: '0',
          RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 2 }),
        },
      }),
    );
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'poison' }));

    // Act
    const receipts: number[] = [];
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const received = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 0 }));
      receipts.push(received.Messages?.length ?? 0);
    }
    const dead = await sqs.send(new ReceiveMessageCommand({ QueueUrl: dlqUrl, WaitTimeSeconds: 1 }));

    // Assess
    expect(receipts).toEqual([1, 1, 0]);
    expect(dead.Messages?.map((message) => message.Body)).toEqual(['poison']);
  });
});

describe('S3 stand-in', () => {
  const bucket = 'archive-test';

  beforeAll(async () => {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  });

  it('stores an object, serves a byte range of it, and describes it on HEAD', async () => {
    // Prepare
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: 'requests/r-1/record.json',
        Body: '0123456789',
        ContentType: 'application/json',
        Metadata: { sha256: 'abc' },
      }),
    );

    // Act
    const range = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: 'requests/r-1/record.json', Range: 'bytes=2-5' }),
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'requests/r-1/record.json' }));

    // Assess
    expect(await range.Body?.transformToString()).toBe('2345');
    expect(range.ContentRange).toBe('bytes 2-5/10');
    expect(head.ContentLength).toBe(10);
    expect(head.ContentType).toBe('application/json');
    expect(head.Metadata).toEqual({ sha256: 'abc' });
  });

  it('answers NotFound for a missing key', async () => {
    // Act
    const missing = s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'requests/none' }));

    // Assess
    await expect(missing).rejects.toMatchObject({ name: 'NotFound' });
  });

  it('assembles a multipart Upload from lib-storage byte for byte, with a multipart ETag', async () => {
    // Prepare
    const body = randomBytes(11 * 1024 * 1024);
    const upload = new Upload({
      client: s3,
      params: { Bucket: bucket, Key: 'requests/r-2/export.zip', Body: body },
      partSize: 5 * 1024 * 1024,
      queueSize: 2,
    });

    // Act
    const done = await upload.done();
    const stored = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'requests/r-2/export.zip' }));
    const bytes = await stored.Body?.transformToByteArray();

    // Assess
    expect(done.ETag).toMatch(/-3"$/);
    expect(bytes?.length).toBe(body.length);
    expect(sha256(bytes ?? new Uint8Array())).toBe(sha256(body));
  });

  it('lists objects under a prefix', async () => {
    // Prepare
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'audit/r-9/001.json', Body: '{}' }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'audit/r-9/002.json', Body: '{}' }));

    // Act
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'audit/r-9/' }));

    // Assess
    expect(listed.Contents?.map((object) => object.Key)).toEqual([
      'audit/r-9/001.json',
      'audit/r-9/002.json',
    ]);
  });

  it('keeps each write as a version of its own once the bucket says Enabled', async () => {
    // Prepare
    await s3.send(
      new PutBucketVersioningCommand({ Bucket: bucket, VersioningConfiguration: { Status: 'Enabled' } }),
    );

    // Act
    const versioning = await s3.send(new GetBucketVersioningCommand({ Bucket: bucket }));
    const first = await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'versioned', Body: 'v1' }));
    const second = await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'versioned', Body: 'v2' }));
    const older = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: 'versioned', VersionId: first.VersionId }),
    );

    // Assess
    expect(versioning.Status).toBe('Enabled');
    expect(first.VersionId).toEqual(expect.any(String));
    expect(second.VersionId).not.toBe(first.VersionId);
    expect(await older.Body?.transformToString()).toBe('v1');
  });
});

describe('DynamoDB stand-in', () => {
  const table = 'ledger-test';

  beforeAll(async () => {
    await createTable(dynamo, legacyLedgerTable(table, 'by-status-due'));
  });

  it('describes the table and its GSI as ACTIVE with the requested key schema', async () => {
    // Act
    const described = await dynamo.send(new DescribeTableCommand({ TableName: table }));

    // Assess
    expect(described.Table?.TableStatus).toBe('ACTIVE');
    expect(described.Table?.GlobalSecondaryIndexes?.[0]).toMatchObject({
      IndexName: 'by-status-due',
      IndexStatus: 'ACTIVE',
      KeySchema: [
        { AttributeName: 'status', KeyType: 'HASH' },
        { AttributeName: 'due_at', KeyType: 'RANGE' },
      ],
    });
  });

  it('refuses a second conditional put for the same key with ConditionalCheckFailedException', async () => {
    // Prepare
    const item = { request_id: 'r-cond', status: 'received', due_at: '2026-12-01T00:00:00Z' };
    const putIfAbsent = (status: string) =>
      documents.send(
        new PutCommand({
          TableName: table,
          Item: { ...item, status },
          ConditionExpression: 'attribute_not_exists(request_id)',
        }),
      );
    await putIfAbsent('received');

    // Act
    const second = putIfAbsent('running');

    // Assess
    await expect(second).rejects.toBeInstanceOf(ConditionalCheckFailedException);
    const stored = await documents.send(new GetCommand({ TableName: table, Key: { request_id: 'r-cond' } }));
    expect(stored.Item?.status).toBe('received');
  });

  it('queries the GSI by status in due-date order', async () => {
    // Prepare
    const items = [
      { request_id: 'r-a', status: 'running', due_at: '2026-12-20T00:00:00Z' },
      { request_id: 'r-b', status: 'running', due_at: '2026-12-05T00:00:00Z' },
      { request_id: 'r-c', status: 'completed', due_at: '2026-12-01T00:00:00Z' },
    ];
    for (const item of items) await documents.send(new PutCommand({ TableName: table, Item: item }));

    // Act
    const running = await documents.send(
      new QueryCommand({
        TableName: table,
        IndexName: 'by-status-due',
        KeyConditionExpression: '#status = :status AND due_at < :before',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':status': 'running', ':before': '2027-01-01T00:00:00Z' },
      }),
    );

    // Assess
    expect(running.Items?.map((item) => item.request_id)).toEqual(['r-b', 'r-a']);
  });
});

describe('startAwsStandIns with an s3Root', () => {
  let directory: string;
  let onDisk: AwsStandIns;
  let client: S3Client;

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-root-'));
    onDisk = await startAwsStandIns({ s3Root: directory });
    client = new S3Client(onDisk.clientConfig('s3'));
  });

  afterAll(async () => {
    client.destroy();
    await onDisk.close();
    await rm(directory, { recursive: true, force: true });
  });

  it('serves S3 from its own loopback endpoint, apart from SQS', async () => {
    // Prepare
    const queues = new SQSClient(onDisk.clientConfig('sqs'));

    // Act
    const { QueueUrl } = await queues.send(new CreateQueueCommand({ QueueName: 'beside-s3' }));
    queues.destroy();

    // Assess
    expect(onDisk.endpoints.s3).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(onDisk.endpoints.s3).not.toBe(onDisk.endpoints.sqs);
    expect(onDisk.clientConfig('s3')).toMatchObject({ endpoint: onDisk.endpoints.s3, forcePathStyle: true });
    expect(QueueUrl).toContain('beside-s3');
  });

  it('writes each object as a plain file under <s3Root>/<bucket>/<key>', async () => {
    // Prepare
    await client.send(new CreateBucketCommand({ Bucket: 'svc-dsr-archive' }));

    // Act
    await client.send(
      new PutObjectCommand({
        Bucket: 'svc-dsr-archive',
        Key: 'exports/r-1/attempt-1.zip',
        Body: 'zip bytes',
      }),
    );

    // Assess
    expect(
      await readFile(join(directory, 'svc-dsr-archive', 'exports', 'r-1', 'attempt-1.zip'), 'utf8'),
    ).toBe('zip bytes');
  });

  it('keeps S3 objects across a restart on the same s3Root', async () => {
    // Prepare
    await client.send(new CreateBucketCommand({ Bucket: 'svc-dsr-audit' }));
    await client.send(
      new PutObjectCommand({
        Bucket: 'svc-dsr-audit',
        Key: 'audit/r-1/000000-Intake.json',
        Body: '{}',
        ContentType: 'application/json',
      }),
    );
    const second = await startAwsStandIns({ s3Root: directory });
    const reader = new S3Client(second.clientConfig('s3'));

    // Act
    const read = await reader.send(
      new GetObjectCommand({ Bucket: 'svc-dsr-audit', Key: 'audit/r-1/000000-Intake.json' }),
    );
    const body = await read.Body?.transformToString();
    reader.destroy();
    await second.close();

    // Assess
    expect(body).toBe('{}');
    expect(read.ContentType).toBe('application/json');
  });
});

describe('AwsStandIns.close', () => {
  function tcpHandles(): number {
    return process.getActiveResourcesInfo().filter((name) => name.startsWith('TCP')).length;
  }

  it('stops both servers and leaves no TCP handle behind, even with keep-alive clients still open', async () => {
    // Prepare
    const before = tcpHandles();
    const local = await startAwsStandIns();
    // No retries: a retried long poll would open a fresh socket while the handles are counted.
    const queueClient = new SQSClient({ ...local.clientConfig('sqs'), maxAttempts: 1 });
    const tableClient = new DynamoDBClient({ ...local.clientConfig('dynamodb'), maxAttempts: 1 });
    const { QueueUrl } = await queueClient.send(new CreateQueueCommand({ QueueName: 'closing' }));
    const pendingPoll = queueClient.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 20 }));
    pendingPoll.catch(() => undefined);
    await tableClient.send(new DescribeTableCommand({ TableName: 'none' })).catch(() => undefined);
    expect(tcpHandles()).toBeGreaterThan(before);

    // Act
    await local.close();
    await local.close();
    await new Promise((resolve) => setTimeout(resolve, 50));

    // Assess
    expect(tcpHandles()).toBe(before);
    await expect(tableClient.send(new DescribeTableCommand({ TableName: 'none' }))).rejects.toMatchObject({
      code: 'ECONNREFUSED',
    });
    queueClient.destroy();
    tableClient.destroy();
  });

  it('stops the disk S3 too when started with an s3Root', async () => {
    // Prepare
    const before = tcpHandles();
    const directory = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-close-'));
    const local = await startAwsStandIns({ s3Root: directory });
    const client = new S3Client(local.clientConfig('s3'));
    await client.send(new CreateBucketCommand({ Bucket: 'closing' }));

    // Act
    await local.close();
    await new Promise((resolve) => setTimeout(resolve, 50));

    // Assess: at most as many as before (an unrelated kept-alive socket may have timed out meanwhile)
    expect(tcpHandles()).toBeLessThanOrEqual(before);
    await expect(client.send(new CreateBucketCommand({ Bucket: 'again' }))).rejects.toMatchObject({
      code: 'ECONNREFUSED',
    });
    client.destroy();
    await rm(directory, { recursive: true, force: true });
  });

  it('keeps DynamoDB items across a restart when given a dynamoPath', async () => {
    // Prepare
    const directory = await mkdtemp(join(tmpdir(), 'svc-dsr-dynalite-'));
    const write = async () => {
      const first = await startAwsStandIns({ dynamoPath: directory });
      const client = new DynamoDBClient(first.clientConfig('dynamodb'));
      await createTable(client, {
        TableName: 'persisted',
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'request_id', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'request_id', KeyType: 'HASH' }],
      });
      await DynamoDBDocumentClient.from(client).send(
        new PutCommand({ TableName: 'persisted', Item: { request_id: 'r-keep', step: 'erasing' } }),
      );
      client.destroy();
      await first.close();
    };
    await write();

    // Act
    const second = await startAwsStandIns({ dynamoPath: directory });
    const client = DynamoDBDocumentClient.from(new DynamoDBClient(second.clientConfig('dynamodb')));
    const read = await client.send(new GetCommand({ TableName: 'persisted', Key: { request_id: 'r-keep' } }));
    client.destroy();
    await second.close();
    await rm(directory, { recursive: true, force: true });

    // Assess
    expect(read.Item).toEqual({ request_id: 'r-keep', step: 'erasing' });
  });
});
