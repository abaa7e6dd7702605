import { randomUUID } from 'node:crypto';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import type { DsrRequest } from '#shared/request';
import { startDynamo } from '../../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let client: DynamoDBClient;
let ledger: Ledger;

function correction(): DsrRequest {
  return {
    request_id: randomUUID(),
    type: 'correction',
    regulation: 'ccpa',
    primary_key: 'u-1',
    received_at: '2026-11-02T09:30:00Z',
    verification: { method: 'account_login', verified_by: 'privacy', verified_at: '2026-11-02T10:00:00Z' },
    corrections: { email: 'new@example.org', display_name: 'New Name' },
  };
}

/** The item as DynamoDB stores it, every attribute. */
async function stored(requestId: string): Promise<Record<string, unknown> | undefined> {
  const { Item } = await dynamo.doc.send(
    new GetCommand({ TableName: 'ledger', Key: { request_id: requestId } }),
  );
  return Item;
}

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  client = new DynamoDBClient(dynamo.config);
  ledger = new Ledger(client, 'ledger', () => new Date('2026-11-03T00:00:00Z'));
});
afterAll(async () => {
  client.destroy();
  await dynamo.close();
});

describe('a correction in the ledger', () => {
  it('keeps the field names, and the values only until the request ends', async () => {
    // Prepare
    const request = correction();
    await ledger.createReceived(request, 'fp', computeDeadlines('ccpa', new Date(request.received_at)));
    const received = await stored(request.request_id);
    // Act
    await ledger.cancel(request.request_id, { reason: 'withdrawn' });
    // Assess
    expect(received).toMatchObject({
      correction_fields: ['display_name', 'email'],
      correction_values: { email: 'new@example.org', display_name: 'New Name' },
    });
    const cancelled = await stored(request.request_id);
    expect(cancelled).toMatchObject({ status: 'cancelled', correction_fields: ['display_name', 'email'] });
    expect(cancelled).not.toHaveProperty('correction_values');
    expect(cancelled).not.toHaveProperty('corrections');
  });

  it('never stores the values of a correction denied at intake', async () => {
    const request = correction();
    await ledger.createDenied(request, 'fp', computeDeadlines('ccpa', new Date(request.received_at)), {
      code: 'identity_not_verified',
    });
    const item = await stored(request.request_id);
    expect(item).toMatchObject({ status: 'denied', correction_fields: ['display_name', 'email'] });
    expect(JSON.stringify(item)).not.toContain('new@example.org');
  });

  it('keeps them while the request is failed, for an operator retry', async () => {
    const request = correction();
    await ledger.createReceived(request, 'fp', computeDeadlines('ccpa', new Date(request.received_at)));
    await ledger.update(request.request_id, { status: 'running' }, ['received']);
    await ledger.update(request.request_id, { status: 'failed', error: { code: 'x', message: 'y' } }, [
      'running',
    ]);
    expect(await stored(request.request_id)).toMatchObject({
      correction_values: { email: 'new@example.org' },
    });
  });
});
