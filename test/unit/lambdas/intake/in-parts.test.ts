import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AuditEvent } from '#shared/audit';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import { parseRequestMessage } from '#shared/request';
import { siteRequestId } from '#shared/sites';
import { type IntakeDeps, intakeMessage } from '../../../../lambdas/intake/intake.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let ledger: Ledger;
let appended: { requestId: string; event: AuditEvent }[];
let started: { name: string; input: unknown }[];
let deps: IntakeDeps;

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'intake');
  ledger = new Ledger(dynamo.client, 'intake');
});
afterAll(async () => {
  await dynamo.close();
});
beforeEach(() => {
  appended = [];
  started = [];
  deps = {
    ledger,
    audit: {
      append: vi.fn(async (requestId: string, event: AuditEvent) => {
        appended.push({ requestId, event });
        return {} as never;
      }),
    },
    quarantine: vi.fn(async () => {}),
    startExecution: vi.fn(async (name: string, input: unknown) => {
      started.push({ name, input });
      return 'started' as const;
    }),
    logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
    sites: ['news', 'shop', 'blog'],
  };
});

function message(requestId: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    ...extra,
    request_id: requestId,
    type: 'erasure',
    regulation: 'gdpr',
    primary_key: 'subject-pk-31',
    received_at: '2026-11-20T00:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T00:00:00Z' },
  });
}

describe('intake of a stack with several sites', () => {
  it("records the request with a part per site, each part's intake record naming its site, and starts one execution per part", async () => {
    // Prepare
    const id = randomUUID();

    // Act
    const result = await intakeMessage(message(id), deps);

    // Assess
    expect(result).toEqual({ kind: 'accepted', requestId: id });
    expect(started.map(({ name }) => name)).toEqual(
      ['news', 'shop', 'blog'].map((site) => siteRequestId(id, site)),
    );
    expect(started[1]?.input).toEqual({
      request_id: siteRequestId(id, 'shop'),
      type: 'erasure',
      regulation: 'gdpr',
    });
    expect(await ledger.require(id)).toMatchObject({
      status: 'running',
      sites: ['news', 'shop', 'blog'],
      site_results: {},
    });
    expect((await ledger.require(siteRequestId(id, 'blog'))).executions).toBe(1);
    expect(appended.map(({ requestId }) => requestId)).toEqual([id, ...started.map(({ name }) => name)]);
    expect(appended[2]?.event.facts).toMatchObject({ site: 'shop', part_of: id });
  });

  it('finishes a fan-out that a crash cut short when the message comes again: the missing part, its record and its run', async () => {
    // Prepare: the first delivery recorded the request and its first part, then died
    const id = randomUUID();
    const parsed = parseRequestMessage(message(id));
    if (parsed.kind !== 'valid') throw new Error('the message is valid');
    const deadlines = computeDeadlines('gdpr', new Date('2026-11-20T00:00:00Z'));
    await ledger.createReceived(parsed.request, parsed.fingerprint, deadlines, {
      sites: ['news', 'shop', 'blog'],
      site_results: {},
    });
    await ledger.createReceived(
      { ...parsed.request, request_id: siteRequestId(id, 'news') },
      parsed.fingerprint,
      deadlines,
      { site: 'news', parent_request_id: id },
    );

    // Act
    const again = await intakeMessage(message(id), deps);

    // Assess
    expect(again.kind).toBe('duplicate');
    expect((await ledger.get(siteRequestId(id, 'shop')))?.status).toBe('received');
    expect(started.map(({ name }) => name)).toEqual(
      ['news', 'shop', 'blog'].map((site) => siteRequestId(id, site)),
    );
    expect((await ledger.require(id)).status).toBe('running');
  });

  it('runs a request of a stack with one site under its own id, as before', async () => {
    // Prepare
    const id = randomUUID();

    // Act
    await intakeMessage(message(id), { ...deps, sites: ['main'] });

    // Assess
    expect(started.map(({ name }) => name)).toEqual([id]);
    expect((await ledger.require(id)).site_results).toBeUndefined();
  });

  it("runs only the sites a request names, in the configuration's order", async () => {
    // Prepare
    const id = randomUUID();

    // Act
    await intakeMessage(message(id, { sites: ['blog', 'news'] }), deps);

    // Assess
    expect(started.map(({ name }) => name)).toEqual([siteRequestId(id, 'news'), siteRequestId(id, 'blog')]);
    expect((await ledger.require(id)).sites).toEqual(['news', 'blog']);
    expect(await ledger.get(siteRequestId(id, 'shop'))).toBeUndefined();
  });

  it('rejects a request naming a site the stack does not serve, listing the ones it does', async () => {
    // Prepare
    const id = randomUUID();

    // Act
    const result = await intakeMessage(message(id, { sites: ['news', 'forum'] }), deps);

    // Assess
    expect(result.kind).toBe('rejected');
    const item = await ledger.require(id);
    expect(item.status).toBe('rejected');
    expect(item.rejection_errors).toEqual([
      'sites: "forum" is not a site of this stack; the sites are "news", "shop", "blog": name those, or leave "sites" out for all of them',
    ]);
    expect(started).toEqual([]);
  });

  it('refuses a site id of the wrong form, or one named twice, as a field error', async () => {
    // Act
    const bad = await intakeMessage(message(randomUUID(), { sites: ['News'] }), deps);
    const twice = await intakeMessage(message(randomUUID(), { sites: ['news', 'news'] }), deps);

    // Assess
    expect([bad.kind, twice.kind]).toEqual(['rejected', 'rejected']);
    expect(started).toEqual([]);
  });
});
