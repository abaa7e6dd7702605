import { randomUUID } from 'node:crypto';
import { UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { AuditEvent, AuditRecord } from '#shared/audit';
import type { ExecutionStatus, ListedStatus } from '#shared/executions';
import { Ledger, type Status } from '#shared/ledger';
import { createGateTable, createLedgerTable } from '#shared/ledger/table';
import { PlatformGate } from '#shared/platform-gate';
import { SITES_FAILED_CODE } from '#shared/site-parts';
import { siteRequestId } from '#shared/sites';
import type { ExecutionInput } from '#shared/step-io';
import { memoryCursor } from '../../../../lambdas/reconciler/cursor.ts';
import { ApiPacer, DOCUMENTED_QUOTAS, shareOf } from '../../../../lambdas/reconciler/quota.ts';
import {
  type ReconcileMetrics,
  reconcile,
  STRANDED_CODE,
} from '../../../../lambdas/reconciler/reconciler.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

const NOW = new Date('2026-12-01T12:00:00.000Z');
const EARLIER = new Date(NOW.getTime() - 3600_000);
const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let tables = 0;
beforeAll(async () => {
  dynamo = await startDynamo();
});
afterAll(async () => {
  await dynamo.close();
});

/** A ledger with one request per status, last changed an hour ago. */
async function ledgerWith(statuses: Status[]): Promise<{ ledger: Ledger; tableName: string; ids: string[] }> {
  tables += 1;
  const tableName = `reconcile-${tables}`;
  await createLedgerTable(dynamo.client, tableName);
  const ledger = new Ledger(dynamo.client, tableName, () => EARLIER);
  const ids: string[] = [];
  for (const status of statuses) {
    const id = randomUUID();
    await ledger.createReceived(
      {
        request_id: id,
        type: 'access',
        regulation: 'gdpr',
        primary_key: 'u-1',
        received_at: '2026-11-20T09:00:00Z',
        verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-20T09:05:00Z' },
      },
      'fp',
      { due_at: '2026-12-20T09:00:00Z', extension_limit_at: '2027-02-20T09:00:00Z', confirm_by: null },
    );
    await ledger.countFirstRun(id);
    if (status !== 'received') await ledger.update(id, { status }, ['received']);
    ids.push(id);
  }
  return { ledger: new Ledger(dynamo.client, tableName, () => NOW), tableName, ids };
}

/** A platform gate on a table of its own, and the metrics each pass publishes. */
async function gated(now: () => number = () => NOW.getTime()) {
  tables += 1;
  const table = `gate-${tables}`;
  await createGateTable(dynamo.client, table);
  const gate = new PlatformGate(
    dynamo.client,
    table,
    { requestsPerSecond: 100, burst: 100, maxOpenExports: 10, outageHorizonSeconds: 3600 },
    { now },
  );
  const published: ReconcileMetrics[] = [];
  return {
    gate,
    published,
    publish: (metrics: ReconcileMetrics) => published.push(metrics),
    cursor: memoryCursor(),
  };
}

/**
 * Step Functions over `statuses` (execution name -> status): ListExecutions lists each status's
 * executions in one page, DescribeExecution answers any name (MISSING when unknown).
 */
function executions(statuses: Record<string, ExecutionStatus>) {
  const started: { name: string; input: ExecutionInput }[] = [];
  const appended: { requestId: string; event: AuditEvent }[] = [];
  const described: string[] = [];
  return {
    started,
    appended,
    described,
    list: async (status: ListedStatus) => ({
      executions: Object.entries(statuses)
        .filter(([, listed]) => listed === status)
        .map(([name, listed]) => ({ name, status: listed })),
    }),
    audit: {
      append: async (requestId: string, event: AuditEvent) => {
        appended.push({ requestId, event });
        return {} as AuditRecord;
      },
    },
    describe: async (name: string) => {
      described.push(name);
      return statuses[name] ?? 'MISSING';
    },
    start: async (name: string, input: ExecutionInput) => {
      started.push({ name, input });
      return 'started' as const;
    },
  };
}

describe('reconcile', () => {
  it('resumes an open request whose execution ended, and leaves a running one alone', async () => {
    const { ledger, ids } = await ledgerWith(['running', 'running', 'completed']);
    const [stuck = '', live = ''] = ids;
    const sfn = executions({ [stuck]: 'TIMED_OUT', [live]: 'RUNNING' });

    const summary = await reconcile(
      { ledger, ...sfn, clock: () => NOW, logger: silent, ...(await gated()) },
      { maxResumes: 3, graceSeconds: 60 },
    );

    expect(summary.resumed).toEqual([stuck]);
    expect(sfn.started).toEqual([
      { name: `${stuck}-retry-2`, input: { request_id: stuck, type: 'access', regulation: 'gdpr' } },
    ]);
    expect(await ledger.require(stuck)).toMatchObject({ status: 'running', executions: 2, resumes: 1 });
    expect(await ledger.require(live)).toMatchObject({ executions: 1 });
  });

  it('records a request failed as stranded once it was resumed maxResumes times', async () => {
    const { ledger, ids } = await ledgerWith(['running']);
    const [stuck = ''] = ids;
    const sfn = executions({});
    const deps = { ledger, ...sfn, clock: () => NOW, logger: silent, ...(await gated()) };

    const first = await reconcile(deps, { maxResumes: 1, graceSeconds: 0 });
    const second = await reconcile(deps, { maxResumes: 1, graceSeconds: 0 });

    expect(first.resumed).toEqual([stuck]);
    expect(second.stranded).toEqual([stuck]);
    const item = await ledger.require(stuck);
    expect(item).toMatchObject({ status: 'failed', error: { code: STRANDED_CODE } });
    expect(item.error?.message).toContain('svc-dsr retry');
    expect(sfn.started).toHaveLength(1);
    // Failed is terminal: the reconciler's own record closes the chain.
    expect(sfn.appended).toEqual([
      {
        requestId: stuck,
        event: expect.objectContaining({
          step: 'Reconciler',
          action: 'request_failed',
          facts: { code: STRANDED_CODE, step: null },
          final: true,
        }),
      },
    ]);
  });

  it('leaves a request changed within the grace period to the intake or retry starting it', async () => {
    const { ledger } = await ledgerWith(['received']);
    const sfn = executions({});

    const summary = await reconcile(
      {
        ledger,
        ...sfn,
        clock: () => new Date(EARLIER.getTime() + 30_000),
        logger: silent,
        ...(await gated()),
      },
      { maxResumes: 3, graceSeconds: 60 },
    );

    expect(summary.resumed).toEqual([]);
    expect(sfn.started).toEqual([]);
  });

  it('moves the open index key of a request the state machine recorded failed itself', async () => {
    const { ledger, tableName, ids } = await ledgerWith(['running']);
    const [failed = ''] = ids;
    // What the state machine's last-resort write does: the status only.
    await dynamo.client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { request_id: { S: failed } },
        UpdateExpression: 'SET #status = :failed',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':failed': { S: 'failed' } },
      }),
    );
    const sfn = executions({});

    const summary = await reconcile(
      { ledger, ...sfn, clock: () => NOW, logger: silent, ...(await gated()) },
      { maxResumes: 3, graceSeconds: 0 },
    );

    expect(summary.reindexed).toBe(1);
    expect(sfn.started).toEqual([]);
    // No Lambda recorded that failure: the reconciler writes the final record RecordFailure would have.
    expect(sfn.appended).toEqual([
      {
        requestId: failed,
        event: expect.objectContaining({ step: 'Reconciler', action: 'request_failed', final: true }),
      },
    ]);
    const listed: string[] = [];
    for await (const entry of ledger.openRequests('failed')) listed.push(entry.request_id);
    expect(listed).toEqual([failed]);
  });

  it('gives back the export slot of a request that no longer exports, and publishes what it found', async () => {
    const { ledger, ids } = await ledgerWith(['running', 'running', 'failed']);
    const [stuck = '', exporting = '', ended = ''] = ids;
    await ledger.update(exporting, { step: 'exporting' }, ['running']);
    const sfn = executions({ [exporting]: 'RUNNING' });
    // The gate's clock runs an hour ahead of the ledger's writes, so every slot is settled.
    const gate = await gated(() => NOW.getTime() - 3_600_000);
    for (const id of [exporting, ended]) await gate.gate.acquireExport(id);
    for (let failure = 0; failure < 5; failure++) await gate.gate.report('down');

    const summary = await reconcile(
      { ledger, ...sfn, ...gate, clock: () => NOW, logger: silent },
      { maxResumes: 3, graceSeconds: 60 },
    );

    expect(summary.slotsFreed).toBe(1);
    expect(Object.keys(await gate.gate.exportHolders())).toEqual([exporting]);
    expect(gate.published.at(-1)).toEqual({
      StuckRequests: 1,
      PlatformDownSeconds: 3600,
      ExportSlotsHeld: 1,
    });
    expect(summary.resumed).toEqual([stuck]);
  });

  it('offers export slots that stand free while requests wait for one, on every pass', async () => {
    const { ledger } = await ledgerWith([]);
    const sfn = executions({});
    const gate = await gated();
    let offers = 0;
    const offering = {
      exportHolders: () => gate.gate.exportHolders(),
      releaseExport: (requestId: string) => gate.gate.releaseExport(requestId),
      state: () => gate.gate.state(),
      offerFreeSlots: async () => {
        offers += 1;
        return 0;
      },
    };

    await reconcile(
      { ledger, ...sfn, ...gate, gate: offering, clock: () => NOW, logger: silent },
      { maxResumes: 3, graceSeconds: 60 },
    );

    expect(offers).toBe(1);
  });

  it('stops when its time is up, and the next pass goes on from the cursor and covers the rest', async () => {
    const { ledger, ids } = await ledgerWith(Array.from({ length: 30 }, (): Status => 'running'));
    const sfn = executions({});
    // A budget in pages (the 16 empty shards of `received`, then 4 of `running`): the clock is the
    // pages read, so nothing here depends on real time.
    let pagesRead = 0;
    const readPage = ledger.openRequestsPage.bind(ledger);
    vi.spyOn(ledger, 'openRequestsPage').mockImplementation((...args) => {
      pagesRead += 1;
      return readPage(...args);
    });
    const deps = { ledger, ...sfn, clock: () => NOW, logger: silent, ...(await gated()) };
    const budgetOf = (pages: number) => () => (pagesRead < pages ? 1 : 0);
    const options = { maxResumes: 3, graceSeconds: 60, pageSize: 4, concurrency: 3 };

    const first = await reconcile(deps, { ...options, timeLeftMs: budgetOf(20) });
    const stoppedAt = deps.cursor.current;
    const second = await reconcile(deps, options);

    expect(first).toMatchObject({ complete: false, pages: 20 });
    expect(first.checked).toBeGreaterThan(0);
    expect(first.checked).toBeLessThan(ids.length);
    expect(stoppedAt).toMatchObject({ status: 'running' });
    // The second pass reads only what the first did not: together they looked at each request once.
    expect(second.complete).toBe(true);
    expect(first.checked + second.checked).toBe(ids.length);
    expect([...first.resumed, ...second.resumed].sort()).toEqual([...ids].sort());
    expect(new Set(sfn.started.map((started) => started.name)).size).toBe(ids.length);
    expect(deps.cursor.current).toBeUndefined();
  });

  it('publishes its figures page by page, before the pass ends', async () => {
    const { ledger, ids } = await ledgerWith(Array.from({ length: 12 }, (): Status => 'running'));
    let looked = 0;
    const sfn = {
      ...executions({}),
      // The last request's lookup fails, as a pass killed by its timeout would end there.
      describe: async () => {
        looked += 1;
        if (looked === ids.length) throw new Error('Task timed out');
        return 'MISSING' as const;
      },
    };
    const gate = await gated();

    await expect(
      reconcile(
        { ledger, ...sfn, ...gate, clock: () => NOW, logger: silent },
        { maxResumes: 3, graceSeconds: 60, pageSize: 2, concurrency: 1 },
      ),
    ).rejects.toThrow('Task timed out');

    expect(gate.published.length).toBeGreaterThan(0);
    expect(gate.published.at(-1)?.StuckRequests).toBeGreaterThan(0);
  });

  it('holds the slot of an export a cancelled request left pending, and drains it once complete', async () => {
    const { ledger, ids } = await ledgerWith(['running', 'running']);
    const [cancelled = '', neverStarted = ''] = ids;
    await ledger.update(cancelled, { step: 'exporting', export_id: 'exp-9', export_status: 'pending' }, [
      'running',
    ]);
    await ledger.cancel(cancelled, { reason: 'withdrawn' });
    await ledger.cancel(neverStarted, { reason: 'withdrawn' });
    const sfn = executions({});
    const gate = await gated(() => NOW.getTime() - 3_600_000);
    for (const id of ids) await gate.gate.acquireExport(id);
    const answers: ('pending' | 'completed')[] = ['pending', 'completed'];
    const discarded: string[] = [];
    const drain = {
      state: async () => answers.shift() ?? 'completed',
      discard: async (exportId: string) => {
        discarded.push(exportId);
        return 1234;
      },
    };
    const deps = { ledger, ...sfn, ...gate, drain, clock: () => NOW, logger: silent };

    const first = await reconcile(deps, { maxResumes: 3, graceSeconds: 60 });
    const heldAfterFirst = Object.keys(await gate.gate.exportHolders());
    const second = await reconcile(deps, { maxResumes: 3, graceSeconds: 60 });

    // The platform still prepares the export: its slot stays; the one never started goes back.
    expect(first.slotsFreed).toBe(1);
    expect(heldAfterFirst).toEqual([cancelled]);
    // Complete: downloaded to nowhere, recorded in the effects chain, and only then given back.
    expect(second.slotsFreed).toBe(1);
    expect(discarded).toEqual(['exp-9']);
    expect(Object.keys(await gate.gate.exportHolders())).toEqual([]);
    expect(sfn.appended).toEqual([
      {
        requestId: `${cancelled}.effects`,
        event: expect.objectContaining({
          action: 'export_drained',
          facts: {
            export_id: 'exp-9',
            platform_state: 'completed',
            discarded_bytes: 1234,
            status: 'cancelled',
          },
        }),
      },
    ]);
  });

  it('goes on with its pass when an export cannot be drained, and holds that slot for the next', async () => {
    const { ledger, ids } = await ledgerWith(['running', 'running']);
    const [cancelled = '', stuck = ''] = ids;
    await ledger.update(cancelled, { export_id: 'exp-3', export_status: 'pending' }, ['running']);
    await ledger.cancel(cancelled, { reason: 'withdrawn' });
    const sfn = executions({});
    const gate = await gated(() => NOW.getTime() - 3_600_000);
    await gate.gate.acquireExport(cancelled);
    const drain = {
      state: async (): Promise<'pending'> => {
        throw Object.assign(new Error('connect ECONNREFUSED'), { name: 'PlatformUnavailableError' });
      },
      discard: async () => 0,
    };

    const summary = await reconcile(
      { ledger, ...sfn, ...gate, drain, clock: () => NOW, logger: silent },
      { maxResumes: 3, graceSeconds: 60 },
    );

    expect(summary.resumed).toEqual([stuck]);
    expect(Object.keys(await gate.gate.exportHolders())).toEqual([cancelled]);
  });
  it('matches open requests to the listed executions by name, and describes only the ones no listing named', async () => {
    // Prepare
    const { ledger, ids } = await ledgerWith(['running', 'running', 'running', 'running']);
    const [live = '', failed = '', redriving = '', neverStarted = ''] = ids;
    const sfn = executions({ [live]: 'RUNNING', [failed]: 'FAILED', [redriving]: 'PENDING_REDRIVE' });
    const deps = { ledger, ...sfn, clock: () => NOW, logger: silent, ...(await gated()) };

    // Act
    const summary = await reconcile(deps, { maxResumes: 3, graceSeconds: 60 });

    // Assess
    expect(sfn.described).toEqual([neverStarted]);
    expect([...summary.resumed].sort()).toEqual([failed, neverStarted].sort());
    expect(summary.listed).toBe(3);
    expect(summary.sfnCalls).toEqual({
      ListExecutions: { calls: 5, throttled: 0 },
      DescribeExecution: { calls: 1, throttled: 0 },
      StartExecution: { calls: 2, throttled: 0 },
    });
  });

  it('reads every page of a listing before it matches', async () => {
    // Prepare
    const { ledger, ids } = await ledgerWith(['running', 'running', 'running']);
    const sfn = executions({});
    const pages: (string | undefined)[] = [];
    // RUNNING in three pages of one execution each; every other status empty.
    const list = async (status: ListedStatus, nextToken?: string) => {
      if (status !== 'RUNNING') return { executions: [] };
      pages.push(nextToken);
      const at = nextToken === undefined ? 0 : Number(nextToken);
      return {
        executions: [{ name: ids[at] ?? '', status: 'RUNNING' as const }],
        ...(at + 1 < ids.length ? { nextToken: String(at + 1) } : {}),
      };
    };
    const deps = { ledger, ...sfn, list, clock: () => NOW, logger: silent, ...(await gated()) };

    // Act
    const summary = await reconcile(deps, { maxResumes: 3, graceSeconds: 60 });

    // Assess
    expect(pages).toEqual([undefined, '1', '2']);
    expect(sfn.described).toEqual([]);
    expect(summary).toMatchObject({ checked: 3, resumed: [], listed: 3 });
  });

  it('keeps the page under way for the next pass when Step Functions throttles it until its time is up, failing nothing', async () => {
    // Prepare
    const { ledger, ids } = await ledgerWith(['running', 'running']);
    const sfn = executions({});
    let throttling = true;
    let throttled = 0;
    const describe = async (name: string) => {
      if (throttling) {
        throttled += 1;
        throw Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' });
      }
      return sfn.describe(name);
    };
    const deps = {
      ledger,
      ...sfn,
      describe,
      pacer: new ApiPacer(shareOf(DOCUMENTED_QUOTAS.largest, 0.5), { firstBackoffMs: 20, maxBackoffMs: 40 }),
      clock: () => NOW,
      logger: silent,
      ...(await gated()),
    };

    // Act: the pass's time is up once three calls were throttled.
    const first = await reconcile(deps, {
      maxResumes: 3,
      graceSeconds: 60,
      timeLeftMs: () => (throttled < 3 ? 60_000 : 0),
    });
    const keptAt = deps.cursor.current;
    throttling = false;
    const second = await reconcile(deps, { maxResumes: 3, graceSeconds: 60 });

    // Assess
    expect(first).toMatchObject({ complete: false, checked: 0, resumed: [] });
    expect(first.sfnCalls.DescribeExecution.throttled).toBeGreaterThanOrEqual(3);
    // The shards of `received` were done; the page of `running` with the throttled requests was not.
    expect(keptAt).toMatchObject({ status: 'running' });
    expect(keptAt?.after).toBeUndefined();
    expect(second).toMatchObject({ complete: true, checked: 2 });
    expect([...second.resumed].sort()).toEqual([...ids].sort());
  });
});

describe('reconcile, a request in parts', () => {
  /** An access request across news and shop, each part running with its first execution. */
  async function inParts() {
    tables += 1;
    const tableName = `reconcile-${tables}`;
    await createLedgerTable(dynamo.client, tableName);
    const earlier = new Ledger(dynamo.client, tableName, () => EARLIER);
    const id = randomUUID();
    await earlier.createInParts(
      {
        request_id: id,
        type: 'access',
        regulation: 'gdpr',
        primary_key: 'u-1',
        received_at: '2026-11-20T09:00:00Z',
        verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-20T09:05:00Z' },
      },
      'fp',
      { due_at: '2026-12-20T09:00:00Z', extension_limit_at: '2027-02-20T09:00:00Z', confirm_by: null },
      ['news', 'shop'],
    );
    await earlier.update(id, { status: 'running' }, ['received']);
    for (const site of ['news', 'shop']) {
      await earlier.countFirstRun(siteRequestId(id, site));
      await earlier.update(siteRequestId(id, site), { status: 'running' }, ['received']);
    }
    return { ledger: new Ledger(dynamo.client, tableName, () => NOW), tableName, id };
  }

  it('never starts an execution for the request itself, and resumes the part whose execution ended', async () => {
    // Prepare
    const { ledger, id } = await inParts();
    const sfn = executions({
      [siteRequestId(id, 'news')]: 'RUNNING',
      [siteRequestId(id, 'shop')]: 'TIMED_OUT',
    });

    // Act
    const summary = await reconcile(
      { ledger, ...sfn, clock: () => NOW, logger: silent, ...(await gated()) },
      { maxResumes: 3, graceSeconds: 60 },
    );

    // Assess
    expect(summary.resumed).toEqual([siteRequestId(id, 'shop')]);
    expect(sfn.started.map(({ name }) => name)).toEqual([`${siteRequestId(id, 'shop')}-retry-2`]);
    expect(sfn.described).not.toContain(id);
  });

  it("tells the request of a part the state machine's own write failed, which then fails naming that site", async () => {
    // Prepare: news completed and told its request; shop failed by the last-resort write
    const { ledger, tableName, id } = await inParts();
    const news = await ledger.update(siteRequestId(id, 'news'), { status: 'completed', outcome: 'no_data' }, [
      'running',
    ]);
    await ledger.recordSiteResult(id, 'news', {
      status: 'completed',
      outcome: 'no_data',
      at: news.updated_at,
    });
    await dynamo.client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { request_id: { S: siteRequestId(id, 'shop') } },
        UpdateExpression: 'SET #status = :failed',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':failed': { S: 'failed' } },
      }),
    );
    const sfn = executions({ [siteRequestId(id, 'news')]: 'SUCCEEDED' });

    // Act
    await reconcile(
      { ledger, ...sfn, clock: () => NOW, logger: silent, ...(await gated()) },
      { maxResumes: 3, graceSeconds: 0 },
    );

    // Assess
    const request = await ledger.require(id);
    expect(request).toMatchObject({ status: 'failed', error: { code: SITES_FAILED_CODE } });
    expect(request.error?.message).toContain('failed on shop');
    expect(sfn.appended.filter(({ requestId }) => requestId === id).map(({ event }) => event.action)).toEqual(
      ['request_failed'],
    );
  });
});

describe('reconcile, several sites', () => {
  it("frees and drains each site's export slots on that site's gate, and reports each site's circuit", async () => {
    // Prepare: a request cancelled while its export on shop was pending holds a slot on shop's gate
    const { ledger, ids } = await ledgerWith(['running', 'running']);
    const [onShop = '', onNews = ''] = ids;
    await ledger.update(onShop, { step: 'exporting', export_id: 'exp-shop', export_status: 'pending' }, [
      'running',
    ]);
    await ledger.cancel(onShop, { reason: 'withdrawn' });
    await ledger.cancel(onNews, { reason: 'withdrawn' });
    const sfn = executions({});
    const news = await gated(() => NOW.getTime() - 3_600_000);
    tables += 1;
    const shopTable = `gate-${tables}`;
    await createGateTable(dynamo.client, shopTable);
    const shop = new PlatformGate(
      dynamo.client,
      shopTable,
      { requestsPerSecond: 100, burst: 100, maxOpenExports: 10, outageHorizonSeconds: 3600 },
      { now: () => NOW.getTime() - 600_000, site: 'shop' },
    );
    await news.gate.acquireExport(onNews);
    await shop.acquireExport(onShop);
    // Shop's platform account is down; news's is not.
    for (let failure = 0; failure < 5; failure++) await shop.report('down');
    const drained: string[] = [];
    const drainOf = (site: string) => ({
      state: async () => 'completed' as const,
      discard: async (exportId: string) => {
        drained.push(`${site}:${exportId}`);
        return 10;
      },
    });

    // Act
    const summary = await reconcile(
      {
        ledger,
        ...sfn,
        ...news,
        drain: drainOf('news'),
        site: 'news',
        sites: [{ site: 'shop', gate: shop, drain: drainOf('shop') }],
        clock: () => NOW,
        logger: silent,
      },
      { maxResumes: 3, graceSeconds: 60 },
    );

    // Assess: each slot given back on its own gate, the export drained by its own site's drain
    expect(summary.slotsFreed).toBe(2);
    expect(await news.gate.exportHolders()).toEqual({});
    expect(await shop.exportHolders()).toEqual({});
    expect(drained).toEqual(['shop:exp-shop']);
    expect(news.published.at(-1)).toEqual({
      StuckRequests: 0,
      PlatformDownSeconds: 600,
      ExportSlotsHeld: 0,
      sites: {
        news: { PlatformDownSeconds: 0, ExportSlotsHeld: 0 },
        shop: { PlatformDownSeconds: 600, ExportSlotsHeld: 0 },
      },
    });
  });
});
