/**
 * Runs the product as its users do, with every AWS call recorded: local mode with the real intake,
 * state machine and steps, the operator CLI as separate processes against it, and the deadline
 * sweep with its retention pass. The scenarios cover every path that reaches AWS: an access request, an erasure, a
 * correction, an unknown subject, an invalid message, a failed export retried by the operator, a request left
 * without an execution and resumed by the reconciler (one whose execution was stopped, one whose
 * execution never started), a cancel, an extension, a request denied at
 * intake (its identity not verified), a failed one denied by the operator, and the read commands
 * (status, list, report, verify, package), a notice to the subject, and the API's routes as a
 * signed-in person calls them (submit, list, open, timeline, hand-out, cancel).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SFNClient, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { startLocalMode } from '#local/local-mode';
import { readLocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { sweepDeadlines } from '../../../lambdas/deadline-sweep/deadline-sweep.ts';
import { intakeMessage } from '../../../lambdas/intake/intake.ts';
import { writeDailyManifests } from '../../../lambdas/shared/audit-manifest.ts';
import {
  CALLERS,
  type RecordedCall,
  runAsCaller,
  setCallSink,
} from '../../../lambdas/shared/call-recorder.ts';
import { Ledger } from '../../../lambdas/shared/ledger/index.ts';
import { prepareSdkClient } from '../../../lambdas/shared/sdk-clients.ts';
import { runCli } from '../../../test/helpers/cli.ts';
import { LOCAL_SIGN_IN_PATH } from '../../runtime/api-endpoint.ts';
import { reconcileUntilActedOn } from '../helpers/reconcile.ts';

const DAY_MS = 24 * 3600 * 1000;

/** A valid request, received an hour ago and verified a minute ago. */
export const request = (requestId: string, type: 'access' | 'erasure', primaryKey: string) => ({
  request_id: requestId,
  type,
  regulation: 'gdpr',
  primary_key: primaryKey,
  received_at: new Date(Date.now() - 3_600_000).toISOString(),
  verification: {
    method: 'email_link',
    verified_by: 'privacy-team',
    verified_at: new Date(Date.now() - 60_000).toISOString(),
  },
});

const ids = {
  failing: '0b7f6d0e-0000-4000-8000-000000000001',
  access: '0b7f6d0e-0000-4000-8000-000000000002',
  erasure: '0b7f6d0e-0000-4000-8000-000000000003',
  unknown: '0b7f6d0e-0000-4000-8000-000000000004',
  correction: '0b7f6d0e-0000-4000-8000-00000000000c',
  cancelled: '0b7f6d0e-0000-4000-8000-000000000005',
  extended: '0b7f6d0e-0000-4000-8000-000000000006',
  stranded: '0b7f6d0e-0000-4000-8000-000000000008',
  denied: '0b7f6d0e-0000-4000-8000-000000000009',
  unverified: '0b7f6d0e-0000-4000-8000-00000000000a',
  strandedForGood: '0b7f6d0e-0000-4000-8000-00000000000b',
  neverStarted: '0b7f6d0e-0000-4000-8000-00000000000d',
  viaApi: '0b7f6d0e-0000-4000-8000-00000000000e',
} as const;

/** Runs the scenarios in `dataDir` and returns every call made, in this process and in the CLI's. */
export async function observeCalls(dataDir: string): Promise<RecordedCall[]> {
  const calls: RecordedCall[] = [];
  const previous = setCallSink((call) => calls.push(call));
  const cliCalls = join(dataDir, 'cli-calls.jsonl');
  const cli = async (...args: string[]) => {
    const result = await runCli([...args, '--data-dir', dataDir], {
      env: { SVC_DSR_RECORD_CALLS: cliCalls },
    });
    if (result.code !== 0) throw new Error(`svc-dsr ${args[0]} exited ${result.code}: ${result.stderr}`);
    return result.stdout;
  };
  /** `svc-dsr submit` of one request, received an hour ago and verified a minute ago. */
  const submitByCli = (requestId: string, type: string, regulation: string, primaryKey: string) =>
    cli(
      'submit',
      '--request-id',
      requestId,
      '--type',
      type,
      '--regulation',
      regulation,
      '--primary-key',
      primaryKey,
      '--received-at',
      new Date(Date.now() - 3_600_000).toISOString(),
      '--verification-method',
      'email_link',
      '--verified-by',
      'privacy-team',
      '--verified-at',
      new Date(Date.now() - 60_000).toISOString(),
    );
  const mode = await startLocalMode({
    dataDir,
    // The first two exports fail, so the first two requests fail for good (one attempt each): one
    // is retried, the other denied.
    faults: { export_outcomes: ['failed', 'failed'], export_ready_after_polls: 1 },
    // Long enough that the cancel and the extension land while their requests wait for the export,
    // even when each CLI process takes seconds to start on a busy machine.
    waitMs: 10_000,
    env: { EXPORT_MAX_ATTEMPTS: '1' },
  });
  let stop = async () => {};
  try {
    await runAsCaller('CLI', () =>
      mode.submit([
        JSON.stringify(request(ids.failing, 'access', 'u-alice')),
        JSON.stringify(request(ids.denied, 'access', 'u-bruno')),
      ]),
    );
    await mode.idle();
    await runAsCaller('CLI', () =>
      mode.submit([
        JSON.stringify(request(ids.access, 'access', 'u-alice')),
        JSON.stringify(request(ids.unknown, 'access', 'u-nobody-here')),
        JSON.stringify({
          ...request(ids.correction, 'access', 'u-alice'),
          type: 'correction',
          verification: {
            ...request(ids.correction, 'access', 'u-alice').verification,
            method: 'account_login',
          },
          corrections: { display_name: 'Alice Corrected', location: 'Porto' },
        }),
        JSON.stringify({
          ...request(ids.unverified, 'erasure', 'u-fay'),
          verification: {
            method: 'none',
            verified_by: 'privacy-team',
            verified_at: new Date().toISOString(),
          },
        }),
        '{"request_id": "0b7f6d0e-0000-4000-8000-000000000007", "type": "access"}',
        'not json',
      ]),
    );
    await mode.idle();
    // From here on requests come from the CLI, through the queue, as in a serving local mode.
    stop = mode.pollContinuously(() => {});
    await cli('retry', ids.failing);
    // Open requests for the operator's cancel and extend, acted on while they wait for the export.
    await submitByCli(ids.cancelled, 'access', 'gdpr', 'u-bruno');
    await cli('cancel', ids.cancelled, '--reason', 'withdrawn by the subject');
    await submitByCli(ids.extended, 'erasure', 'ccpa', 'u-chloe');
    await cli('extend', ids.extended, '--reason', 'complex request', '--notice-channel', 'email');
    // A failed request is still owed an answer, so the operator can deny it.
    await cli('deny', ids.denied, '--reason-code', 'identity_not_verified', '--reason', 'ID check failed');
    await submitByCli(ids.erasure, 'erasure', 'gdpr', 'u-dan');
    // An open request an execution is running: the operator function looks it up and refuses.
    const running = await runCli(['retry', ids.erasure, '--data-dir', dataDir], {
      env: { SVC_DSR_RECORD_CALLS: cliCalls },
    });
    if (running.code !== 1)
      throw new Error(`retry of a running request exited ${running.code}: ${running.stderr}`);
    await waitFor(async () => (await cli('status', ids.erasure, '--json')).includes('"completed"'));
    await waitFor(async () => (await cli('status', ids.failing, '--json')).includes('"completed"'));
    await waitFor(async () => (await cli('status', ids.extended, '--json')).includes('"completed"'));

    // A request left running with its execution gone (a crash, a timeout): the reconciler resumes it.
    const strand = async (requestId: string, regulation = 'gdpr') => {
      await submitByCli(requestId, 'access', regulation, 'u-alice');
      await waitFor(
        async () =>
          (await runAsCaller(CALLERS.localRuntime, () => mode.workflow.ledger.get(requestId)))?.step ===
          'exporting',
        60_000,
        25,
      );
      const sfn = new SFNClient({
        region: mode.aws.region,
        endpoint: mode.shim.endpoint,
        credentials: mode.aws.credentials,
      });
      await runAsCaller(CALLERS.localRuntime, () =>
        sfn.send(
          new StopExecutionCommand({
            executionArn: `${mode.shim.stateMachineArn.replace(':stateMachine:', ':execution:')}:${requestId}`,
          }),
        ),
      );
      sfn.destroy();
    };
    await strand(ids.stranded);
    await reconcileUntilActedOn(mode, ids.stranded);
    await waitFor(async () => (await cli('status', ids.stranded, '--json')).includes('"completed"'));
    // One resumed too often already: the reconciler records it failed and closes its chain.
    // A CCPA request: the sweep run as if weeks later finds its receipt confirmation overdue.
    await strand(ids.strandedForGood, 'ccpa');
    await reconcileUntilActedOn(mode, ids.strandedForGood, { maxResumes: 0 });
    await waitFor(async () => (await cli('status', ids.strandedForGood, '--json')).includes('"failed"'));
    // One whose intake stopped between the ledger write and StartExecution, its message gone: no
    // listing names its execution, so the reconciler describes it, finds none, and starts it.
    await runAsCaller('Intake', () =>
      intakeMessage(JSON.stringify(request(ids.neverStarted, 'access', 'u-alice')), {
        ledger: mode.workflow.ledger,
        audit: mode.workflow.audit,
        quarantine: async () => {
          throw new Error('nothing of this message is quarantined');
        },
        startExecution: async () => {
          throw Object.assign(new Error('connection reset'), { code: 'ECONNRESET' });
        },
        logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
      }).catch(() => undefined),
    );
    await reconcileUntilActedOn(mode, ids.neverStarted);
    await waitFor(async () => (await cli('status', ids.neverStarted, '--json')).includes('"completed"'));
    await cli('status', ids.access);
    await cli('notice', ids.access, '--kind', 'response', '--channel', 'email');
    await cli('list', '--status', 'completed');
    await cli('list', '--overdue');
    await cli('list', '--receipt-due');
    await cli('report', '--format', 'json');
    await cli('verify', ids.access);
    await cli('package', ids.access, '--out', join(dataDir, 'package.zip'));
    await cli('package', ids.access);
    // The API function, as the console and other systems reach it: a person signed in with a
    // one-time code, a request submitted, listed, opened, its timeline, a hand-out, a cancel.
    const apiCall = async (method: string, path: string, token?: string, body?: unknown) => {
      const answer = await fetch(`${mode.api.url}${path}`, {
        method,
        headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await answer.text();
      if (!answer.ok) throw new Error(`API ${method} ${path} answered ${answer.status}: ${text}`);
      return JSON.parse(text) as Record<string, unknown>;
    };
    const { token } = await apiCall('POST', LOCAL_SIGN_IN_PATH, undefined, {
      code: mode.api.signInCode('privacy-team'),
      username: 'jane',
    });
    const bearer = String(token);
    await apiCall('POST', '/requests', bearer, request(ids.viaApi, 'access', 'u-bruno'));
    await waitFor(async () => (await cli('status', ids.viaApi, '--json')).includes('"running"'));
    await apiCall('GET', '/requests?status=received,running,failed', bearer);
    await apiCall('GET', `/requests/${ids.access}`, bearer);
    await apiCall('GET', `/requests/${ids.access}/timeline`, bearer);
    await apiCall('GET', `/requests/${ids.access}/verify`, bearer);
    await apiCall('GET', '/report', bearer);
    await apiCall('GET', '/manifests', bearer);
    await apiCall('POST', `/requests/${ids.access}/package`, bearer, { expires_in: 600 });
    await apiCall('POST', `/requests/${ids.viaApi}/cancel`, bearer, { reason: 'withdrawn by the subject' });

    const endpoints = await readLocalEndpoints(dataDir);
    const dynamo = prepareSdkClient(
      new DynamoDBClient({
        region: endpoints.region,
        credentials: endpoints.credentials,
        endpoint: endpoints.endpoints.dynamodb,
      }),
    );
    const s3 = prepareSdkClient(
      new S3Client({
        region: endpoints.region,
        credentials: endpoints.credentials,
        endpoint: endpoints.endpoints.s3,
        forcePathStyle: true,
      }),
    );
    const sweepLedger = new Ledger(dynamo, endpoints.outputs.LedgerTableName);
    for (const days of [0, 20]) {
      // Twenty days on, the open CCPA request's receipt confirmation is late: the sweep reads it in full.
      await runAsCaller('DeadlineSweep', () =>
        sweepDeadlines(
          { ledger: sweepLedger, clock: () => new Date(Date.now() + days * 24 * 3600 * 1000) },
          { dueSoonDays: 7 },
        ),
      );
    }
    // The sweep's daily manifest, run as if tomorrow, so today's chains are locked; then the
    // operator's full verification reads it, every chain and the versions of the audit bucket.
    // The next day's run reads the last manifest to chain the next one to it.
    for (const days of [1, 2]) {
      await runAsCaller('DeadlineSweep', () =>
        writeDailyManifests({
          s3,
          bucket: endpoints.outputs.AuditBucketName,
          clock: () => new Date(Date.now() + days * DAY_MS),
        }),
      );
    }
    // The retention pass, run as if 800 days later, so every ended request is past its 730 days;
    // then the operator's reads still work on the minimised items.
    const hmacKey = (await readFile(join(dataDir, 'audit-hmac-key'), 'utf8')).trim();
    const later = new Ledger(
      dynamo,
      endpoints.outputs.LedgerTableName,
      () => new Date(Date.now() + 800 * DAY_MS),
    );
    await runAsCaller('DeadlineSweep', () =>
      later.minimiseDue({ hmacKey: async () => hmacKey, afterDays: 730 }),
    );
    await cli('verify', '--all');
    await cli('verify', ids.access);
    await cli('report', '--format', 'json');
    dynamo.destroy();
    s3.destroy();
  } finally {
    await stop();
    await mode.close();
    setCallSink(previous);
  }
  const fromCli = (await readFile(cliCalls, 'utf8'))
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as RecordedCall);
  return [...calls, ...fromCli];
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 60_000, everyMs = 100): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
  throw new Error('timed out waiting for a request to reach the state the scenario needs');
}
