import { randomUUID } from 'node:crypto';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { LedgerStateError, RequestCancelledError } from '#shared/errors';
import { Ledger } from '#shared/ledger';
import type { DsrRequest } from '#shared/request';
import { CACHED_MIDDLEWARE } from '#shared/sdk-clients';
import { createLedgerTable } from '../../../../local/ledger-table.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

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
      due_at: '2026-12-02T09:30:00.000Z',
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

describe('Ledger.increment', () => {
  it('counts duplicates', async () => {
    const req = request();
    await ledger.createReceived(req, 'fp', computeDeadlines('gdpr', new Date(req.received_at)));
    await ledger.increment(req.request_id, 'duplicates');
    await ledger.increment(req.request_id, 'duplicates');
    expect((await ledger.require(req.request_id)).duplicates).toBe(2);
  });
});

describe('Ledger.listByStatus', () => {
  it('lists by status, earliest due first, and filters by due date', async () => {
    const local = new Ledger(dynamo.client, 'ledger-list');
    await createLedgerTable(dynamo.client, 'ledger-list');
    const late = request({ regulation: 'ccpa', received_at: '2026-10-01T00:00:00Z' });
    const early = request({ regulation: 'gdpr', received_at: '2026-09-01T00:00:00Z' });
    for (const req of [late, early]) {
      await local.createReceived(req, 'fp', computeDeadlines(req.regulation, new Date(req.received_at)));
    }
    const all = await local.listByStatus('received');
    expect(all.items.map((item) => item.request_id)).toEqual([early.request_id, late.request_id]);
    const dueSoon = await local.listByStatus('received', { dueBefore: '2026-10-15T00:00:00Z' });
    expect(dueSoon.items.map((item) => item.request_id)).toEqual([early.request_id]);
  });
});
