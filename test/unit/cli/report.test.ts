import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, GetCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { computeMetrics, computeSiteRows, denialBasisOf, toRecord } from '#shared/evidence/report';
import { ledgerItemSchema } from '#shared/ledger';
import { runReport } from '../../../bin/cli/commands/report.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { ledgerRecord, PRIMARY_KEY, SVC_USER_ID, testContext } from './helpers.ts';
import { chainsFor, serveChains } from './locked-chains.ts';

const dbMock = mockClient(DynamoDBDocumentClient);
const s3Mock = mockClient(S3Client);

/** `runReport` looking again at once at a request its records did not back (a test of its own waits). */
const report: typeof runReport = (context, options, io) =>
  runReport(context, { recheckAfterMs: [0], ...options }, io);

/** The ledger's answer to a GetItem: the item of that id among `items`. */
function servesItems(items: readonly object[]): void {
  dbMock.on(GetCommand).callsFake((input: { Key?: { request_id?: unknown } }) => ({
    Item: items.find((item) => 'request_id' in item && item.request_id === input.Key?.request_id),
  }));
}
let dir: string;

const id = (n: number) => `aaaaaaaa-0000-4000-8000-${String(n).padStart(12, '0')}`;

/**
 * A hand-computed fixture; the report runs at 2026-11-21T12:00Z (NOW) for a controller in
 * California (the stack's TimeZone output). Days to respond, by hand:
 * 1: 03-01T00 -> 03-03T00 = 2.0; 2: 03-01T00 -> 03-11T12 = 10.5; 8: 02-01 -> 02-05 = 4.0;
 * 9: 08-01T00 -> 09-04T12 = 34.5 (after its due date: late). 10 is received after the report is
 * made and answered before it, and 11 answered before it was received: their locked notice
 * records break a rule, so the report refuses both (and names them) rather than print them.
 * The audit bucket holds the chains that lock what each item says (locked-chains.ts).
 * 6 is received at 2026-01-01T05:00Z, which is still 31 December 2025 in California.
 */
const ITEMS = [
  ledgerRecord({
    request_id: id(1),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    channel: 'web_form',
    received_at: '2026-03-01T00:00:00Z',
    completed_at: '2026-03-03T00:00:00Z',
    notice_response: { channel: 'email', at: '2026-03-03T00:00:00Z', recorded_at: '2026-03-03T00:00:00Z' },
    due_at: '2026-04-15T06:59:59.999Z',
  }),
  ledgerRecord({
    request_id: id(2),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'no_data',
    received_at: '2026-03-01T00:00:00Z',
    completed_at: '2026-03-11T12:00:00Z',
    notice_response: { channel: 'email', at: '2026-03-11T12:00:00Z', recorded_at: '2026-03-11T12:00:00Z' },
    due_at: '2026-04-15T06:59:59.999Z',
    verification: { method: '=HYPERLINK("x")', verified_by: 'pt', verified_at: '2026-03-01T00:00:00Z' },
  }),
  ledgerRecord({
    request_id: id(3),
    regulation: 'ccpa',
    status: 'failed',
    error: { code: 'export_failed', message: 'gave up, after 3 tries' },
    received_at: '2026-04-01T00:00:00Z',
    due_at: '2026-05-16T06:59:59.999Z',
    updated_at: '2026-04-02T00:00:00Z',
  }),
  ledgerRecord({
    request_id: id(4),
    regulation: 'ccpa',
    status: 'running',
    received_at: '2026-11-01T00:00:00Z',
    due_at: '2026-12-16T07:59:59.999Z',
  }),
  ledgerRecord({
    request_id: id(5),
    regulation: 'gdpr',
    type: 'erasure',
    status: 'cancelled',
    cancel_reason: 'withdrawn',
    received_at: '2026-06-01T00:00:00Z',
    completed_at: '2026-06-02T00:00:00Z',
  }),
  ledgerRecord({
    request_id: id(6),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    received_at: '2026-01-01T05:00:00Z',
    completed_at: '2026-01-02T05:00:00Z',
    notice_response: { channel: 'email', at: '2026-01-02T05:00:00Z', recorded_at: '2026-01-02T05:00:00Z' },
  }),
  ledgerRecord({
    request_id: id(8),
    regulation: 'ccpa',
    type: 'erasure',
    status: 'completed',
    outcome: 'erased',
    received_at: '2026-02-01T00:00:00Z',
    completed_at: '2026-02-05T00:00:00Z',
    notice_response: { channel: 'email', at: '2026-02-05T00:00:00Z', recorded_at: '2026-02-05T00:00:00Z' },
    due_at: '2026-03-18T06:59:59.999Z',
  }),
  ledgerRecord({
    request_id: id(9),
    regulation: 'gdpr',
    status: 'completed',
    outcome: 'exported',
    received_at: '2026-08-01T00:00:00Z',
    completed_at: '2026-09-04T12:00:00Z',
    notice_response: { channel: 'email', at: '2026-09-04T12:00:00Z', recorded_at: '2026-09-04T12:00:00Z' },
    due_at: '2026-09-01T06:59:59.999Z',
  }),
  ledgerRecord({
    request_id: id(10),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    received_at: '2030-01-10T00:00:00Z',
    completed_at: '2026-11-20T00:00:00Z',
    notice_response: { channel: 'email', at: '2026-11-20T00:00:00Z', recorded_at: '2026-11-20T00:00:00Z' },
    due_at: '2030-02-24T07:59:59.999Z',
  }),
  ledgerRecord({
    request_id: id(11),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    received_at: '2026-10-01T00:00:00Z',
    completed_at: '2026-09-30T00:00:00Z',
    notice_response: { channel: 'email', at: '2026-09-30T00:00:00Z', recorded_at: '2026-09-30T00:00:00Z' },
  }),
];
const REJECTED = {
  request_id: id(7),
  fingerprint: 'fp',
  status: 'rejected',
  rejection_errors: ['type: must be "access" or "erasure"'],
  created_at: '2026-07-01T00:00:00Z',
  updated_at: '2026-07-01T00:00:00Z',
  completed_at: '2026-07-01T00:00:00Z',
};

const californian = () => testContext({ names: { TimeZone: 'America/Los_Angeles' } });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-dsr-report-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
beforeEach(() => {
  dbMock.reset();
  dbMock
    .on(ScanCommand)
    .resolvesOnce({ Items: ITEMS.slice(0, 3), LastEvaluatedKey: { request_id: id(3) } })
    .resolvesOnce({ Items: [...ITEMS.slice(3), REJECTED, { request_id: 'broken' }] });
  servesItems([...ITEMS, REJECTED]);
  // The audit bucket holds the chains that lock what each item says.
  s3Mock.reset();
  serveChains(s3Mock, [...ITEMS, ledgerItemSchema.parse(REJECTED)].flatMap(chainsFor));
});

/** Every metric row, with the zeros a row leaves out here filled in. */
const row = (fields: Record<string, string | number | null>) => ({
  received: 0,
  complied: 0,
  denied: 0,
  denied_unverifiable: 0,
  denied_other: 0,
  withdrawn: 0,
  open: 0,
  failed: 0,
  late: 0,
  notice_missing: 0,
  median_days_to_respond: null,
  mean_days_to_respond: null,
  date_problems: 0,
  ...fields,
});

describe('runReport --out', () => {
  it('writes to standard output for -', async () => {
    const io = collectingIo();
    await report(californian(), { json: true, out: '-' }, io);
    expect(JSON.parse(io.stdout())).toMatchObject({ time_zone: 'America/Los_Angeles' });
  });

  it('replaces a file a report wrote before', async () => {
    const file = join(dir, 'again.json');
    await writeFile(file, 'last month');
    await report(californian(), { json: true, out: file }, collectingIo());
    expect(JSON.parse(await readFile(file, 'utf8'))).toMatchObject({ time_zone: 'America/Los_Angeles' });
  });

  it.each([
    ['a folder', () => dir, 'is a directory; give a file path'],
    ['a path in a missing folder', () => join(dir, 'missing', 'r.csv'), 'does not exist; create it first'],
  ])('refuses %s with exit 2 before reading the ledger', async (_label, out, message) => {
    dbMock.resetHistory();
    await expect(report(californian(), { out: out() }, collectingIo())).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining(message),
    });
    expect(dbMock.commandCalls(ScanCommand)).toHaveLength(0);
  });
});

describe('runReport', () => {
  it('computes each 7102 figure per regulation and type as hand-computed, GDPR and CCPA never in one row', async () => {
    // Act
    const io = collectingIo();
    const { exitCode, result } = await report(californian(), { json: true, from: '2026-01-01' }, io);

    // Assess: one item the schema refuses is left out and counted, one its records contradict is
    // left out and named, and the command fails.
    expect(exitCode).toBe(1);
    expect(io.stderr()).toContain(
      'svc-dsr: 1 ledger item(s) did not match the ledger schema and are not in the report',
    );
    expect(io.stderr()).toContain(
      'svc-dsr: 2 request(s) are not in the report: their audit records do not back what the ledger says',
    );
    expect(io.stderr()).toContain(`${id(11)} rule_broken: notices chain: record 0 (notice_given)`);
    expect(result.refused).toEqual([
      {
        request_id: id(10),
        findings: [
          {
            check: 'rule_broken',
            detail: `notices chain: record 0 (notice_given) says the response notice was given at 2026-11-20T00:00:00Z, before the request was received (2030-01-10T00:00:00Z, record 0 request_received)`,
          },
        ],
      },
      {
        request_id: id(11),
        findings: [
          {
            check: 'rule_broken',
            detail: `notices chain: record 0 (notice_given) says the response notice was given at 2026-09-30T00:00:00Z, before the request was received (2026-10-01T00:00:00Z, record 0 request_received)`,
          },
        ],
      },
    ]);
    const scans = dbMock.commandCalls(ScanCommand).map((call) => call.args[0].input);
    expect(scans).toEqual([
      { TableName: 'ledger' },
      { TableName: 'ledger', ExclusiveStartKey: { request_id: id(3) } },
    ]);
    expect(result).toMatchObject({
      time_zone: 'America/Los_Angeles',
      // Midnight in California, PST.
      from: '2026-01-01T08:00:00.000Z',
      to: null,
      regulation: null,
      intake_errors: 1,
      skipped: 1,
    });
    expect(result.metrics).toEqual([
      row({
        regulation: 'ccpa',
        type: 'access',
        // 1, 2 complied; 3 failed; 4 open. Days: 2 and 10.5 -> median and mean 6.25.
        received: 4,
        complied: 2,
        open: 1,
        failed: 1,
        median_days_to_respond: 6.3,
        mean_days_to_respond: 6.3,
      }),
      row({
        regulation: 'ccpa',
        type: 'erasure',
        received: 1,
        complied: 1,
        median_days_to_respond: 4,
        mean_days_to_respond: 4,
      }),
      row({
        regulation: 'ccpa',
        type: 'all',
        // Days 2, 4, 10.5: median 4, mean 16.5 / 3 = 5.5.
        received: 5,
        complied: 3,
        open: 1,
        failed: 1,
        median_days_to_respond: 4,
        mean_days_to_respond: 5.5,
      }),
      row({
        regulation: 'gdpr',
        type: 'access',
        received: 1,
        complied: 1,
        late: 1,
        median_days_to_respond: 34.5,
        mean_days_to_respond: 34.5,
      }),
      row({ regulation: 'gdpr', type: 'erasure', received: 1, withdrawn: 1 }),
      row({
        regulation: 'gdpr',
        type: 'all',
        received: 2,
        complied: 1,
        withdrawn: 1,
        late: 1,
        median_days_to_respond: 34.5,
        mean_days_to_respond: 34.5,
      }),
    ]);
  });

  it('records the 7101 fields, with failed, withdrawn, open and intake errors apart from denials', async () => {
    const { result } = await report(californian(), { json: true }, collectingIo());
    const byId = new Map(result.records.map((record) => [record.request_id, record]));
    expect(byId.get(id(1))).toMatchObject({
      received_at: '2026-03-01T00:00:00Z',
      type: 'access',
      // §7101's manner is how the request was made, not how the identity was verified.
      channel: 'web_form',
      verification_method: 'email_link',
      response: 'exported',
      response_category: 'complied',
      response_date: '2026-03-03T00:00:00Z',
      days_to_respond: 2,
      denial_basis: null,
      on_time: true,
    });
    // A failed request is still owed: no response, not denied, and late once past its due date.
    expect(byId.get(id(3))).toMatchObject({
      response: 'failed',
      response_category: 'failed',
      response_date: null,
      days_to_respond: null,
      denial_basis: null,
      on_time: false,
    });
    expect(byId.get(id(3))?.channel).toBeNull();
    expect(byId.get(id(4))).toMatchObject({ response: 'pending', response_category: 'open', on_time: null });
    expect(byId.get(id(5))).toMatchObject({
      response: 'cancelled',
      response_category: 'withdrawn',
      response_date: '2026-06-02T00:00:00Z',
      on_time: null,
    });
    // An intake error is dated by its locked record (request_rejected), written when intake refused it.
    expect(byId.get(id(7))).toMatchObject({
      received_at: '2026-07-01T00:00:00.000Z',
      regulation: null,
      response_category: 'intake_error',
      denial_basis: 'invalid request: type: must be "access" or "erasure"',
    });
    expect(byId.get(id(9))).toMatchObject({ days_to_respond: 34.5, on_time: false });
    // Answered before they were received, as their locked records say: refused, not printed.
    expect(byId.has(id(10))).toBe(false);
    expect(byId.has(id(11))).toBe(false);
  });

  it('filters by regulation, and still counts the intake errors that have none', async () => {
    const { result } = await report(
      californian(),
      { json: true, regulation: 'gdpr', from: '2026-01-01', to: '2026-12-31' },
      collectingIo(),
    );
    expect(result.records.map((record) => record.request_id)).toEqual([id(5), id(9)]);
    expect(result.metrics.map((metric) => `${metric.regulation}/${metric.type}`)).toEqual([
      'gdpr/access',
      'gdpr/erasure',
      'gdpr/all',
    ]);
    expect(result.intake_errors).toBe(1);
    expect(result.to).toBe('2027-01-01T07:59:59.999Z');
  });

  it('cuts day ranges in the configured time zone, not in UTC', async () => {
    // 2026-01-01T05:00Z is 31 December 2025 in California and 1 January 2026 in UTC.
    const local = await report(
      californian(),
      { json: true, from: '2025-12-31', to: '2025-12-31' },
      collectingIo(),
    );
    expect(local.result.records.map((record) => record.request_id)).toEqual([id(6)]);

    dbMock.reset();
    dbMock.on(ScanCommand).resolves({ Items: ITEMS });
    servesItems(ITEMS);
    const utc = await report(
      californian(),
      { json: true, from: '2025-12-31', to: '2025-12-31', timeZone: 'UTC' },
      collectingIo(),
    );
    expect(utc.result.records).toEqual([]);
    expect(utc.result.time_zone).toBe('UTC');
  });

  it('writes CSV with both tables, quoting and neutralising spreadsheet formulas, and never a subject identifier', async () => {
    // Prepare
    const out = join(dir, 'report.csv');
    const io = collectingIo();
    // Act
    await report(californian(), { out, from: '2026-01-01', to: '2026-12-31T23:59:59Z' }, io);
    // Assess
    const csv = await readFile(out, 'utf8');
    const [records, metrics] = csv.split('\r\n\r\n');
    expect(records?.split('\r\n')[0]).toBe(
      'request_id,regulation,type,received_at,channel,verification_method,status,response,response_category,response_date,notice_given_at,notice_recorded_at,ended_at,days_to_respond,denial_basis,due_at,notice_due_at,extended,on_time,notice_recorded_late,date_problem,reference',
    );
    expect(records).toContain(`"'=HYPERLINK(""x"")"`);
    expect(metrics?.split('\r\n')[0]).toBe(
      'regulation,type,received,complied,denied,denied_unverifiable,denied_other,withdrawn,open,failed,late,notice_missing,median_days_to_respond,mean_days_to_respond,date_problems',
    );
    // Request 10 (received in 2030) is out of this range.
    expect(metrics).toContain('ccpa,all,5,3,0,0,0,0,1,1,0,0,4,5.5,0');
    expect(csv).not.toContain(PRIMARY_KEY);
    expect(csv).not.toContain(SVC_USER_ID);
    expect(io.stderr()).toContain(`wrote ${out}`);
    expect(io.stderr()).toContain('1 message(s) were rejected at intake');
    expect(io.stderr()).toContain('1 ledger item(s) did not match');
  });

  it('prints only the metrics table with --table metrics', async () => {
    const io = collectingIo();
    // Request 5, received 2026-06-01T00:00Z, was received on 31 May in California.
    await report(californian(), { table: 'metrics', from: '2026-05-31', to: '2026-05-31' }, io);
    expect(io.stdout().split('\r\n').filter(Boolean)).toEqual([
      'regulation,type,received,complied,denied,denied_unverifiable,denied_other,withdrawn,open,failed,late,notice_missing,median_days_to_respond,mean_days_to_respond,date_problems',
      'gdpr,erasure,1,0,0,0,0,1,0,0,0,0,,,0',
      'gdpr,all,1,0,0,0,0,1,0,0,0,0,,,0',
    ]);
  });

  it('refuses an unreadable date, a reversed range, a regulation or time zone it does not know, with exit 2, before scanning', async () => {
    await expect(report(testContext(), { from: '01/02/2026' }, collectingIo())).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('--from: must be a date (2026-01-31)'),
    });
    await expect(
      report(testContext(), { from: '2026-02-01', to: '2026-01-01' }, collectingIo()),
    ).rejects.toThrow('--from is after --to');
    await expect(report(testContext(), { format: 'xlsx' }, collectingIo())).rejects.toThrow('--format');
    await expect(report(testContext(), { regulation: 'lgpd' }, collectingIo())).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('--regulation: must be "gdpr" or "ccpa"'),
    });
    await expect(report(testContext(), { timeZone: 'Pacific/Nowhere' }, collectingIo())).rejects.toThrow(
      '--time-zone',
    );
    expect(dbMock.commandCalls(ScanCommand)).toHaveLength(0);
  });
});

describe('denialBasisOf', () => {
  it('puts an unverified identity in its own basis and every other reason code under other', () => {
    expect(denialBasisOf('identity_not_verified')).toBe('unverifiable');
    expect(denialBasisOf('manifestly_unfounded')).toBe('other');
    expect(denialBasisOf(undefined)).toBe('other');
  });
});

describe('runReport: the answer is the notice', () => {
  /** Received 2026-01-01, due 2026-02-15; its workflow ended in nine days; the notice claims 10 February and was recorded on 27 October. */
  const backdated = ledgerRecord({
    request_id: id(21),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    received_at: '2026-01-01T00:00:00Z',
    due_at: '2026-02-15T23:59:59.999Z',
    completed_at: '2026-01-10T00:00:00Z',
    notice_response: { channel: 'email', at: '2026-02-10T00:00:00Z', recorded_at: '2026-10-27T00:00:00Z' },
  });
  /** Completed in four days and never answered: past its due date with no notice. */
  const unanswered = ledgerRecord({
    request_id: id(22),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'no_data',
    received_at: '2026-03-01T00:00:00Z',
    due_at: '2026-04-15T23:59:59.999Z',
    completed_at: '2026-03-05T00:00:00Z',
  });
  /** Answered in ten days, recorded five minutes later. */
  const answered = ledgerRecord({
    request_id: id(23),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    received_at: '2026-06-01T00:00:00Z',
    due_at: '2026-07-16T23:59:59.999Z',
    completed_at: '2026-06-10T00:00:00Z',
    notice_response: { channel: 'email', at: '2026-06-11T00:00:00Z', recorded_at: '2026-06-11T00:05:00Z' },
  });
  /** A GDPR request extended to 1 August and denied on 1 July: its denial was due on 1 June. */
  const extendedDenial = ledgerRecord({
    request_id: id(24),
    regulation: 'gdpr',
    status: 'denied',
    step: undefined,
    received_at: '2026-05-01T00:00:00Z',
    due_at: '2026-08-01T23:59:59.999Z',
    original_due_at: '2026-06-01T23:59:59.999Z',
    extended: true,
    denial: { code: 'exempt', at: '2026-07-01T00:00:00Z' },
    completed_at: '2026-07-01T00:00:00Z',
    notice_denial: { channel: 'letter', at: '2026-07-01T10:00:00Z', recorded_at: '2026-07-01T10:00:00Z' },
  });

  beforeEach(() => {
    dbMock.reset();
    dbMock.on(ScanCommand).resolves({ Items: [backdated, unanswered, answered, extendedDenial] });
    servesItems([backdated, unanswered, answered, extendedDenial]);
    s3Mock.reset();
    serveChains(s3Mock, [backdated, unanswered, answered, extendedDenial].flatMap(chainsFor));
  });

  it('dates a response by its notice, as recorded: a backdated notice recorded late is late', async () => {
    const { result } = await report(testContext(), { json: true }, collectingIo());
    const byId = new Map(result.records.map((record) => [record.request_id, record]));
    expect(byId.get(id(21))).toMatchObject({
      ended_at: '2026-01-10T00:00:00Z',
      notice_given_at: '2026-02-10T00:00:00Z',
      notice_recorded_at: '2026-10-27T00:00:00Z',
      response_date: '2026-10-27T00:00:00Z',
      // 1 January to 27 October.
      days_to_respond: 299,
      on_time: false,
      notice_recorded_late: true,
    });
    expect(byId.get(id(22))).toMatchObject({
      ended_at: '2026-03-05T00:00:00Z',
      response_date: null,
      days_to_respond: null,
      on_time: false,
      notice_recorded_late: null,
    });
    expect(byId.get(id(23))).toMatchObject({
      response_date: '2026-06-11T00:05:00Z',
      days_to_respond: 10,
      on_time: true,
      notice_recorded_late: false,
    });
    expect(byId.get(id(24))).toMatchObject({
      due_at: '2026-08-01T23:59:59.999Z',
      notice_due_at: '2026-06-01T23:59:59.999Z',
      response_date: '2026-07-01T10:00:00Z',
      on_time: false,
    });
    expect(result.metrics).toContainEqual(
      row({
        regulation: 'ccpa',
        type: 'all',
        received: 3,
        complied: 3,
        late: 2,
        notice_missing: 1,
        // 299 and 10 days: the unanswered request has no response date.
        median_days_to_respond: 154.5,
        mean_days_to_respond: 154.5,
      }),
    );
  });
});

describe('toRecord', () => {
  it('dates a response only by the completion time a record locks, never by the last write of the ledger item', () => {
    // Prepare: answered, but the ledger item holds no completion time; it was written to since.
    const item = ledgerRecord({
      status: 'completed',
      step: undefined,
      outcome: 'exported',
      completed_at: undefined,
      updated_at: '2026-11-21T09:00:00.000Z',
    });

    // Act
    const record = toRecord(item, new Date('2026-12-01T00:00:00.000Z'));

    // Assess
    expect(record.response_date).toBeNull();
    expect(record.days_to_respond).toBeNull();
  });
});

describe('report of correction requests', () => {
  it('counts requests to correct in a row of their own, apart from access and erasure', () => {
    const now = new Date('2026-12-31T00:00:00Z');
    const correction = (n: number, fields: NonNullable<Parameters<typeof ledgerRecord>[0]>) =>
      toRecord(
        ledgerRecord({
          request_id: `00000000-0000-4000-8000-0000000001${String(n).padStart(2, '0')}`,
          type: 'correction',
          regulation: 'ccpa',
          received_at: '2026-11-01T00:00:00Z',
          due_at: '2026-12-16T07:59:59.999Z',
          ...fields,
        }),
        now,
        fields.denial?.code,
      );
    const records = [
      correction(1, { status: 'completed', outcome: 'corrected', completed_at: '2026-11-03T00:00:00Z' }),
      correction(2, {
        status: 'completed',
        outcome: 'corrected_with_changes',
        completed_at: '2026-11-05T00:00:00Z',
      }),
      correction(3, {
        status: 'denied',
        denial: { code: 'identity_not_verified', at: '2026-11-01T00:00:00Z' },
        completed_at: '2026-11-01T00:00:00Z',
      }),
      toRecord(ledgerRecord({ regulation: 'ccpa', status: 'completed', outcome: 'exported' }), now),
    ];

    const metrics = computeMetrics(records);

    expect(records.map((record) => record.response)).toEqual([
      'corrected',
      'corrected_with_changes',
      'denied',
      'exported',
    ]);
    expect(metrics.find((metric) => metric.type === 'correction')).toMatchObject({
      regulation: 'ccpa',
      received: 3,
      complied: 2,
      denied: 1,
      denied_unverifiable: 1,
    });
    expect(metrics.find((metric) => metric.type === 'access')).toMatchObject({ received: 1, complied: 1 });
    expect(metrics.find((metric) => metric.type === 'all')).toMatchObject({ received: 4, complied: 3 });
  });
});

describe('runReport against the audit records', () => {
  /** Answered, and told so: its due date, outcome, verification and notice are all locked. */
  const answered = ledgerRecord({
    request_id: id(31),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    received_at: '2026-05-01T00:00:00Z',
    due_at: '2026-06-15T23:59:59.999Z',
    completed_at: '2026-05-05T00:00:00Z',
    notice_response: { channel: 'email', at: '2026-05-06T00:00:00Z', recorded_at: '2026-05-06T00:00:00Z' },
  });
  /** Denied, and told so. */
  const denied = ledgerRecord({
    request_id: id(32),
    regulation: 'ccpa',
    status: 'denied',
    step: undefined,
    received_at: '2026-05-02T00:00:00Z',
    due_at: '2026-06-16T23:59:59.999Z',
    denial: { code: 'identity_not_verified', at: '2026-05-03T00:00:00Z' },
    completed_at: '2026-05-03T00:00:00Z',
    notice_denial: { channel: 'letter', at: '2026-05-03T10:00:00Z', recorded_at: '2026-05-03T10:00:00Z' },
  });
  const untouched = [answered, denied];

  /** The ledger holds `items`; the bucket, the chains that locked `locked`. */
  function world(items: readonly object[], locked = untouched) {
    dbMock.reset();
    dbMock.on(ScanCommand).resolves({ Items: [...items] });
    servesItems(items);
    s3Mock.reset();
    serveChains(s3Mock, locked.flatMap(chainsFor));
  }

  it('exits 0 with every row, as the ledger says, when the records back every item', async () => {
    world(untouched);
    const io = collectingIo();

    const { exitCode, result } = await report(testContext(), { json: true }, io);

    expect(exitCode).toBe(0);
    expect(io.stderr()).toBe('');
    expect(result).toMatchObject({ checked: 2, refused: [], skipped: 0 });
    expect(result.records.map((record) => record.request_id)).toEqual([id(31), id(32)]);
    expect(result.records.map((record) => record.on_time)).toEqual([true, true]);
  });

  it.each([
    [
      'due_at',
      answered,
      { due_at: '2026-04-01T23:59:59.999Z' },
      /the ledger's due_at is "2026-04-01T23:59:59.999Z"; record 0 \(request_received\) locked/,
    ],
    [
      'outcome',
      answered,
      { outcome: 'no_data' },
      /the ledger's outcome is "no_data"; record 1 \(request_completed\) locked "exported"/,
    ],
    [
      'verification method',
      answered,
      {
        verification: {
          method: 'in_person',
          verified_by: 'privacy-team',
          verified_at: '2026-11-20T09:05:00Z',
        },
      },
      /the ledger's verification method is "in_person"; record 0 \(request_received\) locked "email_link"/,
    ],
    [
      'denial code',
      denied,
      { denial: { code: 'exempt', at: '2026-05-03T00:00:00Z' } },
      /the ledger's denial code is "exempt"; record 1 \(request_denied\) locked "identity_not_verified"/,
    ],
    [
      'response date',
      answered,
      {
        notice_response: {
          channel: 'email',
          at: '2026-05-02T00:00:00Z',
          recorded_at: '2026-05-02T00:00:00Z',
        },
      },
      /the ledger's response notice time is "2026-05-02T00:00:00Z"; record 0 \(notice_given\) locked "2026-05-06T00:00:00Z"/,
    ],
  ])(
    'refuses a row whose ledger %s was edited after its record locked it, naming the request, and exits 1',
    async (_field, item, edit, detail) => {
      // Prepare: the chain locked the item as it was; the ledger was edited since.
      world(untouched.map((entry) => (entry === item ? { ...entry, ...edit } : entry)));
      const io = collectingIo();

      // Act
      const { exitCode, result } = await report(testContext(), { json: true }, io);

      // Assess: no figure of the edited row is printed; the other request still is.
      expect(exitCode).toBe(1);
      expect(result.refused.map((refused) => refused.request_id)).toEqual([item.request_id]);
      expect(result.refused[0]?.findings).toContainEqual({
        check: 'ledger_mismatch',
        detail: expect.stringMatching(detail),
      });
      expect(result.records.map((record) => record.request_id)).toEqual(
        untouched.filter((entry) => entry !== item).map((entry) => entry.request_id),
      );
      expect(result.metrics.find((metric) => metric.type === 'all')?.received).toBe(1);
      expect(io.stderr()).toContain(`${item.request_id} ledger_mismatch: `);
    },
  );

  it('looks again at a request caught between its record and its ledger write, and prints it once they agree', async () => {
    // Prepare: the scan read the ledger before RecordOutcome's write (running, no outcome) while
    // the bucket already held the final record; a moment later the ledger has caught up.
    world(untouched);
    dbMock.on(ScanCommand).resolves({
      Items: [{ ...answered, status: 'running', outcome: undefined, completed_at: undefined }, denied],
    });
    const io = collectingIo();
    const started = Date.now();

    // Act
    const { exitCode, result } = await runReport(testContext(), { json: true, recheckAfterMs: [50] }, io);

    // Assess: read again (a consistent GetItem) after the pause, and backed.
    expect(exitCode).toBe(0);
    expect(result.refused).toEqual([]);
    expect(result.records.find((record) => record.request_id === id(31))).toMatchObject({
      status: 'completed',
      response: 'exported',
    });
    expect(dbMock.commandCalls(GetCommand).map((call) => call.args[0].input)).toEqual([
      { TableName: 'ledger', Key: { request_id: id(31) }, ConsistentRead: true },
    ]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(50);
  });

  it('still refuses an edit after looking again as often as it is told', async () => {
    world([{ ...answered, outcome: 'no_data' }, denied]);

    const { exitCode, result } = await runReport(
      testContext(),
      { json: true, recheckAfterMs: [10, 10] },
      collectingIo(),
    );

    expect(exitCode).toBe(1);
    expect(result.refused.map((entry) => entry.request_id)).toEqual([id(31)]);
    expect(dbMock.commandCalls(GetCommand)).toHaveLength(2);
  });

  it('refuses a request that is only a ledger item (fabricated): chain_missing, named', async () => {
    const fabricated = ledgerRecord({ ...answered, request_id: id(33) });
    world([...untouched, fabricated]);
    const io = collectingIo();

    const { exitCode, result } = await report(testContext(), { json: true }, io);

    expect(exitCode).toBe(1);
    expect(result.refused).toEqual([
      {
        request_id: id(33),
        findings: [
          {
            check: 'chain_missing',
            detail: 'the ledger has the request (completed) but the bucket has no records',
          },
          {
            check: 'chain_missing',
            detail: `notices chain: the ledger records notices to the subject but the bucket has no audit/${id(33)}.notices/ records`,
          },
        ],
      },
    ]);
    expect(result.records.map((record) => record.request_id)).toEqual([id(31), id(32)]);
    expect(io.stderr()).toContain(`${id(33)} chain_missing`);
  });

  it('checks a request the ledger moved out of the range: its intake record puts it in, so it is named', async () => {
    // Prepare: received in May as locked; the ledger now says last year.
    world([{ ...answered, received_at: '2025-05-01T00:00:00Z' }, denied]);

    // Act
    const { exitCode, result } = await report(
      testContext(),
      { json: true, from: '2026-01-01', to: '2026-12-31' },
      collectingIo(),
    );

    // Assess
    expect(exitCode).toBe(1);
    expect(result.refused).toEqual([
      {
        request_id: id(31),
        findings: [
          expect.objectContaining({
            check: 'ledger_mismatch',
            detail: expect.stringContaining(`the ledger's received_at is "2025-05-01T00:00:00Z"`),
          }),
        ],
      },
    ]);
    expect(result.checked).toBe(2);
  });

  it('names a request moved out of --regulation by an edit, and leaves out one of the other regulation', async () => {
    // Prepare: the answered CCPA request now says GDPR; a GDPR request, edited too, prints nothing in a CCPA report.
    const gdpr = ledgerRecord({ ...answered, request_id: id(34), regulation: 'gdpr' });
    world(
      [{ ...answered, regulation: 'gdpr' }, denied, { ...gdpr, due_at: '2026-04-01T23:59:59.999Z' }],
      [...untouched, gdpr],
    );

    // Act
    const { exitCode, result } = await report(
      testContext(),
      { json: true, regulation: 'ccpa' },
      collectingIo(),
    );

    // Assess
    expect(exitCode).toBe(1);
    expect(result.refused).toEqual([
      {
        request_id: id(31),
        findings: [
          {
            check: 'ledger_mismatch',
            detail: `the ledger's regulation is "gdpr"; record 0 (request_received) locked "ccpa"`,
          },
        ],
      },
    ]);
    expect(result.records.map((record) => record.request_id)).toEqual([id(32)]);
  });

  it('reads only the first record of a request out of the range, and leaves it out when the records agree', async () => {
    world(untouched);

    const { exitCode, result } = await report(
      testContext(),
      { json: true, from: '2026-05-02', to: '2026-05-31', timeZone: 'UTC' },
      collectingIo(),
    );

    expect(exitCode).toBe(0);
    expect(result.records.map((record) => record.request_id)).toEqual([id(32)]);
    expect(result.checked).toBe(1);
    const reads = s3Mock.commandCalls(GetObjectCommand).map((call) => call.args[0].input.Key);
    expect(reads.filter((key) => key?.startsWith(`audit/${id(31)}`))).toEqual([
      `audit/${id(31)}/000000.json`,
    ]);
  });

  it('names a chain received in the range whose ledger item is gone: ledger_missing', async () => {
    world([denied]);

    const { exitCode, result } = await report(testContext(), { json: true }, collectingIo());

    expect(exitCode).toBe(1);
    expect(result.refused).toEqual([
      {
        request_id: id(31),
        findings: [
          {
            check: 'ledger_missing',
            detail: `the bucket holds the chain audit/${id(31)}/ of a request received at 2026-05-01T00:00:00Z, but the ledger has no such request`,
          },
        ],
      },
    ]);
  });

  it('prints a row whose ledger head is behind its chain (a writer died between them): no figure depends on it', async () => {
    const [own] = chainsFor(answered);
    const first = own?.records[0];
    world([{ ...answered, audit_count: 1, audit_head: first?.hash }, denied]);

    const { exitCode, result } = await report(testContext(), { json: true }, collectingIo());

    expect(exitCode).toBe(0);
    expect(result.records.map((record) => record.request_id)).toEqual([id(31), id(32)]);
  });

  it('fails with exit 1 naming the audit bucket when its records cannot be read', async () => {
    world(untouched);
    s3Mock
      .on(ListObjectsV2Command)
      .rejects(Object.assign(new Error('Access Denied'), { name: 'AccessDenied' }));

    await expect(report(testContext(), { json: true }, collectingIo())).rejects.toMatchObject({
      exitCode: 1,
      message:
        'cannot read the audit records in bucket audit (AccessDenied: Access Denied): the report checks every request against them',
    });
  });
});

describe('toRecord: dates that contradict each other', () => {
  it('never calls a response dated before receipt on time, nor one received after the report', () => {
    // Prepare: due in June, answered "in March" though received in May; and one received in 2030.
    const now = new Date('2026-11-21T00:00:00Z');
    const early = ledgerRecord({
      status: 'completed',
      outcome: 'exported',
      received_at: '2026-05-01T00:00:00Z',
      due_at: '2026-06-15T23:59:59.999Z',
      completed_at: '2026-05-05T00:00:00Z',
      notice_response: { channel: 'email', at: '2026-03-01T00:00:00Z', recorded_at: '2026-03-01T00:00:00Z' },
    });
    const future = ledgerRecord({
      ...early,
      received_at: '2030-01-01T00:00:00Z',
      due_at: '2030-02-15T23:59:59.999Z',
    });

    // Act
    const records = [toRecord(early, now), toRecord(future, now)];

    // Assess
    expect(records.map(({ date_problem, on_time }) => ({ date_problem, on_time }))).toEqual([
      { date_problem: 'response dated before receipt', on_time: null },
      { date_problem: 'received after the report was made', on_time: null },
    ]);
  });
});

describe('report of requests over several sites', () => {
  it('counts a request once in the metrics, says per record what each site came to, and breaks it down by site', () => {
    // Prepare: an access over news and forum (exported on news, no data on forum), an erasure on news alone
    const now = new Date('2026-12-31T00:00:00Z');
    const over = (n: number, fields: NonNullable<Parameters<typeof ledgerRecord>[0]>) =>
      toRecord(
        ledgerRecord({
          request_id: `00000000-0000-4000-8000-0000000002${String(n).padStart(2, '0')}`,
          regulation: 'ccpa',
          status: 'completed',
          completed_at: '2026-11-03T00:00:00Z',
          ...fields,
        }),
        now,
      );
    const at = '2026-11-03T00:00:00Z';
    const records = [
      over(1, {
        type: 'access',
        outcome: 'exported',
        sites: ['news', 'forum'],
        site_results: {
          news: { status: 'completed', outcome: 'exported', at },
          forum: { status: 'completed', outcome: 'no_data', at },
        },
      }),
      over(2, {
        type: 'erasure',
        outcome: 'erased',
        sites: ['news'],
        site_results: { news: { status: 'completed', outcome: 'erased', at } },
      }),
      over(3, { type: 'access', outcome: 'exported' }),
    ];

    // Act
    const metrics = computeMetrics(records);
    const bySite = computeSiteRows(records);

    // Assess
    expect(metrics.find((metric) => metric.type === 'all')).toMatchObject({ received: 3, complied: 3 });
    expect(records.map((record) => record.sites)).toEqual([
      'exported on 1 (news); no data on 1 (forum)',
      'erased on 1 (news)',
      null,
    ]);
    expect(bySite).toEqual([
      { site: 'news', requests: 2, exported: 1, erased: 1, corrected: 0, no_data: 0, failed: 0, other: 0 },
      { site: 'forum', requests: 1, exported: 0, erased: 0, corrected: 0, no_data: 1, failed: 0, other: 0 },
    ]);
  });
});
