import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiQuotas } from '../../../lambdas/reconciler/quota.ts';
import { type QuotaRunOptions, reconcileUnderQuota, totals } from '../../bench/reconciler.ts';
import { startDynamo } from '../helpers/dynamo.ts';

/**
 * The reconciler bench's small version (local/bench/reconciler.ts; `npm run bench` runs 50,000
 * open requests against the documented buckets): 120 open requests against buckets small enough
 * that the pass's own pace of calls (16 requests at once) empties them, so a pass that does not
 * pace itself is throttled.
 */
const QUOTAS: ApiQuotas = {
  ListExecutions: { bucket: 4, refillPerSecond: 8 },
  DescribeExecution: { bucket: 6, refillPerSecond: 12 },
  StartExecution: { bucket: 6, refillPerSecond: 24 },
};
const RUN: QuotaRunOptions = {
  requests: 120,
  failed: 12,
  unlisted: 24,
  history: 50,
  quotas: QUOTAS,
  pace: { share: 0.5 },
  latencyMs: 1,
  budgetMs: 60_000,
  firstBackoffMs: 50,
  pageSize: 20,
};

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
beforeAll(async () => {
  dynamo = await startDynamo();
});
afterAll(async () => {
  await dynamo.close();
});

describe('the reconciler under Step Functions throttling', () => {
  it('covers every open request in one pass, throttled never, when it paces itself at half the quotas', async () => {
    // Act
    const run = await reconcileUnderQuota(dynamo.client, RUN);

    // Assess
    expect(run).toMatchObject({ complete: true, passes: 1, failedPasses: 0, checked: RUN.requests });
    expect(totals(run.calls).throttled).toBe(0);
    // Matched by name from the listings: only the requests no listing named were described.
    expect(run.calls.DescribeExecution.calls).toBe(RUN.unlisted);
    expect(run.calls.ListExecutions.calls).toBe(5);
    expect(run.calls.StartExecution.calls).toBe(RUN.failed + RUN.unlisted);
    expect(run.resumedAsExpected).toBe(true);
    expect(totals(run.calls).calls / run.requests).toBeLessThan(0.55);
  }, 60_000);

  it('covers every request with another caller spending the other half of every refill, throttled never', async () => {
    // Act
    const run = await reconcileUnderQuota(dynamo.client, { ...RUN, neighbourShare: 0.5 });

    // Assess
    expect(run).toMatchObject({
      complete: true,
      failedPasses: 0,
      checked: RUN.requests,
      resumedAsExpected: true,
    });
    expect(totals(run.calls).throttled).toBe(0);
    expect(run.neighbour?.calls).toBeGreaterThan(0);
  }, 60_000);

  it('is throttled without its pace, backs off, and still covers every request with no failed pass', async () => {
    // Act
    const run = await reconcileUnderQuota(dynamo.client, { ...RUN, pace: 'unpaced' });

    // Assess
    expect(totals(run.calls).throttled).toBeGreaterThan(0);
    expect(run).toMatchObject({
      complete: true,
      failedPasses: 0,
      checked: RUN.requests,
      resumedAsExpected: true,
    });
  }, 60_000);

  it('backs off when another caller has emptied the buckets, keeps its place as its time runs out, and the next passes finish', async () => {
    // Act
    const run = await reconcileUnderQuota(dynamo.client, {
      ...RUN,
      burstBefore: true,
      budgetMs: 1_500,
    });

    // Assess
    expect(totals(run.calls).throttled).toBeGreaterThan(0);
    expect(run.passes).toBeGreaterThan(1);
    expect(run).toMatchObject({ complete: true, failedPasses: 0, resumedAsExpected: true });
    // Each page is counted once, by the pass that finished it: together the passes cover each request once.
    expect(run.checked).toBe(RUN.requests);
  }, 60_000);

  it('the previous pass (a DescribeExecution per open request, unpaced) fails at its first throttled call', async () => {
    // Act
    const run = await reconcileUnderQuota(dynamo.client, { ...RUN, pace: 'previous' });

    // Assess
    expect(run.failedPasses).toBe(1);
    expect(run.failures).toEqual(['ThrottlingException']);
    expect(run.complete).toBe(false);
    expect(run.described).toBeLessThan(RUN.requests);
  }, 60_000);
});
