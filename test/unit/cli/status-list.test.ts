import { DynamoDBClient, GetItemCommand, ScanCommand as IndexScanCommand } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { OPEN_DUE_INDEX } from '#shared/ledger';
import { runList } from '../../../bin/cli/commands/list.ts';
import { runStatus } from '../../../bin/cli/commands/status.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { CliError } from '../../../bin/cli/io.ts';
import {
  ledgerRecord,
  NOW,
  PRIMARY_KEY,
  REQUEST_ID,
  SVC_USER_ID,
  storedItem,
  testContext,
} from './helpers.ts';

const dbMock = mockClient(DynamoDBDocumentClient);
/** The ledger reads through a plain DynamoDB client; the commands' own writes go through the DocumentClient. */
const ledgerMock = mockClient(DynamoDBClient);

beforeEach(() => {
  dbMock.reset();
  ledgerMock.reset();
});

describe('runStatus', () => {
  it('shows what each site of a request in parts came to, and how to follow each part', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          status: 'running',
          sites: ['news', 'shop'],
          site_results: {
            news: { status: 'completed', outcome: 'erased', at: '2026-11-20T10:00:00Z' },
            shop: { status: 'failed', error_code: 'platform_outage', at: '2026-11-20T10:05:00Z' },
          },
        }),
      ),
    });
    const io = collectingIo();

    // Act
    await runStatus(testContext(), { requestId: REQUEST_ID }, io);

    // Assess
    const text = io.stdout();
    expect(text).toMatch(/sites\s+erased on 1 \(news\); failed \(platform_outage\) on 1 \(shop\)/);
    expect(text).toContain(`npx svc-dsr status ${REQUEST_ID}_shop`);
  });

  it('shows status, step, deadlines, export and archive facts, and hides the subject', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          status: 'completed',
          step: undefined,
          outcome: 'exported',
          export_id: 'exp-42',
          archive: {
            key: `exports/${REQUEST_ID}/attempt-1.zip`,
            bytes: 2048,
            sha256: 'ab'.repeat(32),
            verified_at: '2026-11-20T10:00:00Z',
            entries: 4,
          },
          completed_at: '2026-11-20T10:00:01Z',
        }),
      ),
    });
    const io = collectingIo();
    // Act
    const { exitCode } = await runStatus(testContext(), { requestId: REQUEST_ID }, io);
    // Assess
    expect(exitCode).toBe(0);
    expect(ledgerMock).toHaveReceivedCommandWith(GetItemCommand, {
      TableName: 'ledger',
      Key: { request_id: { S: REQUEST_ID } },
    });
    const text = io.stdout();
    expect(text).toMatch(/status\s+completed outcome exported/);
    expect(text).toMatch(/due\s+2026-12-20T09:00:00.000Z/);
    expect(text).toContain('id exp-42, attempt 1');
    expect(text).toContain(`exports/${REQUEST_ID}/attempt-1.zip, 2048 bytes, 4 entries`);
    expect(text).toContain('pass --show-subject');
    expect(text).not.toContain(PRIMARY_KEY);
    expect(text).not.toContain(SVC_USER_ID);
  });

  it('says what the platform keeps of an erased subject: their comments, re-linked to a random guest user', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          type: 'erasure',
          status: 'completed',
          step: undefined,
          outcome: 'erased',
          erasure: { outcome: 'deleted', platform_status: 204, at: '2026-11-20T10:00:00Z' },
          completed_at: '2026-11-20T10:00:01Z',
          minimised_at: '2028-11-21T00:00:00.000Z',
        }),
      ),
    });
    const text = collectingIo();
    const json = collectingIo();
    // Act
    await runStatus(testContext(), { requestId: REQUEST_ID }, text);
    await runStatus(testContext(), { requestId: REQUEST_ID, json: true }, json);
    // Assess
    expect(text.stdout()).toMatch(
      /platform keeps\s+the comments the subject wrote stay on the platform, re-linked to a random guest user/,
    );
    expect(JSON.parse(json.stdout()).platform_keeps).toContain('re-linked to a random guest user');
    // Read after its retention, the request says its identifiers are only hashes now.
    expect(text.stdout()).toMatch(
      /minimised\s+2028-11-21T00:00:00.000Z: who it names is kept only as keyed hashes/,
    );
  });

  it('shows how the request was made (its channel), when the ledger has one', async () => {
    // Prepare
    ledgerMock
      .on(GetItemCommand)
      .resolvesOnce({ Item: storedItem(ledgerRecord({ channel: 'web_form' })) })
      .resolvesOnce({ Item: storedItem(ledgerRecord({})) });

    // Act
    const withChannel = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, withChannel);
    const without = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, without);

    // Assess
    expect(withChannel.stdout()).toMatch(/channel\s+web_form/);
    expect(without.stdout()).not.toContain('channel');
  });

  it('says a request was overdue at intake, in the text as in --json', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(ledgerRecord({ received_at: '2020-01-01T00:00:00Z', overdue_at_intake: true })),
    });
    const text = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, text);
    expect(text.stdout()).toMatch(/overdue\s+at intake: its deadline had passed when it was received/);
  });

  it('shows the warning intake recorded for a key that mixes scripts, in the text as in --json, without the key', async () => {
    // Prepare: a Cyrillic а among Latin letters, and a code this CLI does not know yet.
    const key = 'u-p\u0430ul28';
    const item = ledgerRecord({
      primary_key: key,
      intake_warnings: ['primary_key_mixed_scripts', 'a_later_warning'],
    });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });

    // Act
    const text = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, text);
    const json = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID, json: true }, json);

    // Assess
    expect(text.stdout()).toMatch(
      /warning\s+primary_key_mixed_scripts: primary_key mixes letters of more than one script .*subject_under_other_spelling/,
    );
    expect(text.stdout()).toMatch(/warning\s+a_later_warning\n/);
    expect(text.stdout()).not.toContain(key);
    expect(JSON.parse(json.stdout())).toMatchObject({
      intake_warnings: ['primary_key_mixed_scripts', 'a_later_warning'],
    });
    expect(json.stdout()).not.toContain(key);
  });

  it('prints the ledger item as JSON without primary_key and svc_user_id', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(ledgerRecord({ error: { code: 'export_failed', message: 'gave up' } })) });
    const io = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID, json: true }, io);
    const printed = JSON.parse(io.stdout());
    expect(printed).toMatchObject({
      request_id: REQUEST_ID,
      status: 'running',
      step: 'exporting',
      executions: 1,
    });
    expect(printed.error).toEqual({ code: 'export_failed', message: 'gave up' });
    expect(printed).not.toHaveProperty('primary_key');
    expect(printed).not.toHaveProperty('svc_user_id');
  });

  it("shows a correction's field names and result, never its values, even with --show-subject", async () => {
    const correction = ledgerRecord({
      type: 'correction',
      status: 'completed',
      step: undefined,
      outcome: 'corrected_with_changes',
      correction_fields: ['user_name', 'email'],
      correction_values: { user_name: 'taken_name', email: 'new-address@example.org' },
      correction: {
        outcome: 'corrected_with_changes',
        altered: ['user_name'],
        attempts: 1,
        at: '2026-11-20T10:00:00Z',
      },
    });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(correction) });
    const text = collectingIo();
    const json = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID, showSubject: true }, text);
    await runStatus(testContext(), { requestId: REQUEST_ID, json: true, showSubject: true }, json);
    expect(text.stdout()).toMatch(/corrects\s+user_name, email/);
    expect(text.stdout()).toMatch(
      /correction\s+corrected_with_changes at .*; the platform altered user_name/,
    );
    expect(JSON.parse(json.stdout())).toMatchObject({ correction_fields: ['user_name', 'email'] });
    for (const value of ['taken_name', 'new-address@example.org']) {
      expect(`${text.stdout()}${json.stdout()}`.includes(value) ? value : null).toBeNull();
    }
  });

  it('shows the subject only with --show-subject', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(ledgerRecord()) });
    const human = collectingIo();
    const machine = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID, showSubject: true }, human);
    await runStatus(testContext(), { requestId: REQUEST_ID, showSubject: true, json: true }, machine);
    expect(human.stdout()).toContain(PRIMARY_KEY);
    expect(JSON.parse(machine.stdout())).toMatchObject({
      primary_key: PRIMARY_KEY,
      svc_user_id: SVC_USER_ID,
    });
  });

  it('explains the field errors of a rejected request', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem({
        request_id: REQUEST_ID,
        fingerprint: 'fp',
        status: 'rejected',
        rejection_errors: ['type: must be "access" or "erasure"'],
        created_at: '2026-11-20T09:00:00Z',
        updated_at: '2026-11-20T09:00:00Z',
      }),
    });
    const io = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, io);
    expect(io.stdout()).toMatch(/rejected\s+type: must be "access" or "erasure"/);
  });

  it('exits 1 with a clear message for an unknown request id', async () => {
    ledgerMock.on(GetItemCommand).resolves({});
    const error = await runStatus(testContext(), { requestId: REQUEST_ID }, collectingIo()).catch(
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(CliError);
    expect(error).toMatchObject({ exitCode: 1 });
    expect(String(error)).toContain(`no request ${REQUEST_ID} in the ledger`);
  });

  it('exits 2 for something that is not a request id, without reading the ledger', async () => {
    await expect(runStatus(testContext(), { requestId: 'DSR-1042' }, collectingIo())).rejects.toMatchObject({
      exitCode: 2,
    });
    expect(ledgerMock.commandCalls(GetItemCommand)).toHaveLength(0);
  });
});

describe('runStatus export facts', () => {
  it.each([
    ['uncertain', 'start unconfirmed (the platform gave no clear answer)'],
    ['interrupted', 'start unconfirmed (interrupted before the platform answered)'],
  ] as const)('does not call an export failed when its start was %s', async (start, shown) => {
    // Prepare: the ledger marks such an attempt failed, so that the next one starts anew
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          status: 'failed',
          error: { code: 'export_start_unconfirmed', message: 'no export was confirmed started' },
          export_attempts: 3,
          export_status: 'failed',
          export_start: start,
        }),
      ),
    });
    const io = collectingIo();
    // Act
    await runStatus(testContext(), { requestId: REQUEST_ID }, io);
    // Assess
    expect(io.stdout()).toContain(`attempt 3, ${shown}`);
    expect(io.stdout()).not.toContain('status failed');
  });

  it('says the export failed when the platform reported it so', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({ export_id: 'exp-7', export_status: 'failed', export_start: 'accepted' }),
      ),
    });
    const io = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, io);
    expect(io.stdout()).toContain('id exp-7, attempt 1, status failed');
  });
});

describe('runStatus notices', () => {
  it('prints the notices still due beside the ones given with --json', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          regulation: 'ccpa',
          status: 'completed',
          confirm_by: '2026-11-20T00:00:00.000Z',
          notice_response: {
            channel: 'email',
            at: '2026-11-21T10:00:00Z',
            recorded_at: '2026-11-21T10:01:00Z',
          },
        }),
      ),
    });
    const io = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID, json: true }, io);
    const printed = JSON.parse(io.stdout());
    expect(printed.notices_due).toEqual([
      { kind: 'receipt', due_by: '2026-11-20T00:00:00.000Z', overdue: true },
    ]);
    expect(printed.notice_response).toMatchObject({ channel: 'email' });
  });

  it('shows which notices are due and which were given', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          regulation: 'ccpa',
          confirm_by: '2026-11-20T00:00:00.000Z',
          extended: true,
          notice_extension: {
            channel: 'letter',
            at: '2026-11-19T10:00:00Z',
            recorded_at: '2026-11-19T10:05:00Z',
          },
        }),
      ),
    });
    const io = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, io);
    expect(io.stdout()).toMatch(
      /receipt notice\s+DUE by 2026-11-20T00:00:00.000Z \(overdue\): record it with npx svc-dsr notice 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --kind receipt --channel email/,
    );
    expect(io.stdout()).toMatch(/extension notice\s+given 2026-11-19T10:00:00Z by letter/);
  });

  it('shows when a notice was recorded, if well after the time it claims, and its template', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          status: 'denied',
          step: undefined,
          notice_denial: {
            channel: 'letter',
            at: '2026-11-19T10:00:00Z',
            recorded_at: '2026-11-21T09:00:00Z',
            template: 'gdpr-denial-v3',
          },
        }),
      ),
    });
    const io = collectingIo();
    await runStatus(testContext(), { requestId: REQUEST_ID }, io);
    expect(io.stdout()).toMatch(
      /denial notice\s+given 2026-11-19T10:00:00Z by letter, recorded 2026-11-21T09:00:00Z, template gdpr-denial-v3/,
    );
  });
});

describe('runStatus on hostile ledger text', () => {
  it('escapes control characters, separators and bidi overrides instead of printing them raw', async () => {
    // Prepare: text that reached the ledger from outside (a rejected field name, a reference).
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          reference: 'T-1\u001b[2J\u009b31m\u202eevil\u200b\ufeff',
          rejection_errors: ['unknown field(s) "\u001b]8;;https://x\u0007": remove them', 'line\u2028two'],
        }),
      ),
    });
    const io = collectingIo();
    // Act
    await runStatus(testContext(), { requestId: REQUEST_ID }, io);
    // Assess
    const text = io.stdout();
    const raw = [...text].filter((char) => {
      const code = char.charCodeAt(0);
      return (
        (code < 0x20 && char !== '\n') || (code >= 0x7f && code <= 0x9f) || code === 0x2028 || code === 0x202e
      );
    });
    expect(raw).toEqual([]);
    expect(text).toContain('T-1\\x1b[2J\\x9b31m\\u202eevil\\u200b\\ufeff');
    expect(text).toContain('\\x1b]8;;https://x\\x07');
    expect(text).toContain('line\\u2028two');
  });

  it('finds a request given its id in upper case', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(ledgerRecord({})) });
    await runStatus(testContext(), { requestId: REQUEST_ID.toUpperCase(), json: true }, collectingIo());
    expect(ledgerMock).toHaveReceivedCommandWith(GetItemCommand, { Key: { request_id: { S: REQUEST_ID } } });
  });
});

describe('runList', () => {
  const early = ledgerRecord({
    request_id: 'aaaaaaaa-0000-4000-8000-000000000001',
    due_at: '2026-11-25T00:00:00.000Z',
  });
  const late = ledgerRecord({
    request_id: 'aaaaaaaa-0000-4000-8000-000000000002',
    status: 'received',
    step: undefined,
    due_at: '2026-12-30T00:00:00.000Z',
  });
  const overdue = ledgerRecord({
    request_id: 'aaaaaaaa-0000-4000-8000-000000000003',
    due_at: '2026-11-01T00:00:00.000Z',
  });

  it('scans the open index once for received, running and failed requests, follows pages, and sorts by due date', async () => {
    // Prepare: two pages, in no order
    ledgerMock
      .on(IndexScanCommand)
      .resolvesOnce({
        Items: [storedItem(late), storedItem(early)],
        LastEvaluatedKey: { request_id: { S: early.request_id } },
      })
      .resolvesOnce({ Items: [storedItem(overdue)] });
    const io = collectingIo();
    // Act
    const { result } = await runList(testContext(), { json: true }, io);
    // Assess
    expect(ledgerMock).toHaveReceivedCommandWith(IndexScanCommand, {
      TableName: 'ledger',
      IndexName: OPEN_DUE_INDEX,
      FilterExpression:
        '(begins_with(#shard, :status0) OR begins_with(#shard, :status1) OR begins_with(#shard, :status2))',
      ExpressionAttributeValues: {
        ':status0': { S: 'received#' },
        ':status1': { S: 'running#' },
        ':status2': { S: 'failed#' },
      },
    });
    const calls = ledgerMock.commandCalls(IndexScanCommand);
    expect(calls).toHaveLength(2);
    expect(calls[1]?.args[0].input.ExclusiveStartKey).toEqual({ request_id: { S: early.request_id } });
    expect(result.requests.map((request) => request.request_id)).toEqual([
      overdue.request_id,
      early.request_id,
      late.request_id,
    ]);
    expect(result.requests[0]?.due).toBe('20 days overdue');
    expect(JSON.parse(io.stdout()).count).toBe(3);
    expect(io.stdout()).not.toContain(PRIMARY_KEY);
  });

  it('asks the index only for requests due before now with --overdue', async () => {
    ledgerMock.on(IndexScanCommand).resolves({ Items: [storedItem(overdue)] });
    const io = collectingIo();
    await runList(testContext(), { overdue: true }, io);
    expect(ledgerMock).toHaveReceivedCommandWith(IndexScanCommand, {
      FilterExpression: expect.stringMatching(/\) AND #due_at < :due$/),
      ExpressionAttributeValues: expect.objectContaining({ ':due': { S: NOW.toISOString() } }),
    });
    expect(io.stdout()).toMatch(/REQUEST ID\s+STATUS/);
    expect(io.stdout()).toContain('20 days overdue');
  });

  it('lists an overdue failed request with --overdue, since it is still owed an answer', async () => {
    const failed = ledgerRecord({
      request_id: 'aaaaaaaa-0000-4000-8000-000000000004',
      status: 'failed',
      due_at: '2026-11-10T00:00:00.000Z',
      error: { code: 'export_failed', message: 'x' },
    });
    ledgerMock.on(IndexScanCommand).resolves({ Items: [storedItem(failed)] });
    const io = collectingIo();
    const { result } = await runList(testContext(), { overdue: true }, io);
    expect(result.requests.map((request) => [request.request_id, request.status])).toEqual([
      [failed.request_id, 'failed'],
    ]);
    expect(io.stdout()).toContain('11 days overdue');
  });

  it('limits to requests due within the given days with --due-within', async () => {
    ledgerMock.on(IndexScanCommand).resolves({ Items: [] });
    const io = collectingIo();
    await runList(testContext(), { dueWithin: '7', status: 'running' }, io);
    expect(ledgerMock).toHaveReceivedCommandWith(IndexScanCommand, {
      FilterExpression: 'begins_with(#shard, :status0) AND #due_at < :due',
      ExpressionAttributeValues: { ':status0': { S: 'running#' }, ':due': { S: '2026-11-28T12:00:00.000Z' } },
    });
    expect(ledgerMock.commandCalls(IndexScanCommand)).toHaveLength(1);
    expect(io.stderr()).toContain('no running requests due before 2026-11-28T12:00:00.000Z');
  });

  it('lists failed requests from the open index, since they are still owed an answer', async () => {
    const failed = ledgerRecord({ status: 'failed', error: { code: 'export_failed', message: 'x' } });
    ledgerMock.on(IndexScanCommand).resolves({ Items: [storedItem(failed)] });

    const { result } = await runList(testContext(), { status: 'failed' }, collectingIo());

    expect(result.requests.map((request) => [request.request_id, request.status])).toEqual([
      [failed.request_id, 'failed'],
    ]);
    expect(dbMock.commandCalls(ScanCommand)).toHaveLength(0);
  });

  it('finds ended requests, which are not in the open index, with one filtered scan', async () => {
    dbMock.on(ScanCommand).resolves({
      Items: [
        {
          request_id: REQUEST_ID,
          fingerprint: 'fp',
          status: 'rejected',
          rejection_errors: ['x'],
          created_at: '2026-11-20T09:00:00Z',
          updated_at: '2026-11-20T09:00:00Z',
        },
      ],
    });
    const { result } = await runList(testContext(), { status: 'rejected,completed' }, collectingIo());
    expect(dbMock).toHaveReceivedCommandWith(ScanCommand, {
      FilterExpression: '#status IN (:status0, :status1)',
      ExpressionAttributeValues: { ':status0': 'rejected', ':status1': 'completed' },
    });
    expect(dbMock.commandCalls(ScanCommand)).toHaveLength(1);
    expect(ledgerMock.commandCalls(IndexScanCommand)).toHaveLength(0);
    expect(result.requests).toHaveLength(1);
  });

  it('lists only the request types asked for with --type, and refuses an unknown one', async () => {
    const ended = (requestId: string, type: string) => ({
      request_id: requestId,
      fingerprint: 'fp',
      status: 'completed',
      type,
      regulation: 'gdpr',
      created_at: '2026-11-20T09:00:00Z',
      updated_at: '2026-11-20T09:00:00Z',
    });
    const correctionId = '11111111-2222-4333-8444-555555555555';
    dbMock
      .on(ScanCommand)
      .resolves({ Items: [ended(REQUEST_ID, 'access'), ended(correctionId, 'correction')] });
    const { result } = await runList(
      testContext(),
      { status: 'completed', type: 'correction' },
      collectingIo(),
    );
    expect(result.requests.map((request) => request.request_id)).toEqual([correctionId]);
    await expect(runList(testContext(), { type: 'rectification' }, collectingIo())).rejects.toThrow(
      '--type: each type must be one of access, erasure, correction',
    );
  });

  it('limits a scan for ended requests by due date with --overdue', async () => {
    dbMock.on(ScanCommand).resolves({ Items: [] });
    await runList(testContext(), { status: 'completed', overdue: true }, collectingIo());
    expect(dbMock).toHaveReceivedCommandWith(ScanCommand, {
      FilterExpression: '#status IN (:status0) AND #due_at < :before',
      ExpressionAttributeValues: { ':status0': 'completed', ':before': NOW.toISOString() },
    });
  });

  it('refuses an unknown status and contradictory date limits with exit 2', async () => {
    await expect(runList(testContext(), { status: 'running,done' }, collectingIo())).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('--status'),
    });
    await expect(
      runList(testContext(), { overdue: true, dueWithin: 3 }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 2,
    });
    await expect(runList(testContext(), { dueWithin: 'soon' }, collectingIo())).rejects.toThrow(
      '--due-within: must be a number of days',
    );
    expect(ledgerMock.calls()).toHaveLength(0);
    expect(dbMock.calls()).toHaveLength(0);
  });

  describe('CCPA receipt confirmations', () => {
    // NOW is 2026-11-21T12:00Z: one receipt is past its confirm-by date, one due in 4 days, one given.
    const lateReceipt = ledgerRecord({
      request_id: 'bbbbbbbb-0000-4000-8000-000000000001',
      regulation: 'ccpa',
      confirm_by: '2026-11-19T23:59:59.999Z',
      due_at: '2026-12-30T00:00:00.000Z',
    });
    const dueReceipt = ledgerRecord({
      request_id: 'bbbbbbbb-0000-4000-8000-000000000002',
      regulation: 'ccpa',
      confirm_by: '2026-11-25T23:59:59.999Z',
      due_at: '2026-12-31T00:00:00.000Z',
    });
    const givenReceipt = ledgerRecord({
      request_id: 'bbbbbbbb-0000-4000-8000-000000000003',
      regulation: 'ccpa',
      confirm_by: '2026-11-19T23:59:59.999Z',
      due_at: '2027-01-01T00:00:00.000Z',
      notice_receipt: { channel: 'email', at: '2026-11-12T10:00:00Z', recorded_at: '2026-11-12T10:01:00Z' },
    });
    const gdpr = ledgerRecord({
      request_id: 'bbbbbbbb-0000-4000-8000-000000000004',
      due_at: '2027-01-02T00:00:00.000Z',
    });
    const all = [lateReceipt, dueReceipt, givenReceipt, gdpr];

    /** The open index answers with what it projects (no confirm_by, no notices); GetItem with the whole item. */
    function indexAndItems() {
      ledgerMock.on(IndexScanCommand).resolves({
        Items: all.map(({ confirm_by: _confirmBy, notice_receipt: _notice, ...projected }) =>
          storedItem(projected),
        ),
      });
      for (const item of all) {
        ledgerMock
          .on(GetItemCommand, { Key: { request_id: { S: item.request_id } } })
          .resolves({ Item: storedItem(item) });
      }
    }

    it('shows each receipt confirmation in a RECEIPT column, reading only the CCPA requests in full', async () => {
      indexAndItems();
      const io = collectingIo();

      const { result } = await runList(testContext(), { status: 'running' }, io);

      expect(
        result.requests.map((request) => [request.request_id, request.confirm_by, request.receipt]),
      ).toEqual([
        [lateReceipt.request_id, lateReceipt.confirm_by, 'overdue'],
        [dueReceipt.request_id, dueReceipt.confirm_by, 'due'],
        [givenReceipt.request_id, givenReceipt.confirm_by, 'given'],
        [gdpr.request_id, null, null],
      ]);
      expect(ledgerMock.commandCalls(GetItemCommand)).toHaveLength(3);
      const lines = io.stdout().split('\n');
      expect(lines[0]).toMatch(/DUE\s+RECEIPT\s+NOTICE\s+REFERENCE/);
      expect(lines.find((line) => line.startsWith(lateReceipt.request_id))).toContain('1 day overdue');
      expect(lines.find((line) => line.startsWith(dueReceipt.request_id))).toContain('due in 4 days');
      expect(lines.find((line) => line.startsWith(givenReceipt.request_id))).toContain('confirmed');
    });

    it('lists only the receipts not confirmed yet with --receipt-due, and only the late ones with --receipt-overdue', async () => {
      indexAndItems();

      const due = await runList(testContext(), { status: 'running', receiptDue: true }, collectingIo());
      const late = await runList(testContext(), { status: 'running', receiptOverdue: true }, collectingIo());

      expect(due.result.requests.map((request) => request.request_id)).toEqual([
        lateReceipt.request_id,
        dueReceipt.request_id,
      ]);
      expect(late.result.requests.map((request) => request.request_id)).toEqual([lateReceipt.request_id]);
    });
  });

  describe('response and denial notices', () => {
    // NOW is 2026-11-21T12:00Z.
    const unanswered = ledgerRecord({
      request_id: 'cccccccc-0000-4000-8000-000000000001',
      status: 'completed',
      step: undefined,
      outcome: 'exported',
      due_at: '2026-11-20T23:59:59.999Z',
      completed_at: '2026-11-10T00:00:00Z',
    });
    const answered = ledgerRecord({
      request_id: 'cccccccc-0000-4000-8000-000000000002',
      status: 'completed',
      step: undefined,
      outcome: 'exported',
      due_at: '2026-11-20T23:59:59.999Z',
      completed_at: '2026-11-10T00:00:00Z',
      notice_response: { channel: 'email', at: '2026-11-10T00:00:00Z', recorded_at: '2026-11-10T00:00:00Z' },
    });
    /** GDPR, extended to 2027-01-19 and denied: its denial was due one month after receipt, on 19 November. */
    const extendedDenial = ledgerRecord({
      request_id: 'cccccccc-0000-4000-8000-000000000003',
      status: 'denied',
      step: undefined,
      received_at: '2026-10-19T09:00:00Z',
      due_at: '2027-01-19T23:59:59.999Z',
      original_due_at: '2026-11-19T23:59:59.999Z',
      extended: true,
      completed_at: '2026-11-18T00:00:00Z',
    });
    const denialDueSoon = ledgerRecord({
      request_id: 'cccccccc-0000-4000-8000-000000000004',
      status: 'denied',
      step: undefined,
      due_at: '2026-11-25T23:59:59.999Z',
      completed_at: '2026-11-18T00:00:00Z',
    });

    beforeEach(() => {
      ledgerMock.on(IndexScanCommand).resolves({ Items: [] });
      dbMock.on(ScanCommand).resolves({ Items: [unanswered, answered, extendedDenial, denialDueSoon] });
    });

    it('lists with --notice-overdue the requests whose response or denial notice is late, every status but rejected', async () => {
      const io = collectingIo();

      const { result } = await runList(testContext(), { noticeOverdue: true }, io);

      expect(result.statuses).toEqual(['received', 'running', 'completed', 'failed', 'cancelled', 'denied']);
      expect(dbMock).toHaveReceivedCommandWith(ScanCommand, {
        ExpressionAttributeValues: { ':status0': 'completed', ':status1': 'cancelled', ':status2': 'denied' },
      });
      expect(result.requests.map((request) => [request.request_id, request.notice])).toEqual([
        [unanswered.request_id, { kind: 'response', due_by: '2026-11-20T23:59:59.999Z', state: 'overdue' }],
        [extendedDenial.request_id, { kind: 'denial', due_by: '2026-11-19T23:59:59.999Z', state: 'overdue' }],
      ]);
      const lines = io.stdout().split('\n');
      expect(lines.find((line) => line.startsWith(unanswered.request_id))).toContain(
        'response overdue by less than a day',
      );
      expect(lines.find((line) => line.startsWith(extendedDenial.request_id))).toContain(
        'denial 1 day overdue',
      );
    });

    it('shows the notice of every completed or denied request in the NOTICE column', async () => {
      const io = collectingIo();

      await runList(testContext(), { status: 'completed,denied' }, io);

      const lines = io.stdout().split('\n');
      expect(lines.find((line) => line.startsWith(answered.request_id))).toContain('response given');
      expect(lines.find((line) => line.startsWith(denialDueSoon.request_id))).toContain(
        'denial due in 4 days',
      );
    });
  });

  it('escapes control characters in the table it prints', async () => {
    ledgerMock
      .on(IndexScanCommand)
      .resolves({ Items: [storedItem({ ...late, reference: 'R\u001b[31m\u0085' })] });
    const io = collectingIo();
    await runList(testContext(), { status: 'received' }, io);
    expect(io.stdout()).toContain('R\\x1b[31m\\x85');
    expect(io.stdout()).not.toContain('\u001b');
  });
});
