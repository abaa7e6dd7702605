import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sdkDynamoUpdateItem } from '#local/runtime/integrations';
import { recordWaiter } from '../../../lambdas/shared/export-waiters.ts';
import { createGateTable } from '../../../lambdas/shared/ledger/table.ts';
import { GATE_KEY } from '../../../lambdas/shared/platform-gate.ts';
import { startDynamo } from '../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;

beforeAll(async () => {
  dynamo = await startDynamo();
  await createGateTable(dynamo.client, 'local-gate');
});

afterAll(async () => {
  await dynamo.close();
});

/** The template's gate table, as the resolved definition names it: its logical id. */
const template = { Resources: { PlatformGate97B91594: { Type: 'AWS::DynamoDB::Table' } } };

/** The slot wait's parameters, as lib/dsr-workflow.ts writes them, with the runner's token. */
const slotWait = (requestId: string) => ({
  TableName: 'PlatformGate97B91594',
  Key: { [GATE_KEY]: { S: `waiter#${requestId}` } },
  UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
  ConditionExpression: 'attribute_exists(#since)',
  ExpressionAttributeNames: { '#token': 'token', '#since': 'since' },
  ExpressionAttributeValues: { ':token': { S: 'task-token' }, ':wait': { N: '30' } },
});

describe('sdkDynamoUpdateItem', () => {
  it('writes to the local table of the template table it names', async () => {
    // Prepare: StartExport recorded the request among the waiters.
    await recordWaiter(dynamo.client, 'local-gate', 'request-1', 1_000);
    const updateItem = sdkDynamoUpdateItem(dynamo.client, template, { PlatformGate: 'local-gate' });

    // Act
    await updateItem(slotWait('request-1'));

    // Assess
    const { Item } = await dynamo.client.send(
      new GetItemCommand({ TableName: 'local-gate', Key: marshall({ [GATE_KEY]: 'waiter#request-1' }) }),
    );
    expect(Item === undefined ? undefined : unmarshall(Item)).toMatchObject({
      token: 'task-token',
      wait_seconds: 30,
      since: 1_000,
    });
  });

  it('fails as Step Functions names an AWS SDK error, so the slot wait falls back to its plain Wait', async () => {
    const updateItem = sdkDynamoUpdateItem(dynamo.client, template, { PlatformGate: 'local-gate' });

    // Act / Assess: no waiter item (StartExport's write failed), so the condition does not hold.
    await expect(updateItem(slotWait('never-recorded'))).rejects.toMatchObject({
      name: 'DynamoDb.ConditionalCheckFailedException',
    });
  });

  it('refuses a template table it has no local table for, naming it', async () => {
    const updateItem = sdkDynamoUpdateItem(dynamo.client, template, {});

    await expect(updateItem(slotWait('request-1'))).rejects.toMatchObject({
      name: 'States.Runtime',
      message: expect.stringContaining('PlatformGate97B91594'),
    });
  });
});
