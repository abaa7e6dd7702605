import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import {
  CreateTableCommand,
  type CreateTableCommandInput,
  DynamoDBClient,
  type DynamoDBClientConfig,
  waitUntilTableExists,
} from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { createDynalite } from '@svc-dsr/local/aws/dynalite';
import { openShardOf } from '#shared/ledger';

/**
 * An in-memory DynamoDB (dynalite, with local mode's whole index keys) on a free loopback port, with
 * SDK clients pointed at it; `settings` adds to the client's config (a bench's `maxAttempts`).
 */
export async function startDynamo(settings: Omit<DynamoDBClientConfig, 'endpoint'> = {}): Promise<{
  client: DynamoDBClient;
  doc: DynamoDBDocumentClient;
  /** The config `client` was built with, for tests that need a client of their own. */
  config: DynamoDBClientConfig;
  close(): Promise<void>;
}> {
  const { server } = createDynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const config: DynamoDBClientConfig = {
    region: 'us-east-1',
    endpoint: `http://127.0.0.1:${port}`,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    ...settings,
  };
  const client = new DynamoDBClient(config);
  const doc = DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true } });
  return {
    client,
    doc,
    config,
    close: async () => {
      client.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * Creates a table and waits until it is ACTIVE: like DynamoDB, dynalite refuses items while the
 * table is CREATING, which even with `createTableMs: 0` lasts until its next timer runs.
 */
export async function createTable(client: DynamoDBClient, input: CreateTableCommandInput): Promise<void> {
  await client.send(new CreateTableCommand(input));
  await waitUntilTableExists(
    { client, maxWaitTime: 10, minDelay: 0.05, maxDelay: 0.2 },
    { TableName: input.TableName },
  );
}

/** The ledger table as releases before the open index created it: one `status`/`due_at` index. */
export function legacyLedgerTable(tableName: string, indexName: string): CreateTableCommandInput {
  return {
    TableName: tableName,
    BillingMode: 'PAY_PER_REQUEST',
    AttributeDefinitions: [
      { AttributeName: 'request_id', AttributeType: 'S' },
      { AttributeName: 'status', AttributeType: 'S' },
      { AttributeName: 'due_at', AttributeType: 'S' },
    ],
    KeySchema: [{ AttributeName: 'request_id', KeyType: 'HASH' }],
    GlobalSecondaryIndexes: [
      {
        IndexName: indexName,
        KeySchema: [
          { AttributeName: 'status', KeyType: 'HASH' },
          { AttributeName: 'due_at', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'ALL' },
      },
    ],
  };
}

/**
 * Two request ids that dynalite 4.0.0 on its own files under one open index entry when their
 * status and due date match: the same open shard, and the same six hex digits of the MD5 it
 * appends to an index key (local/aws/dynalite-index.ts). Found by a search over numbered UUIDs.
 */
export function collidingRequestIds(): [string, string] {
  const seen = new Map<string, string>();
  for (let number = 0; number < 1_000_000; number += 1) {
    const id = `00000000-0000-4000-8000-${number.toString(16).padStart(12, '0')}`;
    const shortKey = `${openShardOf(id)}:${createHash('md5').update('Outliers').update(id).digest('hex').slice(0, 6)}`;
    const earlier = seen.get(shortKey);
    if (earlier !== undefined) return [earlier, id];
    seen.set(shortKey, id);
  }
  throw new Error('no two numbered request ids share a short index key');
}
