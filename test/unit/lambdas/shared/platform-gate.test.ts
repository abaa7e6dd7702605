import { randomUUID } from 'node:crypto';
import {
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  type QueryCommandOutput,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PlatformCapacityError, PlatformOutageError } from '#shared/errors';
import { ExportWaiters, type TakenWaiter, type WaiterAnswer, waiterKey } from '#shared/export-waiters';
import { createGateTable } from '#shared/ledger/table';
import {
  afterOutcome,
  type CircuitState,
  circuitDecision,
  GATE_KEY,
  type GateSettings,
  LEARNED_CAP_MS,
  LONGEST_OUTAGE_WAIT_SECONDS,
  LONGEST_RATE_WAIT_SECONDS,
  PlatformGate,
  workingExportCap,
} from '#shared/platform-gate';
import { platformWaitsBudgeted } from '#shared/step-handler';
import { startDynamo } from '../../../helpers/dynamo.ts';

const settings: GateSettings = {
  requestsPerSecond: 10,
  burst: 3,
  maxOpenExports: 2,
  outageHorizonSeconds: 60,
  maxSleepMs: 500,
  failureThreshold: 3,
};
const closed: CircuitState = {
  version: 0,
  failures: 0,
  opened_at: 0,
  open_until: 0,
  probe_until: 0,
  openings: 0,
};

/** Waiters, oldest first, whose executions answer as given; records who was answered. */
function queueOfWaiters(...waiting: [requestId: string, answer: WaiterAnswer][]) {
  const answered: string[] = [];
  const queue = {
    take: async (): Promise<TakenWaiter | undefined> => {
      const next = waiting.shift();
      if (next === undefined) return undefined;
      const [requestId, answer] = next;
      return {
        requestId,
        answer: async () => {
          answered.push(requestId);
          return answer;
        },
      };
    },
  };
  return { queue, answered };
}

describe('circuitDecision', () => {
  it('holds every call while the circuit is open, lets one probe through after, and gives up past the horizon', () => {
    const open: CircuitState = { ...closed, opened_at: 1_000, open_until: 5_000, openings: 1, failures: 3 };
    expect(circuitDecision(closed, 2_000, settings)).toEqual({ kind: 'closed' });
    expect(circuitDecision(open, 2_000, settings)).toEqual({ kind: 'wait', seconds: 3 });

    const probe = circuitDecision(open, 5_000, settings);
    if (probe.kind !== 'probe') throw new Error('expected a probe');
    expect(probe.next.probe_until).toBeGreaterThan(5_000);
    // While the probe is out, the others wait for its answer.
    expect(circuitDecision(probe.next, 5_100, settings)).toMatchObject({ kind: 'wait' });

    // Past the horizon a call that would wait gives up; a half-open circuit still lets its probe
    // through, so a platform that is back is found however long it was down.
    expect(circuitDecision({ ...open, open_until: 70_000 }, 1_000 + 61_000, settings)).toMatchObject({
      kind: 'outage',
    });
    expect(circuitDecision(open, 1_000 + 61_000, settings)).toMatchObject({ kind: 'probe' });
  });
});

describe('waiting out a long outage', () => {
  it('sends waiters away for longer the longer the platform has been down, within the waits an execution may make', () => {
    // Prepare: a circuit open since t = 0 that every probe finds still down, up to a 6-hour horizon.
    const horizon = { ...settings, outageHorizonSeconds: 6 * 3600 };
    const open: CircuitState = { ...closed, opened_at: 1, open_until: 5_001, openings: 3, failures: 9 };

    // Act: one execution that comes back each time it is told to, until the horizon.
    let now = 1_000;
    let waits = 0;
    let longest = 0;
    for (;;) {
      const decision = circuitDecision({ ...open, open_until: now + 5_000 }, now, horizon);
      if (decision.kind !== 'wait') break;
      waits += 1;
      longest = Math.max(longest, decision.seconds);
      now += decision.seconds * 1000;
    }

    // Assess
    expect(circuitDecision({ ...open, open_until: now + 5_000 }, now, horizon)).toMatchObject({
      kind: 'outage',
    });
    expect(waits).toBeLessThan(platformWaitsBudgeted());
    expect(longest).toBe(LONGEST_OUTAGE_WAIT_SECONDS);
    // Early on a waiter looks again within seconds: a short blip costs little time.
    expect(circuitDecision(open, 2_000, horizon)).toEqual({ kind: 'wait', seconds: 4 });
  });
});

describe('afterOutcome', () => {
  it('opens the circuit after the threshold of failures in a row, and longer after each failed probe', () => {
    let state = closed;
    for (let failure = 0; failure < 2; failure++) state = afterOutcome(state, 'down', 0, settings) ?? state;
    expect(state.opened_at).toBe(0);
    state = afterOutcome(state, 'down', 1_000, settings) ?? state;
    expect(state).toMatchObject({ opened_at: 1_000, open_until: 2_000, openings: 1 });
    state = afterOutcome(state, 'down', 3_000, settings) ?? state;
    expect(state).toMatchObject({ opened_at: 1_000, open_until: 5_000, openings: 2 });
  });

  it('closes on the first success, and writes nothing for a success when all was well', () => {
    const open: CircuitState = { ...closed, opened_at: 1, open_until: 2, openings: 4, failures: 9 };
    expect(afterOutcome(open, 'up', 10, settings)).toMatchObject({ opened_at: 0, failures: 0, openings: 0 });
    expect(afterOutcome(closed, 'up', 10, settings)).toBeNull();
  });
});

describe('PlatformGate on DynamoDB', () => {
  let dynamo: Awaited<ReturnType<typeof startDynamo>>;
  beforeAll(async () => {
    dynamo = await startDynamo();
  });
  afterAll(async () => {
    await dynamo.close();
  });

  async function gate(overrides: Partial<GateSettings> = {}, now?: () => number) {
    const table = `gate-${randomUUID()}`;
    await createGateTable(dynamo.client, table);
    const options = now === undefined ? {} : { now, sleep: async () => {} };
    return new PlatformGate(dynamo.client, table, { ...settings, ...overrides }, options);
  }

  it('never lets more than burst + rate calls into any one second, and keeps the pace', async () => {
    // Virtual time: 400 callers arriving every 5 ms; each goes when its slot comes, or comes back
    // when it is told to, in order of time, against the real table.
    let now = 1_000_000;
    const table = `gate-${randomUUID()}`;
    await createGateTable(dynamo.client, table);
    let slept = 0;
    const paced = new PlatformGate(
      dynamo.client,
      table,
      { ...settings, maxSleepMs: 3_000 },
      {
        now: () => now,
        sleep: async (ms) => {
          slept = ms;
        },
      },
    );
    const queue = Array.from({ length: 400 }, (_, index) => now + index * 5);
    const sent: number[] = [];
    let waits = 0;
    while (queue.length > 0) {
      queue.sort((a, b) => a - b);
      now = queue.shift() ?? now;
      slept = 0;
      try {
        await paced.admit();
        sent.push(now + slept);
      } catch (error) {
        if (!(error instanceof PlatformCapacityError)) throw error;
        waits += 1;
        queue.push(now + error.waitSeconds * 1000);
      }
    }
    sent.sort((a, b) => a - b);
    let most = 0;
    for (let start = 0; start < sent.length; start++) {
      let end = start;
      while (end < sent.length && (sent[end] ?? 0) < (sent[start] ?? 0) + 1000) end++;
      most = Math.max(most, end - start);
    }
    expect(sent).toHaveLength(400);
    expect(most).toBeLessThanOrEqual(settings.burst + settings.requestsPerSecond);
    // 400 calls at 10 per second take about 40 s, and few callers are sent away more than once.
    expect((sent.at(-1) ?? 0) - (sent[0] ?? 0)).toBeLessThan(41_000);
    expect(waits).toBeLessThan(400 * 1.5);
  });

  it('takes a slot in one write, whether the counter lags after a quiet spell or keeps up with a busy one', async () => {
    // Prepare: a client that counts the gate's writes, and a clock this test moves.
    const table = `gate-${randomUUID()}`;
    await createGateTable(dynamo.client, table);
    const client = new DynamoDBClient(dynamo.config);
    let writes = 0;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'UpdateItemCommand') writes += 1;
        return next(args);
      },
      { step: 'initialize' },
    );
    let now = 5_000_000;
    const counted = new PlatformGate(client, table, settings, { now: () => now, sleep: async () => {} });
    const writesFor = async (calls: number, spacingMs: number) => {
      writes = 0;
      for (let call = 0; call < calls; call++) {
        await counted.admit();
        now += spacingMs;
      }
      return writes;
    };
    try {
      // Act and assess: the first call finds no counter; then quiet calls (far apart, the counter
      // lags each time) and busy ones (within the bucket's pace) each cost one write.
      expect(await writesFor(1, 0)).toBeLessThanOrEqual(2);
      expect(await writesFor(10, 10_000)).toBe(10);
      expect(await writesFor(10, 100)).toBe(10);

      // A booked bucket turns a caller away with one failed write and one to the waiting room.
      while (writes >= 0) {
        writes = 0;
        const turnedAway = await counted.admit().then(
          () => false,
          (error: unknown) => error instanceof PlatformCapacityError,
        );
        if (turnedAway) break;
      }
      for (let caller = 0; caller < 3; caller++) {
        writes = 0;
        await expect(counted.admit()).rejects.toBeInstanceOf(PlatformCapacityError);
        expect(writes).toBe(2);
      }
    } finally {
      client.destroy();
    }
  });

  it('admits concurrent callers of several functions at the shared pace', async () => {
    const table = `gate-${randomUUID()}`;
    await createGateTable(dynamo.client, table);
    const sent: number[] = [];
    // Three functions' gates on one table, as three Lambdas share it.
    const gates = Array.from(
      { length: 3 },
      () => new PlatformGate(dynamo.client, table, { ...settings, requestsPerSecond: 20, burst: 2 }),
    );
    const started = Date.now();
    await Promise.all(
      Array.from({ length: 24 }, async (_, index) => {
        for (;;) {
          try {
            await gates[index % 3]?.admit();
            sent.push(Date.now() - started);
            return;
          } catch (error) {
            if (!(error instanceof PlatformCapacityError)) throw error;
            await new Promise((resolve) => setTimeout(resolve, error.waitSeconds * 1000));
          }
        }
      }),
    );
    sent.sort((a, b) => a - b);
    // 24 calls at 20 per second with a burst of 2: the last slot (24 - 2) / 20 = 1.1 s after the
    // first, less the first call's own round trip to the table. Three gates each keeping their
    // own pace would take a third of that.
    expect((sent.at(-1) ?? 0) - (sent[0] ?? 0)).toBeGreaterThanOrEqual(900);
    for (let start = 0; start < sent.length; start++) {
      const within = sent.filter((at) => at >= (sent[start] ?? 0) && at < (sent[start] ?? 0) + 1000);
      expect(within.length).toBeLessThanOrEqual(22 + 1);
    }
  });

  it('caps the exports open at once, keeps a slot its holder asks for again, and frees it on release', async () => {
    const exports = await gate();
    await exports.acquireExport('a');
    await exports.acquireExport('b');
    await exports.acquireExport('a');
    await expect(exports.acquireExport('c')).rejects.toMatchObject({
      name: 'PlatformCapacityError',
      reason: 'exports',
    });
    await exports.releaseExport('a');
    await exports.releaseExport('a');
    await exports.acquireExport('c');
    expect(Object.keys(await exports.exportHolders()).sort()).toEqual(['b', 'c']);
  });

  describe('with requests waiting for a slot', () => {
    /** Waiters, oldest first, whose executions answer as given; records who was answered. */
    function queueOf(...waiting: [requestId: string, answer: WaiterAnswer][]) {
      const answered: string[] = [];
      const queue = {
        take: async (): Promise<TakenWaiter | undefined> => {
          const next = waiting.shift();
          if (next === undefined) return undefined;
          const [requestId, answer] = next;
          return {
            requestId,
            answer: async () => {
              answered.push(requestId);
              return answer;
            },
          };
        },
      };
      return { queue, answered };
    }

    async function gateWith(queue: Pick<ExportWaiters, 'take'>) {
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      return new PlatformGate(dynamo.client, table, settings, { waiters: queue });
    }

    it('gives a released slot to the oldest waiter and wakes it; the slot is kept for it against newcomers', async () => {
      const { queue, answered } = queueOf(['w1', 'woken'], ['w2', 'woken']);
      const exports = await gateWith(queue);
      await exports.acquireExport('a');
      await exports.acquireExport('b');

      await exports.releaseExport('a');

      expect(answered).toEqual(['w1']);
      expect(Object.keys(await exports.exportHolders()).sort()).toEqual(['b', 'w1']);
      // A request that did not wait finds no slot; the woken one finds its own.
      await expect(exports.acquireExport('newcomer')).rejects.toMatchObject({ reason: 'exports' });
      await exports.acquireExport('w1');
    });

    it('keeps the slot for a waiter that timed out: its execution comes back to StartExport for it', async () => {
      const { queue } = queueOf(['late', 'timed_out']);
      const exports = await gateWith(queue);
      await exports.acquireExport('a');

      await exports.releaseExport('a');

      expect(Object.keys(await exports.exportHolders())).toEqual(['late']);
    });

    it('passes the slot on past waiters whose executions ended, and gives it back when no one is left', async () => {
      const { queue, answered } = queueOf(['gone', 'ended'], ['next', 'woken']);
      const exports = await gateWith(queue);
      await exports.acquireExport('a');

      await exports.releaseExport('a');
      expect(answered).toEqual(['gone', 'next']);
      expect(Object.keys(await exports.exportHolders())).toEqual(['next']);

      await exports.releaseExport('next');
      expect(Object.keys(await exports.exportHolders())).toEqual([]);
    });

    it('wakes no one on a release run again, which frees nothing', async () => {
      const { queue, answered } = queueOf(['w1', 'woken'], ['w2', 'woken']);
      const exports = await gateWith(queue);
      await exports.acquireExport('a');
      await exports.acquireExport('b');
      await exports.releaseExport('a');

      await exports.releaseExport('a');

      expect(answered).toEqual(['w1']);
      expect(Object.keys(await exports.exportHolders()).sort()).toEqual(['b', 'w1']);
    });

    it('gives the slot to the next waiter when the oldest holds one already, and wakes both', async () => {
      const { queue, answered } = queueOf(['b', 'woken'], ['w2', 'woken']);
      const exports = await gateWith(queue);
      await exports.acquireExport('a');
      await exports.acquireExport('b');

      await exports.releaseExport('a');

      expect(answered).toEqual(['b', 'w2']);
      expect(Object.keys(await exports.exportHolders()).sort()).toEqual(['b', 'w2']);
    });

    it('records a request that finds no slot among the waiters, in the place of its first wait, until it takes one', async () => {
      let now = 1_000;
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      const exports = new PlatformGate(
        dynamo.client,
        table,
        { ...settings, maxOpenExports: 1 },
        { now: () => now },
      );
      const waiterItem = async () => {
        const answer = await dynamo.client.send(
          new GetItemCommand({ TableName: table, Key: marshall({ [GATE_KEY]: waiterKey('w') }) }),
        );
        return answer.Item === undefined ? undefined : unmarshall(answer.Item);
      };
      await exports.acquireExport('a');

      await expect(exports.acquireExport('w')).rejects.toMatchObject({ reason: 'exports' });
      now = 5_000;
      await expect(exports.acquireExport('w')).rejects.toMatchObject({ reason: 'exports' });
      const waiting = await waiterItem();
      await exports.releaseExport('a');
      await exports.acquireExport('w');

      expect(waiting).toMatchObject({ queue: 'exports', since: 1_000, waited_at: 5_000, request_id: 'w' });
      expect(await waiterItem()).toBeUndefined();
    });

    it('hands a released slot to the request that began to wait first, on the gate table', async () => {
      // Prepare: one slot, held by `a`; three requests find it taken, in the order late-1, first, late-2
      // of their first waits, and their state machines write their tokens in another order.
      let now = 100_000;
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      const woken: string[] = [];
      const waiters = new ExportWaiters(
        dynamo.client,
        table,
        async (token) => {
          woken.push(token);
        },
        { logger: { warn: () => {} }, now: () => now },
      );
      const exports = new PlatformGate(
        dynamo.client,
        table,
        { ...settings, maxOpenExports: 1 },
        { now: () => now, waiters },
      );
      await exports.acquireExport('a');
      for (const [requestId, at] of [
        ['first', 1_000],
        ['late-1', 2_000],
        ['late-2', 3_000],
      ] as const) {
        now = 100_000 + at;
        await expect(exports.acquireExport(requestId)).rejects.toMatchObject({ reason: 'exports' });
      }
      for (const requestId of ['late-2', 'first', 'late-1']) {
        await dynamo.client.send(
          new UpdateItemCommand({
            TableName: table,
            Key: marshall({ [GATE_KEY]: waiterKey(requestId) }),
            UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
            ExpressionAttributeNames: { '#token': 'token' },
            ExpressionAttributeValues: marshall({ ':token': `token-${requestId}`, ':wait': 600 }),
          }),
        );
      }
      now = 110_000;

      // Act
      await exports.releaseExport('a');

      // Assess
      expect(woken).toEqual(['token-first']);
      expect(Object.keys(await exports.exportHolders())).toEqual(['first']);
    });

    it('hands the slot to the oldest waiter that waits when the waiters come in partial reads, each out of order', async () => {
      // Prepare: one slot, held by `a`. Nine requests found it taken, w1 first; w1-w6 are between
      // two waits (no token), w7-w9 wait for their tokens. The waiters' reads come back two items at
      // a time at most (a page cut short, as by DynamoDB's size limit), each page reversed.
      let now = 100_000;
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      const woken: string[] = [];
      let queries = 0;
      const partialReads: Pick<DynamoDBClient, 'send'> = {
        send: (async (command: unknown) => {
          if (!(command instanceof QueryCommand)) return dynamo.client.send(command as never);
          queries += 1;
          const page: QueryCommandOutput = await dynamo.client.send(
            new QueryCommand({ ...command.input, Limit: Math.min(command.input.Limit ?? 2, 2) }),
          );
          return { ...page, Items: [...(page.Items ?? [])].reverse() };
        }) as DynamoDBClient['send'],
      };
      const waiters = new ExportWaiters(
        partialReads,
        table,
        async (token) => {
          woken.push(token);
        },
        { logger: { warn: () => {} }, now: () => now },
      );
      const exports = new PlatformGate(
        dynamo.client,
        table,
        { ...settings, maxOpenExports: 1 },
        { now: () => now, waiters },
      );
      await exports.acquireExport('a');
      for (let number = 1; number <= 9; number++) {
        now = 100_000 + number * 1_000;
        await expect(exports.acquireExport(`w${number}`)).rejects.toMatchObject({ reason: 'exports' });
        if (number < 7) continue;
        await dynamo.client.send(
          new UpdateItemCommand({
            TableName: table,
            Key: marshall({ [GATE_KEY]: waiterKey(`w${number}`) }),
            UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
            ExpressionAttributeNames: { '#token': 'token' },
            ExpressionAttributeValues: marshall({ ':token': `token-w${number}`, ':wait': 600 }),
          }),
        );
      }
      now = 120_000;

      // Act
      await exports.releaseExport('a');

      // Assess: w7, found on the fourth partial read, ahead of w8 in the same reversed page.
      expect(queries).toBe(4);
      expect(woken).toEqual(['token-w7']);
      expect(Object.keys(await exports.exportHolders())).toEqual(['w7']);
    });

    it('tells a request that finds no slot whether it waits behind older waiters, and never without a hand-over', async () => {
      let now = 1_000;
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      const waiters = new ExportWaiters(dynamo.client, table, async () => {}, {
        logger: { warn: () => {} },
        now: () => now,
      });
      const handingOver = new PlatformGate(
        dynamo.client,
        table,
        { ...settings, maxOpenExports: 1 },
        { now: () => now, waiters },
      );
      const waitingOut = new PlatformGate(
        dynamo.client,
        table,
        { ...settings, maxOpenExports: 1 },
        { now: () => now },
      );
      const queuedBehind = (requestId: string, gate: PlatformGate) =>
        gate.acquireExport(requestId).then(
          () => 'slot',
          (error: unknown) => (error instanceof PlatformCapacityError ? error.queuedBehind : error),
        );
      await handingOver.acquireExport('a');

      const first = await queuedBehind('first', handingOver);
      now = 2_000;
      const second = await queuedBehind('second', handingOver);
      now = 3_000;
      const firstAgain = await queuedBehind('first', handingOver);
      const secondWithoutWaiters = await queuedBehind('second', waitingOut);

      expect([first, second, firstAgain, secondWithoutWaiters]).toEqual([false, true, false, false]);
    });

    it('hands a slot that stands free while requests wait to the oldest of them, and wakes it', async () => {
      // Prepare: two slots held by `a` and `b`; w1, w2 and w3 find none and wait for their tokens;
      // then `b` gives its slot back with no hand-over (as when no waiter could be woken).
      let now = 100_000;
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      const woken: string[] = [];
      const waiters = new ExportWaiters(
        dynamo.client,
        table,
        async (token) => {
          woken.push(token);
        },
        { logger: { warn: () => {} }, now: () => now },
      );
      const exports = new PlatformGate(dynamo.client, table, settings, { now: () => now, waiters });
      await exports.acquireExport('a');
      await exports.acquireExport('b');
      for (const [requestId, at] of [
        ['w1', 1_000],
        ['w2', 2_000],
        ['w3', 3_000],
      ] as const) {
        now = 100_000 + at;
        await expect(exports.acquireExport(requestId)).rejects.toMatchObject({ reason: 'exports' });
        await dynamo.client.send(
          new UpdateItemCommand({
            TableName: table,
            Key: marshall({ [GATE_KEY]: waiterKey(requestId) }),
            UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
            ExpressionAttributeNames: { '#token': 'token' },
            ExpressionAttributeValues: marshall({ ':token': `token-${requestId}`, ':wait': 600 }),
          }),
        );
      }
      await new PlatformGate(dynamo.client, table, settings).releaseExport('b');
      now = 110_000;

      // Act
      const offered = await exports.offerFreeSlots();
      const offeredAgain = await exports.offerFreeSlots();

      // Assess
      expect([offered, offeredAgain]).toEqual([1, 0]);
      expect(woken).toEqual(['token-w1']);
      expect(Object.keys(await exports.exportHolders()).sort()).toEqual(['a', 'w1']);
    });

    it('wakes a waiter that holds a slot already without giving it a second one', async () => {
      const { queue, answered } = queueOf(['b', 'woken']);
      const exports = await gateWith(queue);
      await exports.acquireExport('a');
      await exports.acquireExport('b');

      await exports.releaseExport('a');

      expect(answered).toEqual(['b']);
      expect(Object.keys(await exports.exportHolders())).toEqual(['b']);
    });
  });

  describe('when the platform refuses a start for too many open exports', () => {
    async function learning(configured: number, waiters?: Pick<ExportWaiters, 'take'>) {
      const clock = { now: 1_000_000 };
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      const exports = new PlatformGate(
        dynamo.client,
        table,
        { ...settings, maxOpenExports: configured },
        { now: () => clock.now, ...(waiters ? { waiters } : {}) },
      );
      const waiterItem = async (requestId: string) => {
        const answer = await dynamo.client.send(
          new GetItemCommand({ TableName: table, Key: marshall({ [GATE_KEY]: waiterKey(requestId) }) }),
        );
        return answer.Item === undefined ? undefined : unmarshall(answer.Item);
      };
      return { exports, clock, waiterItem, table };
    }

    it('lowers its cap to the slots the others hold, for an hour, and takes the refused slot back to no one', async () => {
      // Prepare: a configured cap of 4; a and b hold slots, c takes the third and is refused.
      const { queue, answered } = queueOfWaiters(['w1', 'woken']);
      const { exports, clock, waiterItem } = await learning(4, queue);
      await exports.acquireExport('a');
      await exports.acquireExport('b');
      await exports.acquireExport('c');

      // Act
      const wait = await exports.exportRefused('c');

      // Assess: a wait for a slot, recorded among the waiters, the slot given back and handed to no one.
      expect(wait).toBeInstanceOf(PlatformCapacityError);
      expect(wait).toMatchObject({ reason: 'exports' });
      expect(answered).toEqual([]);
      expect(await waiterItem('c')).toMatchObject({
        queue: 'exports',
        request_id: 'c',
        waited_at: clock.now,
      });
      expect(await exports.exportSlots()).toMatchObject({
        holders: { a: expect.any(Number), b: expect.any(Number) },
        learned_cap: 2,
        learned_until: clock.now + LEARNED_CAP_MS,
        refusals: 1,
      });
      expect(Object.keys((await exports.exportSlots()).holders).sort()).toEqual(['a', 'b']);
      // Two slots open now: a newcomer waits, though the configured cap has room.
      await expect(exports.acquireExport('d')).rejects.toMatchObject({ reason: 'exports' });
      expect(workingExportCap(await exports.exportSlots(), 4, clock.now)).toBe(2);
    });

    it('puts a refused request back in the place of its first wait, ahead of those that began to wait after it', async () => {
      // Prepare: w waits for the one slot; it takes the slot once a gives it back, and x then waits.
      const { exports, clock, waiterItem } = await learning(1);
      const firstWait = clock.now;
      await exports.acquireExport('a');
      await expect(exports.acquireExport('w')).rejects.toMatchObject({ reason: 'exports' });
      clock.now += 5_000;
      await exports.releaseExport('a');
      await exports.acquireExport('w');
      const whileHolding = await waiterItem('w');
      clock.now += 1_000;
      await expect(exports.acquireExport('x')).rejects.toMatchObject({ reason: 'exports' });

      // Act
      clock.now += 1_000;
      await exports.exportRefused('w');

      // Assess
      expect(whileHolding).toBeUndefined();
      expect(await waiterItem('w')).toMatchObject({ since: firstWait, waited_at: clock.now });
      expect(await waiterItem('x')).toMatchObject({ since: firstWait + 6_000 });
    });

    it('lowers to one slot when the others hold none, and renews the hold with each refusal', async () => {
      const { exports, clock } = await learning(5);
      await exports.acquireExport('a');
      await exports.exportRefused('a');
      expect(await exports.exportSlots()).toMatchObject({ holders: {}, learned_cap: 1, refusals: 1 });

      clock.now += 30 * 60_000;
      await exports.acquireExport('a');
      await exports.exportRefused('a');

      expect(await exports.exportSlots()).toMatchObject({
        learned_cap: 1,
        learned_until: clock.now + LEARNED_CAP_MS,
        refusals: 2,
      });
    });

    it('probes one slot above the learned cap once its hour is over, and raises it step by step up to the configured cap', async () => {
      // Prepare: the platform allowed one open export; the configured cap is 3.
      const { exports, clock } = await learning(3);
      await exports.acquireExport('a');
      await exports.acquireExport('b');
      await exports.exportRefused('b');
      // Within the hour, a success at the learned cap raises nothing.
      await exports.exportStarted('a');
      clock.now += LEARNED_CAP_MS - 1;
      await expect(exports.acquireExport('b')).rejects.toMatchObject({ reason: 'exports' });

      // Act: the hour is over; b probes a second slot, and the platform takes it.
      clock.now += 1;
      await exports.acquireExport('b');
      await expect(exports.acquireExport('c')).rejects.toMatchObject({ reason: 'exports' });
      await exports.exportStarted('b');
      const afterFirstProbe = await exports.exportSlots();
      await exports.acquireExport('c');
      await exports.exportStarted('c');
      const afterSecondProbe = await exports.exportSlots();

      // Assess
      expect(afterFirstProbe.learned_cap).toBe(2);
      expect(afterSecondProbe.learned_cap).toBeUndefined();
      expect(afterSecondProbe.learned_until).toBeUndefined();
      expect(Object.keys(afterSecondProbe.holders).sort()).toEqual(['a', 'b', 'c']);
      await expect(exports.acquireExport('d')).rejects.toMatchObject({ reason: 'exports' });
    });

    it('lowers again when the probe is refused, to the slots held then', async () => {
      const { exports, clock } = await learning(3);
      await exports.acquireExport('a');
      await exports.acquireExport('b');
      await exports.exportRefused('b');
      clock.now += LEARNED_CAP_MS;
      await exports.acquireExport('b');

      await exports.exportRefused('b');

      expect(await exports.exportSlots()).toMatchObject({
        learned_cap: 1,
        learned_until: clock.now + LEARNED_CAP_MS,
        refusals: 2,
      });
      await expect(exports.acquireExport('b')).rejects.toMatchObject({ reason: 'exports' });
    });

    it('answers waiters only for a slot under the working cap: a release above it frees the slot and wakes no one', async () => {
      // Prepare: three slots held, taken before a refusal lowered the cap to one (by a gate of
      // another deployment, or as the refusal was on its way).
      const { queue, answered } = queueOfWaiters(['w1', 'woken'], ['w2', 'woken']);
      const { exports, clock, table } = await learning(5, queue);
      await dynamo.client.send(
        new PutItemCommand({
          TableName: table,
          Item: marshall({
            [GATE_KEY]: 'exports',
            holders: { a: 1, b: 2, c: 3 },
            learned_cap: 1,
            learned_until: clock.now + 60_000,
          }),
        }),
      );

      // Act
      await exports.releaseExport('a');
      await exports.releaseExport('b');
      const aboveCap = Object.keys(await exports.exportHolders());
      const wokenAboveCap = [...answered];
      await exports.releaseExport('c');
      const offered = await exports.offerFreeSlots();

      // Assess: the two slots above the cap went back to no one; the last was handed to w1.
      expect(aboveCap).toEqual(['c']);
      expect(wokenAboveCap).toEqual([]);
      expect(answered).toEqual(['w1']);
      expect(Object.keys(await exports.exportHolders())).toEqual(['w1']);
      expect(offered).toBe(0);
    });

    it('offers free slots to waiters only up to the learned cap', async () => {
      const { queue, answered } = queueOfWaiters(['w1', 'woken'], ['w2', 'woken'], ['w3', 'woken']);
      const { exports, clock, table } = await learning(5, queue);
      await dynamo.client.send(
        new PutItemCommand({
          TableName: table,
          Item: marshall({
            [GATE_KEY]: 'exports',
            holders: {},
            learned_cap: 2,
            learned_until: clock.now + 60_000,
          }),
        }),
      );

      const offered = await exports.offerFreeSlots();

      expect(offered).toBe(2);
      expect(answered).toEqual(['w1', 'w2']);
      expect(Object.keys(await exports.exportHolders()).sort()).toEqual(['w1', 'w2']);
    });
  });

  it('opens the shared circuit on failures reported by any function, and ends the wait past the horizon', async () => {
    let now = 100_000;
    const table = await gate({}, () => now);
    for (let failure = 0; failure < 3; failure++) await table.report('down');
    await expect(table.admit()).rejects.toMatchObject({ name: 'PlatformCapacityError', reason: 'outage' });
    now += 61_000;
    // Past the horizon, the half-open circuit's probe still goes; it fails, and the next call gives up.
    await table.admit();
    await table.report('down');
    await expect(table.admit()).rejects.toBeInstanceOf(PlatformOutageError);
  });

  it('closes the circuit when the probe succeeds', async () => {
    let now = 100_000;
    const table = await gate({}, () => now);
    for (let failure = 0; failure < 3; failure++) await table.report('down');
    now += 1_500;
    await table.admit();
    await table.report('up');
    expect(await table.state()).toMatchObject({ opened_at: 0, failures: 0 });
    await table.admit();
  });

  describe('over a table a gate of another rate used before', () => {
    /** A moment of 2026, in epoch ms, at which the runs below start. */
    const start = Date.UTC(2026, 10, 27);

    /** Gates over one table on one clock; a take answers when its call goes (after its sleep). */
    async function sharedTable() {
      const table = `gate-${randomUUID()}`;
      await createGateTable(dynamo.client, table);
      const clock = { now: start };
      const open = (overrides: Partial<GateSettings>) => {
        let slept = 0;
        const opened = new PlatformGate(
          dynamo.client,
          table,
          { ...settings, maxSleepMs: 3_000, ...overrides },
          {
            now: () => clock.now,
            sleep: async (ms) => {
              slept = ms;
            },
          },
        );
        return {
          gate: opened,
          take: async () => {
            slept = 0;
            await opened.admit();
            return clock.now + slept;
          },
        };
      };
      return { table, clock, open };
    }

    /** The gaps between the calls of a run of takes made at one moment. */
    async function gapsOf(take: () => Promise<number>, calls: number): Promise<number[]> {
      const sent: number[] = [];
      for (let call = 0; call < calls; call++) sent.push(await take());
      return sent.slice(1).map((at, index) => at - (sent[index] ?? 0));
    }

    it('goes at once and keeps the new pace when the rate is lowered between runs', async () => {
      // Prepare: a run of 200 calls at 1,000 per second, then a second later a gate at 20 per second.
      const { clock, open } = await sharedTable();
      const fast = open({ requestsPerSecond: 1_000, burst: 10 });
      for (let call = 0; call < 200; call++) await fast.take();
      clock.now += 1_000;
      const slow = open({ requestsPerSecond: 20, burst: 1 });

      // Act
      const first = await slow.take();
      const gaps = await gapsOf(slow.take, 10);

      // Assess: the first call goes within a slot of 1/20 s, the next ones 1/20 s apart.
      expect(first - clock.now).toBeLessThanOrEqual(50);
      for (const gap of gaps) expect(gap).toBeCloseTo(50, 3);
    });

    it('keeps the calls booked at the old rate when the rate is raised between runs, then goes at the new pace', async () => {
      // Prepare: 40 calls at 20 per second book the next 2 s; then a gate at 1,000 per second.
      const { clock, open } = await sharedTable();
      const slow = open({ requestsPerSecond: 20, burst: 1 });
      const booked = [];
      for (let call = 0; call < 40; call++) booked.push(await slow.take());
      const lastBooked = booked.at(-1) ?? 0;
      clock.now += 100;
      const fast = open({ requestsPerSecond: 1_000, burst: 10 });

      // Act
      const first = await fast.take();
      const gaps = await gapsOf(fast.take, 10);

      // Assess: the first call goes just after the last call booked at 20 per second, not among
      // them, and the next ones 1 ms apart.
      expect(lastBooked - start).toBe(1_950);
      expect(first).toBeGreaterThan(lastBooked);
      expect(first - lastBooked).toBeLessThanOrEqual(1);
      for (const gap of gaps) expect(gap).toBeCloseTo(1, 3);

      // After a quiet spell a call at the new rate goes at once.
      clock.now += 10_000;
      expect(await fast.take()).toBe(clock.now);
    });

    it('moves a counter no gate could have written back to now, and never sends a call away for longer than the longest rate wait', async () => {
      const { table, clock, open } = await sharedTable();
      /** Writes the bucket's counters as given, in DynamoDB's number text. */
      const put = (counters: { slot: string; room: string }) =>
        dynamo.client.send(
          new PutItemCommand({
            TableName: table,
            Item: { [GATE_KEY]: { S: 'platform' }, slot: { N: counters.slot }, room: { N: counters.room } },
          }),
        );
      const paced = open({ burst: 1 });
      const farAhead = `${start + 3_500 * 365.25 * 24 * 3600 * 1000}`;

      // A bucket counter 3,500 years ahead: the call goes at once, the next ones at the pace.
      await put({ slot: farAhead, room: farAhead });
      expect(await paced.take()).toBe(clock.now);
      for (const gap of await gapsOf(paced.take, 5)) expect(gap).toBeCloseTo(100, 3);

      // Counters past any safe integer are read and moved back all the same.
      clock.now += 10_000;
      await put({ slot: '1e30', room: '1e30' });
      expect(await paced.take()).toBe(clock.now);

      // A waiting room 3,500 years ahead behind a booked bucket: the caller is sent away for no
      // longer than the bucket is booked, and never longer than the longest rate wait.
      const sentAway = async () => {
        for (;;) {
          const error = await paced.gate.admit().then(
            () => undefined,
            (thrown: unknown) => thrown,
          );
          if (error !== undefined) return error;
        }
      };
      const state = await paced.gate.state();
      await put({ slot: `${state.slot}`, room: farAhead });
      const error = await sentAway();
      expect(error).toBeInstanceOf(PlatformCapacityError);
      if (!(error instanceof PlatformCapacityError)) return;
      expect(error.waitSeconds).toBeLessThanOrEqual(3);
      expect(error.waitSeconds).toBeLessThanOrEqual(LONGEST_RATE_WAIT_SECONDS);
    });
  });
});
