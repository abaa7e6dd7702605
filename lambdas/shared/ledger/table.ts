/**
 * The ledger's and the platform gate's DynamoDB tables as the stack defines them (lib/dsr-stack.ts):
 * their keys and indexes as data, and the functions that create them where no stack does (local mode
 * and the tests).
 */
import {
  type AttributeValue,
  CreateTableCommand,
  type CreateTableCommandInput,
  DeleteTableCommand,
  DescribeTableCommand,
  type DynamoDBClient,
  PutItemCommand,
  ScanCommand,
  type TableDescription,
  waitUntilTableExists,
  waitUntilTableNotExists,
} from '@aws-sdk/client-dynamodb';
import { z } from 'zod';
import { WAITERS_INDEX, WAITERS_QUEUE_ATTRIBUTE, WAITERS_SINCE_ATTRIBUTE } from '../export-waiters.ts';
import { GATE_KEY } from '../platform-gate.ts';
import {
  ENDED_INDEX,
  ENDED_SHARD_ATTRIBUTE,
  endedShardKey,
  OPEN_DUE_INDEX,
  OPEN_INDEX_ATTRIBUTES,
  OPEN_SHARD_ATTRIBUTE,
  openShardKey,
  STATUSES,
} from './schema.ts';

/** A table's keys and indexes, without its name. */
export type TableDefinition = Omit<CreateTableCommandInput, 'TableName'>;

/** The ledger: one item per request; the sharded open-by-due index and the ended index of keys. */
export const LEDGER_TABLE: TableDefinition = {
  BillingMode: 'PAY_PER_REQUEST',
  AttributeDefinitions: [
    { AttributeName: 'request_id', AttributeType: 'S' },
    { AttributeName: OPEN_SHARD_ATTRIBUTE, AttributeType: 'S' },
    { AttributeName: 'due_at', AttributeType: 'S' },
    { AttributeName: ENDED_SHARD_ATTRIBUTE, AttributeType: 'S' },
    { AttributeName: 'completed_at', AttributeType: 'S' },
  ],
  KeySchema: [{ AttributeName: 'request_id', KeyType: 'HASH' }],
  GlobalSecondaryIndexes: [
    {
      IndexName: OPEN_DUE_INDEX,
      KeySchema: [
        { AttributeName: OPEN_SHARD_ATTRIBUTE, KeyType: 'HASH' },
        { AttributeName: 'due_at', KeyType: 'RANGE' },
      ],
      Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: [...OPEN_INDEX_ATTRIBUTES] },
    },
    {
      IndexName: ENDED_INDEX,
      KeySchema: [
        { AttributeName: ENDED_SHARD_ATTRIBUTE, KeyType: 'HASH' },
        { AttributeName: 'completed_at', KeyType: 'RANGE' },
      ],
      Projection: { ProjectionType: 'KEYS_ONLY' },
    },
  ],
};

/** The platform gate: one string key, and the index of export-slot waiters, oldest first. */
export const GATE_TABLE: TableDefinition = {
  BillingMode: 'PAY_PER_REQUEST',
  AttributeDefinitions: [
    { AttributeName: GATE_KEY, AttributeType: 'S' },
    { AttributeName: WAITERS_QUEUE_ATTRIBUTE, AttributeType: 'S' },
    { AttributeName: WAITERS_SINCE_ATTRIBUTE, AttributeType: 'N' },
  ],
  KeySchema: [{ AttributeName: GATE_KEY, KeyType: 'HASH' }],
  GlobalSecondaryIndexes: [
    {
      IndexName: WAITERS_INDEX,
      KeySchema: [
        { AttributeName: WAITERS_QUEUE_ATTRIBUTE, KeyType: 'HASH' },
        { AttributeName: WAITERS_SINCE_ATTRIBUTE, KeyType: 'RANGE' },
      ],
      Projection: { ProjectionType: 'ALL' },
    },
  ],
};

/**
 * Creates the ledger table with the same keys and indexes as the CDK stack (for local mode and
 * tests). A data dir from before the open or the ended index holds a ledger without it, and
 * dynalite cannot add an index to a table: the items are moved through a second table into a new one, each open request with its
 * `open_shard` and each ended one not minimised with its `ended_shard`. Every step can be repeated, so a kill in the middle loses nothing: the next start
 * finishes the move before the ledger is used.
 */
export async function createLedgerTable(client: DynamoDBClient, tableName: string): Promise<void> {
  const moving = `${tableName}.migrating`;
  const current = await describe(client, tableName);
  const indexes = new Set(current?.GlobalSecondaryIndexes?.map((index) => index.IndexName));
  if (current !== undefined && !(indexes.has(OPEN_DUE_INDEX) && indexes.has(ENDED_INDEX))) {
    await createTable(client, moving);
    await copyItems(client, tableName, moving);
    await client.send(new DeleteTableCommand({ TableName: tableName }));
    await waitUntilTableNotExists(
      { client, maxWaitTime: 30, minDelay: 1, maxDelay: 1 },
      { TableName: tableName },
    );
  }
  await createTable(client, tableName);
  if ((await describe(client, moving)) !== undefined) {
    await copyItems(client, moving, tableName);
    await client.send(new DeleteTableCommand({ TableName: moving }));
    await waitUntilTableNotExists(
      { client, maxWaitTime: 30, minDelay: 1, maxDelay: 1 },
      { TableName: moving },
    );
  }
}

async function createTable(client: DynamoDBClient, tableName: string): Promise<void> {
  try {
    await client.send(new CreateTableCommand({ TableName: tableName, ...LEDGER_TABLE }));
  } catch (error) {
    if (!(error instanceof Error && error.name === 'ResourceInUseException')) throw error;
  }
  await waitUntilTableExists({ client, maxWaitTime: 30, minDelay: 1, maxDelay: 1 }, { TableName: tableName });
}

async function describe(client: DynamoDBClient, tableName: string): Promise<TableDescription | undefined> {
  try {
    return (await client.send(new DescribeTableCommand({ TableName: tableName }))).Table;
  } catch (error) {
    if (error instanceof Error && error.name === 'ResourceNotFoundException') return undefined;
    throw error;
  }
}

/** Puts every item of `from` into `to`, each open request with its open index key. */
async function copyItems(client: DynamoDBClient, from: string, to: string): Promise<void> {
  let cursor: Record<string, AttributeValue> | undefined;
  do {
    const page = await client.send(
      new ScanCommand({ TableName: from, ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }) }),
    );
    for (const item of page.Items ?? []) {
      const requestId = item.request_id?.S;
      const status = statusSchema.safeParse(item.status?.S);
      const shard =
        requestId === undefined || !status.success ? undefined : openShardKey(requestId, status.data);
      const ended =
        requestId === undefined || !status.success || item.minimised_at !== undefined
          ? undefined
          : endedShardKey(requestId, status.data);
      const { [OPEN_SHARD_ATTRIBUTE]: _stale, [ENDED_SHARD_ATTRIBUTE]: _staleEnded, ...rest } = item;
      await client.send(
        new PutItemCommand({
          TableName: to,
          Item: {
            ...rest,
            ...(shard === undefined ? {} : { [OPEN_SHARD_ATTRIBUTE]: { S: shard } }),
            ...(ended === undefined ? {} : { [ENDED_SHARD_ATTRIBUTE]: { S: ended } }),
          },
        }),
      );
    }
    cursor = page.LastEvaluatedKey;
  } while (cursor !== undefined);
}

const statusSchema = z.enum(STATUSES);

/**
 * Creates the platform gate's table (lambdas/shared/platform-gate.ts) as the stack does: one string
 * key, and the index of export-slot waiters (export-waiters.ts), oldest first. A table kept from an
 * earlier run is reused; one from before the index is made again with its items (dynalite cannot
 * add an index to a table), which hold only the live pace and the slots' holders.
 */
export async function createGateTable(client: DynamoDBClient, tableName: string): Promise<void> {
  const current = await describe(client, tableName);
  if (current?.GlobalSecondaryIndexes?.some((index) => index.IndexName === WAITERS_INDEX)) return;
  const items: Record<string, AttributeValue>[] = [];
  if (current !== undefined) {
    let cursor: Record<string, AttributeValue> | undefined;
    do {
      const page = await client.send(
        new ScanCommand({
          TableName: tableName,
          ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
        }),
      );
      items.push(...(page.Items ?? []));
      cursor = page.LastEvaluatedKey;
    } while (cursor !== undefined);
    await client.send(new DeleteTableCommand({ TableName: tableName }));
    await waitUntilTableNotExists(
      { client, maxWaitTime: 30, minDelay: 1, maxDelay: 1 },
      { TableName: tableName },
    );
  }
  try {
    await client.send(new CreateTableCommand({ TableName: tableName, ...GATE_TABLE }));
  } catch (error) {
    if (!(error instanceof Error && error.name === 'ResourceInUseException')) throw error;
  }
  await waitUntilTableExists({ client, maxWaitTime: 30, minDelay: 1, maxDelay: 1 }, { TableName: tableName });
  for (const item of items) await client.send(new PutItemCommand({ TableName: tableName, Item: item }));
}
