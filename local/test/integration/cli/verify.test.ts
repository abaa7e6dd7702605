import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runVerify } from '../../../../bin/cli/commands/verify.ts';
import { collectingIo } from '../../../../bin/cli/format.ts';
import { AuditTrail, auditRecordKey } from '../../../../lambdas/shared/audit.ts';
import { ledgerRecord, storedItem, testContext } from '../../../../test/unit/cli/helpers.ts';
import { type DiskS3, startDiskS3 } from '../../../aws/s3-disk.ts';

/**
 * S3 is local mode's disk stand-in on loopback, so hashStoredObject and the audit chain read real
 * objects; the ledger is mocked. The stand-in stores each object at the simulated time, which the
 * writers' clocks set: a record is stored when it says it was written.
 */
/** The ledger reads through a plain DynamoDB client. */
const ledgerMock = mockClient(DynamoDBClient);
let simulatedNow = new Date('2026-11-20T10:00:00.000Z');
let disk: DiskS3;
let root: string;
let s3: S3Client;
const ZIP = Buffer.from('PK\u0003\u0004 archive bytes for verify');

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'verify-'));
  disk = await startDiskS3({ root, clock: () => simulatedNow });
  s3 = new S3Client({
    endpoint: disk.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  await s3.send(new CreateBucketCommand({ Bucket: 'archives' }));
  await s3.send(new CreateBucketCommand({ Bucket: 'audit' }));
});
afterAll(async () => {
  s3.destroy();
  await disk.close();
  await rm(root, { recursive: true, force: true });
});
beforeEach(() => {
  ledgerMock.reset();
});

let counter = 0;
const ZIP_SHA256 = createHash('sha256').update(ZIP).digest('hex');

/**
 * A completed request as the workflow leaves it: its ledger item, and the audit chain that locked
 * the same facts (its receipt, the archive and the subject package it verified, its end). `archive`
 * is what was recorded (null: none, a no_data answer); only the default is stored in the bucket.
 */
async function storedRequest(
  options: {
    subjectPackage?: Buffer;
    type?: 'access' | 'erasure';
    archive?: { key: string; bytes: number; sha256: string; verified_at: string } | null;
    /** A site's part of a request in parts: its id. @default a request id of its own */
    id?: string;
  } = {},
): Promise<{ requestId: string; key: string; packageKey: string }> {
  counter += 1;
  const requestId = options.id ?? `7d3c2f9e-1b4a-4c8e-9f2d-${String(counter).padStart(12, '0')}`;
  const key = `exports/${requestId}/attempt-1.zip`;
  const packageKey = `exports/${requestId}/subject-package.zip`;
  const archive =
    options.archive === undefined
      ? { key, bytes: ZIP.length, sha256: ZIP_SHA256, verified_at: '2026-11-20T10:00:00.000Z' }
      : options.archive;
  if (options.archive === undefined)
    await s3.send(new PutObjectCommand({ Bucket: 'archives', Key: key, Body: ZIP }));
  const built = options.subjectPackage;
  const subjectPackage =
    built === undefined
      ? undefined
      : {
          key: packageKey,
          bytes: built.length,
          sha256: createHash('sha256').update(built).digest('hex'),
          file_name: 'your-data-2026-11-20.zip',
          built_at: '2026-11-20T10:00:01.000Z',
          conversation_details: 'complete' as const,
        };
  if (built !== undefined)
    await s3.send(new PutObjectCommand({ Bucket: 'archives', Key: packageKey, Body: built }));
  const outcome = archive === null ? 'no_data' : options.type === 'erasure' ? 'erased' : 'exported';
  let now = new Date(archive?.verified_at ?? '2026-11-20T10:00:00.000Z');
  const trail = new AuditTrail(
    { s3, bucket: 'audit' },
    {
      hmacKey: () => 'k'.repeat(32),
      clock: () => {
        simulatedNow = now;
        return now;
      },
    },
  );
  await trail.append(requestId, { eventId: 'Intake', step: 'Intake', action: 'request_received', facts: {} });
  if (archive !== null) {
    const { key: archiveKey, bytes, sha256 } = archive;
    await trail.append(requestId, {
      eventId: 'ArchiveExport',
      step: 'ArchiveExport',
      action: 'archive_verified',
      facts: { key: archiveKey, bytes, sha256, entries: 4, version_id: null },
    });
  }
  if (subjectPackage !== undefined) {
    now = new Date(subjectPackage.built_at);
    const { key: builtKey, bytes, sha256 } = subjectPackage;
    await trail.append(requestId, {
      eventId: 'BuildPackage',
      step: 'BuildPackage',
      action: 'subject_package_built',
      facts: { key: builtKey, bytes, sha256 },
    });
  }
  await trail.append(requestId, {
    eventId: 'RecordOutcome',
    step: 'RecordOutcome',
    action: 'request_completed',
    facts: { outcome },
    final: true,
  });
  ledgerMock.on(GetItemCommand, { Key: { request_id: { S: requestId } } }).resolves({
    Item: storedItem(
      ledgerRecord({
        request_id: requestId,
        type: options.type ?? 'access',
        status: 'completed',
        step: undefined,
        outcome,
        ...(archive === null ? {} : { archive: { ...archive, entries: 4 } }),
        ...(subjectPackage === undefined ? {} : { subject_package: subjectPackage }),
      }),
    ),
  });
  return { requestId, key, packageKey };
}

describe('runVerify', () => {
  it("verifies each site's part of a request in parts, and fails the request when one part does not hold", async () => {
    // Prepare: exported on news, no data on shop; the request's own chain ends with what each came to
    counter += 1;
    const requestId = `7d3c2f9e-1b4a-4c8e-9f2d-${String(counter).padStart(12, '0')}`;
    const news = await storedRequest({ id: `${requestId}_news` });
    await storedRequest({ id: `${requestId}_shop`, archive: null });
    const written = new Date('2026-11-20T10:00:02.000Z');
    const trail = new AuditTrail(
      { s3, bucket: 'audit' },
      {
        hmacKey: () => 'k'.repeat(32),
        clock: () => {
          simulatedNow = written;
          return written;
        },
      },
    );
    await trail.append(requestId, {
      eventId: 'Intake',
      step: 'Intake',
      action: 'request_received',
      facts: {},
    });
    await trail.append(requestId, {
      eventId: 'SettleParts:completed',
      step: 'RecordOutcome',
      action: 'request_completed',
      facts: { outcome: 'exported', sites: 'exported on 1 (news); no data on 1 (shop)' },
      final: true,
    });
    const at = '2026-11-20T10:00:00.000Z';
    ledgerMock.on(GetItemCommand, { Key: { request_id: { S: requestId } } }).resolves({
      Item: storedItem(
        ledgerRecord({
          request_id: requestId,
          status: 'completed',
          step: undefined,
          outcome: 'exported',
          sites: ['news', 'shop'],
          site_results: {
            news: { status: 'completed', outcome: 'exported', at },
            shop: { status: 'completed', outcome: 'no_data', at },
          },
        }),
      ),
    });
    const holds = await runVerify(testContext({ s3 }), { requestId }, collectingIo());
    await s3.send(new PutObjectCommand({ Bucket: 'archives', Key: news.key, Body: Buffer.from('swapped') }));
    const io = collectingIo();

    // Act
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId }, io);

    // Assess
    expect(holds.result.findings).toEqual([]);
    expect(holds.exitCode).toBe(0);
    expect(exitCode).toBe(1);
    expect(result.parts).toEqual([
      { request_id: `${requestId}_news`, site: 'news', ok: false },
      { request_id: `${requestId}_shop`, site: 'shop', ok: true },
    ]);
    expect(io.stdout()).toContain(`site     news FAILED: npx svc-dsr verify ${requestId}_news says why`);
  });

  it('exits 0 when the stored archive matches the ledger and the audit chain holds', async () => {
    // Prepare
    const { requestId } = await storedRequest();
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId }, io);
    // Assess
    expect(exitCode).toBe(0);
    expect(result.archive).toMatchObject({ status: 'match', actual: { bytes: ZIP.length } });
    expect(result.audit).toMatchObject({ ok: true, records: 3 });
    expect(result.findings).toEqual([]);
    expect(io.stdout()).toContain('archive  OK');
    expect(io.stdout()).toContain('audit    OK: 3 record(s)');
  });

  it('re-hashes the subject package too, and exits 1 when it no longer matches the ledger', async () => {
    const built = Buffer.from('PK\u0003\u0004 the subject package');
    const { requestId, packageKey } = await storedRequest({ subjectPackage: built });
    const matching = collectingIo();
    const first = await runVerify(testContext({ s3 }), { requestId }, matching);
    expect(first.exitCode).toBe(0);
    expect(first.result.subject_package).toMatchObject({ status: 'match', key: packageKey });
    expect(matching.stdout()).toContain(`package  OK: ${packageKey}`);

    await s3.send(
      new PutObjectCommand({ Bucket: 'archives', Key: packageKey, Body: Buffer.from('swapped') }),
    );
    const io = collectingIo();
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId }, io);

    expect(exitCode).toBe(1);
    expect(result.archive.status).toBe('match');
    expect(result.subject_package.status).toBe('mismatch');
    expect(io.stdout()).toContain(`package  MISMATCH: ${packageKey}`);
  });

  it('exits 1 when the stored bytes differ from what the ledger recorded', async () => {
    const { requestId, key } = await storedRequest();
    await s3.send(
      new PutObjectCommand({ Bucket: 'archives', Key: key, Body: Buffer.concat([ZIP, Buffer.from('!')]) }),
    );
    const io = collectingIo();
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId, json: true }, io);
    expect(exitCode).toBe(1);
    expect(result.archive.status).toBe('mismatch');
    expect(result.audit.ok).toBe(true);
    expect(JSON.parse(io.stdout())).toMatchObject({ ok: false, archive: { status: 'mismatch' } });
  });

  it('exits 1 and names the record when the audit chain was altered', async () => {
    // Prepare: rewrite record 0 with a changed fact, keeping its old hash
    const { requestId } = await storedRequest();
    const recordKey = auditRecordKey(requestId, 0);
    const original = await s3.send(new GetObjectCommand({ Bucket: 'audit', Key: recordKey }));
    const record = JSON.parse((await original.Body?.transformToString()) ?? '{}');
    await s3.send(
      new PutObjectCommand({
        Bucket: 'audit',
        Key: recordKey,
        Body: JSON.stringify({ ...record, facts: { tampered: true } }),
      }),
    );
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId }, io);
    // Assess
    expect(exitCode).toBe(1);
    expect(result.archive.status).toBe('match');
    expect(result.audit).toMatchObject({ ok: false, at: 0 });
    expect(io.stdout()).toContain('audit    BROKEN: hash does not match the record content (record 0)');
  });

  it('reports an archive that is gone from the bucket as missing (exit 1)', async () => {
    const { requestId } = await storedRequest({
      archive: { key: 'exports/none.zip', bytes: 1, sha256: '00', verified_at: '2026-11-20T10:00:00.000Z' },
    });
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId }, collectingIo());
    expect(exitCode).toBe(1);
    expect(result.archive.status).toBe('missing');
  });

  it('reports an archive gone after its retention as expired by policy (exit 0), and one gone before as missing (exit 1)', async () => {
    // Prepare: an erasure archive written 2026-10-01 and 2026-11-01, kept 30 days; NOW is 2026-11-21.
    const verifyGone = async (writtenAt: string) => {
      const { requestId } = await storedRequest({
        type: 'erasure',
        archive: { key: 'exports/none.zip', bytes: 1, sha256: '00', verified_at: writtenAt },
      });
      const io = collectingIo();
      const context = testContext({ s3, names: { ErasureArchiveRetentionDays: 30 } });
      return { ...(await runVerify(context, { requestId }, io)), output: io.stdout() };
    };
    // Act
    const expired = await verifyGone('2026-10-01T09:00:00.000Z');
    const missing = await verifyGone('2026-11-01T09:00:00.000Z');
    // Assess
    expect(expired.exitCode).toBe(0);
    expect(expired.result.archive).toMatchObject({
      status: 'expired',
      retention_ends_at: '2026-10-31T09:00:00.000Z',
    });
    expect(expired.output).toContain(
      'archive  expired: exports/none.zip was deleted by the retention policy',
    );
    expect(expired.output).toContain('verified ');
    expect(missing.exitCode).toBe(1);
    expect(missing.result.archive).toMatchObject({
      status: 'missing',
      retention_ends_at: '2026-12-01T09:00:00.000Z',
    });
    expect(missing.output).toContain('its retention runs until 2026-12-01T09:00:00.000Z');
  });

  it('exits 1 when the ledger records an archive no audit record locked (ledger_mismatch)', async () => {
    // Prepare: a no_data answer whose ledger item was given another request's stored archive.
    const other = await storedRequest();
    const { requestId } = await storedRequest({ archive: null });
    ledgerMock.on(GetItemCommand, { Key: { request_id: { S: requestId } } }).resolves({
      Item: storedItem(
        ledgerRecord({
          request_id: requestId,
          status: 'completed',
          step: undefined,
          outcome: 'no_data',
          archive: {
            key: other.key,
            bytes: ZIP.length,
            sha256: ZIP_SHA256,
            verified_at: '2026-11-20T10:00:00Z',
            entries: 4,
          },
        }),
      ),
    });
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId }, io);
    // Assess: the stored object matches the ledger; only the records show the ledger was changed.
    expect(result.archive.status).toBe('match');
    expect(result.findings).toEqual([
      {
        check: 'ledger_mismatch',
        detail: `the ledger records the archive ${other.key}, but no record locked it (archive_verified)`,
      },
    ]);
    expect(exitCode).toBe(1);
    expect(io.stdout()).toContain('audit    FAILED ledger_mismatch: the ledger records the archive');
  });

  it('checks only the chain when the ledger records no archive', async () => {
    const { requestId } = await storedRequest({ archive: null });
    const { exitCode, result } = await runVerify(testContext({ s3 }), { requestId }, collectingIo());
    expect(exitCode).toBe(0);
    expect(result.archive.status).toBe('none');
    expect(result.findings).toEqual([]);
  });
});
