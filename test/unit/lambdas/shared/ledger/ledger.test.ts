import { randomUUID } from 'node:crypto';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetCommand, PutCommand, QueryCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { subjectHash } from '#shared/audit';
import { computeDeadlines } from '#shared/deadlines';
import { LedgerRuleError, LedgerStateError, RequestCancelledError, SupersededRunError } from '#shared/errors';
import {
  LEGACY_STATUS_DUE_INDEX,
  Ledger,
  OPEN_DUE_INDEX,
  OPEN_INDEX_ATTRIBUTES,
  OPEN_INDEX_SHARDS,
  OWED_STATUSES,
  type OwedStatus,
  openShardKey,
  openShardOf,
  type Status,
} from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import type { DsrRequest } from '#shared/request';
import { CACHED_MIDDLEWARE } from '#shared/sdk-clients';
import { createTable, legacyLedgerTable, startDynamo } from '../../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let cached: DynamoDBClient;
let ledger: Ledger;

function request(overrides: Partial<DsrRequest> = {}): DsrRequest {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: 'u-1',
    received_at: '2026-11-02T09:30:00Z',
    verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-02T10:00:00Z' },
    ...overrides,
  };
}

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  // As in Lambda and local mode: every command of a class after the first reuses its middleware.
  cached = new DynamoDBClient({ ...dynamo.config, ...CACHED_MIDDLEWARE });
  ledger = new Ledger(cached, 'ledger', () => new Date('2026-11-03T00:00:00Z'));
});
afterAll(async () => {
  cached.destroy();
  await dynamo.close();
});

describe('Ledger storage', () => {
  it('stores items exactly as the DocumentClient of the CLI commands reads and writes them', async () => {
    // Prepare
    const req = request({ type: 'erasure', regulation: 'ccpa' });
    await ledger.createReceived(req, 'fp-doc', computeDeadlines('ccpa', new Date(req.received_at)));
    // Act
    const { Item } = await dynamo.doc.send(
      new GetCommand({ TableName: 'ledger', Key: { request_id: req.request_id } }),
    );
    await dynamo.doc.send(
      new UpdateCommand({
        TableName: 'ledger',
        Key: { request_id: req.request_id },
        UpdateExpression: 'SET #reason = :reason, #errors = :errors',
        ExpressionAttributeNames: { '#reason': 'cancel_reason', '#errors': 'rejection_errors' },
        ExpressionAttributeValues: { ':reason': 'written by the CLI', ':errors': ['a', 'b'] },
      }),
    );
    // Assess
    expect(Item).toMatchObject({
      request_id: req.request_id,
      type: 'erasure',
      verification: req.verification,
      extended: false,
      export_attempts: 0,
    });
    expect(Item).not.toHaveProperty('svc_user_id');
    expect(await ledger.require(req.request_id)).toMatchObject({
      fingerprint: 'fp-doc',
      verification: req.verification,
      cancel_reason: 'written by the CLI',
      rejection_errors: ['a', 'b'],
    });
  });

  it('keeps every command its own input on a client that caches middleware', async () => {
    // Prepare
    const first = request({ primary_key: 'u-first' });
    const second = request({ primary_key: 'u-second' });
    for (const req of [first, second]) {
      await ledger.createReceived(
        req,
        `fp-${req.primary_key}`,
        computeDeadlines('gdpr', new Date(req.received_at)),
      );
    }
    // Act
    await ledger.update(first.request_id, { status: 'running', step: 'resolving' }, ['received']);
    await ledger.update(second.request_id, { status: 'running', svc_user_id: 'svc-2' }, ['received']);
    // Assess
    expect(await ledger.require(first.request_id)).toMatchObject({
      primary_key: 'u-first',
      step: 'resolving',
    });
    expect(await ledger.require(first.request_id)).not.toHaveProperty('svc_user_id');
    expect(await ledger.require(second.request_id)).toMatchObject({
      primary_key: 'u-second',
      svc_user_id: 'svc-2',
    });
    expect(await ledger.require(second.request_id)).not.toHaveProperty('step');
  });
});

describe('Ledger.createReceived', () => {
  it('stores the request with its deadlines as received', async () => {
    const req = request();
    const result = await ledger.createReceived(
      req,
      'fp-1',
      computeDeadlines('gdpr', new Date(req.received_at)),
    );
    expect(result.created).toBe(true);
    const stored = await ledger.require(req.request_id);
    expect(stored).toMatchObject({
      status: 'received',
      primary_key: 'u-1',
      due_at: '2026-12-02T23:59:59.999Z',
      fingerprint: 'fp-1',
      created_at: '2026-11-03T00:00:00.000Z',
    });
  });

  it('never overwrites an existing request and returns it instead', async () => {
    const req = request();
    const deadlines = computeDeadlines('gdpr', new Date(req.received_at));
    await ledger.createReceived(req, 'fp-original', deadlines);
    const second = await ledger.createReceived({ ...req, type: 'erasure' }, 'fp-other', deadlines);
    expect(second).toMatchObject({
      created: false,
      existing: { fingerprint: 'fp-original', type: 'access' },
    });
  });
});

describe('Ledger.createRejected', () => {
  it('records the field errors and no personal fields', async () => {
    const id = randomUUID();
    await ledger.createRejected(id, 'fp', ['type: must be "access" or "erasure"']);
    const stored = await ledger.require(id);
    expect(stored).toMatchObject({
      status: 'rejected',
      rejection_errors: ['type: must be "access" or "erasure"'],
    });
    expect(stored.primary_key).toBeUndefined();
  });
});

describe('Ledger.update', () => {
  it('applies a patch, removes null fields, and returns the new item', async () => {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await ledger.update(
      req.request_id,
      { status: 'running', step: 'resolving', error: { code: 'x', message: 'y' } },
      ['received'],
    );
    const updated = await ledger.update(req.request_id, { step: 'exporting', error: null }, ['running']);
    expect(updated.step).toBe('exporting');
    expect(updated.error).toBeUndefined();
  });

  it('refuses a change from a status it does not allow, naming both', async () => {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await expect(ledger.update(req.request_id, { status: 'completed' }, ['running'])).rejects.toThrow(
      new LedgerStateError('the request is received; this change needs running'),
    );
  });

  it('raises RequestCancelledError when the request was cancelled meanwhile', async () => {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await ledger.update(req.request_id, { status: 'cancelled', cancel_reason: 'withdrawn' }, ['received']);
    await expect(ledger.update(req.request_id, { status: 'running' }, ['received'])).rejects.toBeInstanceOf(
      RequestCancelledError,
    );
  });

  it('raises LedgerStateError for an unknown request', async () => {
    await expect(ledger.update(randomUUID(), { step: 'exporting' }, ['running'])).rejects.toBeInstanceOf(
      LedgerStateError,
    );
  });
});

describe('Ledger.updateInRun', () => {
  it('writes for the current run, and for a run intake has not counted yet', async () => {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    // Intake counts its execution (run 1) just after starting it: executions is still 0.
    await ledger.updateInRun(req.request_id, 1, { status: 'running' }, ['received']);
    await ledger.update(req.request_id, { executions: 2 }, ['running']);
    const updated = await ledger.updateInRun(req.request_id, 2, { step: 'erasing' }, ['running']);
    expect(updated.step).toBe('erasing');
  });

  it('refuses a superseded run with SupersededRunError and writes nothing', async () => {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await ledger.update(req.request_id, { status: 'running', executions: 3 }, ['received']);
    await expect(
      ledger.updateInRun(req.request_id, 2, { step: 'erasing' }, ['running']),
    ).rejects.toBeInstanceOf(SupersededRunError);
    expect((await ledger.require(req.request_id)).step).toBeUndefined();
  });
});

describe('operator changes racing a retry', () => {
  /** A failed request, and a ledger whose first read of it is followed at once by a retry's claim. */
  async function failedThenRetriedAfterRead(): Promise<{ requestId: string; racing: Ledger }> {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await ledger.update(req.request_id, { status: 'running', svc_user_id: 's-1', executions: 1 }, [
      'received',
    ]);
    await ledger.update(req.request_id, { status: 'failed', error: { code: 'x', message: 'y' } }, [
      'running',
    ]);
    const racing = new Ledger(cached, 'ledger', () => new Date('2026-11-03T00:00:00Z'));
    const get = racing.get.bind(racing);
    let first = true;
    racing.get = async (id: string) => {
      const item = await get(id);
      if (first) {
        first = false;
        await ledger.retry(id, { liveExecution: async () => undefined });
      }
      return item;
    };
    return { requestId: req.request_id, racing };
  }

  it.each([
    ['denied', (l: Ledger, id: string) => l.deny(id, { code: 'identity_not_verified', reason: 'r' })],
    [
      'extended',
      (l: Ledger, id: string) =>
        l.extend(id, { reason: 'complex request', notice: { channel: 'email', at: '2026-11-02T10:00:00Z' } }),
    ],
  ])(
    'is refused when a retry claimed a new run between its read and its write (%s)',
    async (doing, apply) => {
      // Prepare
      const { requestId, racing } = await failedThenRetriedAfterRead();

      // Act
      const change = apply(racing, requestId);

      // Assess: the retry won; the change says so and wrote nothing.
      await expect(change).rejects.toBeInstanceOf(LedgerRuleError);
      await expect(change).rejects.toThrow(`was not ${doing}: a retry or resume started run 2`);
      const item = await ledger.require(requestId);
      expect(item).toMatchObject({ status: 'running', executions: 2 });
      expect(item.extended).toBe(false);
    },
  );
});

describe('Ledger.increment', () => {
  it('counts duplicates', async () => {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await ledger.increment(req.request_id, 'duplicates');
    await ledger.increment(req.request_id, 'duplicates');
    expect((await ledger.require(req.request_id)).duplicates).toBe(2);
  });
});

describe('the open index', () => {
  /** A fresh table and ledger. */
  async function freshLedger(name: string): Promise<Ledger> {
    await createLedgerTable(dynamo.client, name);
    return new Ledger(dynamo.client, name, () => new Date('2026-11-03T00:00:00Z'));
  }
  async function openIds(local: Ledger, status: OwedStatus, dueBefore?: string): Promise<string[]> {
    const ids: string[] = [];
    for await (const item of local.openRequests(status, dueBefore === undefined ? {} : { dueBefore })) {
      ids.push(item.request_id);
    }
    return ids;
  }
  async function stored(tableName: string, requestId: string): Promise<Record<string, unknown> | undefined> {
    const { Item } = await dynamo.doc.send(
      new GetCommand({ TableName: tableName, Key: { request_id: requestId } }),
    );
    return Item;
  }

  /** One item per status as releases before the open index wrote them (no open_shard); their ids by status. */
  async function putWithoutIndexKey(
    tableName: string,
    statuses: readonly Status[],
  ): Promise<Record<string, string>> {
    const ids: Record<string, string> = {};
    for (const status of statuses) {
      ids[status] = randomUUID();
      await dynamo.doc.send(
        new PutCommand({
          TableName: tableName,
          Item: {
            request_id: ids[status],
            fingerprint: 'fp',
            status,
            // A rejected request never had a due date.
            ...(status === 'rejected' ? {} : { due_at: '2026-12-01T00:00:00.000Z' }),
            created_at: '2026-11-01T00:00:00.000Z',
            updated_at: '2026-11-01T00:00:00.000Z',
          },
        }),
      );
    }
    return ids;
  }

  it('keys a request by <status>#<shard>, the shard a stable hash of the request id', () => {
    const id = '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f';

    expect(openShardOf(id)).toBe(openShardOf(id));
    expect(openShardOf(id)).toBeGreaterThanOrEqual(0);
    expect(openShardOf(id)).toBeLessThan(OPEN_INDEX_SHARDS);
    expect(openShardKey(id, 'received')).toBe(`received#${openShardOf(id)}`);
    expect(openShardKey(id, 'running')).toBe(`running#${openShardOf(id)}`);
    expect(openShardKey(id, 'failed')).toBe(`failed#${openShardOf(id)}`);
    for (const status of ['completed', 'cancelled', 'rejected'] as const) {
      expect(openShardKey(id, status)).toBeUndefined();
    }
  });

  it('spreads many requests with one status and one due date over every shard', () => {
    const perShard = Array.from({ length: OPEN_INDEX_SHARDS }, () => 0);
    for (let index = 0; index < 1600; index++) {
      const shard = openShardOf(randomUUID());
      perShard[shard] = (perShard[shard] ?? 0) + 1;
    }

    // 100 expected per shard; a hash this uneven would be a bug, not chance.
    expect(Math.min(...perShard)).toBeGreaterThan(50);
    expect(Math.max(...perShard)).toBeLessThan(150);
  });

  it('lists a mass drop due at one moment from every shard, none missing', async () => {
    const local = await freshLedger('open-mass');
    const ids: string[] = [];
    for (let index = 0; index < 200; index++) {
      const req = request({ received_at: '2026-10-01T00:00:00Z' });
      await local.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
      ids.push(req.request_id);
    }
    const shards = new Set(ids.map((id) => openShardOf(id)));

    expect(shards.size).toBe(OPEN_INDEX_SHARDS);
    expect((await openIds(local, 'received')).sort()).toEqual(ids.sort());
  });

  it('lists by status, earliest due first across shards, and filters by due date', async () => {
    const local = await freshLedger('open-order');
    const due = ['2026-12-05', '2026-11-20', '2026-12-01', '2026-11-25', '2026-12-10', '2026-11-28'];
    const byDue = new Map<string, string>();
    for (const day of due) {
      const req = request();
      await local.createReceived(req, 'fp', {
        due_at: `${day}T00:00:00.000Z`,
        extension_limit_at: '2027-02-01T00:00:00.000Z',
        confirm_by: null,
      });
      byDue.set(day, req.request_id);
    }
    const ordered = [...due].sort().map((day) => byDue.get(day));

    expect(await openIds(local, 'received')).toEqual(ordered);
    expect(await openIds(local, 'received', '2026-11-29T00:00:00.000Z')).toEqual(ordered.slice(0, 3));
    expect(await openIds(local, 'running')).toEqual([]);
  });

  it('reads every open request of the statuses asked in one paged scan, ended ones left out, and filters by due date', async () => {
    // Prepare: received, running, failed and completed requests due on different days
    const local = await freshLedger('open-all');
    const byStatus: Record<string, string[]> = { received: [], running: [], failed: [], completed: [] };
    const days = ['2026-11-20', '2026-11-25', '2026-12-01', '2026-12-05', '2026-12-10'];
    for (const day of days) {
      for (const status of ['received', 'running', 'failed', 'completed'] as const) {
        const req = request();
        await local.createReceived(req, 'fp', {
          due_at: `${day}T00:00:00.000Z`,
          extension_limit_at: '2027-02-01T00:00:00.000Z',
          confirm_by: null,
        });
        if (status !== 'received')
          await local.update(req.request_id, { status: 'running', step: 'resolving' }, ['received']);
        if (status === 'failed') await local.update(req.request_id, { status: 'failed' }, ['running']);
        if (status === 'completed') {
          await local.update(req.request_id, { status: 'completed', outcome: 'no_data' }, ['running']);
        }
        byStatus[status]?.push(req.request_id);
      }
    }
    const ids = (requests: readonly { request_id: string }[]) =>
      requests.map((item) => item.request_id).sort();

    // Act: pages of 3 items, so the scan follows several pages
    const owed = await local.allOpenRequests(['received', 'running', 'failed'], { pageSize: 3 });
    const failed = await local.allOpenRequests(['failed']);
    const dueSoon = await local.allOpenRequests(['received'], { dueBefore: '2026-11-29T00:00:00.000Z' });

    // Assess
    expect(ids(owed)).toEqual(
      [...(byStatus.received ?? []), ...(byStatus.running ?? []), ...(byStatus.failed ?? [])].sort(),
    );
    expect(owed.find((item) => item.request_id === byStatus.failed?.[0])).toMatchObject({ status: 'failed' });
    expect(ids(failed)).toEqual([...(byStatus.failed ?? [])].sort());
    expect(ids(dueSoon)).toEqual([...(byStatus.received ?? []).slice(0, 2)].sort());
    expect(await local.allOpenRequests([])).toEqual([]);
  });

  it('moves a request between statuses in the index and removes it once it ends', async () => {
    const local = await freshLedger('open-moves');
    const req = request();
    await local.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    const shard = openShardOf(req.request_id);

    expect((await stored('open-moves', req.request_id))?.open_shard).toBe(`received#${shard}`);
    await local.update(req.request_id, { status: 'running', step: 'resolving' }, ['received']);
    expect((await stored('open-moves', req.request_id))?.open_shard).toBe(`running#${shard}`);
    expect(await openIds(local, 'running')).toEqual([req.request_id]);
    expect(await openIds(local, 'received')).toEqual([]);

    await local.update(req.request_id, { status: 'failed' }, ['running']);
    expect(await openIds(local, 'failed')).toEqual([req.request_id]);

    await local.update(req.request_id, { status: 'completed', outcome: 'no_data' }, ['failed']);
    expect(await stored('open-moves', req.request_id)).not.toHaveProperty('open_shard');
    for (const status of OWED_STATUSES) expect(await openIds(local, status)).toEqual([]);

    // A patch that does not change the status leaves the index key alone.
    const other = request();
    await local.createReceived(other, 'fp', computeDeadlines('gdpr', new Date(other.received_at)));
    await local.update(other.request_id, { reference: 'T-1' }, ['received']);
    expect((await stored('open-moves', other.request_id))?.open_shard).toBe(
      `received#${openShardOf(other.request_id)}`,
    );
  });

  it('keeps rejected requests out of the index', async () => {
    const local = await freshLedger('open-rejected');
    await local.createRejected('r-bad', 'fp', ['type: invalid']);

    expect(await stored('open-rejected', 'r-bad')).not.toHaveProperty('open_shard');
  });

  it('carries only what listing and the sweep read: no subject identifiers', async () => {
    const local = await freshLedger('open-projection');
    const req = request({ reference: 'T-9' });
    await local.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await local.update(req.request_id, { status: 'running', svc_user_id: 'svc-42' }, ['received']);

    const { Items } = await dynamo.doc.send(
      new QueryCommand({
        TableName: 'open-projection',
        IndexName: OPEN_DUE_INDEX,
        KeyConditionExpression: '#shard = :shard',
        ExpressionAttributeNames: { '#shard': 'open_shard' },
        ExpressionAttributeValues: { ':shard': openShardKey(req.request_id, 'running') },
      }),
    );

    expect(Items).toHaveLength(1);
    expect(Object.keys(Items?.[0] ?? {}).sort()).toEqual(
      [
        ...OPEN_INDEX_ATTRIBUTES.filter((name) => name !== 'outcome' && name !== 'step'),
        'due_at',
        'open_shard',
        'request_id',
      ].sort(),
    );
    expect(Items?.[0]).not.toHaveProperty('primary_key');
    expect(Items?.[0]).not.toHaveProperty('svc_user_id');
  });

  it('adds the open index to a ledger from before it and puts every open request in, once', async () => {
    // Prepare: the table as earlier releases created it, with items written without open_shard.
    await createTable(dynamo.client, legacyLedgerTable('legacy', LEGACY_STATUS_DUE_INDEX));
    const ids = await putWithoutIndexKey('legacy', [
      'received',
      'running',
      'failed',
      'completed',
      'cancelled',
    ]);
    // Act
    await createLedgerTable(dynamo.client, 'legacy');
    const legacy = new Ledger(dynamo.client, 'legacy');
    // Assess
    for (const status of OWED_STATUSES) expect(await openIds(legacy, status)).toEqual([ids[status]]);
    expect(await stored('legacy', ids.completed ?? '')).not.toHaveProperty('open_shard');
    expect(await stored('legacy', ids.cancelled ?? '')).not.toHaveProperty('open_shard');
    expect(await legacy.backfillOpenIndex()).toBe(0);
  });

  it('backfills open requests written without their index key, as a deployed ledger migrates', async () => {
    const local = await freshLedger('open-backfill');
    const ids = await putWithoutIndexKey('open-backfill', ['received', 'failed', 'rejected']);
    expect(await openIds(local, 'received')).toEqual([]);

    expect(await local.backfillOpenIndex()).toBe(2);

    expect(await openIds(local, 'received')).toEqual([ids.received]);
    expect(await openIds(local, 'failed')).toEqual([ids.failed]);
    expect(await stored('open-backfill', ids.rejected ?? '')).not.toHaveProperty('open_shard');
    expect(await local.backfillOpenIndex()).toBe(0);
  });

  it('backfills ended requests written without their ended key, leaving open and minimised ones out', async () => {
    // Prepare: two ended requests, an open one, and an ended one already minimised.
    const local = await freshLedger('ended-backfill');
    const ids = await putWithoutIndexKey('ended-backfill', ['completed', 'denied', 'received', 'cancelled']);
    await dynamo.doc.send(
      new UpdateCommand({
        TableName: 'ended-backfill',
        Key: { request_id: ids.cancelled },
        UpdateExpression: 'SET minimised_at = :at',
        ExpressionAttributeValues: { ':at': '2026-11-02T00:00:00.000Z' },
      }),
    );

    // Act / Assess: once, then nothing more to do.
    expect(await local.backfillEndedIndex()).toBe(2);
    expect(await stored('ended-backfill', ids.completed ?? '')).toHaveProperty('ended_shard');
    expect(await stored('ended-backfill', ids.denied ?? '')).toHaveProperty('ended_shard');
    expect(await stored('ended-backfill', ids.received ?? '')).not.toHaveProperty('ended_shard');
    expect(await stored('ended-backfill', ids.cancelled ?? '')).not.toHaveProperty('ended_shard');
    expect(await local.backfillEndedIndex()).toBe(0);
  });
});

describe('Ledger.minimiseDue', () => {
  const KEY = 'k'.repeat(32);
  // A table of its own: the other tests leave ended requests behind.
  let ledger: Ledger;
  beforeAll(async () => {
    await createLedgerTable(dynamo.client, 'ledger-minimise');
    ledger = new Ledger(cached, 'ledger-minimise', () => new Date('2026-11-03T00:00:00Z'));
  });

  it('replaces who the request names with keyed hashes after its retention, keeps the §7101 facts, and is idempotent', async () => {
    // Prepare: one request ends 2026-11-03 (the ledger's clock), one stays open, one is ended
    // but not yet past its retention.
    const ended = request({ type: 'erasure', submitted_by: 'ops-alice' } as Partial<DsrRequest>);
    await ledger.createReceived(ended, 'fp-ended', computeDeadlines('gdpr', new Date(ended.received_at)));
    await ledger.update(ended.request_id, { status: 'running', svc_user_id: 'svc-9' }, ['received']);
    const completed = await ledger.update(
      ended.request_id,
      { status: 'completed', outcome: 'erased', completed_at: '2026-11-03T00:00:00.000Z' },
      ['running'],
    );
    const open = request();
    await ledger.createReceived(open, 'fp-open', computeDeadlines('gdpr', new Date(open.received_at)));
    const later = request();
    await ledger.createReceived(later, 'fp-later', computeDeadlines('gdpr', new Date(later.received_at)));
    await ledger.update(later.request_id, { status: 'cancelled', completed_at: '2028-10-01T00:00:00.000Z' }, [
      'received',
    ]);
    // 730 days after 2026-11-03 is 2028-11-02; the pass runs on 2028-11-03.
    const at = new Date('2028-11-03T00:00:00.000Z');
    const pass = new Ledger(cached, 'ledger-minimise', () => at);
    let keyReads = 0;
    const hmacKey = async () => {
      keyReads += 1;
      return KEY;
    };
    // Act
    const first = await pass.minimiseDue({ hmacKey, afterDays: 730 });
    const second = await pass.minimiseDue({ hmacKey, afterDays: 730 });
    // Assess
    expect(first).toEqual({ minimised: 1, skipped: 0 });
    expect(second).toEqual({ minimised: 0, skipped: 0 });
    expect(keyReads).toBe(1);
    const item = await ledger.require(ended.request_id);
    expect(item.primary_key).toBe(subjectHash(KEY, 'primary_key', 'u-1'));
    expect(item.svc_user_id).toBe(subjectHash(KEY, 'svc_user_id', 'svc-9'));
    expect(item.submitted_by).toBe(subjectHash(KEY, 'submitted_by', 'ops-alice'));
    expect(item.verification?.verified_by).toBe(subjectHash(KEY, 'verified_by', 'privacy'));
    expect(item.fingerprint).toBe(subjectHash(KEY, 'fingerprint', 'fp-ended'));
    expect(item.minimised_at).toBe(at.toISOString());
    const kept = {
      ...completed,
      primary_key: item.primary_key,
      svc_user_id: item.svc_user_id,
      submitted_by: item.submitted_by,
      verification: { ...completed.verification, verified_by: item.verification?.verified_by },
      fingerprint: item.fingerprint,
      minimised_at: item.minimised_at,
      updated_at: item.updated_at,
    };
    expect(item).toEqual(kept);
    expect(JSON.stringify(item)).not.toMatch(/u-1|svc-9|ops-alice|"privacy"|fp-ended/);
    expect((await ledger.require(open.request_id)).minimised_at).toBeUndefined();
    expect((await ledger.require(later.request_id)).primary_key).toBe('u-1');
  });

  it('reads only the ended requests that are due, however many ended requests the ledger keeps', async () => {
    // Prepare: a ledger of its own with 60 requests ended recently and 2 ended long ago, and a
    // client that counts every item DynamoDB reads for it (ScannedCount).
    await createLedgerTable(dynamo.client, 'ledger-retention-reads');
    const counting = new DynamoDBClient(dynamo.config);
    let itemsRead = 0;
    counting.middlewareStack.add(
      (next) => async (args) => {
        const result = await next(args);
        const output = result.output as { ScannedCount?: number };
        itemsRead += output.ScannedCount ?? 0;
        return result;
      },
      { step: 'initialize', name: 'countItemsRead' },
    );
    const writer = new Ledger(
      dynamo.client,
      'ledger-retention-reads',
      () => new Date('2026-11-03T00:00:00Z'),
    );
    const endAt = async (completedAt: string) => {
      const ended = request();
      await writer.createReceived(ended, 'fp', computeDeadlines('gdpr', new Date(ended.received_at)));
      await writer.update(ended.request_id, { status: 'cancelled', completed_at: completedAt }, ['received']);
      return ended.request_id;
    };
    const due = [await endAt('2026-01-01T00:00:00.000Z'), await endAt('2026-01-02T00:00:00.000Z')];
    for (let index = 0; index < 60; index++) await endAt('2028-10-01T00:00:00.000Z');
    const pass = new Ledger(counting, 'ledger-retention-reads', () => new Date('2028-01-10T00:00:00Z'));

    // Act
    const result = await pass.minimiseDue({ hmacKey: async () => KEY, afterDays: 730 });

    // Assess: the two due were minimised, and the pass read them alone (the index's keys).
    expect(result).toEqual({ minimised: 2, skipped: 0 });
    for (const id of due) expect((await writer.require(id)).minimised_at).toBeDefined();
    expect(itemsRead).toBe(due.length);
    counting.destroy();
  });

  it('minimises a failed request too, counted from when it first failed, and a retry after that is refused', async () => {
    // Prepare: a request fails on 2026-11-03, its failure is recorded again on 2027-06-01 (which
    // must not push its retention back), and it stays failed.
    const failed = request({ type: 'erasure', submitted_by: 'ops-bob' } as Partial<DsrRequest>);
    await ledger.createReceived(failed, 'fp-failed', computeDeadlines('gdpr', new Date(failed.received_at)));
    await ledger.update(failed.request_id, { status: 'running', svc_user_id: 'svc-7' }, ['received']);
    await ledger.update(failed.request_id, { status: 'failed' }, ['running']);
    const again = new Ledger(cached, 'ledger-minimise', () => new Date('2027-06-01T00:00:00Z'));
    await again.update(failed.request_id, { status: 'failed' }, ['failed']);
    expect((await ledger.require(failed.request_id)).failed_at).toBe('2026-11-03T00:00:00.000Z');
    const early = new Ledger(cached, 'ledger-minimise', () => new Date('2028-11-01T00:00:00Z'));
    const pass = new Ledger(cached, 'ledger-minimise', () => new Date('2028-11-03T00:00:00Z'));

    // Act
    const before = await early.minimiseDue({ hmacKey: async () => KEY, afterDays: 730 });
    const due = await pass.minimiseDue({ hmacKey: async () => KEY, afterDays: 730 });

    // Assess: nothing two days early; then minimised, still failed and owed, and no longer retried.
    expect(before).toEqual({ minimised: 0, skipped: 0 });
    expect(due).toEqual({ minimised: 1, skipped: 0 });
    const item = await ledger.require(failed.request_id);
    expect(item).toMatchObject({
      status: 'failed',
      primary_key: subjectHash(KEY, 'primary_key', 'u-1'),
      svc_user_id: subjectHash(KEY, 'svc_user_id', 'svc-7'),
      minimised_at: '2028-11-03T00:00:00.000Z',
    });
    expect(JSON.stringify(item)).not.toMatch(/"u-1"|svc-7|ops-bob|"privacy"/);
    await expect(
      pass.retry(failed.request_id, { liveExecution: async () => undefined }),
    ).rejects.toBeInstanceOf(LedgerRuleError);
  });

  it('takes a minimised failed request that was then denied out of the ended index, without counting it skipped', async () => {
    // Prepare: failed, minimised after its retention, then denied by an operator (ending it again).
    const failed = request();
    await ledger.createReceived(failed, 'fp', computeDeadlines('gdpr', new Date(failed.received_at)));
    await ledger.update(failed.request_id, { status: 'failed' }, ['received']);
    const later = new Ledger(cached, 'ledger-minimise', () => new Date('2028-11-05T00:00:00Z'));
    await later.minimiseDue({ hmacKey: async () => KEY, afterDays: 730 });
    await later.deny(failed.request_id, { code: 'other', reason: 'not answered in time' });
    expect((await ledger.require(failed.request_id)).minimised_at).toBeDefined();
    const pass = new Ledger(cached, 'ledger-minimise', () => new Date('2030-12-01T00:00:00Z'));
    // Act
    const first = await pass.minimiseDue({ hmacKey: async () => KEY, afterDays: 730 });
    const second = await pass.minimiseDue({ hmacKey: async () => KEY, afterDays: 730 });
    // Assess
    expect(first.skipped).toBe(0);
    expect(second).toEqual({ minimised: 0, skipped: 0 });
    const stored = await cached.send(
      new GetCommand({ TableName: 'ledger-minimise', Key: { request_id: failed.request_id } }),
    );
    expect(stored.Item?.ended_shard).toBeUndefined();
  });

  it('starts the retention of a failure again when a retried request fails again', async () => {
    // Prepare
    const failed = request();
    await ledger.createReceived(failed, 'fp', computeDeadlines('gdpr', new Date(failed.received_at)));
    await ledger.update(failed.request_id, { status: 'failed' }, ['received']);
    const later = new Ledger(cached, 'ledger-minimise', () => new Date('2027-01-05T00:00:00Z'));
    // Act
    await later.retry(failed.request_id, { liveExecution: async () => undefined });
    const retried = await ledger.require(failed.request_id);
    await later.update(failed.request_id, { status: 'failed' }, ['received', 'running']);
    // Assess
    expect(retried.failed_at).toBeUndefined();
    expect((await ledger.require(failed.request_id)).failed_at).toBe('2027-01-05T00:00:00.000Z');
  });

  it('reads no key when nothing is due', async () => {
    // Prepare
    const pass = new Ledger(cached, 'ledger-minimise', () => new Date('2026-11-04T00:00:00.000Z'));
    // Act
    const result = await pass.minimiseDue({
      hmacKey: () => Promise.reject(new Error('the key was read')),
      afterDays: 730,
    });
    // Assess
    expect(result).toEqual({ minimised: 0, skipped: 0 });
  });
});
