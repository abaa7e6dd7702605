/**
 * A local world for the evidence tests: a dynalite ledger, local mode's disk S3 for the audit and
 * archive buckets, and the real writers (intake, RecordFailure, RecordOutcome, the operator
 * commands), all on one simulated clock: the tests fake `Date` only (no timers), so every writer
 * and the disk S3 read the same time, and a test moves it on with {@link EvidenceWorld.advance}.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import {
  DescribeExecutionCommand,
  SFNClient,
  StartExecutionCommand,
  StopExecutionCommand,
} from '@aws-sdk/client-sfn';
import { mockClient } from 'aws-sdk-client-mock';
import { vi } from 'vitest';
import { runCancel } from '../../../../bin/cli/commands/cancel.ts';
import { runDeny } from '../../../../bin/cli/commands/deny.ts';
import { runExtend } from '../../../../bin/cli/commands/extend.ts';
import { runNotice } from '../../../../bin/cli/commands/notice.ts';
import { runRetry } from '../../../../bin/cli/commands/retry.ts';
import { runVerifyAll } from '../../../../bin/cli/commands/verify.ts';
import { collectingIo } from '../../../../bin/cli/format.ts';
import { intakeMessage } from '../../../../lambdas/intake/intake.ts';
import { recordFailure } from '../../../../lambdas/record-failure/record-failure.ts';
import { recordOutcome } from '../../../../lambdas/record-outcome/record-outcome.ts';
import { AuditTrail } from '../../../../lambdas/shared/audit.ts';
import { writeDailyManifests } from '../../../../lambdas/shared/audit-manifest.ts';
import { Ledger } from '../../../../lambdas/shared/ledger/index.ts';
import { createLedgerTable } from '../../../../lambdas/shared/ledger/table.ts';
import type { StepDeps } from '../../../../lambdas/shared/step-deps.ts';
import { testContext } from '../../../../test/unit/cli/helpers.ts';
import { startDiskS3 } from '../../../aws/s3-disk.ts';
import { startDynamo } from '../../helpers/dynamo.ts';

export const HMAC_KEY = 'evidence-hmac-key-0123456789abcdef0123';
const HOUR_MS = 3600 * 1000;

/** What each test sees of the world. */
export type EvidenceWorld = Awaited<ReturnType<typeof startEvidenceWorld>>;

/** A step the workflow never reaches in these tests: it fails loudly if it is. */
const unused = async (): Promise<never> => {
  throw new Error('not part of the evidence tests');
};

/** Starts the world at `start` (faking Date from then on). Close it with `close()`. */
export async function startEvidenceWorld(start: Date) {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(start);
  const dynamo = await startDynamo();
  const root = await mkdtemp(join(tmpdir(), 'evidence-'));
  const disk = await startDiskS3({ root });
  const s3 = new S3Client({
    endpoint: disk.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  const names = { LedgerTableName: 'ledger', AuditBucketName: 'audit', ArchiveBucketName: 'archives' };
  await createLedgerTable(dynamo.client, names.LedgerTableName);
  for (const bucket of [names.AuditBucketName, names.ArchiveBucketName])
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  const ledger = new Ledger(dynamo.client, names.LedgerTableName);
  const trail = new AuditTrail(
    { s3, bucket: names.AuditBucketName },
    { hmacKey: () => HMAC_KEY, heads: ledger },
  );
  const context = testContext({ dynamoClient: dynamo.client, s3, names }, () => new Date());
  // Step Functions answers as for executions that ended: a retry starts one, cancel and deny stop them.
  const sfn = mockClient(SFNClient);
  sfn.on(StartExecutionCommand).resolves({ executionArn: 'arn:aws:states:::execution:dsr:run' });
  sfn.on(DescribeExecutionCommand).resolves({ status: 'FAILED' });
  sfn.on(StopExecutionCommand).resolves({});
  const logger = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };
  const stepDeps: StepDeps = {
    ledger,
    audit: trail,
    platform: {
      retrieveUser: unused,
      updateUser: unused,
      deleteUser: unused,
      startExport: unused,
      exportStatus: unused,
      userActivity: unused,
    },
    gate: {
      admit: unused,
      report: unused,
      acquireExport: unused,
      releaseExport: async () => {},
      exportRefused: unused,
      exportStarted: unused,
    },
    archive: {
      copy: unused,
      verify: unused,
      verifyContinued: unused,
      abandonUpload: unused,
      remove: unused,
      read: unused,
      storePackage: unused,
    },
    schedule: { initialSeconds: 30, maxSeconds: 120, budgetSeconds: 600, growthPercent: 100 },
    exportMaxAttempts: 2,
    retryAfterCapSeconds: 5,
    clock: () => new Date(),
    sleep: async () => {},
    logger,
  };
  const io = () => collectingIo();

  return {
    names,
    ledger,
    trail,
    context,
    s3,
    dynamo,
    root,
    /** Moves the simulated time on. */
    advance(ms: number): void {
      vi.setSystemTime(new Date(Date.now() + ms));
    },
    /** A request through intake, received an hour ago; answers its id and intake's verdict. */
    async submit(
      options: { regulation?: 'gdpr' | 'ccpa'; type?: 'access' | 'erasure'; method?: string } = {},
    ): Promise<{ requestId: string; kind: string }> {
      const requestId = randomUUID();
      const receivedAt = new Date(Date.now() - HOUR_MS).toISOString();
      const body = JSON.stringify({
        request_id: requestId,
        type: options.type ?? 'access',
        regulation: options.regulation ?? 'ccpa',
        primary_key: `site-user-${requestId.slice(0, 8)}`,
        received_at: receivedAt,
        verification: {
          method: options.method ?? 'email_link',
          verified_by: 'privacy',
          verified_at: receivedAt,
        },
      });
      const result = await intakeMessage(body, {
        ledger,
        audit: trail,
        quarantine: async () => {},
        startExecution: async () => 'started',
        logger,
      });
      return { requestId, kind: result.kind };
    },
    /** The workflow fails the request, as RecordFailure does. */
    async fail(requestId: string): Promise<void> {
      await recordFailure(
        {
          request_id: requestId,
          error: { Error: 'ExportFailedError', Cause: 'the platform failed the export' },
        },
        stepDeps,
      );
    },
    /** The workflow answers the request (the platform holds no data), as RecordOutcome does. */
    async complete(requestId: string): Promise<void> {
      await ledger.update(requestId, { status: 'running', step: 'resolving' }, ['received', 'running']);
      await recordOutcome({ request_id: requestId, outcome: 'no_data' }, stepDeps);
    },
    extend: (requestId: string) =>
      runExtend(
        context,
        { requestId, reason: 'several accounts to search', notice: { channel: 'email' } },
        io(),
      ),
    retry: (requestId: string) => runRetry(context, { requestId }, io()),
    cancel: (requestId: string) =>
      runCancel(context, { requestId, reason: 'withdrawn by the subject' }, io()),
    deny: (requestId: string) =>
      runDeny(context, { requestId, reasonCode: 'exempt', reason: 'an exemption applies' }, io()),
    notice: (requestId: string, kind: string) =>
      runNotice(context, { requestId, kind, channel: 'email' }, io()),
    /** The sweep's manifest runs: every whole day not written yet (one run catches up 31 days at most). */
    async manifests(): Promise<string[]> {
      const days: string[] = [];
      for (;;) {
        const written = await writeDailyManifests({
          s3,
          bucket: names.AuditBucketName,
          clock: () => new Date(),
        });
        if (written.length === 0) return days;
        days.push(...written);
      }
    },
    /** `svc-dsr verify --all`. */
    verifyAll: async () => {
      const out = collectingIo();
      const { exitCode, result } = await runVerifyAll(context, {}, out);
      return { exitCode, result, output: out.stdout() };
    },
    async close(): Promise<void> {
      sfn.restore();
      s3.destroy();
      await disk.close();
      await dynamo.close();
      await rm(root, { recursive: true, force: true });
      vi.useRealTimers();
    },
  };
}
