import { randomUUID } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { SITES_FAILED_CODE } from '#shared/site-parts';
import { siteRequestId } from '#shared/sites';
import { recordFailure } from '../../../../lambdas/record-failure/record-failure.ts';
import { recordOutcome } from '../../../../lambdas/record-outcome/record-outcome.ts';
import { deps, ledger, useStepWorld } from '../step-world.ts';

useStepWorld();

/** An erasure across `sites`, each site's part running. */
async function erasureInParts(sites: readonly string[]): Promise<string> {
  const id = randomUUID();
  await ledger.createInParts(
    {
      request_id: id,
      type: 'erasure',
      regulation: 'gdpr',
      primary_key: 'subject-pk-77',
      received_at: '2026-11-20T00:00:00Z',
      verification: { method: 'm', verified_by: 'v', verified_at: '2026-11-20T00:00:00Z' },
    },
    'fp',
    computeDeadlines('gdpr', new Date('2026-11-20T00:00:00Z')),
    sites,
  );
  await ledger.update(id, { status: 'running' }, ['received']);
  for (const site of sites) await ledger.update(siteRequestId(id, site), { status: 'running' }, ['received']);
  return id;
}

const verified = {
  erasure_verification: { platform_answer: 'not_found' as const, at: '2026-11-21T11:01:00Z' },
};

/** The final records appended to the request's own chain, one per event id (the trail keeps one per event). */
function finalRecordsOf(id: string) {
  const calls = vi.mocked(deps.audit.append).mock.calls.filter(([requestId]) => requestId === id);
  return [...new Map(calls.map(([, event]) => [event.eventId, event])).values()].filter(
    (event) => event.final,
  );
}

describe("a request in parts, as its sites' parts end", () => {
  it('stays running while a site works, then completes with the outcome of what was done anywhere', async () => {
    // Prepare: the subject exists on news, not on shop
    const id = await erasureInParts(['news', 'shop']);
    await ledger.update(siteRequestId(id, 'news'), verified, ['running']);

    // Act
    await recordOutcome({ request_id: siteRequestId(id, 'news'), outcome: 'erased' }, deps);
    const meanwhile = await ledger.require(id);
    await recordOutcome({ request_id: siteRequestId(id, 'shop'), outcome: 'no_data' }, deps);

    // Assess
    expect(meanwhile.status).toBe('running');
    expect(await ledger.require(id)).toMatchObject({
      status: 'completed',
      outcome: 'erased',
      site_results: {
        news: { status: 'completed', outcome: 'erased' },
        shop: { status: 'completed', outcome: 'no_data' },
      },
    });
    expect(finalRecordsOf(id)).toEqual([
      expect.objectContaining({
        action: 'request_completed',
        facts: expect.objectContaining({
          outcome: 'erased',
          sites: 'erased on 1 (news); no data on 1 (shop)',
        }),
      }),
    ]);
  });

  it('fails naming the site that failed, once the others have ended, and keeps what they did', async () => {
    // Prepare
    const id = await erasureInParts(['news', 'shop']);
    await ledger.update(siteRequestId(id, 'news'), verified, ['running']);

    // Act
    await recordFailure(
      { request_id: siteRequestId(id, 'shop'), error: { Error: 'PlatformOutageError', Cause: 'down' } },
      deps,
    );
    const meanwhile = await ledger.require(id);
    await recordOutcome({ request_id: siteRequestId(id, 'news'), outcome: 'erased' }, deps);

    // Assess
    expect(meanwhile.status).toBe('running');
    const request = await ledger.require(id);
    expect(request).toMatchObject({ status: 'failed', error: { code: SITES_FAILED_CODE } });
    expect(request.error?.message).toContain('failed on shop');
    expect((await ledger.require(siteRequestId(id, 'news'))).status).toBe('completed');
    expect(finalRecordsOf(id).map((event) => event.action)).toEqual(['request_failed']);
  });

  it('ends the request once, with one final record, when its last two sites end at once', async () => {
    // Prepare
    const id = await erasureInParts(['news', 'shop', 'blog']);
    await recordOutcome({ request_id: siteRequestId(id, 'blog'), outcome: 'no_data' }, deps);

    // Act
    await Promise.all([
      recordOutcome({ request_id: siteRequestId(id, 'news'), outcome: 'no_data' }, deps),
      recordOutcome({ request_id: siteRequestId(id, 'shop'), outcome: 'no_data' }, deps),
    ]);

    // Assess
    expect(await ledger.require(id)).toMatchObject({ status: 'completed', outcome: 'no_data' });
    expect(finalRecordsOf(id)).toHaveLength(1);
  });

  it('writes the final record it missed when RecordOutcome runs again after the request ended', async () => {
    // Prepare: the last part's step ended the request, then its audit append failed
    const id = await erasureInParts(['news']);
    vi.mocked(deps.audit.append).mockImplementation(async (requestId) => {
      if (requestId === id) throw new Error('S3 unavailable');
      return {} as never;
    });
    await expect(
      recordOutcome({ request_id: siteRequestId(id, 'news'), outcome: 'no_data' }, deps),
    ).rejects.toThrow('S3 unavailable');
    vi.mocked(deps.audit.append).mockImplementation(async () => ({}) as never);
    vi.mocked(deps.audit.append).mockClear();

    // Act
    await recordOutcome({ request_id: siteRequestId(id, 'news'), outcome: 'no_data' }, deps);

    // Assess
    expect((await ledger.require(id)).status).toBe('completed');
    expect(finalRecordsOf(id).map((event) => event.action)).toEqual(['request_completed']);
  });
});

describe('a request in parts, run as a whole by mistake', () => {
  it('is refused by its first step, which acts on no site', async () => {
    // Prepare
    const id = await erasureInParts(['news', 'shop']);
    const { resolveSubject } = await import('../../../../lambdas/resolve-subject/resolve-subject.ts');

    // Act
    const run = resolveSubject({ request_id: id }, deps);

    // Assess
    await expect(run).rejects.toThrow('runs in parts');
    expect(vi.mocked(deps.platform.retrieveUser)).not.toHaveBeenCalled();
  });
});
