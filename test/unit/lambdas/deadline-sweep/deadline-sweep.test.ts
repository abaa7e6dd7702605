import { randomUUID } from 'node:crypto';
import { QueryCommand, type QueryCommandInput } from '@aws-sdk/client-dynamodb';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { AUDIT_SCHEMA, auditRecordKey, recordHash } from '#shared/audit';
import { parseEnv } from '#shared/config';
import { computeDeadlines } from '#shared/deadlines';
import { ConfigurationError } from '#shared/errors';
import {
  ENDED_INDEX,
  Ledger,
  OPEN_INDEX_SHARDS,
  type OpenRequest,
  openRequestSchema,
  type Status,
} from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import { HEARTBEAT_METRICS } from '#shared/metrics';
import { functionMetrics } from '#shared/powertools';
import type { DsrRequest } from '#shared/request';
import {
  DEADLINE_METRICS,
  type DeadlineCounts,
  publishDeadlineMetrics,
  sweepDeadlines,
} from '../../../../lambdas/deadline-sweep/deadline-sweep.ts';
import {
  deadlineSweepEnvSchema,
  makeDeadlineSweepHandler,
} from '../../../../lambdas/deadline-sweep/handler.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

const NOW = new Date('2026-12-01T12:00:00.000Z');
const clock = () => NOW;
const DAY_MS = 24 * 3600 * 1000;

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let table = 0;

beforeAll(async () => {
  dynamo = await startDynamo();
});
afterAll(async () => {
  await dynamo.close();
});

/** A fresh ledger table holding one request per entry, with that due date and status. */
async function ledgerWith(
  entries: { due: Date; status: Status }[],
): Promise<{ ledger: Ledger; ids: string[] }> {
  table += 1;
  const tableName = `ledger-${table}`;
  await createLedgerTable(dynamo.client, tableName);
  const ledger = new Ledger(dynamo.client, tableName, clock);
  const ids: string[] = [];
  for (const { due, status } of entries) {
    const request: DsrRequest = {
      request_id: randomUUID(),
      type: 'access',
      regulation: 'gdpr',
      primary_key: 'u-1',
      received_at: new Date(due.getTime() - 30 * DAY_MS).toISOString(),
      verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-01T00:00:00Z' },
    };
    await ledger.createReceived(request, 'fp', {
      due_at: due.toISOString(),
      extension_limit_at: new Date(due.getTime() + 60 * DAY_MS).toISOString(),
      confirm_by: null,
    });
    if (status !== 'received') await ledger.update(request.request_id, { status }, ['received']);
    ids.push(request.request_id);
  }
  return { ledger, ids };
}

const daysFromNow = (days: number) => new Date(NOW.getTime() + days * DAY_MS);

/** An open request as the index returns it, for fakes that stand in for the ledger. */
function indexed(requestId: string, dueAt: Date, status: Status = 'received'): OpenRequest {
  return openRequestSchema.parse({ request_id: requestId, status, due_at: dueAt.toISOString() });
}

/** A fake ledger's ended index: nothing ended. */
async function* noneEnded(): AsyncGenerator<{ request_id: string }> {}

/** The open requests of a fake ledger, as Ledger.openRequests yields them. */
async function* openOf(items: readonly OpenRequest[]): AsyncGenerator<OpenRequest> {
  yield* items;
}

describe('sweepDeadlines', () => {
  it('counts requests still owed an answer, failed ones too, that are overdue and due soon, and nothing else', async () => {
    const { ledger, ids } = await ledgerWith([
      { due: daysFromNow(-3), status: 'received' },
      { due: daysFromNow(-1), status: 'running' },
      { due: daysFromNow(2), status: 'running' },
      { due: daysFromNow(6.9), status: 'received' },
      { due: daysFromNow(8), status: 'received' },
      { due: daysFromNow(-5), status: 'completed' },
      { due: daysFromNow(-4), status: 'failed' },
      { due: daysFromNow(3), status: 'failed' },
      { due: daysFromNow(1), status: 'cancelled' },
    ]);

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 });

    expect(counts).toEqual({
      checked_at: NOW.toISOString(),
      overdue: 3,
      due_soon: 3,
      due_soon_before: daysFromNow(7).toISOString(),
      by_status: {
        received: { overdue: 1, due_soon: 1 },
        running: { overdue: 1, due_soon: 1 },
        failed: { overdue: 1, due_soon: 1 },
      },
      oldest_overdue_due_at: daysFromNow(-4).toISOString(),
      overdue_request_ids: [ids[6], ids[0], ids[1]],
      receipts_overdue: 0,
      receipts_overdue_request_ids: [],
      receipts_due_soon: 0,
      // The end of the third business day after Tuesday 1 December.
      receipts_due_before: '2026-12-04T23:59:59.999Z',
      receipts_due_soon_request_ids: [],
      notices_overdue: 0,
      notices_overdue_request_ids: [],
      notices_due_soon: 0,
      notices_due_soon_request_ids: [],
    });
  });

  it('counts a request due this very moment as due soon, and one due at the horizon not at all', async () => {
    const { ledger } = await ledgerWith([
      { due: NOW, status: 'running' },
      { due: daysFromNow(7), status: 'running' },
    ]);

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 });

    expect(counts).toMatchObject({ overdue: 0, due_soon: 1 });
  });

  it('follows the configured due-soon window', async () => {
    const { ledger } = await ledgerWith([
      { due: daysFromNow(2), status: 'received' },
      { due: daysFromNow(10), status: 'received' },
    ]);

    expect((await sweepDeadlines({ ledger, clock }, { dueSoonDays: 1 })).due_soon).toBe(0);
    expect((await sweepDeadlines({ ledger, clock }, { dueSoonDays: 14 })).due_soon).toBe(2);
  });

  it('reads every page of every shard of the open index', async () => {
    // Forty requests due at the same moment: spread over the shards, several pages on some.
    const { ledger } = await ledgerWith(
      Array.from({ length: 40 }, () => ({ due: daysFromNow(-1), status: 'received' as const })),
    );
    const send = vi.spyOn(dynamo.client, 'send');

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7, pageSize: 2 });
    let queries = send.mock.calls
      .map(([command]) => command)
      .filter((command) => command instanceof QueryCommand)
      .map((command) => command.input as QueryCommandInput);
    send.mockRestore();
    const ended = queries.filter((query) => query.IndexName === ENDED_INDEX);
    queries = queries.filter((query) => query.IndexName !== ENDED_INDEX);

    expect(counts.overdue).toBe(40);
    // The notice pass reads the ended index once per shard (nothing has ended here).
    expect(ended).toHaveLength(OPEN_INDEX_SHARDS);
    const shardsQueried = new Set(queries.map((query) => query.ExpressionAttributeValues?.[':shard']?.S));
    expect(shardsQueried.size).toBe(3 * OPEN_INDEX_SHARDS);
    for (const shard of Array.from({ length: OPEN_INDEX_SHARDS }, (_, index) => index)) {
      expect(shardsQueried).toContain(`received#${shard}`);
      expect(shardsQueried).toContain(`running#${shard}`);
    }
    expect(queries.some((query) => query.ExclusiveStartKey !== undefined)).toBe(true);
    expect(queries.every((query) => query.Limit === 2)).toBe(true);
    // The deadline pass reads only what is due before the horizon; the receipt pass, only what an
    // open CCPA request received before its confirm-by date can be due by.
    expect(
      queries.every((query) =>
        [daysFromNow(7).toISOString(), daysFromNow(80).toISOString()].includes(
          query.ExpressionAttributeValues?.[':due']?.S ?? '',
        ),
      ),
    ).toBe(true);
  });

  it('counts open CCPA requests whose receipt confirmation is past its confirm-by date and not recorded', async () => {
    table += 1;
    const tableName = `ledger-${table}`;
    await createLedgerTable(dynamo.client, tableName);
    const ledger = new Ledger(dynamo.client, tableName, clock);
    const ccpa = async (receivedDaysAgo: number, status: Status = 'received') => {
      const received = daysFromNow(-receivedDaysAgo);
      const request: DsrRequest = {
        request_id: randomUUID(),
        type: 'access',
        regulation: 'ccpa',
        primary_key: 'u-1',
        received_at: received.toISOString(),
        verification: { method: 'email_link', verified_by: 'privacy', verified_at: received.toISOString() },
      };
      await ledger.createReceived(request, 'fp', computeDeadlines('ccpa', received));
      if (status !== 'received') await ledger.update(request.request_id, { status }, ['received']);
      return request.request_id;
    };
    const late = await ccpa(20);
    const later = await ccpa(30, 'failed');
    const confirmed = await ccpa(20, 'running');
    await ledger.recordNotice(confirmed, 'receipt', { channel: 'email', at: daysFromNow(-15).toISOString() });
    await ccpa(5);
    await ccpa(20, 'completed');
    const get = vi.spyOn(ledger, 'get');

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 });

    expect(counts).toMatchObject({ receipts_overdue: 2, receipts_overdue_request_ids: [later, late] });
    // Only the open CCPA requests received long enough ago are read in full.
    expect(get).toHaveBeenCalledTimes(3);
    get.mockRestore();
  });

  it('counts the CCPA receipt confirmations due within three business days, before their date', async () => {
    table += 1;
    const tableName = `ledger-${table}`;
    await createLedgerTable(dynamo.client, tableName);
    const ledger = new Ledger(dynamo.client, tableName, clock);
    const ccpa = async (receivedDaysAgo: number) => {
      const received = daysFromNow(-receivedDaysAgo);
      const request: DsrRequest = {
        request_id: randomUUID(),
        type: 'access',
        regulation: 'ccpa',
        primary_key: 'u-1',
        received_at: received.toISOString(),
        verification: { method: 'email_link', verified_by: 'privacy', verified_at: received.toISOString() },
      };
      await ledger.createReceived(request, 'fp', computeDeadlines('ccpa', received));
      return request.request_id;
    };
    // Now is Tuesday 1 December: the warning reaches the end of Friday 4 December.
    const thursday = await ccpa(9); // received Sunday 22 November: confirm by Friday 4 December
    const wednesday = await ccpa(12); // received Thursday 19 November: confirm by Thursday 3 December
    await ccpa(8); // received Monday 23 November: confirm by Monday 7 December, not yet
    const late = await ccpa(20);
    const confirmed = await ccpa(9);
    await ledger.recordNotice(confirmed, 'receipt', { channel: 'email', at: daysFromNow(-8).toISOString() });

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 });

    expect(counts).toMatchObject({
      receipts_overdue: 1,
      receipts_overdue_request_ids: [late],
      receipts_due_soon: 2,
      receipts_due_soon_request_ids: [wednesday, thursday],
      receipts_due_before: '2026-12-04T23:59:59.999Z',
    });
  });

  it('counts the response and denial notices overdue and due soon of the requests ended within the lookback', async () => {
    table += 1;
    const tableName = `ledger-${table}`;
    await createLedgerTable(dynamo.client, tableName);
    const ledger = new Ledger(dynamo.client, tableName, clock);
    /** A GDPR request received `receivedDaysAgo`, ended `endedDaysAgo` with `status`, optionally extended first. */
    const ended = async (
      receivedDaysAgo: number,
      endedDaysAgo: number,
      status: 'completed' | 'denied' | 'cancelled',
      extended = false,
    ) => {
      const received = daysFromNow(-receivedDaysAgo);
      const request: DsrRequest = {
        request_id: randomUUID(),
        type: 'access',
        regulation: 'gdpr',
        primary_key: 'u-1',
        received_at: received.toISOString(),
        verification: { method: 'email_link', verified_by: 'privacy', verified_at: received.toISOString() },
      };
      await ledger.createReceived(request, 'fp', computeDeadlines('gdpr', received));
      if (extended) {
        const atReceipt = new Ledger(dynamo.client, tableName, () => received);
        await atReceipt.extend(request.request_id, {
          reason: 'complex',
          notice: { channel: 'email', at: received.toISOString() },
        });
      }
      await ledger.update(
        request.request_id,
        { status, completed_at: daysFromNow(-endedDaysAgo).toISOString() },
        ['received'],
      );
      return request.request_id;
    };
    // Now is 1 December. Received 20 October, due 20 November: 11 days overdue.
    const lateResponse = await ended(42, 30, 'completed');
    // Received 3 November, due 3 December: due soon.
    const responseDueSoon = await ended(28, 2, 'completed');
    // Received 25 November, due 25 December: not soon.
    await ended(6, 1, 'completed');
    // Extended to 15 January and denied: its denial was due one month after receipt, 15 November.
    const lateDenial = await ended(16 + 30, 3, 'denied', true);
    // Answered.
    const answered = await ended(28, 2, 'completed');
    await ledger.recordNotice(answered, 'response', { channel: 'email', at: daysFromNow(-1).toISOString() });
    // Owes nothing.
    await ended(28, 2, 'cancelled');
    // Ended before the lookback: left to list --notice-overdue.
    await ended(300, 200, 'completed');

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 });

    expect(counts).toMatchObject({
      notices_overdue: 2,
      notices_overdue_request_ids: [lateDenial, lateResponse],
      notices_due_soon: 1,
      notices_due_soon_request_ids: [responseDueSoon],
    });
  });

  it('reports zeros and no oldest date for an empty ledger', async () => {
    const { ledger } = await ledgerWith([]);

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 });

    expect(counts).toMatchObject({ overdue: 0, due_soon: 0, overdue_request_ids: [] });
    expect(counts.oldest_overdue_due_at).toBeUndefined();
  });

  it('names at most 50 overdue requests, most overdue first, while counting them all', async () => {
    const items = Array.from({ length: 60 }, (_, index) =>
      indexed(`req-${String(index).padStart(2, '0')}`, daysFromNow(-(index + 1))),
    );
    const ledger = {
      openRequests: (status: Status) => openOf(status === 'received' ? items : []),
      get: async () => undefined,
      endedSince: noneEnded,
    };

    const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 });

    expect(counts.overdue).toBe(60);
    expect(counts.overdue_request_ids).toHaveLength(50);
    expect(counts.overdue_request_ids[0]).toBe('req-59');
    expect(counts.oldest_overdue_due_at).toBe(daysFromNow(-60).toISOString());
  });

  it('refuses a due-soon window that is not a positive number of days', async () => {
    const { ledger } = await ledgerWith([]);

    await expect(sweepDeadlines({ ledger, clock }, { dueSoonDays: 0 })).rejects.toThrow(RangeError);
  });

  it('lets a ledger failure through, so the scheduled invocation fails and alarms', async () => {
    const ledger = {
      // biome-ignore lint/correctness/useYield: a ledger whose first read fails
      openRequests: async function* (): AsyncGenerator<OpenRequest> {
        throw new Error('ProvisionedThroughputExceededException');
      },
      get: async () => undefined,
      endedSince: noneEnded,
    };

    await expect(sweepDeadlines({ ledger, clock }, { dueSoonDays: 7 })).rejects.toThrow(
      'ProvisionedThroughputExceededException',
    );
  });
});

const counts: DeadlineCounts = {
  checked_at: NOW.toISOString(),
  overdue: 3,
  due_soon: 5,
  due_soon_before: daysFromNow(7).toISOString(),
  by_status: {
    received: { overdue: 1, due_soon: 2 },
    running: { overdue: 2, due_soon: 3 },
    failed: { overdue: 0, due_soon: 0 },
  },
  oldest_overdue_due_at: daysFromNow(-4).toISOString(),
  overdue_request_ids: ['a', 'b', 'c'],
  receipts_overdue: 2,
  receipts_overdue_request_ids: ['a', 'd'],
  receipts_due_soon: 1,
  receipts_due_before: daysFromNow(3).toISOString(),
  receipts_due_soon_request_ids: ['e'],
  notices_overdue: 4,
  notices_overdue_request_ids: ['f'],
  notices_due_soon: 6,
  notices_due_soon_request_ids: ['g'],
};

/** What `work` wrote to standard output, line by line, where Powertools Metrics writes Embedded Metric Format. */
function stdoutLines(work: () => void): string[] {
  const written: string[] = [];
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    written.push(String(chunk));
    return true;
  });
  try {
    work();
  } finally {
    spy.mockRestore();
  }
  return written
    .join('')
    .split('\n')
    .filter((line) => line !== '');
}

describe('publishDeadlineMetrics', () => {
  it('writes one Embedded Metric Format document with the six counts and the heartbeat under the stack and service dimensions', () => {
    const lines = stdoutLines(() => publishDeadlineMetrics(functionMetrics('svc-dsr', 'SvcDsr'), counts));

    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? '{}')).toEqual({
      _aws: {
        Timestamp: NOW.getTime(),
        CloudWatchMetrics: [
          {
            Namespace: 'svc-dsr',
            Dimensions: [['service', 'Stack']],
            Metrics: [
              { Name: DEADLINE_METRICS.overdue, Unit: 'Count' },
              { Name: DEADLINE_METRICS.dueSoon, Unit: 'Count' },
              { Name: DEADLINE_METRICS.receiptsOverdue, Unit: 'Count' },
              { Name: DEADLINE_METRICS.receiptsDueSoon, Unit: 'Count' },
              { Name: DEADLINE_METRICS.noticesOverdue, Unit: 'Count' },
              { Name: DEADLINE_METRICS.noticesDueSoon, Unit: 'Count' },
              { Name: HEARTBEAT_METRICS.deadlineSweep, Unit: 'Count' },
            ],
          },
        ],
      },
      service: 'svc-dsr',
      Stack: 'SvcDsr',
      OverdueRequests: 3,
      DueSoonRequests: 5,
      ReceiptConfirmationsOverdue: 2,
      ReceiptConfirmationsDueSoon: 1,
      ResponseNoticesOverdue: 4,
      ResponseNoticesDueSoon: 6,
      DeadlineSweepHeartbeat: 1,
    });
  });
});

describe('the deadline sweep handler', () => {
  function harness(overdue: number, options: { listFails?: boolean } = {}) {
    const lines: string[] = [];
    const metrics = functionMetrics('svc-dsr', 'SvcDsr');
    const logged: { level: string; message: string; attributes?: Record<string, unknown> }[] = [];
    const log = (level: string) => (message: string, attributes?: Record<string, unknown>) => {
      logged.push({ level, message, ...(attributes ? { attributes } : {}) });
    };
    const items = Array.from({ length: overdue }, (_, index) =>
      indexed(`late-${index}`, daysFromNow(-1), 'running'),
    );
    const s3 = new S3Client({ region: 'eu-west-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } });
    const s3Mock = mockClient(s3);
    // One record in the bucket, stored yesterday: the day the manifest locks.
    const storedAt = daysFromNow(-1);
    const unsealed = {
      schema: AUDIT_SCHEMA,
      request_id: randomUUID(),
      seq: 0,
      event_id: 'Intake',
      step: 'Intake',
      action: 'request_received',
      at: storedAt.toISOString(),
      facts: {},
      final: false,
      prev_hash: null,
    };
    const changed = { ...unsealed, hash: recordHash(unsealed) };
    const recordKey = auditRecordKey(changed.request_id, 0);
    s3Mock.on(ListObjectsV2Command, { Prefix: 'manifests/' }).resolves({ Contents: [] });
    if (options.listFails) {
      s3Mock
        .on(ListObjectsV2Command, { Prefix: 'audit/' })
        .rejects(new Error('Task timed out after 120.00 seconds'));
    } else {
      s3Mock
        .on(ListObjectsV2Command, { Prefix: 'audit/' })
        .resolves({ Contents: [{ Key: recordKey, LastModified: storedAt }] });
    }
    s3Mock.on(GetObjectCommand, { Key: recordKey }).callsFake(() => ({
      Body: { transformToString: async () => JSON.stringify(changed) },
    }));
    s3Mock.on(PutObjectCommand).resolves({});
    const retentionPasses: number[] = [];
    const handler = makeDeadlineSweepHandler(() => ({
      ledger: {
        openRequests: (status: Status) => openOf(status === 'running' ? items : []),
        get: async () => undefined,
        endedSince: noneEnded,
        minimiseDue: async (options: { afterDays: number }) => {
          retentionPasses.push(options.afterDays);
          return { minimised: 0, skipped: 0 };
        },
      },
      minimisation: { afterDays: 730, hmacKey: async () => 'k'.repeat(32) },
      manifests: { s3, bucket: 'audit' },
      clock,
      dueSoonDays: 7,
      publish: (published: DeadlineCounts) => {
        lines.push(...stdoutLines(() => publishDeadlineMetrics(metrics, published)));
      },
      logger: { info: log('info'), warn: log('warn'), error: log('error'), debug: log('debug') },
    }));
    return { handler, lines, logged, s3Mock, changed, retentionPasses };
  }

  it('runs the retention pass with the configured days on every run', async () => {
    const { handler, retentionPasses } = harness(0);

    await handler();
    await handler();

    expect(retentionPasses).toEqual([730, 730]);
  });

  it("writes yesterday's audit manifest, locking each record the bucket stored that day, after publishing", async () => {
    const { handler, s3Mock, changed } = harness(0);

    await handler();

    const yesterday = new Date(clock().getTime() - 24 * 3600 * 1000).toISOString().slice(0, 10);
    expect(s3Mock).toHaveReceivedCommandWith(PutObjectCommand, {
      Bucket: 'audit',
      Key: `manifests/${yesterday}.json`,
      IfNoneMatch: '*',
    });
    const body = JSON.parse(String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body));
    expect(body).toMatchObject({
      schema: 'svc-dsr.manifest/2',
      day: yesterday,
      records: [
        {
          chain: changed.request_id,
          seq: 0,
          hash: changed.hash,
          stored_at: daysFromNow(-1).toISOString(),
        },
      ],
      prev_hash: null,
    });
  });

  it('publishes the counts as one metric line and warns with the overdue request ids', async () => {
    const { handler, lines, logged } = harness(2);

    const result = await handler();

    expect(result.overdue).toBe(2);
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({
      OverdueRequests: 2,
      DueSoonRequests: 0,
      Stack: 'SvcDsr',
    });
    expect(logged.slice(0, 1)).toEqual([
      {
        level: 'warn',
        message: 'open requests are overdue',
        attributes: expect.objectContaining({ overdue: 2, overdue_request_ids: ['late-0', 'late-1'] }),
      },
    ]);
  });

  it('still publishes a zero, so the alarm recovers, and logs at info when nothing is late', async () => {
    const { handler, lines, logged } = harness(0);

    await handler();

    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ OverdueRequests: 0 });
    expect(logged.map((entry) => entry.message)).toEqual(['deadline sweep', 'audit manifests written']);
  });

  it('publishes the deadline metrics first, so a manifest or retention pass that fails leaves them out', async () => {
    const { handler, lines } = harness(1, { listFails: true });

    await expect(handler()).rejects.toThrow('Task timed out');

    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ OverdueRequests: 1, DeadlineSweepHeartbeat: 1 });
  });
});

describe('deadlineSweepEnvSchema', () => {
  it('names the missing variables', () => {
    expect(() => parseEnv(deadlineSweepEnvSchema, { DUE_SOON_DAYS: '7' })).toThrow(ConfigurationError);
    expect(() => parseEnv(deadlineSweepEnvSchema, { DUE_SOON_DAYS: '7' })).toThrow(
      /TABLE_NAME.*METRICS_STACK/,
    );
  });

  it('reads the window and defaults the namespace and the retention (730 days, the §7101 24 months)', () => {
    expect(
      parseEnv(deadlineSweepEnvSchema, {
        TABLE_NAME: 't',
        METRICS_STACK: 's',
        DUE_SOON_DAYS: '3',
        AUDIT_BUCKET: 'a',
        AUDIT_KEY_SECRET_ID: 'k',
      }),
    ).toEqual({
      TABLE_NAME: 't',
      METRICS_STACK: 's',
      AUDIT_BUCKET: 'a',
      DUE_SOON_DAYS: 3,
      METRICS_NAMESPACE: 'svc-dsr',
      MINIMISE_AFTER_DAYS: 730,
      AUDIT_KEY_SECRET_ID: 'k',
      TIME_ZONE: 'UTC',
    });
  });

  it('refuses a retention of zero days, naming the variable', () => {
    expect(() =>
      parseEnv(deadlineSweepEnvSchema, {
        TABLE_NAME: 't',
        METRICS_STACK: 's',
        AUDIT_BUCKET: 'a',
        AUDIT_KEY_SECRET_ID: 'k',
        MINIMISE_AFTER_DAYS: '0',
      }),
    ).toThrow(/MINIMISE_AFTER_DAYS/);
  });
});
