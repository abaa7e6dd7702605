import { createHash } from 'node:crypto';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  ListObjectVersionsCommand,
} from '@aws-sdk/client-s3';
import { SFNClient, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { emulatorControl } from '#local/emulator/server';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { type CancelResult, runCancel } from '../../../bin/cli/commands/cancel.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { inProcessOperator } from '../../../bin/cli/operator-client.ts';
import { computeDeadlines } from '../../../lambdas/shared/deadlines.ts';
import { dsrRequestSchema } from '../../../lambdas/shared/request.ts';
import { type Harness, requestFor, startHarness, TEST_EXPORT_TOKEN, TEST_SSO_TOKEN } from './harness.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function start(options: Parameters<typeof startHarness>[0] = {}): Promise<Harness> {
  harness = await startHarness(options);
  return harness;
}

const submit = submitAndSettle;

function platformCalls(h: Harness, method: string, pathPrefix: string) {
  return emulatorControl(h.emulator)
    .calls()
    .filter((call) => call.method === method && call.path.startsWith(pathPrefix));
}

async function storedBytes(h: Harness, bucket: string, key: string): Promise<Buffer> {
  const { Body } = await h.workflow.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from((await Body?.transformToByteArray()) ?? []);
}

/** The zip the emulator serves for its export `exportId`, fetched as any client would. */
async function emulatorZip(h: Harness, exportId: string): Promise<Buffer> {
  const status = await fetch(
    `${h.emulator.url}/gdpr/export/status/${exportId}?access_token=${TEST_EXPORT_TOKEN}&spot_id=${h.emulator.spotId}`,
  );
  const body: unknown = await status.json();
  const link = typeof body === 'object' && body !== null && 'link' in body ? String(body.link) : '';
  return Buffer.from(await (await fetch(link)).arrayBuffer());
}

async function quarantined(h: Harness) {
  const { Messages = [] } = await h.workflow.sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: h.workflow.queueUrls.quarantine,
      MaxNumberOfMessages: 10,
      MessageAttributeNames: ['All'],
    }),
  );
  return Messages.map((message) => ({
    body: message.Body ?? '',
    reason: message.MessageAttributes?.reason?.StringValue ?? '',
  }));
}

describe('access request for an existing user', () => {
  it('ends exported, with the archive byte-identical to the platform zip', async () => {
    const h = await start();
    const request = requestFor('u-alice');

    const results = await submit(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'exported', export_attempts: 1 });
    const archive = item.archive;
    if (archive === undefined) throw new Error('no archive recorded');
    const stored = await storedBytes(h, LOCAL_NAMES.archiveBucket, archive.key);
    const platformZip = await emulatorZip(h, item.export_id ?? '');
    expect(stored.equals(platformZip)).toBe(true);
    expect(archive.sha256).toBe(createHash('sha256').update(platformZip).digest('hex'));
    expect(archive.bytes).toBe(platformZip.length);
    expect(archive.key).not.toContain('u-alice');
    const verification = await h.workflow.audit.verify(request.request_id);
    expect(verification).toMatchObject({ ok: true });
  });
});

describe('erasure request', () => {
  it('archives, then deletes, then verifies not-found, and the comments stay under a guest', async () => {
    const h = await start();
    const control = emulatorControl(h.emulator);
    const commentsBefore = control.comments().filter((comment) => comment.author_primary_key === 'u-alice');
    const request = requestFor('u-alice', { type: 'erasure' });

    const results = await submit(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'erased', erasure: { outcome: 'deleted' } });
    expect(item.erasure_verification?.platform_answer).toBe('not_found');
    expect(control.user('u-alice')).toBeUndefined();
    // Order: the archive was verified before the DELETE, and the DELETE came before the proving GET.
    const calls = control.calls();
    const download = calls.findIndex((call) => call.path.startsWith('/_downloads/'));
    const deletion = calls.findIndex((call) => call.method === 'DELETE');
    const proof = calls.findLastIndex(
      (call) => call.method === 'GET' && call.path.startsWith('/sso/v1/user/'),
    );
    expect(download).toBeGreaterThan(-1);
    expect(deletion).toBeGreaterThan(download);
    expect(proof).toBeGreaterThan(deletion);
    expect(calls[proof]?.status).toBe(404);
    // The copy taken before the deletion is gone with every version once the erasure is verified
    // (erasureArchiveKeepDays 0 by default); the ledger keeps what it was.
    expect(item).toMatchObject({
      archive: { key: expect.any(String) },
      archive_deleted_at: expect.any(String),
    });
    const versions = await h.workflow.s3.send(
      new ListObjectVersionsCommand({
        Bucket: LOCAL_NAMES.archiveBucket,
        Prefix: `exports/${request.request_id}/`,
      }),
    );
    expect([...(versions.Versions ?? []), ...(versions.DeleteMarkers ?? [])]).toEqual([]);
    const commentsAfter = control.comments();
    expect(commentsBefore.length).toBeGreaterThan(0);
    for (const before of commentsBefore) {
      const after = commentsAfter.find((comment) => comment.id === before.id);
      expect(after).toMatchObject({ text: before.text, author_registered: false });
      expect(after?.author_svc_user_id).not.toBe(before.author_svc_user_id);
    }
  });
});

describe('an erasure request on a stack that keeps its archive', () => {
  it('keeps the archive after the verified erasure when erasureArchiveKeepDays is set', async () => {
    const h = await start({ config: { erasureArchiveKeepDays: 7 } });
    const request = requestFor('u-alice', { type: 'erasure' });

    await submit(h, request);

    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'erased' });
    expect(item.archive_deleted_at).toBeUndefined();
    const stored = await storedBytes(h, LOCAL_NAMES.archiveBucket, item.archive?.key ?? '');
    expect(stored.length).toBe(item.archive?.bytes);
  });
});

describe('unknown primary_key', () => {
  it.each(['access', 'erasure'])('records no_data for %s and starts no export', async (type) => {
    const h = await start();
    const request = requestFor('u-nobody', { type });

    const results = await submit(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'no_data',
    });
    expect(platformCalls(h, 'POST', '/gdpr/export')).toHaveLength(0);
    expect(platformCalls(h, 'DELETE', '/sso/v1/user/')).toHaveLength(0);
  });
});

/** The method and path of a fetch the steps make. */
function callOf(input: Parameters<typeof fetch>[0], init?: RequestInit): { method: string; path: string } {
  const url = new URL(input instanceof Request ? input.url : String(input));
  return { method: init?.method ?? 'GET', path: url.pathname };
}

describe('an erasure of the same subject racing the access request', () => {
  it('ends the access request completed/no_data when the subject is erased before its export starts', async () => {
    let erased = false;
    const h = await start({
      fetch: (real) => async (input, init) => {
        const { method, path } = callOf(input, init);
        if (!erased && method === 'POST' && path === '/gdpr/export') {
          // Another request's erasure removes the subject between ResolveSubject and StartExport.
          erased = true;
          const url = harness?.emulator.url ?? '';
          await real(`${url}/sso/v1/user/u-alice`, {
            method: 'DELETE',
            headers: { 'x-svc-sso-access-token': TEST_SSO_TOKEN },
          });
        }
        return real(input, init);
      },
    });
    const request = requestFor('u-alice');

    const results = await submit(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'no_data',
      export_attempts: 0,
    });
    const records = await h.workflow.audit.list(request.request_id);
    expect(records.map((record) => record.action)).toContain('subject_not_found');
    expect(records.at(-1)).toMatchObject({ action: 'request_completed', facts: { outcome: 'no_data' } });
  });
});

describe('an erasure whose DELETE answer is lost', () => {
  it('records the deletion as its own when the retried step finds the subject gone', async () => {
    let dropped = false;
    const h = await start({
      fetch: (real) => async (input, init) => {
        const answer = await real(input, init);
        const { method } = callOf(input, init);
        if (!dropped && method === 'DELETE') {
          // The platform deleted the subject; the answer never reaches the step.
          dropped = true;
          throw new TypeError('fetch failed', {
            cause: Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
          });
        }
        return answer;
      },
    });
    const request = requestFor('u-alice', { type: 'erasure' });

    const results = await submit(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'erased',
      erasure: { outcome: 'deleted', evidence: 'not_found_after_interrupted_delete' },
    });
    expect(platformCalls(h, 'DELETE', '/sso/v1/user/')).toHaveLength(1);
    const records = await h.workflow.audit.list(request.request_id);
    expect(records.map((record) => record.action)).toContain('subject_deleted');
    expect(records.map((record) => record.action)).not.toContain('subject_already_absent');
    // An honest "erased": the deletion and the final record say the comments stay, under a guest user.
    const keeps = { platform_keeps: 'comments', comments_relinked_to: 'random_guest_user' };
    expect(records.find((record) => record.action === 'subject_deleted')?.facts).toMatchObject(keeps);
    expect(records.at(-1)).toMatchObject({ action: 'request_completed', final: true, facts: keeps });
  });
});

/** What the CLI commands work with, over the harness's stand-ins (Step Functions answered by `sfn`). */
function cliContext(h: Harness, sfn: SFNClient) {
  const context = {
    names: {
      IntakeQueueUrl: h.workflow.queueUrls.intake,
      QuarantineQueueUrl: h.workflow.queueUrls.quarantine,
      LedgerTableName: LOCAL_NAMES.table,
      ArchiveBucketName: LOCAL_NAMES.archiveBucket,
      AuditBucketName: LOCAL_NAMES.auditBucket,
      StateMachineArn: 'arn:aws:states:us-east-1:000000000000:stateMachine:svc-dsr-local',
    },
    target: 'local' as const,
    ledger: h.workflow.ledger,
    dynamo: DynamoDBDocumentClient.from(new DynamoDBClient(h.aws.clientConfig('dynamodb'))),
    s3: h.workflow.s3,
    sfn,
    clock: () => new Date(),
    operator: async () => 'local-user:operator',
  };
  return {
    ...context,
    operatorFunction: inProcessOperator(context, context.operator),
  };
}

describe('a cancel that lands while ArchiveExport copies the export', () => {
  it('leaves no archive object behind and the cancel command succeeds', async () => {
    const sfn = new SFNClient({ region: 'us-east-1' });
    mockClient(sfn).on(StopExecutionCommand).resolves({ stopDate: new Date() });
    let cancelled: Promise<{ exitCode: number; result: CancelResult }> | undefined;
    const request = requestFor('u-alice');
    const h = await start({
      fetch: (real) => async (input, init) => {
        const archiving =
          callOf(input, init).path.startsWith('/gdpr/export/status/') &&
          (await h.workflow.ledger.require(request.request_id)).step === 'archiving';
        if (cancelled === undefined && archiving) {
          // The operator cancels as ArchiveExport asks for its link: its final ledger write finds it.
          const context = cliContext(h, sfn);
          cancelled = runCancel(
            context,
            { requestId: request.request_id, reason: 'withdrawn' },
            collectingIo(),
          );
          await cancelled;
        }
        return real(input, init);
      },
    });

    await submit(h, request);

    expect((await cancelled)?.exitCode).toBe(0);
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'cancelled' });
    expect(item.archive).toBeUndefined();
    const { Versions = [], DeleteMarkers = [] } = await h.workflow.s3.send(
      new ListObjectVersionsCommand({
        Bucket: LOCAL_NAMES.archiveBucket,
        Prefix: `exports/${request.request_id}/`,
      }),
    );
    expect([...Versions, ...DeleteMarkers]).toEqual([]);
    const { Contents = [] } = await h.workflow.s3.send(
      new ListObjectsV2Command({
        Bucket: LOCAL_NAMES.archiveBucket,
        Prefix: `exports/${request.request_id}/`,
      }),
    );
    expect(Contents).toEqual([]);
    // The cancel's final record closed the chain before the copy ended: it stays the chain's last
    // record (S3's If-None-Match keeps the late append from overwriting it), and the removal is
    // in the log.
    const records = await h.workflow.audit.list(request.request_id);
    expect(records.at(-1)).toMatchObject({ final: true });
    expect(records.map((record) => record.action)).not.toContain('archive_removed');
    expect(h.logs.map((line) => JSON.parse(line).message)).toContain(
      'archive removed: the request was cancelled during the copy',
    );
  });
});

describe('a cancel whose audit record comes after the workflow closed the chain', () => {
  it('exits 0: the request ended cancelled and the workflow recorded it', async () => {
    const h = await start();
    const sfn = new SFNClient({ region: 'us-east-1' });
    mockClient(sfn).on(StopExecutionCommand).resolves({ stopDate: new Date() });
    const request = requestFor('u-alice');
    await h.workflow.ledger.createReceived(
      dsrRequestSchema.parse(request),
      'fp',
      computeDeadlines('gdpr', new Date(request.received_at)),
    );
    await h.workflow.ledger.update(request.request_id, { status: 'running', step: 'archiving' }, [
      'received',
    ]);
    // The step saw the cancellation first and closed the chain with its final record.
    await h.workflow.audit.append(request.request_id, {
      eventId: 'RecordFailure:cancelled',
      step: 'RecordFailure',
      action: 'request_cancelled',
      facts: { step: 'archiving' },
      final: true,
    });
    const io = collectingIo();

    const { exitCode } = await runCancel(
      cliContext(h, sfn),
      { requestId: request.request_id, reason: 'withdrawn' },
      io,
    );

    expect(exitCode).toBe(0);
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({ status: 'cancelled' });
  });
});

describe('failed exports', () => {
  it('starts a new export after one failure and records two attempts', async () => {
    const h = await start({ faults: { export_outcomes: ['failed', 'completed'] } });
    const request = requestFor('u-bruno');

    await submit(h, request);

    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'exported', export_attempts: 2 });
    expect(platformCalls(h, 'POST', '/gdpr/export')).toHaveLength(2);
    const actions = (await h.workflow.audit.list(request.request_id)).map((record) => record.action);
    expect(actions.filter((action) => action === 'export_started')).toHaveLength(2);
    expect(actions).toContain('export_failed');
  });

  it('fails with ExportFailed once the attempts are spent', async () => {
    const h = await start({ faults: { export_failure_rate: 1 }, env: { EXPORT_MAX_ATTEMPTS: '2' } });
    const request = requestFor('u-bruno');

    const results = await submit(h, request);

    expect(results.get(request.request_id)).toMatchObject({ status: 'FAILED', error: 'ExportFailedError' });
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'failed', error: { code: 'export_failed' }, export_attempts: 2 });
    expect(platformCalls(h, 'POST', '/gdpr/export')).toHaveLength(2);
  });

  it('fails with ExportTimedOut when the export stays pending past the budget', async () => {
    const h = await start({
      faults: { export_ready_after_polls: 1000 },
      env: { POLL_INITIAL_SECONDS: '30', POLL_MAX_SECONDS: '60', POLL_BUDGET_SECONDS: '300' },
    });
    const request = requestFor('u-bruno');

    const results = await submit(h, request);

    expect(results.get(request.request_id)).toMatchObject({ status: 'FAILED', error: 'ExportTimedOutError' });
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'failed', error: { code: 'export_timed_out' } });
    expect(item.export_waited_seconds).toBe(300);
    expect(item.archive).toBeUndefined();
  });
});

describe('transient platform faults', () => {
  it('retries 429s, 5xx, timeouts and dropped connections to success', async () => {
    const h = await start({
      faults: {
        seed: 11,
        error_rate: 0.35,
        errors: ['500', '503', '429', 'timeout', 'reset'],
        retry_after_seconds: 1,
        timeout_ms: 1500,
        paths: ['/sso/', '/gdpr/export/status/'],
      },
      env: { PLATFORM_TIMEOUT_MS: '500' },
    });
    const requests = ['u-alice', 'u-bruno', 'u-chloe'].map((key) => requestFor(key));

    const results = await submit(h, ...requests);

    for (const request of requests) {
      expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
      expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({ outcome: 'exported' });
    }
    const faults = new Set(
      emulatorControl(h.emulator)
        .calls()
        .map((call) => call.fault),
    );
    for (const kind of ['500', '503', '429', 'timeout', 'reset']) expect(faults).toContain(kind);
  });

  it('retries a truncated download and never records a corrupt archive', async () => {
    const h = await start({ faults: { seed: 3, truncate_download_rate: 0.6 } });
    const requests = ['u-alice', 'u-bruno', 'u-chloe'].map((key) => requestFor(key));

    await submit(h, ...requests);

    const downloads = platformCalls(h, 'GET', '/_downloads/');
    expect(downloads.some((call) => call.fault === 'truncate')).toBe(true);
    emulatorControl(h.emulator).setFaults({});
    for (const request of requests) {
      const item = await h.workflow.ledger.require(request.request_id);
      expect(item.status).toBe('completed');
      const archive = item.archive;
      if (archive === undefined) throw new Error('no archive');
      const stored = await storedBytes(h, LOCAL_NAMES.archiveBucket, archive.key);
      expect(createHash('sha256').update(stored).digest('hex')).toBe(archive.sha256);
      expect(stored.equals(await emulatorZip(h, item.export_id ?? ''))).toBe(true);
    }
  });
});

describe('download allowlist', () => {
  it('refuses a link whose host is not allowed and fetches nothing', async () => {
    const h = await start({
      env: { DOWNLOAD_INSECURE_HOSTS: '127.0.0.1:9', DOWNLOAD_ALLOWED_HOSTS: 'exports.example.com' },
    });
    const request = requestFor('u-alice');

    const results = await submit(h, request);

    expect(results.get(request.request_id)).toMatchObject({
      status: 'FAILED',
      error: 'DownloadHostNotAllowedError',
    });
    expect(platformCalls(h, 'GET', '/_downloads/')).toHaveLength(0);
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'failed', error: { code: 'download_host_not_allowed' } });
    expect(item.archive).toBeUndefined();
    const { KeyCount } = await h.workflow.s3.send(
      new ListObjectsV2Command({ Bucket: LOCAL_NAMES.archiveBucket }),
    );
    expect(KeyCount ?? 0).toBe(0);
  });
});

describe('archive expansion cap', () => {
  it('fails the request with ArchiveTooLarge, once and without retries, and stores nothing', async () => {
    const h = await start({
      faults: { export_padding_bytes: 3 * 1024 * 1024 },
      env: { ARCHIVE_MAX_EXPANDED_BYTES: String(1024 * 1024) },
    });
    const request = requestFor('u-alice');

    const results = await submit(h, request);

    expect(results.get(request.request_id)).toMatchObject({
      status: 'FAILED',
      error: 'ArchiveTooLargeError',
    });
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'failed', error: { code: 'archive_too_large' } });
    expect(item.error?.message).toContain(
      'past the limit of 1048576 (stack setting archiveMaxExpandedBytes)',
    );
    expect(item.archive).toBeUndefined();
    expect(platformCalls(h, 'GET', '/_downloads/')).toHaveLength(1);
    const { KeyCount } = await h.workflow.s3.send(
      new ListObjectsV2Command({ Bucket: LOCAL_NAMES.archiveBucket }),
    );
    expect(KeyCount ?? 0).toBe(0);
  });
});

describe('intake', () => {
  it('runs one execution and one export for the same message sent twice', async () => {
    const h = await start();
    const request = requestFor('u-alice');
    await h.workflow.sqs.send(
      new SendMessageCommand({ QueueUrl: h.workflow.queueUrls.intake, MessageBody: JSON.stringify(request) }),
    );

    await submit(h, request);

    expect(h.workflow.executions.list()).toHaveLength(1);
    expect(platformCalls(h, 'POST', '/gdpr/export')).toHaveLength(1);
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      duplicates: 1,
      status: 'completed',
    });
  });

  it('quarantines a conflicting message and leaves the original untouched', async () => {
    const h = await start();
    const original = requestFor('u-alice');
    await submit(h, original);
    const before = await h.workflow.ledger.require(original.request_id);

    await submit(h, { ...original, type: 'erasure' });

    const after = await h.workflow.ledger.require(original.request_id);
    expect(after).toMatchObject({
      type: 'access',
      fingerprint: before.fingerprint,
      outcome: 'exported',
      conflicts: 1,
    });
    expect(platformCalls(h, 'DELETE', '/sso/v1/user/')).toHaveLength(0);
    const held = await quarantined(h);
    expect(held).toHaveLength(1);
    expect(held[0]?.reason).toContain('conflict');
  });

  it('rejects or quarantines invalid messages and still processes the rest of the batch', async () => {
    const h = await start();
    const good = requestFor('u-bruno');
    const invalid = requestFor('u-chloe', { type: 'delete', regulaton: 'gdpr' });

    const results = await submit(h, '{not json', invalid, good);

    expect(results.get(good.request_id)?.status).toBe('SUCCEEDED');
    expect(await h.workflow.ledger.require(good.request_id)).toMatchObject({ outcome: 'exported' });
    const rejected = await h.workflow.ledger.require(invalid.request_id);
    expect(rejected.status).toBe('rejected');
    expect(rejected.rejection_errors).toEqual(
      expect.arrayContaining([
        'type: must be "access", "erasure" or "correction"',
        expect.stringContaining('"regulaton"'),
      ]),
    );
    expect(results.has(invalid.request_id)).toBe(false);
    const held = await quarantined(h);
    expect(held.map((message) => message.reason).sort()).toEqual([
      expect.stringContaining('invalid request'),
      expect.stringContaining('message body is not valid JSON'),
    ]);
  });
});

describe('re-running an execution', () => {
  it('starts no second export and no second deletion for a completed request', async () => {
    const h = await start();
    const request = requestFor('u-alice', { type: 'erasure' });
    await submit(h, request);
    const before = await h.workflow.ledger.require(request.request_id);

    const rerun = await h.workflow.machine.run(
      { request_id: request.request_id, type: 'erasure', regulation: 'gdpr' },
      { executionName: `${request.request_id}-again` },
    );

    expect(rerun.status).toBe('SUCCEEDED');
    expect(platformCalls(h, 'POST', '/gdpr/export')).toHaveLength(1);
    expect(platformCalls(h, 'DELETE', '/sso/v1/user/')).toHaveLength(1);
    const after = await h.workflow.ledger.require(request.request_id);
    expect(after.archive).toEqual(before.archive);
    expect(after.completed_at).toBe(before.completed_at);
  });

  it('resumes a request interrupted after its archive without a second export', async () => {
    const h = await start();
    const request = requestFor('u-bruno', { type: 'erasure' });
    await submit(h, request);
    // Rewind the ledger to "archived, not yet erased", as if the execution had died there.
    await h.workflow.ledger.update(
      request.request_id,
      { status: 'running', outcome: null, erasure: null, erasure_verification: null, completed_at: null },
      ['completed'],
    );

    const rerun = await h.workflow.machine.run(
      { request_id: request.request_id, type: 'erasure', regulation: 'gdpr' },
      { executionName: `${request.request_id}-resume` },
    );

    expect(rerun.status).toBe('SUCCEEDED');
    expect(platformCalls(h, 'POST', '/gdpr/export')).toHaveLength(1);
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'erased',
    });
  });
});

describe('no identifiers, tokens or links leave the ledger', () => {
  it('keeps them out of logs, execution state and error messages in a faulty run', async () => {
    const h = await start({
      faults: {
        seed: 5,
        error_rate: 0.3,
        errors: ['500', '429', 'reset'],
        retry_after_seconds: 1,
        export_outcomes: ['failed'],
      },
    });
    const requests = [
      requestFor('u-alice', { type: 'erasure' }),
      requestFor('u-bruno'),
      requestFor('u-nobody'),
    ];
    const notAllowed = await startHarness({ env: { DOWNLOAD_INSECURE_HOSTS: '127.0.0.1:9' } });
    try {
      const results = [
        ...(await submit(h, ...requests)).values(),
        ...(await submit(notAllowed, requestFor('u-alice'))).values(),
      ];
      const users = emulatorControl(h.emulator).users();
      const secrets = [
        TEST_SSO_TOKEN,
        TEST_EXPORT_TOKEN,
        'u-alice',
        'u-bruno',
        'u-nobody',
        ...users.map((user) => String(user.svc_user_id)),
        'u_sample_alice',
        '_downloads',
        h.emulator.url,
        notAllowed.emulator.url,
      ];
      const ledgerErrors = await Promise.all(
        requests.map(
          async (request) => (await h.workflow.ledger.require(request.request_id)).error?.message ?? '',
        ),
      );
      const haystacks = {
        logs: [...h.logs, ...notAllowed.logs].join('\n'),
        events: JSON.stringify(results.map((result) => result.events)),
        errors: JSON.stringify(results.map((result) => [result.error, result.cause])),
        ledgerErrors: ledgerErrors.join('\n'),
      };
      expect(haystacks.logs.length).toBeGreaterThan(1000);
      expect(haystacks.events).toContain('TaskStateEntered'.slice(0, 4));
      for (const [where, text] of Object.entries(haystacks)) {
        for (const secret of secrets) {
          expect({ where, leaked: text.includes(secret) ? secret : null }).toEqual({ where, leaked: null });
        }
      }
    } finally {
      await notAllowed.close();
    }
  });
});

describe('stored objects', () => {
  it('keeps archives under keys built from the request id', async () => {
    const h = await start();
    const request = requestFor('u-chloe');
    await submit(h, request);
    const item = await h.workflow.ledger.require(request.request_id);
    const head = await h.workflow.s3.send(
      new HeadObjectCommand({ Bucket: LOCAL_NAMES.archiveBucket, Key: item.archive?.key }),
    );
    expect(head.ContentLength).toBe(item.archive?.bytes);
    expect(item.archive?.key).toBe(`exports/${request.request_id}/attempt-1.zip`);
  });
});
