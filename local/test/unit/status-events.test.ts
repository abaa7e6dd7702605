import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwsStandIns } from '#local/aws/aws-standins';
import type { LocalEvent } from '#local/aws/events-standin';
import { EVENTS_DIR, type LocalStatusEvents, startLocalStatusEvents } from '#local/runtime/status-events';
import { computeDeadlines } from '../../../lambdas/shared/deadlines.ts';
import { Ledger } from '../../../lambdas/shared/ledger/index.ts';
import { createLedgerTable } from '../../../lambdas/shared/ledger/table.ts';
import { parseRequestMessage } from '../../../lambdas/shared/request.ts';
import { statusChangedDetailSchema } from '../../../lambdas/status-events/status-events.ts';
import { startDynamo } from '../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let dataDir: string;
let events: LocalStatusEvents;
const seen: LocalEvent[] = [];
let ledger: Ledger;
let client: DynamoDBClient;

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-events-'));
  const endpoint = String(dynamo.config.endpoint);
  const aws = {
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    endpoints: { sqs: endpoint, s3: endpoint, dynamodb: endpoint },
    clientConfig: () => ({}),
    close: async () => {},
  } as unknown as AwsStandIns;
  events = await startLocalStatusEvents(
    dataDir,
    aws,
    'ledger',
    { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
    (event) => seen.push(event),
  );
  client = new DynamoDBClient({ ...dynamo.config, endpoint: events.aws.endpoints.dynamodb });
  ledger = new Ledger(client, 'ledger');
});
afterAll(async () => {
  client.destroy();
  await events.close();
  await dynamo.close();
  await rm(dataDir, { recursive: true, force: true });
});

describe('local status events', () => {
  it('publishes every status change of the ledger, whoever writes it, to events/ with no identifier', async () => {
    // Prepare
    const requestId = randomUUID();
    const parsed = parseRequestMessage(
      JSON.stringify({
        request_id: requestId,
        type: 'access',
        regulation: 'ccpa',
        primary_key: 'subject-pk-77120',
        received_at: '2026-11-20T00:00:00Z',
        verification: { method: 'email', verified_by: 'Jane Verifier', verified_at: '2026-11-20T00:00:00Z' },
      }),
    );
    if (parsed.kind !== 'valid') throw new Error('the test request should be valid');

    // Act: intake's write, a step's writes (a step change is not a status change), the failure.
    await ledger.createReceived(
      parsed.request,
      parsed.fingerprint,
      computeDeadlines('ccpa', new Date('2026-11-20T00:00:00Z')),
    );
    await ledger.update(requestId, { status: 'running', step: 'resolving' }, ['received']);
    await ledger.update(requestId, { step: 'exporting', svc_user_id: 'svc-uid-5521' }, ['running']);
    await ledger.update(requestId, { status: 'failed', error: { code: 'export_failed', message: 'no' } }, [
      'running',
    ]);
    await events.drained();

    // Assess
    const mine = seen.filter((event) => (event.detail as { request_id: string }).request_id === requestId);
    expect(mine.map((event) => event['detail-type'])).toEqual([
      'svc-dsr Request Status Changed',
      'svc-dsr Request Status Changed',
      'svc-dsr Request Status Changed',
    ]);
    const details = mine.map((event) => statusChangedDetailSchema.parse(event.detail));
    expect(details.map((detail) => [detail.previous_status, detail.status])).toEqual([
      [null, 'received'],
      ['received', 'running'],
      ['running', 'failed'],
    ]);
    expect(details[2]).toMatchObject({ error_code: 'export_failed', notices_due: ['receipt'] });
    const files = await readdir(join(dataDir, EVENTS_DIR));
    const kept = (
      await Promise.all(files.map((file) => readFile(join(dataDir, EVENTS_DIR, file), 'utf8')))
    ).join('');
    expect(kept.split('\n').filter((line) => line.includes(requestId))).toHaveLength(3);
    for (const identifier of ['subject-pk-77120', 'svc-uid-5521', 'Jane Verifier'])
      expect(kept).not.toContain(identifier);
  });
});
