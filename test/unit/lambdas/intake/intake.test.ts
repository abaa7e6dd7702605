import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLedgerTable } from '#local/ledger-table';
import type { AuditEvent } from '#shared/audit';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger } from '#shared/ledger';
import { parseRequestMessage } from '#shared/request';
import { type IntakeDeps, intakeMessage } from '../../../../lambdas/intake/intake.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let ledger: Ledger;

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'intake');
  ledger = new Ledger(dynamo.client, 'intake');
});
afterAll(async () => {
  await dynamo.close();
});

interface Appended {
  readonly requestId: string;
  readonly event: AuditEvent;
  readonly newChain: boolean | undefined;
}

let appended: Appended[];
let started: string[];
let deps: IntakeDeps;

beforeEach(() => {
  appended = [];
  started = [];
  deps = {
    ledger,
    audit: {
      append: vi.fn(async (requestId: string, event: AuditEvent, options?: { newChain?: boolean }) => {
        appended.push({ requestId, event, newChain: options?.newChain });
        return {} as never;
      }),
    },
    quarantine: vi.fn(async () => {}),
    startExecution: vi.fn(async (name: string) => {
      started.push(name);
      return 'started' as const;
    }),
    logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
  };
});

function message(requestId = randomUUID()): string {
  return JSON.stringify({
    request_id: requestId,
    type: 'access',
    regulation: 'gdpr',
    primary_key: 'subject-pk-31',
    received_at: '2026-11-20T00:00:00Z',
    verification: { method: 'email', verified_by: 'privacy-team', verified_at: '2026-11-20T00:00:00Z' },
  });
}

describe('intakeMessage', () => {
  it('records a new request as the first record of a new chain and starts its execution', async () => {
    const body = message();

    const result = await intakeMessage(body, deps);

    expect(result.kind).toBe('accepted');
    const requestId = result.kind === 'accepted' ? result.requestId : '';
    expect(appended).toEqual([
      expect.objectContaining({
        requestId,
        newChain: true,
        event: expect.objectContaining({ eventId: 'Intake' }),
      }),
    ]);
    expect(started).toEqual([requestId]);
    expect(await ledger.require(requestId)).toMatchObject({ status: 'received', executions: 1 });
  });

  it('finishes the intake of a request whose first delivery stopped after the ledger write', async () => {
    // Prepare: the first delivery wrote the ledger item, then its Lambda died.
    const requestId = randomUUID();
    const body = message(requestId);
    const parsed = parseRequestMessage(body);
    if (parsed.kind !== 'valid') throw new Error('the test message should be valid');
    await ledger.createReceived(
      parsed.request,
      parsed.fingerprint,
      computeDeadlines('gdpr', new Date(parsed.request.received_at)),
    );

    // Act: SQS delivers the message again.
    const result = await intakeMessage(body, deps);

    // Assess: the intake record is written (by its eventId, after whatever the chain holds) and the execution started.
    expect(result).toEqual({ kind: 'duplicate', requestId });
    expect(appended).toEqual([
      expect.objectContaining({
        requestId,
        newChain: false,
        event: expect.objectContaining({ eventId: 'Intake' }),
      }),
    ]);
    expect(started).toEqual([requestId]);
    expect(await ledger.require(requestId)).toMatchObject({ duplicates: 1, executions: 1 });
  });

  it('does nothing but count a duplicate of a request already running', async () => {
    const body = message();
    const first = await intakeMessage(body, deps);
    const requestId = first.kind === 'accepted' ? first.requestId : '';
    await ledger.update(requestId, { status: 'running' }, ['received']);
    appended = [];
    started = [];

    const again = await intakeMessage(body, deps);

    expect(again).toEqual({ kind: 'duplicate', requestId });
    expect(appended).toEqual([]);
    expect(started).toEqual([]);
    expect(await ledger.require(requestId)).toMatchObject({ status: 'running', duplicates: 1 });
  });
});
