import { GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { runExtend } from '../../../bin/cli/commands/extend.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import {
  conditionalFailure,
  ledgerRecord,
  ledgerWrites,
  mockOperatorClients,
  NOW,
  OPERATOR,
  REQUEST_ID,
  storedItem,
  testContext,
  written,
} from './helpers.ts';

const { ledgerMock, s3Mock } = mockOperatorClients();

/** How the subject was told of the extension. */
const NOTICE = { channel: 'email', at: '2026-11-21T11:00:00Z', reference: 'DSR-1042' };

describe('runExtend', () => {
  it('moves due_at to the statutory limit through the ledger', async () => {
    // Prepare
    const item = ledgerRecord({
      regulation: 'ccpa',
      due_at: '2026-12-01T00:00:00.000Z',
      extension_limit_at: '2027-01-15T00:00:00.000Z',
    });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock
      .on(UpdateItemCommand)
      .resolves(written({ ...item, due_at: item.extension_limit_at, extended: true }));
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runExtend(
      testContext(),
      { requestId: REQUEST_ID, notice: NOTICE, reason: 'several accounts to search' },
      io,
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(ledgerWrites(ledgerMock)[0]?.values).toMatchObject({
      ':due_at': '2027-01-15T00:00:00.000Z',
      ':if_due_at': '2026-12-01T00:00:00.000Z',
      ':extension_reason': 'several accounts to search',
      ':updated_at': NOW.toISOString(),
      ':notice_extension': {
        channel: 'email',
        at: '2026-11-21T11:00:00.000Z',
        reference: 'DSR-1042',
        recorded_at: NOW.toISOString(),
      },
    });
    expect(result).toEqual({
      request_id: REQUEST_ID,
      regulation: 'ccpa',
      previous_due_at: '2026-12-01T00:00:00.000Z',
      due_at: '2027-01-15T00:00:00.000Z',
      reason: 'several accounts to search',
      notice: { channel: 'email', at: '2026-11-21T11:00:00.000Z', reference: 'DSR-1042' },
    });
    expect(io.stdout()).toContain('due 2026-12-01T00:00:00.000Z -> 2027-01-15T00:00:00.000Z');
    expect(io.stderr()).toContain(
      'recorded the extension notice to the subject (email, 2026-11-21T11:00:00.000Z)',
    );
  });

  it('refuses a second extension (exit 1)', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(ledgerRecord({ extended: true, extension_reason: 'first' })) });
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, notice: NOTICE, reason: 'again' }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('already been extended once'),
    });
    expect(ledgerMock.commandCalls(UpdateItemCommand)).toHaveLength(0);
  });

  it('refuses once the original deadline has passed', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(ledgerRecord({ due_at: '2026-11-20T00:00:00.000Z' })) });
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, notice: NOTICE, reason: 'late' }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('has passed; extend only before it'),
    });
  });

  it('refuses a request that is no longer owed an answer', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(ledgerRecord({ status: 'completed' })) });
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, notice: NOTICE, reason: 'r' }, collectingIo()),
    ).rejects.toThrow('is completed; only received, running or failed requests can be extended');
  });

  it('extends a failed request, which is still owed an answer', async () => {
    const item = ledgerRecord({ status: 'failed', error: { code: 'export_failed', message: 'x' } });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock
      .on(UpdateItemCommand)
      .resolves(written({ ...item, due_at: item.extension_limit_at, extended: true }));
    const { exitCode, result } = await runExtend(
      testContext(),
      { requestId: REQUEST_ID, notice: NOTICE, reason: 'platform outage' },
      collectingIo(),
    );
    expect(exitCode).toBe(0);
    expect(result.due_at).toBe(item.extension_limit_at);
  });

  it('reports the rule that applies when another operator extended it first', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolvesOnce({ Item: storedItem(ledgerRecord()) })
      .resolves({ Item: storedItem(ledgerRecord({ extended: true })) });
    ledgerMock.on(UpdateItemCommand).rejects(conditionalFailure());
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, notice: NOTICE, reason: 'r' }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('already been extended once'),
    });
  });
});

describe('runExtend audit record', () => {
  it('appends the new and previous due dates to the audit chain', async () => {
    const item = ledgerRecord({ regulation: 'gdpr' });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock
      .on(UpdateItemCommand)
      .resolves(written({ ...item, due_at: item.extension_limit_at, extended: true }));
    await runExtend(
      testContext(),
      { requestId: REQUEST_ID, notice: NOTICE, reason: 'complex request' },
      collectingIo(),
    );
    const body = String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body);
    expect(JSON.parse(body)).toMatchObject({
      step: 'Operator',
      action: 'deadline_extended',
      facts: {
        previous_due_at: item.due_at,
        due_at: item.extension_limit_at,
        operator: OPERATOR,
        reason: 'complex request',
      },
    });
  });
});

describe('runExtend --notice-at', () => {
  it('refuses a notice time in the future as an invalid flag (exit 2), before the ledger is read', async () => {
    // Prepare: NOW is the test clock; six minutes on is past the five minutes of clock skew
    const future = new Date(NOW.getTime() + 6 * 60_000).toISOString();
    // Act
    const error = await runExtend(
      testContext(),
      { requestId: REQUEST_ID, notice: { ...NOTICE, at: future }, reason: 'complex request' },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    // Assess
    expect(error).toMatchObject({
      exitCode: 2,
      message: expect.stringMatching(/^--notice-at: .* is in the future/),
    });
    expect(ledgerMock.commandCalls(GetItemCommand)).toHaveLength(0);
  });
});
