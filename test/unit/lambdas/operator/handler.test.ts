import { createHash, randomUUID } from 'node:crypto';
import {
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  NoSuchKey,
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
import { siteRequestId } from '#shared/sites';
import { functionUrlEvent } from '../../../../bin/cli/operator-client.ts';
import { makeOperatorHandler } from '../../../../lambdas/operator/handler.ts';
import type { OperatorDeps } from '../../../../lambdas/operator/operator.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';
import { s3Body } from '../../cli/helpers.ts';

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
    // Test keys: the function signs the links it hands out.
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

const ARCHIVE = Buffer.from('PK\u0003\u0004 the platform export of the subject');
const sha256Of = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** The archive facts the ledger keeps for `bytes`, but its key (completedWith puts it under the request). */
function archiveFacts(bytes: Buffer, versionId: string) {
  return {
    bytes: bytes.length,
    sha256: sha256Of(bytes),
    version_id: versionId,
    verified_at: NOW.toISOString(),
    entries: 4,
  };
}

/** A completed access request whose archive is `exports/<request_id>/attempt-1.zip`. */
async function completedWith(archive: Omit<NonNullable<LedgerPatch['archive']>, 'key'>): Promise<LedgerItem> {
  const item = await stored();
  return deps.ledger.update(
    item.request_id,
    {
      status: 'completed',
      outcome: 'exported',
      archive: { ...archive, key: `exports/${item.request_id}/attempt-1.zip` },
    },
    ['received'],
  );
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

  it("hands out a link to the ledger's version of the archive, recorded with the ledger's facts, not the command's", async () => {
    // Prepare
    const item = await completedWith(archiveFacts(ARCHIVE, 'v1'));
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ARCHIVE.length });
    // Act
    const { status, body } = await call({
      command: 'hand_out_package',
      request_id: item.request_id,
      raw: true,
      hand_out: { delivery: 'link', expires_in: 900 },
      key: 'exports/someone-else/attempt-1.zip',
      sha256: 'b'.repeat(64),
    });
    // Assess
    expect(status).toBe(200);
    const result = (body as { result: { url: string } }).result;
    const link = new URL(result.url);
    expect(link.hostname).toBe('archives.s3.eu-west-1.amazonaws.com');
    expect(link.pathname).toBe(`/exports/${item.request_id}/attempt-1.zip`);
    expect(link.searchParams.get('versionId')).toBe('v1');
    expect(link.searchParams.get('X-Amz-Expires')).toBe('900');
    expect(result).toMatchObject({
      package: 'platform_archive',
      sha256: sha256Of(ARCHIVE),
      expires_at: '2026-11-21T12:15:00.000Z',
      recorded: true,
    });
    expect(records()).toEqual([
      expect.objectContaining({
        action: 'package_handed_out',
        facts: expect.objectContaining({
          operator: CALLER,
          package: 'platform_archive',
          key: `exports/${item.request_id}/attempt-1.zip`,
          sha256: sha256Of(ARCHIVE),
          delivery: 'link',
          link_expires_at: '2026-11-21T12:15:00.000Z',
        }),
      }),
    ]);
  });

  it('keeps the link and its signature out of every log line, record and ledger field', async () => {
    // Prepare
    const item = await completedWith(archiveFacts(ARCHIVE, 'v1'));
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ARCHIVE.length });
    const logged: unknown[] = [];
    const capture = (...args: unknown[]) => logged.push(args);
    const handler = makeOperatorHandler(
      () => deps,
      () => ({ info: capture, warn: capture, error: capture, debug: capture }),
    );
    const links: string[] = [];
    // Act: a link, a download to a file, and a refused one (the record cannot be written).
    for (const handOut of [{ delivery: 'link', expires_in: 3600 }, { delivery: 'file' }]) {
      const answer = await handler(
        functionUrlEvent(
          CALLER,
          JSON.stringify({
            command: 'hand_out_package',
            request_id: item.request_id,
            raw: true,
            hand_out: handOut,
          }),
        ),
      );
      expect(answer.statusCode).toBe(200);
      links.push((JSON.parse(answer.body) as { result: { url: string } }).result.url);
    }
    s3Mock.on(PutObjectCommand).rejects(new Error('AccessDenied'));
    const refused = await handler(
      functionUrlEvent(
        CALLER,
        JSON.stringify({
          command: 'hand_out_package',
          request_id: item.request_id,
          raw: true,
          hand_out: { delivery: 'file' },
        }),
      ),
    );
    // Assess
    expect(refused.statusCode).toBe(409);
    expect(refused.body).not.toContain('X-Amz-');
    expect(logged).toContainEqual([
      'operator command applied',
      expect.objectContaining({ command: 'hand_out_package', request_id: item.request_id }),
    ]);
    const kept = JSON.stringify([logged, records(), await deps.ledger.require(item.request_id)]);
    for (const url of links) {
      const signature = new URL(url).searchParams.get('X-Amz-Signature') ?? '';
      expect(signature).toMatch(/^[0-9a-f]{64}$/);
      expect(kept).not.toContain(signature);
      expect(kept).not.toContain(url);
    }
    expect(kept).not.toContain('X-Amz-');
  });

  it('answers the size and SHA-256 of what the bucket holds at the recorded key, and null when it holds nothing', async () => {
    // Prepare
    const item = await completedWith(archiveFacts(ARCHIVE, 'v1'));
    s3Mock
      .on(GetObjectCommand, { Bucket: 'archives', Key: `exports/${item.request_id}/attempt-1.zip` })
      .callsFakeOnce(() => ({ Body: s3Body(ARCHIVE), ContentLength: ARCHIVE.length }))
      .rejects(new NoSuchKey({ message: 'gone', $metadata: {} }));
    const check = (object: string) => call({ command: 'check_stored', request_id: item.request_id, object });
    // Act
    const present = await check('archive');
    const gone = await check('archive');
    const none = await check('subject_package');
    // Assess
    expect(present.body).toEqual({
      ok: true,
      result: {
        request_id: item.request_id,
        object: 'archive',
        key: `exports/${item.request_id}/attempt-1.zip`,
        stored: { bytes: ARCHIVE.length, sha256: sha256Of(ARCHIVE) },
      },
    });
    expect(gone.body).toMatchObject({ ok: true, result: { stored: null } });
    expect(none.body).toMatchObject({ ok: true, result: { key: null, stored: null } });
    expect(s3Mock.commandCalls(GetObjectCommand)).toHaveLength(2);
    expect(records()).toEqual([]);
  });

  it('tells a caller of another version which commands it knows', async () => {
    const item = await completedWith(archiveFacts(ARCHIVE, 'v1'));
    const { status, body } = await call({
      command: 'package_handed_out',
      request_id: item.request_id,
      raw: true,
      hand_out: { delivery: 'file', file_mode: '0600' },
    });
    expect(status).toBe(400);
    expect(body).toMatchObject({
      ok: false,
      code: 'invalid',
      message: expect.stringMatching(
        /^command: this operator function does not know "package_handed_out" \(it knows .*hand_out_package, check_stored\): the CLI and the deployed stack are of different versions/,
      ),
    });
    expect(records()).toEqual([]);
  });
});

const SITES = ['news', 'shop', 'blog'];

/** What a change to a request in parts answers, as far as these tests read it. */
type PartsAnswer = { parts?: unknown[]; due_at?: string };

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
    expect((body.result as PartsAnswer | undefined)?.parts).toEqual([
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
    expect((body.result as PartsAnswer | undefined)?.due_at).toBe(due);
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
    expect((body.result as PartsAnswer | undefined)?.parts).toEqual([
      expect.objectContaining({ site: 'shop', done: true }),
    ]);
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
