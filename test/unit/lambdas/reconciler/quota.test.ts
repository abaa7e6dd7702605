import { describe, expect, it } from 'vitest';
import {
  ApiPacer,
  type ApiQuotas,
  DOCUMENTED_QUOTAS,
  documentedQuotas,
  isThrottling,
  type PacerClock,
  shareOf,
} from '../../../../lambdas/reconciler/quota.ts';

/** A clock that moves only when someone sleeps: one caller at a time, so sleeps never overlap. */
function steppedClock(): PacerClock & { readonly at: () => number } {
  let now = 0;
  return {
    now: () => now,
    sleep: async (ms) => {
      now += ms;
    },
    at: () => now,
  };
}

const QUOTAS: ApiQuotas = {
  ListExecutions: { bucket: 2, refillPerSecond: 1 },
  DescribeExecution: { bucket: 10, refillPerSecond: 5 },
  StartExecution: { bucket: 100, refillPerSecond: 50 },
};

const throttling = () => Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' });
const forever = () => Number.POSITIVE_INFINITY;

describe('documentedQuotas', () => {
  it('gives the largest Regions their larger buckets and every other Region the smaller ones', () => {
    // Assess
    expect(documentedQuotas('eu-west-1').DescribeExecution).toEqual({ bucket: 300, refillPerSecond: 15 });
    expect(documentedQuotas('us-east-1')).toBe(DOCUMENTED_QUOTAS.largest);
    expect(documentedQuotas('eu-central-1').DescribeExecution).toEqual({ bucket: 250, refillPerSecond: 10 });
    expect(documentedQuotas(undefined)).toBe(DOCUMENTED_QUOTAS.other);
  });
});

describe('shareOf', () => {
  it('takes the share of every bucket and refill, and never less than one call', () => {
    // Act
    const half = shareOf(DOCUMENTED_QUOTAS.largest, 0.5);
    const sliver = shareOf(QUOTAS, 0.05);

    // Assess
    expect(half.DescribeExecution).toEqual({ bucket: 150, refillPerSecond: 7.5 });
    expect(half.ListExecutions).toEqual({ bucket: 100, refillPerSecond: 2.5 });
    expect(sliver.ListExecutions).toEqual({ bucket: 1, refillPerSecond: 0.05 });
  });
});

describe('ApiPacer', () => {
  it('makes a burst of its bucket at once, then no more calls than its refill', async () => {
    // Prepare
    const clock = steppedClock();
    const pacer = new ApiPacer(QUOTAS, { clock });
    const madeAt: number[] = [];

    // Act
    for (let call = 0; call < 20; call++) {
      await pacer.run('DescribeExecution', async () => madeAt.push(clock.at()), forever);
    }

    // Assess: 10 at 0 ms, then one every 200 ms.
    expect(madeAt.slice(0, 10)).toEqual(Array(10).fill(0));
    expect(madeAt.slice(10).map(Math.round)).toEqual([
      200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800, 2000,
    ]);
    expect(pacer.figures().DescribeExecution).toEqual({ calls: 20, throttled: 0 });
  });

  it('keeps a bucket per action: one action spent leaves the others whole', async () => {
    // Prepare
    const clock = steppedClock();
    const pacer = new ApiPacer(QUOTAS, { clock });
    for (let call = 0; call < 2; call++) await pacer.run('ListExecutions', async () => 0, forever);

    // Act
    await pacer.run('DescribeExecution', async () => 0, forever);

    // Assess
    expect(clock.at()).toBe(0);
  });

  it('backs off after a throttled call, doubling each time, and makes it again', async () => {
    // Prepare
    const clock = steppedClock();
    const pacer = new ApiPacer(QUOTAS, { clock, firstBackoffMs: 100, random: () => 1 });
    const attemptsAt: number[] = [];

    // Act
    const answer = await pacer.run(
      'StartExecution',
      async () => {
        attemptsAt.push(clock.at());
        if (attemptsAt.length < 4) throw throttling();
        return 'started';
      },
      forever,
    );

    // Assess: backoffs of 100, 200 and 400 ms (jitter at its top); the emptied bucket refills meanwhile.
    expect(answer).toEqual({ done: true, value: 'started' });
    expect(attemptsAt.map(Math.round)).toEqual([0, 100, 300, 700]);
    expect(pacer.figures().StartExecution).toEqual({ calls: 4, throttled: 3 });
  });

  it('does not make a call whose wait for a token would outlast the time left', async () => {
    // Prepare
    const clock = steppedClock();
    const pacer = new ApiPacer(QUOTAS, { clock });
    for (let call = 0; call < 2; call++) await pacer.run('ListExecutions', async () => 0, forever);
    let made = 0;

    // Act: the next token is a second away, and only half a second is left.
    const answer = await pacer.run(
      'ListExecutions',
      async () => made++,
      () => 500,
    );

    // Assess
    expect(answer).toEqual({ done: false });
    expect(made).toBe(0);
    expect(clock.at()).toBe(0);
  });

  it('stops trying a throttled call once its backoff would outlast the time left', async () => {
    // Prepare
    const clock = steppedClock();
    const pacer = new ApiPacer(QUOTAS, { clock, firstBackoffMs: 1000, random: () => 0 });

    // Act
    const answer = await pacer.run(
      'DescribeExecution',
      async () => {
        throw throttling();
      },
      () => 2_000 - clock.at(),
    );

    // Assess: tried at 0, 500 and 1,500 ms; the next backoff (2 s) would end after the time left.
    expect(answer).toEqual({ done: false });
    expect(pacer.figures().DescribeExecution).toEqual({ calls: 3, throttled: 3 });
  });

  it('throws any error but throttling as it is', async () => {
    // Prepare
    const pacer = new ApiPacer(QUOTAS, { clock: steppedClock() });
    const denied = Object.assign(new Error('not authorized'), { name: 'AccessDeniedException' });

    // Act / Assess
    await expect(
      pacer.run(
        'DescribeExecution',
        async () => {
          throw denied;
        },
        forever,
      ),
    ).rejects.toBe(denied);
    expect(pacer.figures().DescribeExecution).toEqual({ calls: 1, throttled: 0 });
  });
});

describe('isThrottling', () => {
  it('knows the names AWS throttles with, and nothing else', () => {
    // Assess
    expect(isThrottling(throttling())).toBe(true);
    expect(isThrottling(Object.assign(new Error('x'), { name: 'TooManyRequestsException' }))).toBe(true);
    expect(isThrottling(new Error('ThrottlingException'))).toBe(false);
    expect(isThrottling('ThrottlingException')).toBe(false);
  });
});
