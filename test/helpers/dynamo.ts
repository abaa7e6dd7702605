import type { AddressInfo } from 'node:net';
import {
  type CreateTableCommandInput,
  DynamoDBClient,
  type DynamoDBClientConfig,
} from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import dynalite from 'dynalite';

/** An in-memory DynamoDB (dynalite) on a free loopback port, with SDK clients pointed at it. */
export async function startDynamo(): Promise<{
  client: DynamoDBClient;
  doc: DynamoDBDocumentClient;
  /** The config `client` was built with, for tests that need a client of their own. */
  config: DynamoDBClientConfig;
  close(): Promise<void>;
}> {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const config: DynamoDBClientConfig = {
    region: 'us-east-1',
    endpoint: `http://127.0.0.1:${port}`,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
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
