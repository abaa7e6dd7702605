import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cp, mkdtemp, readdir, readFile, rename, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteItemCommand } from '@aws-sdk/client-dynamodb';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  ListObjectVersionsCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  PutObjectLockConfigurationCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { VerifyAllCheck } from '#shared/evidence/chains';
import { runVerify, runVerifyAll } from '../../../../bin/cli/commands/verify.ts';
import { collectingIo } from '../../../../bin/cli/format.ts';
import {
  type AuditRecord,
  AuditTrail,
  auditRecordKey,
  recordHash,
} from '../../../../lambdas/shared/audit.ts';
import { computeDeadlines } from '../../../../lambdas/shared/deadlines.ts';
import { Ledger } from '../../../../lambdas/shared/ledger/index.ts';
import { createLedgerTable } from '../../../../lambdas/shared/ledger/table.ts';
import { testContext } from '../../../../test/unit/cli/helpers.ts';
import { type DiskS3, startDiskS3 } from '../../../aws/s3-disk.ts';
import { startDynamo } from '../../helpers/dynamo.ts';

/**
 * The tamperings of one day, before that day's manifest locks it, done to a local data dir as a
 * person with access to its disk (or to its S3 API) would do them. In AWS, versioning, Object
 * Lock and the time S3 stores each object at catch them; the disk S3 keeps versions and its own
 * times as S3 does, so `svc-dsr verify` and `verify --all` must catch each one locally too. The
 * audit bucket is made as local mode makes it: versioned, with COMPLIANCE retention by default.
 */
const HMAC_KEY = 'same-day-hmac-key-0123456789abcdef0123';
const WRITTEN = new Date('2026-11-20T10:00:00.000Z');
/** The tamper comes two minutes later: within the 5 minutes record_time allows. */
const TAMPERED = new Date('2026-11-20T10:02:00.000Z');
const CHECKED = new Date('2026-11-20T10:03:00.000Z');
const HOUR_MS = 3600 * 1000;

/** The stand-in's clock, the time each object is stored at; each writer's clock moves it when read. */
let simulatedNow = WRITTEN;
function clockAt(date: Date): () => Date {
  return () => {
    simulatedNow = date;
    return date;
  };
}

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let disk: DiskS3;
let root: string;
let s3: S3Client;
let worlds = 0;

beforeAll(async () => {
  dynamo = await startDynamo();
  root = await mkdtemp(join(tmpdir(), 'verify-same-day-'));
  disk = await startDiskS3({ root, clock: () => simulatedNow });
  s3 = new S3Client({
    endpoint: disk.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    maxAttempts: 1,
  });
});
afterAll(async () => {
  s3.destroy();
  await disk.close();
  await dynamo.close();
  await rm(root, { recursive: true, force: true });
});

/** A ledger and an audit bucket as local mode makes them, holding two requests completed at WRITTEN. */
async function world() {
  worlds += 1;
  simulatedNow = WRITTEN;
  const names = {
    LedgerTableName: `same-day-${worlds}`,
    AuditBucketName: `same-day-audit-${worlds}`,
    ArchiveBucketName: `same-day-archive-${worlds}`,
  };
  await createLedgerTable(dynamo.client, names.LedgerTableName);
  for (const bucket of [names.AuditBucketName, names.ArchiveBucketName]) {
    const audit = bucket === names.AuditBucketName;
    await s3.send(
      new CreateBucketCommand({ Bucket: bucket, ...(audit ? { ObjectLockEnabledForBucket: true } : {}) }),
    );
    await s3.send(
      new PutBucketVersioningCommand({ Bucket: bucket, VersioningConfiguration: { Status: 'Enabled' } }),
    );
  }
  await s3.send(
    new PutObjectLockConfigurationCommand({
      Bucket: names.AuditBucketName,
      ObjectLockConfiguration: {
        ObjectLockEnabled: 'Enabled',
        Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 731 } },
      },
    }),
  );
  const ledger = new Ledger(dynamo.client, names.LedgerTableName, () => WRITTEN);
  const trailAt = (date: Date) =>
    new AuditTrail(
      { s3, bucket: names.AuditBucketName },
      { hmacKey: () => HMAC_KEY, clock: clockAt(date), heads: ledger },
    );
  const trail = trailAt(WRITTEN);
  const requests = [await completedRequest(ledger, trail), await completedRequest(ledger, trail)];
  simulatedNow = TAMPERED;
  const context = testContext({ dynamoClient: dynamo.client, s3, names }, () => CHECKED);
  return { names, ledger, trailAt, requests, context };
}

async function completedRequest(ledger: Ledger, trail: AuditTrail, receivedAt = '2026-11-19T09:00:00Z') {
  const requestId = randomUUID();
  const request = {
    request_id: requestId,
    type: 'access' as const,
    regulation: 'gdpr' as const,
    primary_key: 'site-user-1',
    received_at: receivedAt,
    verification: { method: 'email_link', verified_by: 'privacy', verified_at: receivedAt },
  };
  await ledger.createReceived(request, 'fp', computeDeadlines('gdpr', new Date(request.received_at)));
  await trail.append(requestId, { eventId: 'Intake', step: 'Intake', action: 'request_received', facts: {} });
  await ledger.update(requestId, { status: 'running', step: 'resolving' }, ['received']);
  for (const step of ['ResolveSubject', 'StartExport', 'CheckExport']) {
    await trail.append(requestId, { eventId: step, step, action: 'step_done', facts: {} });
  }
  await ledger.update(requestId, { status: 'completed', outcome: 'no_data', step: null }, ['running']);
  await trail.append(requestId, {
    eventId: 'RecordOutcome',
    step: 'RecordOutcome',
    action: 'request_completed',
    facts: { outcome: 'no_data' },
    final: true,
  });
  return requestId;
}

/** The plain file of a record in the data dir: what a person with the disk sees and edits. */
function recordFile(bucket: string, requestId: string, seq: number): string {
  return join(root, bucket, ...auditRecordKey(requestId, seq).split('/'));
}

async function readRecordFile(bucket: string, requestId: string, seq: number): Promise<AuditRecord> {
  return JSON.parse(await readFile(recordFile(bucket, requestId, seq), 'utf8')) as AuditRecord;
}

/** The final record moved a minute on and hashed again, as a forger who keeps the chain whole would. */
function retimedFinal(record: AuditRecord): AuditRecord {
  const { hash: _old, ...rest } = record;
  const moved = { ...rest, at: new Date(Date.parse(record.at) + 60_000).toISOString() };
  return { ...moved, hash: recordHash(moved) };
}

/** Rewrites the ledger's head of the request's chain, as someone with write access to the table can. */
async function rewriteHead(table: string, requestId: string, head: string, count: number): Promise<void> {
  await dynamo.doc.send(
    new UpdateCommand({
      TableName: table,
      Key: { request_id: requestId },
      UpdateExpression: 'SET audit_head = :head, audit_count = :count',
      ExpressionAttributeValues: { ':head': head, ':count': count },
    }),
  );
}

async function deleteLedgerItem(table: string, requestId: string): Promise<void> {
  await dynamo.client.send(
    new DeleteItemCommand({ TableName: table, Key: { request_id: { S: requestId } } }),
  );
}

/** `svc-dsr verify <request_id>`: its exit code and the checks it failed. */
async function verifyOne(context: ReturnType<typeof testContext>, requestId: string) {
  const io = collectingIo();
  const { exitCode, result } = await runVerify(context, { requestId }, io);
  const checks = [
    ...result.findings.map((finding) => finding.check),
    ...result.side_chains.flatMap((side) => side.findings.map((finding) => finding.check)),
    ...(result.audit.ok ? [] : ['chain_broken' as const]),
  ];
  return { exitCode, checks: [...new Set(checks)].sort(), findings: result.findings, output: io.stdout() };
}

/** `svc-dsr verify --all`: its exit code, the checks it failed, and its findings. */
async function verifyAll(context: ReturnType<typeof testContext>) {
  const io = collectingIo();
  const { exitCode, result } = await runVerifyAll(context, {}, io);
  return {
    exitCode,
    checks: [...new Set(result.findings.map((finding) => finding.check))].sort() as VerifyAllCheck[],
    findings: result.findings,
    output: io.stdout(),
  };
}

describe('same-day tampering of a local data dir', () => {
  it('finds nothing when nothing was touched', async () => {
    // Prepare
    const { requests, context } = await world();

    // Act
    const all = await verifyAll(context);
    const one = await verifyOne(context, requests[0] ?? '');

    // Assess
    expect(all.findings).toEqual([]);
    expect(all.exitCode).toBe(0);
    expect(one.exitCode).toBe(0);
  });

  it('catches the final record rewritten through S3 within 5 minutes, with the ledger head to match: multiple_versions', async () => {
    // Prepare
    const { names, requests, context } = await world();
    const requestId = requests[0] ?? '';
    const forged = retimedFinal(await readRecordFile(names.AuditBucketName, requestId, 4));
    await s3.send(
      new PutObjectCommand({
        Bucket: names.AuditBucketName,
        Key: auditRecordKey(requestId, 4),
        Body: JSON.stringify(forged),
      }),
    );
    await rewriteHead(names.LedgerTableName, requestId, forged.hash, 5);

    // Act
    const one = await verifyOne(context, requestId);
    const all = await verifyAll(context);

    // Assess
    expect(one).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(one.output).toContain(
      `audit    FAILED multiple_versions: ${auditRecordKey(requestId, 4)} has 2 versions`,
    );
    expect(all.exitCode).toBe(1);
    expect(all.findings).toEqual([
      {
        request_id: requestId,
        check: 'multiple_versions',
        detail: expect.stringContaining(`${auditRecordKey(requestId, 4)} has 2 versions`),
      },
    ]);
  });

  it('catches the final record replaced on disk by a new file, with the ledger head to match: multiple_versions', async () => {
    // Prepare: as an editor saves, a new file renamed over the record.
    const { names, requests, context } = await world();
    const requestId = requests[0] ?? '';
    const path = recordFile(names.AuditBucketName, requestId, 4);
    const forged = retimedFinal(await readRecordFile(names.AuditBucketName, requestId, 4));
    await writeFile(`${path}.new`, JSON.stringify(forged));
    await rename(`${path}.new`, path);
    await rewriteHead(names.LedgerTableName, requestId, forged.hash, 5);

    // Act
    const one = await verifyOne(context, requestId);
    const all = await verifyAll(context);

    // Assess
    expect(one).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all.findings.map((finding) => finding.request_id)).toEqual([requestId]);
  });

  it('catches the final record edited in place with its size and mtime put back (touch -r): multiple_versions', async () => {
    // Prepare
    const { names, requests, context } = await world();
    const requestId = requests[1] ?? '';
    const path = recordFile(names.AuditBucketName, requestId, 4);
    const original = await readFile(path, 'utf8');
    const record = JSON.parse(original) as AuditRecord;
    const retimed = retimedFinal(record);
    // The same bytes but for the time and the hash, which are as long as before: the size is kept.
    const forged = original.replace(record.at, retimed.at).replace(record.hash, retimed.hash);
    const reference = join(root, `reference-${worlds}`);
    execFileSync('touch', ['-r', path, reference]);
    await writeFile(path, forged);
    execFileSync('touch', ['-r', reference, path]);
    await rewriteHead(names.LedgerTableName, requestId, retimed.hash, 5);

    // Act
    const one = await verifyOne(context, requestId);
    const all = await verifyAll(context);

    // Assess
    expect(forged.length).toBe(original.length);
    expect(JSON.parse(forged)).toEqual(retimed);
    expect(one).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
  });

  it('catches a chain truncated through S3 and reopened with other records, the ledger following: multiple_versions', async () => {
    // Prepare: the last two records deleted, the ledger's head put back to record 2, then two
    // other records appended by the product's own writer, which moves the ledger head on.
    const { names, ledger, trailAt, requests, context } = await world();
    const requestId = requests[0] ?? '';
    for (const seq of [3, 4]) {
      await s3.send(
        new DeleteObjectCommand({ Bucket: names.AuditBucketName, Key: auditRecordKey(requestId, seq) }),
      );
    }
    const kept = await readRecordFile(names.AuditBucketName, requestId, 2);
    await rewriteHead(names.LedgerTableName, requestId, kept.hash, 3);
    await reopen(trailAt(TAMPERED), requestId);

    // Act
    const one = await verifyOne(context, requestId);
    const all = await verifyAll(context);

    // Assess
    expect((await ledger.require(requestId)).audit_count).toBe(5);
    expect(one).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all.findings.map((finding) => finding.detail)).toEqual([
      expect.stringContaining(`${auditRecordKey(requestId, 3)} has 3 versions`),
      expect.stringContaining(`${auditRecordKey(requestId, 4)} has 3 versions`),
    ]);
  });

  it('catches a chain truncated on disk and reopened with other records, the ledger following: multiple_versions', async () => {
    // Prepare
    const { names, trailAt, requests, context } = await world();
    const requestId = requests[1] ?? '';
    for (const seq of [3, 4]) await rm(recordFile(names.AuditBucketName, requestId, seq));
    const kept = await readRecordFile(names.AuditBucketName, requestId, 2);
    await rewriteHead(names.LedgerTableName, requestId, kept.hash, 3);
    await reopen(trailAt(TAMPERED), requestId);

    // Act
    const one = await verifyOne(context, requestId);
    const all = await verifyAll(context);

    // Assess
    expect(one).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all.findings).toHaveLength(2);
  });

  it('catches a chain deleted through S3 with its ledger item, and keeps the locked versions: multiple_versions', async () => {
    // Prepare
    const { names, requests, context } = await world();
    const requestId = requests[0] ?? '';
    for (const seq of [0, 1, 2, 3, 4]) {
      await s3.send(
        new DeleteObjectCommand({ Bucket: names.AuditBucketName, Key: auditRecordKey(requestId, seq) }),
      );
    }
    await deleteLedgerItem(names.LedgerTableName, requestId);
    // Deleting a version itself, by its id, is what Object Lock refuses.
    const listed = await s3.send(
      new ListObjectVersionsCommand({ Bucket: names.AuditBucketName, Prefix: auditRecordKey(requestId, 0) }),
    );
    const purge = await s3
      .send(
        new DeleteObjectCommand({
          Bucket: names.AuditBucketName,
          Key: auditRecordKey(requestId, 0),
          VersionId: listed.Versions?.[0]?.VersionId,
        }),
      )
      .then(
        () => 'deleted',
        (error: { name?: string }) => error.name,
      );

    // Act
    const all = await verifyAll(context);

    // Assess
    expect(purge).toBe('AccessDenied');
    expect(all).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all.findings).toHaveLength(5);
    expect(all.findings.every((finding) => finding.request_id === requestId)).toBe(true);
    expect(all.output).toContain('verification FAILED: 5 finding(s)');
  });

  it('catches a chain deleted on disk (its folder removed) with its ledger item: multiple_versions', async () => {
    // Prepare
    const { names, requests, context } = await world();
    const requestId = requests[1] ?? '';
    await rm(join(root, names.AuditBucketName, 'audit', requestId), { recursive: true });
    await deleteLedgerItem(names.LedgerTableName, requestId);

    // Act
    const all = await verifyAll(context);

    // Assess
    expect(all).toMatchObject({ exitCode: 1, checks: ['multiple_versions'] });
    expect(all.findings).toHaveLength(5);
    expect(all.findings.map((finding) => finding.request_id)).toEqual(Array(5).fill(requestId));
  });

  it('catches a fake request put on disk, its records given mtimes that match the times they claim: record_time', async () => {
    // Prepare: a ledger item and a chain made three hours back (in a scratch bucket), then the
    // chain's files copied into the audit bucket's folder with their mtimes set to their `at`.
    const { names, ledger, requests, context } = await world();
    const scratch = `${names.AuditBucketName}-scratch`;
    await s3.send(new CreateBucketCommand({ Bucket: scratch }));
    const back = new Date(WRITTEN.getTime() - 3 * HOUR_MS);
    const forger = new AuditTrail(
      { s3, bucket: scratch },
      { hmacKey: () => HMAC_KEY, clock: clockAt(back), heads: ledger },
    );
    const fake = await completedRequest(ledger, forger, '2026-11-20T06:00:00Z');
    simulatedNow = TAMPERED;
    const folder = join(root, names.AuditBucketName, 'audit', fake);
    await cp(join(root, scratch, 'audit', fake), folder, { recursive: true });
    for (const name of await readdir(folder)) {
      const record = JSON.parse(await readFile(join(folder, name), 'utf8')) as AuditRecord;
      await utimes(join(folder, name), new Date(record.at), new Date(record.at));
    }

    // Act
    const one = await verifyOne(context, fake);
    const all = await verifyAll(context);

    // Assess
    expect(one).toMatchObject({ exitCode: 1, checks: ['record_time'] });
    expect(one.output).toContain(`but S3 stored it at ${TAMPERED.toISOString()} (3 hours later)`);
    expect(all).toMatchObject({ exitCode: 1, checks: ['record_time'] });
    expect(all.findings).toHaveLength(5);
    expect(all.findings.every((finding) => finding.request_id === fake)).toBe(true);
    expect(requests).not.toContain(fake);
  });
});

/** Appends two other records after record 2, as a forger using the product's own writer would. */
async function reopen(trail: AuditTrail, requestId: string): Promise<void> {
  await trail.append(requestId, {
    eventId: 'CheckExport-again',
    step: 'CheckExport',
    action: 'step_done',
    facts: {},
  });
  await trail.append(requestId, {
    eventId: 'RecordOutcome-again',
    step: 'RecordOutcome',
    action: 'request_completed',
    facts: { outcome: 'no_data' },
    final: true,
  });
}
