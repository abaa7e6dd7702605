import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger, OPEN_INDEX_SHARDS } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import type { DsrRequest } from '#shared/request';
import { requestVerdict } from '#shared/site-outcomes';
import { siteRequestId } from '#shared/sites';
import { startDynamo } from '../../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let ledger: Ledger;

function request(): DsrRequest {
  return {
    request_id: randomUUID().toUpperCase(),
    type: 'erasure',
    regulation: 'gdpr',
    primary_key: 'u-1',
    received_at: '2026-11-02T09:30:00Z',
    verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-02T10:00:00Z' },
  };
}
const deadlines = computeDeadlines('gdpr', new Date('2026-11-02T09:30:00Z'));

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  ledger = new Ledger(dynamo.client, 'ledger', () => new Date('2026-11-03T00:00:00Z'));
});
afterAll(async () => {
  await dynamo.close();
});

describe('a request in parts, one per site', () => {
  it("records the request with empty results and each site's part as a request of its own", async () => {
    // Prepare
    const req = request();
    const id = req.request_id.toLowerCase();

    // Act
    const { request: own, parts } = await ledger.createInParts(req, 'fp', deadlines, [
      'news',
      'shop',
      'blog',
    ]);

    // Assess
    expect(own).toMatchObject({
      created: true,
      item: { request_id: id, status: 'received', site_results: {} },
    });
    expect(parts.map((part) => (part.created ? part.item : part.existing))).toEqual([
      expect.objectContaining({
        request_id: `${id}_news`,
        site: 'news',
        parent_request_id: id,
        primary_key: 'u-1',
      }),
      expect.objectContaining({ request_id: `${id}_shop`, site: 'shop', parent_request_id: id }),
      expect.objectContaining({ request_id: `${id}_blog`, site: 'blog', parent_request_id: id }),
    ]);
    expect((await ledger.get(siteRequestId(id, 'shop')))?.status).toBe('received');
  });

  it('creates only the parts a cut-short intake left out when run again', async () => {
    // Prepare: the first run recorded the request and one part, then died
    const req = request();
    const id = req.request_id.toLowerCase();
    await ledger.createInParts(req, 'fp', deadlines, ['news']);
    await ledger.update(siteRequestId(id, 'news'), { status: 'running' }, ['received']);

    // Act
    const again = await ledger.createInParts(req, 'fp', deadlines, ['news', 'shop']);

    // Assess
    expect(again.request.created).toBe(false);
    expect(again.parts.map((part) => part.created)).toEqual([false, true]);
    expect((await ledger.get(siteRequestId(id, 'news')))?.status).toBe('running');
  });

  it("keeps each site's latest result, whatever order and however often they arrive", async () => {
    // Prepare
    const req = request();
    const id = req.request_id.toLowerCase();
    await ledger.createInParts(req, 'fp', deadlines, ['news', 'shop']);

    // Act: shop's failure, news's erasure twice, then shop's older running state late
    await ledger.recordSiteResult(id, 'shop', {
      status: 'failed',
      error_code: 'platform_outage',
      at: '2026-11-03T02:00:00Z',
    });
    await ledger.recordSiteResult(id, 'news', {
      status: 'completed',
      outcome: 'erased',
      at: '2026-11-03T01:00:00Z',
    });
    await ledger.recordSiteResult(id, 'news', {
      status: 'completed',
      outcome: 'erased',
      at: '2026-11-03T01:00:00Z',
    });
    const last = await ledger.recordSiteResult(id, 'shop', { status: 'running', at: '2026-11-03T00:30:00Z' });

    // Assess
    expect(last?.site_results).toEqual({
      news: { status: 'completed', outcome: 'erased', at: '2026-11-03T01:00:00Z' },
      shop: { status: 'failed', error_code: 'platform_outage', at: '2026-11-03T02:00:00Z' },
    });
    expect(requestVerdict('erasure', ['news', 'shop'], last?.site_results ?? {})).toMatchObject({
      kind: 'failed',
      failed: ['shop'],
    });
  });

  it('records no result on a request that does not run in parts', async () => {
    // Prepare
    const req = request();
    await ledger.createReceived(req, 'fp', deadlines);

    // Act
    const recorded = await ledger.recordSiteResult(req.request_id, 'news', {
      status: 'completed',
      outcome: 'no_data',
      at: '2026-11-03T01:00:00Z',
    });

    // Assess
    expect(recorded).toBeUndefined();
    expect((await ledger.get(req.request_id))?.site_results).toBeUndefined();
  });
});

describe('the open requests of a ledger with requests in parts', () => {
  it('are the requests, never their parts: a request is counted and listed once, however many sites it covers', async () => {
    // Prepare
    const req = request();
    const id = req.request_id.toLowerCase();
    await ledger.createInParts(req, 'fp', deadlines, ['news', 'shop']);

    // Act
    const listed = await ledger.allOpenRequests(['received']);
    const merged: string[] = [];
    for await (const entry of ledger.openRequests('received')) merged.push(entry.request_id);

    // Assess
    expect(listed.map((entry) => entry.request_id)).toContain(id);
    expect(listed.some((entry) => entry.request_id.startsWith(`${id}.`))).toBe(false);
    expect(merged).toContain(id);
    expect(merged.some((entry) => entry.startsWith(`${id}.`))).toBe(false);
  });

  it("still shows the reconciler each part, page by page, in the open index's shards", async () => {
    // Prepare
    const req = request();
    const id = req.request_id.toLowerCase();
    await ledger.createInParts(req, 'fp', deadlines, ['news']);

    // Act
    const seen: string[] = [];
    for (let shard = 0; shard < OPEN_INDEX_SHARDS; shard++) {
      const page = await ledger.openRequestsPage('received', shard, { pageSize: 1000 });
      seen.push(...page.items.map((entry) => entry.request_id));
    }

    // Assess
    expect(seen).toContain(`${id}_news`);
  });
});
