import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runReport } from '../../../bin/cli/commands/report.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { ledgerRecord, PRIMARY_KEY, SVC_USER_ID, testContext } from './helpers.ts';

const dbMock = mockClient(DynamoDBDocumentClient);
let dir: string;

const id = (n: number) => `aaaaaaaa-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** Five CCPA access requests in 2026 (two completed, one rejected, one failed, one open), one GDPR erasure, and one from 2025. */
const ITEMS = [
  ledgerRecord({
    request_id: id(1),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'exported',
    received_at: '2026-03-01T00:00:00Z',
    completed_at: '2026-03-03T00:00:00Z',
    due_at: '2026-04-15T00:00:00Z',
  }),
  ledgerRecord({
    request_id: id(2),
    regulation: 'ccpa',
    status: 'completed',
    outcome: 'no_data',
    received_at: '2026-03-01T00:00:00Z',
    completed_at: '2026-03-11T00:00:00Z',
    due_at: '2026-04-15T00:00:00Z',
    verification: { method: '=HYPERLINK("x")', verified_by: 'pt', verified_at: '2026-03-01T00:00:00Z' },
  }),
  ledgerRecord({
    request_id: id(3),
    regulation: 'ccpa',
    status: 'failed',
    error: { code: 'export_failed', message: 'gave up, after 3 tries' },
    received_at: '2026-04-01T00:00:00Z',
    updated_at: '2026-04-02T00:00:00Z',
  }),
  ledgerRecord({
    request_id: id(4),
    regulation: 'ccpa',
    status: 'running',
    received_at: '2026-05-01T00:00:00Z',
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
    received_at: '2025-12-31T23:00:00Z',
    completed_at: '2026-01-02T00:00:00Z',
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
});

describe('runReport', () => {
  it('scans every page of the ledger and computes the 7102 metrics per regulation and type', async () => {
    // Act
    const { exitCode, result } = await runReport(
      testContext(),
      { json: true, from: '2026-01-01', to: '2026-12-31' },
      collectingIo(),
    );
    // Assess
    expect(exitCode).toBe(0);
    const scans = dbMock.commandCalls(ScanCommand).map((call) => call.args[0].input);
    expect(scans).toEqual([
      { TableName: 'ledger' },
      { TableName: 'ledger', ExclusiveStartKey: { request_id: id(3) } },
    ]);
    expect(result.records.map((record) => record.request_id)).toEqual([
      id(1),
      id(2),
      id(3),
      id(4),
      id(5),
      id(7),
    ]);
    expect(result.skipped).toBe(1);
    expect(result.metrics).toEqual([
      {
        regulation: 'ccpa',
        type: 'access',
        received: 4,
        complied: 2,
        denied: 1,
        pending: 1,
        median_days_to_respond: 6,
      },
      {
        regulation: 'gdpr',
        type: 'erasure',
        received: 1,
        complied: 0,
        denied: 1,
        pending: 0,
        median_days_to_respond: null,
      },
      {
        regulation: 'unknown',
        type: 'unknown',
        received: 1,
        complied: 0,
        denied: 1,
        pending: 0,
        median_days_to_respond: null,
      },
      {
        regulation: 'all',
        type: 'all',
        received: 6,
        complied: 2,
        denied: 3,
        pending: 1,
        median_days_to_respond: 6,
      },
    ]);
  });

  it('records the 7101 fields: date, nature, manner, date and nature of the response, and the basis of a denial', async () => {
    const { result } = await runReport(testContext(), { json: true }, collectingIo());
    const byId = new Map(result.records.map((record) => [record.request_id, record]));
    expect(byId.get(id(1))).toMatchObject({
      received_at: '2026-03-01T00:00:00Z',
      type: 'access',
      verification_method: 'email_link',
      response: 'exported',
      response_category: 'complied',
      response_date: '2026-03-03T00:00:00Z',
      denial_basis: null,
      on_time: true,
    });
    expect(byId.get(id(3))).toMatchObject({
      response: 'failed',
      response_category: 'denied',
      response_date: '2026-04-02T00:00:00Z',
      denial_basis: 'not fulfilled: export_failed: gave up, after 3 tries',
    });
    expect(byId.get(id(5))?.denial_basis).toBe('cancelled: withdrawn');
    expect(byId.get(id(7))).toMatchObject({
      received_at: '2026-07-01T00:00:00Z',
      regulation: null,
      denial_basis: 'invalid request: type: must be "access" or "erasure"',
    });
    expect(byId.get(id(4))).toMatchObject({ response: 'pending', response_date: null, on_time: null });
  });

  it('writes CSV with both tables, quoting and neutralising spreadsheet formulas, and never a subject identifier', async () => {
    // Prepare
    const out = join(dir, 'report.csv');
    const io = collectingIo();
    // Act
    await runReport(testContext(), { out, to: '2026-12-31T23:59:59Z' }, io);
    // Assess
    const csv = await readFile(out, 'utf8');
    const [records, metrics] = csv.split('\r\n\r\n');
    expect(records?.split('\r\n')[0]).toBe(
      'request_id,regulation,type,received_at,verification_method,status,response,response_category,response_date,denial_basis,due_at,extended,on_time,reference',
    );
    expect(records).toContain(`"'=HYPERLINK(""x"")"`);
    expect(records).toContain('"not fulfilled: export_failed: gave up, after 3 tries"');
    expect(metrics?.split('\r\n')[0]).toBe(
      'regulation,type,received,complied,denied,pending,median_days_to_respond',
    );
    expect(metrics).toContain('ccpa,access,5,3,1,1,2');
    expect(csv).not.toContain(PRIMARY_KEY);
    expect(csv).not.toContain(SVC_USER_ID);
    expect(io.stderr()).toContain(`wrote ${out}`);
    expect(io.stderr()).toContain('1 ledger item(s) did not match');
  });

  it('prints only the metrics table with --table metrics', async () => {
    const io = collectingIo();
    await runReport(testContext(), { table: 'metrics', from: '2026-06-01' }, io);
    expect(io.stdout().split('\r\n').filter(Boolean)).toEqual([
      'regulation,type,received,complied,denied,pending,median_days_to_respond',
      'gdpr,erasure,1,0,1,0,',
      'unknown,unknown,1,0,1,0,',
      'all,all,2,0,2,0,',
    ]);
  });

  it('refuses an unreadable date and a reversed range with exit 2, before scanning', async () => {
    await expect(runReport(testContext(), { from: '01/02/2026' }, collectingIo())).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('--from: must be a date (2026-01-31)'),
    });
    await expect(
      runReport(testContext(), { from: '2026-02-01', to: '2026-01-01' }, collectingIo()),
    ).rejects.toThrow('--from is after --to');
    await expect(runReport(testContext(), { format: 'xlsx' }, collectingIo())).rejects.toThrow('--format');
    expect(dbMock.commandCalls(ScanCommand)).toHaveLength(0);
  });
});
