import { randomUUID } from 'node:crypto';
import {
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import {
  DescribeExecutionCommand,
  SFNClient,
  StartExecutionCommand,
  StopExecutionCommand,
} from '@aws-sdk/client-sfn';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger, type LedgerItem, type LedgerPatch, type Status } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import { functionUrlEvent } from '../../../../bin/cli/operator-client.ts';
import { makeOperatorHandler } from '../../../../lambdas/operator/handler.ts';
import type { OperatorDeps } from '../../../../lambdas/operator/operator.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

const NOW = new Date('2026-11-21T12:00:00.000Z');
const CALLER = 'arn:aws:sts::111122223333:assumed-role/PrivacyOperator/jane';
const STATE_MACHINE = 'arn:aws:states:eu-west-1:111122223333:stateMachine:dsr';

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
    s3: new S3Client({ region: 'eu-west-1' }),
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

/** A request in the ledger, moved to `patch` (from received). */
async function stored(patch: LedgerPatch = {}, from: Status[] = ['received']): Promise<LedgerItem> {
  const requestId = randomUUID();
  const receivedAt = '2026-11-20T09:00:00Z';
  await deps.ledger.createReceived(
    {
      request_id: requestId,
      type: 'access',
      regulation: 'gdpr',
      primary_key: 'site-user-pk-1',
      received_at: receivedAt,
      verification: { method: 'email_link', verified_by: 'pt', verified_at: receivedAt },
    },
    'fp',
    computeDeadlines('gdpr', new Date(receivedAt)),
  );
  return Object.keys(patch).length === 0
    ? deps.ledger.require(requestId)
    : deps.ledger.update(requestId, patch, from);
}

/** Calls the handler as Lambda would for an IAM-authenticated POST by CALLER. */
async function call(command: Record<string, unknown>, caller: string = CALLER) {
  const handler = makeOperatorHandler(() => deps, silent);
  const answer = await handler(functionUrlEvent(caller, JSON.stringify(command)));
  return { status: answer.statusCode, body: JSON.parse(answer.body) as Record<string, unknown> };
}

/** The audit records the handler wrote, parsed. */
function records(): Record<string, unknown>[] {
  return s3Mock
    .commandCalls(PutObjectCommand)
    .map((write) => JSON.parse(String(write.args[0].input.Body)) as Record<string, unknown>);
}

describe('the operator handler', () => {
  it('cancels through the ledger and records the caller principal, ignoring an operator named in the body', async () => {
    // Prepare
    const item = await stored({ status: 'running', step: 'exporting' });
    // Act
    const { status, body } = await call({
      command: 'cancel',
      request_id: item.request_id,
      reason: 'subject withdrew',
      operator: 'arn:aws:iam::111122223333:user/someone-else',
      facts: { operator: 'forged' },
    });
    // Assess
    expect(status).toBe(200);
    expect(body).toMatchObject({ ok: true, result: { status: 'cancelled', previous_status: 'running' } });
    expect(await deps.ledger.require(item.request_id)).toMatchObject({ status: 'cancelled' });
    expect(records()).toEqual([
      expect.objectContaining({
        action: 'request_cancelled',
        final: true,
        facts: expect.objectContaining({ operator: CALLER, reason: 'subject withdrew' }),
      }),
    ]);
    expect(JSON.stringify(records())).not.toContain('someone-else');
    expect(sfnMock.commandCalls(StopExecutionCommand).length).toBeGreaterThan(0);
  });

  it('refuses a caller without an IAM principal, writing nothing', async () => {
    const item = await stored({ status: 'running', step: 'exporting' });
    const handler = makeOperatorHandler(() => deps, silent);
    const answer = await handler({
      requestContext: { http: { method: 'POST' } },
      body: JSON.stringify({ command: 'cancel', request_id: item.request_id, reason: 'r', operator: CALLER }),
    });
    expect(answer.statusCode).toBe(403);
    expect(await deps.ledger.require(item.request_id)).toMatchObject({ status: 'running' });
    expect(s3Mock.commandCalls(PutObjectCommand)).toHaveLength(0);
  });

  it("refuses what the ledger's rules refuse (409), and an unknown request, with nothing recorded", async () => {
    const erasing = await stored({ status: 'running', step: 'erasing' });
    const refused = await call({ command: 'cancel', request_id: erasing.request_id, reason: 'r' });
    expect(refused).toMatchObject({
      status: 409,
      body: { ok: false, code: 'refused', message: expect.stringContaining('erasure has started') },
    });
    const unknown = await call({
      command: 'deny',
      request_id: randomUUID(),
      reason_code: 'identity_not_verified',
      reason: 'r',
    });
    expect(unknown).toMatchObject({ status: 409, body: { ok: false, code: 'unknown_request' } });
    expect(s3Mock.commandCalls(PutObjectCommand)).toHaveLength(0);
  });

  it('refuses a command it does not know, or a reason holding an e-mail address, as invalid (400)', async () => {
    const item = await stored();
    expect(await call({ command: 'delete', request_id: item.request_id })).toMatchObject({
      status: 400,
      body: { code: 'invalid' },
    });
    expect(
      await call({ command: 'cancel', request_id: item.request_id, reason: 'asked by jane@example.com' }),
    ).toMatchObject({ status: 400, body: { code: 'invalid', message: expect.stringContaining('reason') } });
    expect(await deps.ledger.require(item.request_id)).toMatchObject({ status: 'received' });
  });

  it('denies, with a final record naming the caller', async () => {
    const item = await stored({ status: 'failed', error: { code: 'export_failed', message: 'x' } }, [
      'received',
    ]);
    const { status } = await call({
      command: 'deny',
      request_id: item.request_id,
      reason_code: 'identity_not_verified',
      reason: 'ID check failed',
    });
    expect(status).toBe(200);
    expect(await deps.ledger.require(item.request_id)).toMatchObject({ status: 'denied' });
    expect(records()[0]).toMatchObject({
      action: 'request_denied',
      final: true,
      facts: { operator: CALLER, reason_code: 'identity_not_verified' },
    });
  });

  it('extends once, with the notice, and refuses a notice given in the future', async () => {
    const item = await stored({ status: 'running', step: 'exporting' });
    const future = await call({
      command: 'extend',
      request_id: item.request_id,
      reason: 'complex',
      notice: { channel: 'email', at: '2026-12-01T00:00:00Z' },
    });
    expect(future).toMatchObject({ status: 400, body: { message: expect.stringContaining('future') } });
    const { status, body } = await call({
      command: 'extend',
      request_id: item.request_id,
      reason: 'complex',
      notice: { channel: 'email', at: '2026-11-21T11:00:00Z' },
    });
    expect(status).toBe(200);
    expect(body).toMatchObject({ result: { previous_due_at: item.due_at } });
    expect(await deps.ledger.require(item.request_id)).toMatchObject({ extended: true });
    expect(records()[0]).toMatchObject({ action: 'deadline_extended', facts: { operator: CALLER } });
  });

  it('records a notice in the notices chain, naming the caller', async () => {
    const item = await stored({ status: 'running', step: 'exporting' });
    const { status } = await call({
      command: 'notice',
      request_id: item.request_id,
      kind: 'receipt',
      notice: { channel: 'email', at: '2026-11-21T10:00:00Z', reference: 'DSR-7' },
    });
    expect(status).toBe(200);
    expect(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Key).toBe(
      `audit/${item.request_id}.notices/000000.json`,
    );
    expect(records()[0]).toMatchObject({
      action: 'notice_given',
      facts: { operator: CALLER, kind: 'receipt' },
    });
  });

  it('retries a failed request and starts its execution; refuses one an execution runs (running)', async () => {
    const failed = await stored({ status: 'failed', error: { code: 'export_failed', message: 'x' } });
    const { status, body } = await call({ command: 'retry', request_id: failed.request_id });
    expect(status).toBe(200);
    expect(body).toMatchObject({ result: { execution: `${failed.request_id}-retry-1`, started: true } });
    expect(records()[0]).toMatchObject({ action: 'request_retried', facts: { operator: CALLER } });

    sfnMock.on(DescribeExecutionCommand).resolves({ status: 'RUNNING' });
    const running = await stored({ status: 'running', step: 'exporting' });
    expect(await call({ command: 'retry', request_id: running.request_id })).toMatchObject({
      status: 409,
      body: { code: 'running' },
    });
  });

  it("records a package hand-out with the ledger's facts, not the command's", async () => {
    const item = await stored(
      {
        status: 'completed',
        outcome: 'exported',
        archive: {
          key: 'exports/x/attempt-1.zip',
          bytes: 10,
          sha256: 'a'.repeat(64),
          version_id: 'v1',
          verified_at: NOW.toISOString(),
          entries: 4,
        },
      },
      ['received'],
    );
    const { status } = await call({
      command: 'package_handed_out',
      request_id: item.request_id,
      raw: true,
      hand_out: { delivery: 'file', file_mode: '0600' },
      sha256: 'b'.repeat(64),
    });
    expect(status).toBe(200);
    expect(records()[0]).toMatchObject({
      action: 'package_handed_out',
      facts: { operator: CALLER, package: 'platform_archive', sha256: 'a'.repeat(64), delivery: 'file' },
    });
  });
});
