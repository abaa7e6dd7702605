import { randomUUID } from 'node:crypto';
import {
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { SFNClient, StartExecutionCommand, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import { siteRequestId } from '#shared/sites';
import { functionUrlEvent } from '../../../../bin/cli/operator-client.ts';
import { makeOperatorHandler } from '../../../../lambdas/operator/handler.ts';
import type { OperatorDeps } from '../../../../lambdas/operator/operator.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

const NOW = new Date('2026-11-21T12:00:00.000Z');
const CALLER = 'arn:aws:sts::111122223333:assumed-role/PrivacyOperator/jane';
const STATE_MACHINE = 'arn:aws:states:eu-west-1:111122223333:stateMachine:dsr';
const SITES = ['news', 'shop', 'blog'];

// The operator function's answers come from the ledger (dynalite); S3 (audit records, archive
// deletes) and Step Functions are recorded, as the handler's own tests record them.
const s3Mock = mockClient(S3Client);
const sfnMock = mockClient(SFNClient);
let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let deps: OperatorDeps;
const silent = () => ({ info() {}, warn() {}, error() {}, debug() {} });

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  deps = {
    ledger: new Ledger(dynamo.client, 'ledger', () => NOW),
    s3: new S3Client({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'AKIATEST', secretAccessKey: 'test' },
    }),
    sfn: new SFNClient({ region: 'eu-west-1' }),
    names: { ArchiveBucketName: 'archives', AuditBucketName: 'audit', StateMachineArn: STATE_MACHINE },
    clock: () => NOW,
  };
});
afterAll(async () => {
  await dynamo.close();
});
beforeEach(() => {
  s3Mock.reset();
  s3Mock.on(ListObjectsV2Command).resolves({});
  s3Mock.on(PutObjectCommand).resolves({});
  s3Mock.on(ListObjectVersionsCommand).resolves({});
  sfnMock.reset();
  sfnMock.on(StopExecutionCommand).resolves({ stopDate: NOW });
  sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });
});

/** An erasure across SITES: news erased, shop failed, blog still running. */
async function erasureInParts(): Promise<string> {
  const id = randomUUID();
  const receivedAt = '2026-11-20T09:00:00Z';
  await deps.ledger.createInParts(
    {
      request_id: id,
      type: 'erasure',
      regulation: 'gdpr',
      primary_key: 'site-user-pk-1',
      received_at: receivedAt,
      verification: { method: 'email_link', verified_by: 'pt', verified_at: receivedAt },
    },
    'fp',
    computeDeadlines('gdpr', new Date(receivedAt)),
    SITES,
  );
  await deps.ledger.update(id, { status: 'running' }, ['received']);
  await deps.ledger.update(siteRequestId(id, 'news'), { status: 'completed', outcome: 'erased' }, [
    'received',
  ]);
  await deps.ledger.update(
    siteRequestId(id, 'shop'),
    { status: 'failed', error: { code: 'platform_outage', message: 'down' } },
    ['received'],
  );
  await deps.ledger.update(siteRequestId(id, 'blog'), { status: 'running' }, ['received']);
  return id;
}

async function call(command: Record<string, unknown>) {
  const handler = makeOperatorHandler(() => deps, silent);
  const answer = await handler(functionUrlEvent(CALLER, JSON.stringify(command)));
  return {
    status: answer.statusCode,
    body: JSON.parse(answer.body) as {
      result?: Record<string, unknown> & { parts?: unknown[]; due_at?: string };
      message?: string;
    },
  };
}

/** The audit records written for `requestId`'s chain, parsed. */
function recordsOf(requestId: string): Record<string, unknown>[] {
  return s3Mock
    .commandCalls(PutObjectCommand)
    .map((write) => JSON.parse(String(write.args[0].input.Body)) as Record<string, unknown>)
    .filter((record) => record.request_id === requestId);
}

describe('the operator on a request in parts, one per site', () => {
  it('cancels the request and every part still open, each recorded under the caller, and keeps the part that completed', async () => {
    // Prepare
    const id = await erasureInParts();

    // Act
    const { status, body } = await call({ command: 'cancel', request_id: id, reason: 'withdrawn' });

    // Assess
    expect(status).toBe(200);
    expect(body.result?.parts).toEqual([
      expect.objectContaining({ site: 'news', done: false }),
      expect.objectContaining({ site: 'shop', done: false, detail: expect.stringContaining('is failed') }),
      expect.objectContaining({ site: 'blog', done: true, detail: 'cancelled' }),
    ]);
    expect((await deps.ledger.require(id)).status).toBe('cancelled');
    expect((await deps.ledger.require(siteRequestId(id, 'news'))).status).toBe('completed');
    expect((await deps.ledger.require(siteRequestId(id, 'blog'))).status).toBe('cancelled');
    for (const chain of [id, siteRequestId(id, 'blog')]) {
      expect(recordsOf(chain)).toEqual([
        expect.objectContaining({
          action: 'request_cancelled',
          facts: expect.objectContaining({ operator: CALLER }),
        }),
      ]);
    }
  });

  it('extends the request and every part', async () => {
    // Prepare
    const id = await erasureInParts();

    // Act
    const { body } = await call({
      command: 'extend',
      request_id: id,
      reason: 'complex: three sites',
      notice: { channel: 'email', at: '2026-11-21T11:00:00Z' },
    });

    // Assess
    const due = (await deps.ledger.require(id)).due_at;
    expect(body.result?.due_at).toBe(due);
    for (const site of ['shop', 'blog'])
      expect((await deps.ledger.require(siteRequestId(id, site))).due_at).toBe(due);
  });

  it('retries only the part that failed, never the one that completed nor one still running', async () => {
    // Prepare: the request failed once blog ended too
    const id = await erasureInParts();
    await deps.ledger.update(siteRequestId(id, 'blog'), { status: 'completed', outcome: 'no_data' }, [
      'running',
    ]);
    for (const [site, result] of [
      ['news', { status: 'completed', outcome: 'erased' }],
      ['shop', { status: 'failed', error_code: 'platform_outage' }],
      ['blog', { status: 'completed', outcome: 'no_data' }],
    ] as const) {
      await deps.ledger.recordSiteResult(id, site, { ...result, at: '2026-11-21T10:00:00.000Z' });
    }
    await deps.ledger.update(
      id,
      { status: 'failed', error: { code: 'sites_failed', message: 'failed on shop' } },
      ['running'],
    );

    // Act
    const { status, body } = await call({ command: 'retry', request_id: id });

    // Assess
    expect(status).toBe(200);
    expect(body.result?.parts).toEqual([expect.objectContaining({ site: 'shop', done: true })]);
    const started = sfnMock
      .commandCalls(StartExecutionCommand)
      .map((start) => JSON.parse(start.args[0].input.input ?? '{}'));
    expect(started).toEqual([expect.objectContaining({ request_id: siteRequestId(id, 'shop') })]);
    const request = await deps.ledger.require(id);
    expect(request.status).not.toBe('failed');
    expect(request.site_results?.shop?.status).toBe('running');
    expect(request.site_results?.news?.status).toBe('completed');
  });

  it("refuses to act on a site's part alone, naming the request to act on", async () => {
    // Prepare
    const id = await erasureInParts();

    // Act
    const { status, body } = await call({ command: 'retry', request_id: siteRequestId(id, 'shop') });

    // Assess
    expect(status).toBe(409);
    expect(body.message).toContain(`the shop part of request ${id}`);
    expect(sfnMock.commandCalls(StartExecutionCommand)).toEqual([]);
  });
});
