import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  type AttributeValue,
  DynamoDBClient,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsStandIns, startAwsStandIns } from '#local/aws/aws-standins';
import {
  OPEN_DUE_INDEX,
  OPEN_SHARD_ATTRIBUTE,
  type OwedStatus,
  openShardKey,
} from '../../../lambdas/shared/ledger/index.ts';
import { createLedgerTable } from '../../../lambdas/shared/ledger/table.ts';
import { collidingRequestIds, legacyLedgerTable } from '../helpers/dynamo.ts';

const TABLE = 'svc-dsr-ledger';
const DUE_AT = '2026-12-23T22:59:59.999Z';
const [first, second] = collidingRequestIds();

let standIns: AwsStandIns;
let dynamo: DynamoDBClient;

beforeAll(async () => {
  standIns = await startAwsStandIns();
  dynamo = new DynamoDBClient(standIns.clientConfig('dynamodb'));
  await createLedgerTable(dynamo, TABLE);
});

afterAll(async () => {
  dynamo.destroy();
  await standIns.close();
});

/** The request ids the open index holds under one status's shard. */
async function openIds(client: DynamoDBClient, shardKey: string): Promise<string[]> {
  const page = await client.send(
    new QueryCommand({
      TableName: TABLE,
      IndexName: OPEN_DUE_INDEX,
      KeyConditionExpression: '#shard = :shard',
      ExpressionAttributeNames: { '#shard': OPEN_SHARD_ATTRIBUTE },
      ExpressionAttributeValues: { ':shard': { S: shardKey } },
    }),
  );
  return (page.Items ?? []).map((item) => item.request_id?.S ?? '').sort();
}

function moveTo(requestId: string, status: OwedStatus | 'completed') {
  const shard = status === 'completed' ? undefined : openShardKey(requestId, status);
  const values: Record<string, AttributeValue> = { ':status': { S: status } };
  if (shard !== undefined) values[':shard'] = { S: shard };
  return dynamo.send(
    new UpdateItemCommand({
      TableName: TABLE,
      Key: { request_id: { S: requestId } },
      UpdateExpression: `SET #status = :status ${shard === undefined ? 'REMOVE #shard' : ', #shard = :shard'}`,
      ExpressionAttributeNames: { '#status': 'status', '#shard': OPEN_SHARD_ATTRIBUTE },
      ExpressionAttributeValues: values,
    }),
  );
}

describe('the local DynamoDB index', () => {
  it('keeps an entry for each of two requests whose short index keys collide, and removes only its own', async () => {
    // Same open shard, same due date, and the same six MD5 digits dynalite appends to the index key.
    const shard = openShardKey(first, 'received');
    expect(openShardKey(second, 'received')).toBe(shard);
    for (const requestId of [first, second]) {
      await dynamo.send(
        new PutItemCommand({
          TableName: TABLE,
          Item: {
            request_id: { S: requestId },
            status: { S: 'received' },
            due_at: { S: DUE_AT },
            [OPEN_SHARD_ATTRIBUTE]: { S: shard ?? '' },
          },
        }),
      );
    }
    expect(await openIds(dynamo, shard ?? '')).toEqual([first, second]);

    await moveTo(first, 'completed');
    expect(await openIds(dynamo, shard ?? '')).toEqual([second]);
  });

  it('files every item once under its last key when many updates move the same items at once', async () => {
    const ids = Array.from(
      { length: 20 },
      (_, n) => `10000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
    );
    for (const requestId of ids) {
      await dynamo.send(
        new PutItemCommand({
          TableName: TABLE,
          Item: { request_id: { S: requestId }, status: { S: 'completed' }, due_at: { S: DUE_AT } },
        }),
      );
    }
    const statuses = ['received', 'running', 'failed', 'completed', 'running'] as const;
    await Promise.all(ids.flatMap((requestId) => statuses.map((status) => moveTo(requestId, status))));
    // Each item's last write wins; whichever it was, the item is in the index exactly where its status says.
    const filed = new Map<string, number>();
    for (const status of ['received', 'running', 'failed'] as const) {
      for (let shard = 0; shard < 16; shard += 1) {
        for (const requestId of await openIds(dynamo, `${status}#${shard}`)) {
          if (!ids.includes(requestId)) continue;
          expect(openShardKey(requestId, status)).toBe(`${status}#${shard}`);
          filed.set(requestId, (filed.get(requestId) ?? 0) + 1);
        }
      }
    }
    expect([...filed.values()].every((count) => count === 1)).toBe(true);
  });
});

describe('a ledger written by dynalite without whole index keys', () => {
  let workdir: string;

  beforeAll(async () => {
    workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-dynalite-'));
  });
  afterAll(async () => {
    await rm(workdir, { recursive: true, force: true });
  });

  it('gets its index entries rebuilt when local mode opens it', async () => {
    const path = join(workdir, 'ledger');
    const legacyIndex = 'by-status-due';
    // Plain dynalite in a process of its own writes both requests: its index keeps one of them.
    const script = `
      import dynalite from 'dynalite';
      import { DynamoDBClient, CreateTableCommand, PutItemCommand, QueryCommand, waitUntilTableExists } from '@aws-sdk/client-dynamodb';
      const server = dynalite({ path: process.env.STORE, createTableMs: 0 });
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      const client = new DynamoDBClient({ region: 'us-east-1', endpoint: 'http://127.0.0.1:' + server.address().port,
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
      await client.send(new CreateTableCommand(JSON.parse(process.env.TABLE)));
      // Items are refused while the table is CREATING, which lasts until dynalite's next timer.
      await waitUntilTableExists({ client, maxWaitTime: 10, minDelay: 0.05, maxDelay: 0.2 }, { TableName: '${TABLE}' });
      for (const id of JSON.parse(process.env.IDS)) await client.send(new PutItemCommand({ TableName: '${TABLE}',
        Item: { request_id: { S: id }, status: { S: 'received' }, due_at: { S: '${DUE_AT}' } } }));
      const page = await client.send(new QueryCommand({ TableName: '${TABLE}', IndexName: '${legacyIndex}',
        KeyConditionExpression: '#s = :s', ExpressionAttributeNames: { '#s': 'status' },
        ExpressionAttributeValues: { ':s': { S: 'received' } } }));
      console.log(page.Items.length);
      client.destroy();
      await new Promise((resolve) => server.close(resolve));
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
      env: {
        ...process.env,
        STORE: path,
        TABLE: JSON.stringify(legacyLedgerTable(TABLE, legacyIndex)),
        IDS: JSON.stringify([first, second]),
      },
    });
    expect(stdout.trim()).toBe('1');

    const reopened = await startAwsStandIns({ dynamoPath: path });
    const client = new DynamoDBClient(reopened.clientConfig('dynamodb'));
    try {
      const byStatus = async (status: string) => {
        const page = await client.send(
          new QueryCommand({
            TableName: TABLE,
            IndexName: legacyIndex,
            KeyConditionExpression: '#s = :s',
            ExpressionAttributeNames: { '#s': 'status' },
            ExpressionAttributeValues: { ':s': { S: status } },
          }),
        );
        return (page.Items ?? []).map((item) => item.request_id?.S).sort();
      };
      expect(await byStatus('received')).toEqual([first, second]);
      await client.send(
        new UpdateItemCommand({
          TableName: TABLE,
          Key: { request_id: { S: first } },
          UpdateExpression: 'SET #s = :s',
          ExpressionAttributeNames: { '#s': 'status' },
          ExpressionAttributeValues: { ':s': { S: 'completed' } },
        }),
      );
      // No entry is left under the short key the old store used.
      expect(await byStatus('received')).toEqual([second]);
      expect(await byStatus('completed')).toEqual([first]);
    } finally {
      client.destroy();
      await reopened.close();
    }
  });
});
