import { randomUUID } from 'node:crypto';
import { GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXPORT_WAITERS_QUEUE, ExportWaiters, waiterKey } from '#shared/export-waiters';
import { createGateTable } from '#shared/ledger/table';
import { GATE_KEY, type GateSettings, gateItemName, PlatformGate } from '#shared/platform-gate';
import { startDynamo } from '../../../helpers/dynamo.ts';

const settings: GateSettings = {
  requestsPerSecond: 10,
  burst: 1,
  maxOpenExports: 1,
  outageHorizonSeconds: 60,
  maxSleepMs: 500,
  failureThreshold: 1,
};

/**
 * Each site is its own account on the platform, with its own limits: the gates of two sites on
 * one table never share a slot, a rate bucket, a circuit or a queue of waiters.
 */
describe('the gates of several sites on one table', () => {
  let dynamo: Awaited<ReturnType<typeof startDynamo>>;
  let table: string;
  beforeAll(async () => {
    dynamo = await startDynamo();
  });
  afterAll(async () => {
    await dynamo.close();
  });

  async function gates(now: () => number) {
    table = `gate-${randomUUID()}`;
    await createGateTable(dynamo.client, table);
    const options = { now, sleep: async () => {} };
    return {
      first: new PlatformGate(dynamo.client, table, settings, options),
      shop: new PlatformGate(dynamo.client, table, settings, { ...options, site: 'shop' }),
    };
  }

  const item = async (name: string) => {
    const answer = await dynamo.client.send(
      new GetItemCommand({ TableName: table, Key: marshall({ [GATE_KEY]: name }) }),
    );
    return answer.Item === undefined ? undefined : unmarshall(answer.Item);
  };

  it("keeps each site's export slots: a full cap on one site leaves the other's slot free", async () => {
    // Prepare
    const { first, shop } = await gates(() => 1_000);
    await first.acquireExport('a');

    // Act
    const firstFull = await first.acquireExport('b').catch((error: unknown) => error);
    await shop.acquireExport('b_shop');

    // Assess
    expect(firstFull).toMatchObject({ reason: 'exports' });
    expect((await item('exports'))?.holders).toEqual({ a: expect.any(Number) });
    expect((await item('shop#exports'))?.holders).toEqual({ b_shop: expect.any(Number) });
  });

  it("keeps each site's rate bucket and circuit: an outage on one site does not hold the other", async () => {
    // Prepare: the first site's platform fails once, which opens its circuit (threshold 1)
    const { first, shop } = await gates(() => 5_000);
    await first.admit();
    await first.report('down');

    // Act
    const firstAgain = await first.admit().catch((error: unknown) => error);
    const shopCall = await shop.admit().catch((error: unknown) => error);

    // Assess
    expect(firstAgain).toMatchObject({ reason: 'outage' });
    expect(shopCall).toBeUndefined();
    expect(await item('platform')).toBeDefined();
    expect(await item('shop#platform')).toBeDefined();
  });

  it("queues a site's waiters apart: a slot given back on one site wakes none of the other's", async () => {
    // Prepare: both sites full, one waiter on each
    let now = 10_000;
    table = `gate-${randomUUID()}`;
    await createGateTable(dynamo.client, table);
    const woken: string[] = [];
    const waitersOf = (queue?: string) =>
      new ExportWaiters(dynamo.client, table, async (token) => void woken.push(token), {
        logger: { warn: () => {} },
        now: () => now,
        ...(queue === undefined ? {} : { queue }),
      });
    const first = new PlatformGate(dynamo.client, table, settings, { now: () => now, waiters: waitersOf() });
    const shop = new PlatformGate(dynamo.client, table, settings, {
      now: () => now,
      site: 'shop',
      waiters: waitersOf(gateItemName(EXPORT_WAITERS_QUEUE, 'shop')),
    });
    await first.acquireExport('a');
    await shop.acquireExport('a_shop');
    await expect(first.acquireExport('w')).rejects.toMatchObject({ reason: 'exports' });
    await expect(shop.acquireExport('w_shop')).rejects.toMatchObject({ reason: 'exports' });
    for (const id of ['w', 'w_shop']) {
      await dynamo.client.send(
        new UpdateItemCommand({
          TableName: table,
          Key: marshall({ [GATE_KEY]: waiterKey(id) }),
          UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
          ExpressionAttributeNames: { '#token': 'token' },
          ExpressionAttributeValues: marshall({ ':token': `token-${id}`, ':wait': 600 }),
        }),
      );
    }
    now = 20_000;

    // Act
    await shop.releaseExport('a_shop');

    // Assess
    expect(woken).toEqual(['token-w_shop']);
    expect((await item(waiterKey('w')))?.queue).toBe('exports');
    expect((await item('exports'))?.holders).toEqual({ a: expect.any(Number) });
  });
});
