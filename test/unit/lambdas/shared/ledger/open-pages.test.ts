import { randomUUID } from 'node:crypto';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger, maskedKey, OpenCursorError, type OpenListFilter } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import type { DsrRequest } from '#shared/request';
import { CACHED_MIDDLEWARE } from '#shared/sdk-clients';
import { startDynamo } from '../../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let client: DynamoDBClient;
let ledger: Ledger;
const made: { id: string; type: string; regulation: string; due: string }[] = [];

// 600 open requests received on four days only, so hundreds share a due date within each shard.
const DAYS = ['2026-11-02T09:30:00Z', '2026-11-03T09:30:00Z', '2026-11-04T09:30:00Z', '2026-11-05T09:30:00Z'];

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  client = new DynamoDBClient({ ...dynamo.config, ...CACHED_MIDDLEWARE });
  ledger = new Ledger(client, 'ledger', () => new Date('2026-11-06T00:00:00Z'));
  for (let index = 0; index < 600; index++) {
    const request: DsrRequest = {
      request_id: randomUUID(),
      type: index % 3 === 0 ? 'erasure' : 'access',
      regulation: index % 2 === 0 ? 'ccpa' : 'gdpr',
      primary_key: `u-${index}`,
      received_at: DAYS[index % DAYS.length] ?? '',
      verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-05T10:00:00Z' },
    };
    const deadlines = computeDeadlines(request.regulation, new Date(request.received_at));
    await ledger.createReceived(request, `fp-${index}`, deadlines);
    made.push({
      id: request.request_id,
      type: request.type,
      regulation: request.regulation,
      due: deadlines.due_at,
    });
  }
}, 120_000);
afterAll(async () => {
  client.destroy();
  await dynamo.close();
});

/** Every page of a filter, followed by its cursors. */
async function allPages(filter: OpenListFilter, limit: number) {
  const pages: { request_id: string; due_at?: string | undefined }[][] = [];
  let cursor: string | undefined;
  do {
    const page = await ledger.openPage(filter, { limit, ...(cursor === undefined ? {} : { cursor }) });
    pages.push(page.requests);
    cursor = page.next ?? undefined;
  } while (cursor !== undefined && pages.length < 100);
  return pages;
}

describe('pages of open requests', () => {
  it('gives every open request once, earliest due first, however many share a due date', async () => {
    // Act
    const pages = await allPages({ statuses: ['received', 'running', 'failed'] }, 37);

    // Assess
    const ids = pages.flat().map((request) => request.request_id);
    expect(ids).toHaveLength(made.length);
    expect(new Set(ids)).toEqual(new Set(made.map((request) => request.id)));
    expect(new Set(made.map((request) => request.due)).size).toBeLessThanOrEqual(8);
    const dues = pages.flat().map((request) => request.due_at ?? '');
    expect(dues).toEqual([...dues].sort());
    expect(pages.slice(0, -1).every((page) => page.length === 37)).toBe(true);
  });

  it('filters by type and regulation, and pages the filtered set alone', async () => {
    // Act
    const pages = await allPages({ statuses: ['received'], types: ['erasure'], regulations: ['ccpa'] }, 25);

    // Assess
    const expected = made.filter((request) => request.type === 'erasure' && request.regulation === 'ccpa');
    expect(new Set(pages.flat().map((request) => request.request_id))).toEqual(
      new Set(expected.map((r) => r.id)),
    );
    expect(pages.flat()).toHaveLength(expected.length);
  });

  it('refuses a cursor given with other filters, or one it did not make', async () => {
    // Prepare
    const first = await ledger.openPage({ statuses: ['received'] }, { limit: 5 });

    // Act / Assess
    await expect(
      ledger.openPage({ statuses: ['received'], types: ['access'] }, { limit: 5, cursor: first.next ?? '' }),
    ).rejects.toThrow(OpenCursorError);
    await expect(
      ledger.openPage({ statuses: ['received'] }, { limit: 5, cursor: 'bm90LWEtY3Vyc29y' }),
    ).rejects.toThrow(OpenCursorError);
  });
});

describe('the primary keys of a page', () => {
  it('reads every named request’s key in batches of at most 100, and none for an unknown id', async () => {
    // Prepare: more ids than one BatchGetItem takes, one named twice, one unknown.
    const ids = made.slice(0, 250).map((request) => request.id);
    const unknown = randomUUID();

    // Act
    const keys = await ledger.primaryKeys([...ids, ids[0] ?? '', unknown]);

    // Assess
    expect(keys.size).toBe(250);
    expect(keys.get(ids[7] ?? '')).toBe('u-7');
    expect(keys.has(unknown)).toBe(false);
  });

  it('masks a key to its first and last characters, never the whole', () => {
    expect(maskedKey('u-alice')).toBe('u•••e');
    expect(maskedKey('jane.doe@example.com')).toBe('ja•••om');
    expect(maskedKey('abc')).toBe('•••');
    expect(maskedKey('😀abcd😀')).toBe('😀•••😀');
    for (const key of ['u-alice', 'jane.doe@example.com', 'abcd']) {
      expect(maskedKey(key)).not.toContain(key.slice(1, -1));
    }
  });

  it('counts the open requests by status and by due date without reading them, a site part left out', async () => {
    // Prepare: one request's part on a site, as a request over several sites has
    const part: DsrRequest = {
      request_id: `${randomUUID()}_forum`,
      type: 'access',
      regulation: 'gdpr',
      primary_key: 'u-part',
      received_at: DAYS[0] ?? '',
      verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-05T10:00:00Z' },
    };
    await ledger.createReceived(part, 'fp-part', computeDeadlines('gdpr', new Date(part.received_at)));
    const dueTo = [...new Set(made.map((request) => request.due))].sort()[1] ?? '';

    // Act
    const all = await ledger.openCounts({ statuses: ['received', 'running', 'failed'] });
    const due = await ledger.openCounts({ statuses: ['received'], dueTo });
    const ccpa = await ledger.openCounts({ statuses: ['received'], regulations: ['ccpa'] });

    // Assess
    expect(all).toEqual({ received: made.length, running: 0, failed: 0 });
    expect(due).toEqual({ received: made.filter((request) => request.due <= dueTo).length });
    expect(due.received).toBeGreaterThan(0);
    expect(due.received).toBeLessThan(made.length);
    expect(ccpa).toEqual({ received: made.filter((request) => request.regulation === 'ccpa').length });
  });
});
