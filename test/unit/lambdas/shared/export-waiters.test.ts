import { randomUUID } from 'node:crypto';
import {
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  type QueryCommandOutput,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ExportWaiters, forgetWaiter, recordWaiter, waiterKey } from '#shared/export-waiters';
import { createGateTable } from '#shared/ledger/table';
import { GATE_KEY } from '#shared/platform-gate';
import { startDynamo } from '../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let table: string;

beforeAll(async () => {
  dynamo = await startDynamo();
});

afterAll(async () => {
  await dynamo.close();
});

beforeEach(async () => {
  table = `gate-${randomUUID()}`;
  await createGateTable(dynamo.client, table);
});

/** Now, for the waiters' clock: the tests write times around it. */
const NOW = 10_000_000;

/**
 * A request that found no slot at `at` and then waits `seconds` for `token`: StartExport's write
 * (the gate's), then the state machine's, as lib/dsr-workflow.ts makes it.
 */
async function waits(requestId: string, at: number, token: string, seconds = 600): Promise<void> {
  await recordWaiter(dynamo.client, table, requestId, at);
  await dynamo.client.send(
    new UpdateItemCommand({
      TableName: table,
      Key: marshall({ [GATE_KEY]: waiterKey(requestId) }),
      UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
      ConditionExpression: 'attribute_exists(#since)',
      ExpressionAttributeNames: { '#token': 'token', '#since': 'since' },
      ExpressionAttributeValues: { ':token': { S: token }, ':wait': { N: String(seconds) } },
    }),
  );
}

async function item(requestId: string): Promise<Record<string, unknown> | undefined> {
  const answer = await dynamo.client.send(
    new GetItemCommand({ TableName: table, Key: marshall({ [GATE_KEY]: waiterKey(requestId) }) }),
  );
  return answer.Item === undefined ? undefined : unmarshall(answer.Item);
}

function named(name: string): Error {
  return Object.assign(new Error(name), { name });
}

/**
 * DynamoDB as a careless stand-in answers a Query: `pageSize` items at most per page (as a page cut
 * short by its size limit), each page's items shuffled. The pages still follow the index.
 */
function scrambled(
  client: DynamoDBClient,
  pageSize: number,
): Pick<DynamoDBClient, 'send'> & { queries: number } {
  const stand = {
    queries: 0,
    send: (async (command: unknown) => {
      if (command instanceof QueryCommand) {
        stand.queries += 1;
        const answer: QueryCommandOutput = await client.send(
          new QueryCommand({ ...command.input, Limit: Math.min(command.input.Limit ?? pageSize, pageSize) }),
        );
        const items = [...(answer.Items ?? [])].reverse();
        return { ...answer, Items: items };
      }
      return client.send(command as never);
    }) as DynamoDBClient['send'],
  };
  return stand;
}

function waiters(
  client: Pick<DynamoDBClient, 'send'>,
  succeed: (token: string) => Promise<void>,
  now = () => NOW,
) {
  const warnings: string[] = [];
  const queue = new ExportWaiters(client, table, succeed, {
    logger: {
      warn: (message, attributes) => warnings.push(`${message} ${JSON.stringify(attributes ?? {})}`),
    },
    now,
  });
  return { queue, warnings };
}

describe('ExportWaiters', () => {
  it('takes the waiters oldest first, whatever order they began in and however the reads come back', async () => {
    // Prepare: eight waiters, written in no order of their age; reads of three at most, reversed.
    const ages = [5, 1, 7, 3, 8, 2, 6, 4];
    for (const age of ages) await waits(`r${age}`, NOW - 100_000 + age * 1000, `token-${age}`);
    const woken: string[] = [];
    const { queue } = waiters(scrambled(dynamo.client, 3), async (token) => {
      woken.push(token);
    });

    // Act: eight slots given back one after another.
    const taken: string[] = [];
    for (const _ of ages) {
      const waiter = await queue.take();
      if (waiter === undefined) break;
      taken.push(waiter.requestId);
      expect(await waiter.answer()).toBe('woken');
    }

    // Assess: oldest first, each woken once, and no one left.
    expect(taken).toEqual(['r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7', 'r8']);
    expect(woken).toEqual(taken.map((requestId) => `token-${requestId.slice(1)}`));
    expect(await queue.take()).toBeUndefined();
  });

  it('keeps a request its place across its waits: the first wait counts, not the last', async () => {
    // Prepare: `early` began to wait first; its wait timed out and it waits again, after `late`.
    await waits('early', NOW - 60_000, 'early-1', 30);
    await waits('late', NOW - 40_000, 'late-1');
    await waits('early', NOW - 20_000, 'early-2');
    const { queue } = waiters(dynamo.client, async () => {});

    // Act
    const waiter = await queue.take();

    // Assess
    expect(waiter?.requestId).toBe('early');
    expect(await item('early')).toMatchObject({
      since: NOW - 60_000,
      waited_at: NOW - 20_000,
      token: 'early-2',
    });
  });

  it('passes over waiters past their wait, between two waits, or already tried, and keeps their items', async () => {
    // Prepare
    await waits('timed-out', NOW - 90_000, 'timed-out', 60);
    await recordWaiter(dynamo.client, table, 'between', NOW - 80_000);
    await waits('tried', NOW - 70_000, 'tried');
    await waits('live', NOW - 60_000, 'live');
    const { queue } = waiters(dynamo.client, async () => {});

    // Act
    const waiter = await queue.take(new Set(['tried']));

    // Assess: they wait again (or are woken by a later release) in their place.
    expect(waiter?.requestId).toBe('live');
    for (const requestId of ['timed-out', 'between', 'tried']) expect(await item(requestId)).toBeDefined();
  });

  it('deletes the items of waiters gone for long, and unreadable ones, on the way', async () => {
    // Prepare: a wait that ended over half an hour ago, a write that never got its wait, a broken item.
    await waits('gone', NOW - 3 * 3_600_000, 'gone', 60);
    await recordWaiter(dynamo.client, table, 'never-waited', NOW - 2 * 3_600_000);
    await dynamo.client.send(
      new PutItemCommand({
        TableName: table,
        Item: marshall({ [GATE_KEY]: 'waiter#broken', queue: 'exports', since: NOW - 4 * 3_600_000 }),
      }),
    );
    await waits('live', NOW - 60_000, 'live');
    const { queue, warnings } = waiters(dynamo.client, async () => {});

    // Act
    const waiter = await queue.take();

    // Assess
    expect(waiter?.requestId).toBe('live');
    for (const requestId of ['gone', 'never-waited', 'broken']) expect(await item(requestId)).toBeUndefined();
    expect(warnings.join('\n')).toContain('not one was deleted');
  });

  it('looks through several pages of waiters that do not wait now for one that does', async () => {
    // Prepare: twenty-five timed-out waiters ahead of the live one, read ten at a time.
    for (let index = 0; index < 25; index++) {
      await waits(`stale-${index}`, NOW - 500_000 + index, `stale-${index}`, 30);
    }
    await waits('live', NOW - 60_000, 'live');
    const client = scrambled(dynamo.client, 10);
    const { queue } = waiters(client, async () => {});

    // Act
    const waiter = await queue.take();

    // Assess
    expect(waiter?.requestId).toBe('live');
    expect(client.queries).toBe(3);
  });

  it('tells a waiter woken, timed out or ended apart, and deletes its item in each case', async () => {
    // Prepare
    await waits('woken', NOW - 30_000, 'woken');
    await waits('timed-out', NOW - 20_000, 'timed-out');
    await waits('ended', NOW - 10_000, 'ended');
    const answers = new Map<string, Error | undefined>([
      ['woken', undefined],
      ['timed-out', named('TaskTimedOut')],
      ['ended', named('TaskDoesNotExist')],
    ]);
    const { queue } = waiters(dynamo.client, async (token) => {
      const error = answers.get(token);
      if (error !== undefined) throw error;
    });

    // Act
    const results: string[] = [];
    for (let index = 0; index < 3; index++) {
      const waiter = await queue.take();
      results.push(`${waiter?.requestId}:${await waiter?.answer()}`);
    }

    // Assess
    expect(results).toEqual(['woken:woken', 'timed-out:timed_out', 'ended:ended']);
    for (const requestId of answers.keys()) expect(await item(requestId)).toBeUndefined();
  });

  it('keeps the item of a waiter Step Functions could not be told, and of a wait begun since it was read', async () => {
    // Prepare
    await waits('throttled', NOW - 30_000, 'throttled');
    await waits('again', NOW - 20_000, 'again-1');
    const { queue, warnings } = waiters(dynamo.client, async (token) => {
      if (token === 'throttled') throw named('ThrottlingException');
      throw named('TaskTimedOut');
    });

    // Act
    const throttled = await queue.take();
    const throttledAnswer = await throttled?.answer();
    const again = await queue.take(new Set(['throttled']));
    // Its execution came back to StartExport and waits again before the answer's delete.
    await waits('again', NOW - 1_000, 'again-2');
    await again?.answer();

    // Assess
    expect(throttledAnswer).toBe('unanswered');
    expect(await item('throttled')).toMatchObject({ token: 'throttled' });
    expect(await item('again')).toMatchObject({ token: 'again-2', since: NOW - 20_000 });
    expect(warnings.join('\n')).toContain('ThrottlingException');
    expect(warnings.join('\n')).not.toContain('throttled"');
  });

  it('gives no waiter, and does not throw, when the table cannot be read', async () => {
    // Prepare
    await waits('live', NOW - 60_000, 'live');
    const broken = new ExportWaiters(dynamo.client, `${table}-missing`, async () => {}, {
      logger: { warn: () => {} },
      now: () => NOW,
    });

    // Act / Assess
    await expect(broken.take()).resolves.toBeUndefined();
  });
});

describe('recordWaiter and forgetWaiter', () => {
  it('keeps when the request first began to wait, drops its last token, and forgets it once it holds a slot', async () => {
    // Prepare
    await waits('request', NOW - 60_000, 'first');

    // Act
    await recordWaiter(dynamo.client, table, 'request', NOW);
    const between = await item('request');
    await forgetWaiter(dynamo.client, table, 'request');

    // Assess
    expect(between).toMatchObject({
      since: NOW - 60_000,
      waited_at: NOW,
      queue: 'exports',
      request_id: 'request',
    });
    expect(between).not.toHaveProperty('token');
    expect(await item('request')).toBeUndefined();
  });
});
