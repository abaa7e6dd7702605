import type { Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import {
  CreateTableCommand,
  type CreateTableCommandInput,
  DynamoDBClient,
  type DynamoDBClientConfig,
  waitUntilTableExists,
} from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';

/** dynalite's server factory (the package has no types). */
type DynaliteFactory = (options: {
  createTableMs: number;
  deleteTableMs: number;
  updateTableMs: number;
}) => Server;

/** An in-memory dynalite server, not listening yet, whose tables are ACTIVE at their next timer. */
export function dynaliteServer(): Server {
  const dynalite = createRequire(import.meta.url)('dynalite') as DynaliteFactory;
  return dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
}

/**
 * An in-memory DynamoDB (dynalite, or the server `serve` makes) on a free loopback port, with SDK
 * clients pointed at it; `settings` adds to the client's config (a bench's `maxAttempts`).
 */
export async function startDynamo(
  settings: Omit<DynamoDBClientConfig, 'endpoint'> = {},
  serve: () => Server = dynaliteServer,
): Promise<{
  client: DynamoDBClient;
  doc: DynamoDBDocumentClient;
  /** The config `client` was built with, for tests that need a client of their own. */
  config: DynamoDBClientConfig;
  close(): Promise<void>;
}> {
  const server = serve();
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
