import {
  DeleteItemCommand,
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import type { DynamoDBRecord } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_REQUEST_BYTES, startLedgerStream } from '#local/aws/ledger-stream';
import { createTable, startDynamo } from '../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let stream: Awaited<ReturnType<typeof startLedgerStream>>;
let client: DynamoDBClient;
const records: DynamoDBRecord[] = [];
const TABLE = 'ledger';

beforeAll(async () => {
  dynamo = await startDynamo();
  await createTable(dynamo.client, {
    TableName: TABLE,
    KeySchema: [{ AttributeName: 'request_id', KeyType: 'HASH' }],
    AttributeDefinitions: [{ AttributeName: 'request_id', AttributeType: 'S' }],
    BillingMode: 'PAY_PER_REQUEST',
  });
  stream = await startLedgerStream({
    target: String(dynamo.config.endpoint),
    table: TABLE,
    consume: async (batch) => {
      records.push(...batch);
    },
  });
  client = new DynamoDBClient({ ...dynamo.config, endpoint: stream.endpoint });
});
afterAll(async () => {
  client.destroy();
  await stream.close();
  await dynamo.close();
});

const key = (id: string) => ({ request_id: { S: id } });
const setStatus = (id: string, status: string, ReturnValues?: 'ALL_NEW' | 'UPDATED_NEW') =>
  client.send(
    new UpdateItemCommand({
      TableName: TABLE,
      Key: key(id),
      UpdateExpression: 'SET #status = :status',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':status': { S: status } },
      ...(ReturnValues ? { ReturnValues } : {}),
    }),
  );
const statusesOf = (id: string) =>
  records
    .filter((record) => (record.dynamodb?.NewImage ?? record.dynamodb?.OldImage)?.request_id?.S === id)
    .map((record) => [
      record.eventName,
      record.dynamodb?.OldImage?.status?.S ?? null,
      record.dynamodb?.NewImage?.status?.S ?? null,
    ]);

describe('the local ledger stream', () => {
  it('gives each status change its old and new image, whatever each write asked to get back', async () => {
    // Act: a put, updates asking for nothing, for the new item and for the updated attributes.
    await client.send(
      new PutItemCommand({ TableName: TABLE, Item: { ...key('r-1'), status: { S: 'received' } } }),
    );
    const none = await setStatus('r-1', 'running');
    const allNew = await setStatus('r-1', 'failed', 'ALL_NEW');
    const updatedNew = await setStatus('r-1', 'running', 'UPDATED_NEW');
    await setStatus('r-1', 'completed');
    await client.send(new DeleteItemCommand({ TableName: TABLE, Key: key('r-1') }));
    await stream.drained();

    // Assess: each caller got the answer it asked for, and the stream holds every change in order.
    expect(none.Attributes).toBeUndefined();
    expect(allNew.Attributes).toEqual({ ...key('r-1'), status: { S: 'failed' } });
    expect(updatedNew.Attributes).toEqual({ status: { S: 'running' } });
    expect(statusesOf('r-1')).toEqual([
      ['INSERT', null, 'received'],
      ['MODIFY', 'received', 'running'],
      ['MODIFY', 'running', 'failed'],
      ['MODIFY', 'failed', 'running'],
      ['MODIFY', 'running', 'completed'],
      ['REMOVE', 'completed', null],
    ]);
  });

  it('keeps the right old image across a refused write and for an item written before it started', async () => {
    // Prepare: an item written straight to the table, which the stream has never seen.
    await dynamo.client.send(
      new PutItemCommand({ TableName: TABLE, Item: { ...key('r-2'), status: { S: 'received' } } }),
    );

    // Act: a change, a write refused by its condition, another change.
    await setStatus('r-2', 'running');
    const refused = client.send(
      new UpdateItemCommand({
        TableName: TABLE,
        Key: key('r-2'),
        UpdateExpression: 'SET #status = :status',
        ConditionExpression: '#status = :expected',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':status': { S: 'cancelled' }, ':expected': { S: 'received' } },
      }),
    );
    await expect(refused).rejects.toMatchObject({ name: 'ConditionalCheckFailedException' });
    await setStatus('r-2', 'completed');
    await stream.drained();

    // Assess
    expect(statusesOf('r-2')).toEqual([
      ['MODIFY', 'received', 'running'],
      ['MODIFY', 'running', 'completed'],
    ]);
    const stored = await client.send(new GetItemCommand({ TableName: TABLE, Key: key('r-2') }));
    expect(stored.Item?.status).toEqual({ S: 'completed' });
  });

  it('keeps the images of open requests only, and still gives an ended one its old image when it is written again', async () => {
    // Prepare
    const kept = stream.imagesKept();

    // Act: two requests end, one stays open; one of those ended is then written again.
    for (const id of ['r-3', 'r-4', 'r-5']) await setStatus(id, 'running');
    await setStatus('r-3', 'completed');
    await setStatus('r-4', 'cancelled');
    const whileOpen = stream.imagesKept() - kept;
    await setStatus('r-3', 'failed');
    await stream.drained();

    // Assess
    expect(whileOpen).toBe(1);
    expect(statusesOf('r-3')).toEqual([
      ['INSERT', null, 'running'],
      ['MODIFY', 'running', 'completed'],
      ['MODIFY', 'completed', 'failed'],
    ]);
  });

  it("refuses a request over DynamoDB's 16 MB limit without holding it, and serves the next one", async () => {
    // Prepare: a body one byte over the limit, as a client that ignores the limit sends it.
    const oversized = Buffer.alloc(MAX_REQUEST_BYTES + 1, 0x20);

    // Act
    const refused = await fetch(stream.endpoint, {
      method: 'POST',
      headers: { 'x-amz-target': 'DynamoDB_20120810.PutItem', 'content-type': 'application/x-amz-json-1.0' },
      body: oversized,
    });
    const answer = (await refused.json()) as { __type: string; message: string };
    await setStatus('r-6', 'running');
    await stream.drained();

    // Assess
    expect(refused.status).toBe(413);
    expect(answer.__type).toBe('com.amazon.coral.validate#ValidationException');
    expect(answer.message).toContain(String(MAX_REQUEST_BYTES));
    expect(statusesOf('r-6')).toEqual([['INSERT', null, 'running']]);
  });
});
