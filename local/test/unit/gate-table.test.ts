import {
  CreateTableCommand,
  DescribeTableCommand,
  GetItemCommand,
  PutItemCommand,
  waitUntilTableExists,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WAITERS_INDEX } from '../../../lambdas/shared/export-waiters.ts';
import { createGateTable } from '../../../lambdas/shared/ledger/table.ts';
import { GATE_KEY } from '../../../lambdas/shared/platform-gate.ts';
import { startDynamo } from '../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;

beforeAll(async () => {
  dynamo = await startDynamo();
});

afterAll(async () => {
  await dynamo.close();
});

describe('createGateTable', () => {
  it('makes a gate table from before the waiters index again with the index, keeping its items', async () => {
    // Prepare: a data dir's gate table as an earlier release made it, with slots held.
    await dynamo.client.send(
      new CreateTableCommand({
        TableName: 'gate',
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: GATE_KEY, AttributeType: 'S' }],
        KeySchema: [{ AttributeName: GATE_KEY, KeyType: 'HASH' }],
      }),
    );
    await waitUntilTableExists(
      { client: dynamo.client, maxWaitTime: 10, minDelay: 1, maxDelay: 1 },
      { TableName: 'gate' },
    );
    const slots = { [GATE_KEY]: 'exports', holders: { 'request-1': 1_000 } };
    await dynamo.client.send(new PutItemCommand({ TableName: 'gate', Item: marshall(slots) }));

    // Act: twice, as two starts of local mode.
    await createGateTable(dynamo.client, 'gate');
    await createGateTable(dynamo.client, 'gate');

    // Assess
    const { Table } = await dynamo.client.send(new DescribeTableCommand({ TableName: 'gate' }));
    expect(Table?.GlobalSecondaryIndexes?.map((index) => index.IndexName)).toEqual([WAITERS_INDEX]);
    const { Item } = await dynamo.client.send(
      new GetItemCommand({ TableName: 'gate', Key: marshall({ [GATE_KEY]: 'exports' }) }),
    );
    expect(Item === undefined ? undefined : unmarshall(Item)).toEqual(slots);
  });
});
