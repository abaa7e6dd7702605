import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteItemCommand, DynamoDBClient, ScanCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { VerifyAllCheck } from '#shared/evidence/chains';
import { runReport } from '../../../../bin/cli/commands/report.ts';
import { runVerify, runVerifyAll } from '../../../../bin/cli/commands/verify.ts';
import { collectingIo } from '../../../../bin/cli/format.ts';
import {
  type AuditRecord,
  AuditTrail,
  auditRecordKey,
  noticesChainOf,
  recordHash,
  sideChainOf,
} from '../../../../lambdas/shared/audit.ts';
import {
  type Manifest,
  manifestKey,
  writeDailyManifests,
} from '../../../../lambdas/shared/audit-manifest.ts';
import { computeDeadlines } from '../../../../lambdas/shared/deadlines.ts';
import { Ledger } from '../../../../lambdas/shared/ledger/index.ts';
import { createLedgerTable } from '../../../../lambdas/shared/ledger/table.ts';
import { testContext } from '../../../../test/unit/cli/helpers.ts';
import { type DiskS3, startDiskS3 } from '../../../aws/s3-disk.ts';
import { startDynamo } from '../../helpers/dynamo.ts';

/**
 * The tamper table of docs/audit.md, performed: each tamper is done to a stored chain (on the
 * disk S3 stand-in of local mode, with a dynalite ledger), and `verify --all` must name the check
 * that catches it.
 */
const HMAC_KEY = 'verify-all-hmac-key-0123456789abcdef';
const DAY_ONE = new Date('2026-11-20T10:00:00.000Z');
const DAY_TWO = new Date('2026-11-21T09:00:00.000Z');
const DAY_MS = 24 * 3600 * 1000;

/**
 * The time of the simulated world: the disk S3 stores each object at it (its LastModified), and
 * each writer's clock sets it when read, so a record is stored when its writer says it was
 * written. A tamper is stored at whatever time the test has reached.
 */
let simulatedNow = DAY_ONE;
/** A writer's clock fixed at `date`, which moves the simulated time there when read. */
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
let bucketCount = 0;

beforeAll(async () => {
  dynamo = await startDynamo();
  root = await mkdtemp(join(tmpdir(), 'verify-all-'));
  disk = await startDiskS3({ root, clock: () => simulatedNow });
  s3 = new S3Client({
    endpoint: disk.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
});
afterAll(async () => {
  s3.destroy();
  await disk.close();
  await dynamo.close();
  await rm(root, { recursive: true, force: true });
});

/** A fresh ledger table and audit bucket holding completed and failed requests, with a manifest of day one. */
async function world() {
  bucketCount += 1;
  const table = `ledger-${bucketCount}`;
  const names = {
    LedgerTableName: table,
    AuditBucketName: `audit-${bucketCount}`,
    ArchiveBucketName: 'archives',
  };
  await createLedgerTable(dynamo.client, table);
  await s3.send(new CreateBucketCommand({ Bucket: names.AuditBucketName }));
  const ledger = new Ledger(dynamo.client, table, () => DAY_ONE);
  const trail = new AuditTrail(
    { s3, bucket: names.AuditBucketName },
    { hmacKey: () => HMAC_KEY, clock: clockAt(DAY_ONE), heads: ledger },
  );
  const requests = [await completedRequest(ledger, trail), await completedRequest(ledger, trail)];
  // The first request's archive was handed out three times: its packages chain.
  await handOut(trail, requests[0] ?? '', 3);
  // The second request's subject was told: its notices chain, after the final record of its own.
  await giveNotices(ledger, trail, requests[1] ?? '');
  // The next day: the manifest of day one is written, and whatever a test does then is stored then.
  simulatedNow = DAY_TWO;
  await writeDailyManifests({ s3, bucket: names.AuditBucketName, clock: () => DAY_TWO });
  const context = testContext({ dynamoClient: dynamo.client, s3, names }, () => DAY_TWO);
  return { names, ledger, trail, requests, context };
}

async function completedRequest(ledger: Ledger, trail: AuditTrail): Promise<string> {
  const requestId = randomUUID();
  const request = {
    request_id: requestId,
    type: 'access' as const,
    regulation: 'gdpr' as const,
    primary_key: 'site-user-1',
    received_at: '2026-11-19T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-11-19T09:05:00Z' },
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

/**
 * A completed erasure whose archive was verified at `writtenAt`, as ArchiveExport records it: the
 * ledger's archive facts, and the archive_verified record written then. The object is stored with
 * `body` when given.
 */
async function archivedRequest(
  ledger: Ledger,
  names: { AuditBucketName: string; ArchiveBucketName: string },
  writtenAt: string,
  body?: string,
): Promise<{ requestId: string; key: string }> {
  const requestId = randomUUID();
  const key = `exports/${requestId}/attempt-1.zip`;
  const bytes = body === undefined ? 10 : Buffer.byteLength(body);
  const sha256 = body === undefined ? 'a'.repeat(64) : createHash('sha256').update(body).digest('hex');
  if (body !== undefined)
    await s3.send(new PutObjectCommand({ Bucket: names.ArchiveBucketName, Key: key, Body: body }));
  const trail = new AuditTrail(
    { s3, bucket: names.AuditBucketName },
    { hmacKey: () => HMAC_KEY, clock: clockAt(new Date(writtenAt)), heads: ledger },
  );
  const request = {
    request_id: requestId,
    type: 'erasure' as const,
    regulation: 'gdpr' as const,
    primary_key: 'site-user-2',
    received_at: '2026-09-30T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy', verified_at: '2026-09-30T09:05:00Z' },
  };
  await ledger.createReceived(request, 'fp', computeDeadlines('gdpr', new Date(request.received_at)));
  await trail.append(requestId, {
    eventId: 'Intake',
    step: 'Intake',
    action: 'request_received',
    facts: { type: 'erasure', regulation: 'gdpr', received_at: request.received_at },
  });
  const archive = { key, bytes, sha256, verified_at: writtenAt, entries: 4 };
  await ledger.update(requestId, { status: 'running', step: 'archiving', archive }, ['received']);
  await trail.append(requestId, {
    eventId: 'ArchiveExport',
    step: 'ArchiveExport',
    action: 'archive_verified',
    facts: { key, bytes, sha256, entries: 4, version_id: null },
  });
  await ledger.update(requestId, { status: 'completed', outcome: 'erased', step: null }, ['running']);
  await trail.append(requestId, {
    eventId: 'RecordOutcome',
    step: 'RecordOutcome',
    action: 'request_completed',
    facts: { outcome: 'erased' },
    final: true,
  });
  return { requestId, key };
}

/** Two notices recorded as `svc-dsr notice` records them: ledger fields, and the notices chain. */
async function giveNotices(ledger: Ledger, trail: AuditTrail, requestId: string): Promise<void> {
  for (const kind of ['receipt', 'response'] as const) {
    const at = DAY_ONE.toISOString();
    await ledger.recordNotice(requestId, kind, { channel: 'email', at });
    await trail.append(noticesChainOf(requestId), {
      eventId: `Operator:notice-${kind}-${at}`,
      step: 'Operator',
      action: 'notice_given',
      facts: { kind, channel: 'email', given_at: at },
    });
  }
}

/** Hand-outs recorded as `svc-dsr package` records them: the packages chain, whose head the ledger keeps. */
async function handOut(trail: AuditTrail, requestId: string, times: number, first = 0): Promise<void> {
  for (let time = first; time < first + times; time += 1) {
    await trail.append(sideChainOf('packages', requestId), {
      eventId: `Operator:package-link-${time}`,
      step: 'Operator',
      action: 'package_handed_out',
      facts: { delivery: 'link', link_expires_at: DAY_TWO.toISOString(), operator: 'alice' },
    });
  }
}

async function readRecord(bucket: string, requestId: string, seq: number): Promise<AuditRecord> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: auditRecordKey(requestId, seq) }));
  return JSON.parse((await answer.Body?.transformToString('utf-8')) ?? '') as AuditRecord;
}

async function writeRecord(bucket: string, requestId: string, seq: number, record: unknown): Promise<void> {
  await s3.send(
    new PutObjectCommand({
      Bucket: bucket,
      Key: auditRecordKey(requestId, seq),
      Body: JSON.stringify(record),
    }),
  );
}

/** A day's manifest as stored. */
async function readStoredManifest(bucket: string, day: string): Promise<Manifest> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: manifestKey(day) }));
  return JSON.parse((await answer.Body?.transformToString('utf-8')) ?? '') as Manifest;
}

/** Deletes records of a chain, as someone with delete rights would. */
async function deleteRecords(bucket: string, chain: string, seqs: readonly number[]): Promise<void> {
  for (const seq of seqs) {
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: auditRecordKey(chain, seq) }));
  }
}

/** Puts two records of a chain under each other's keys. */
async function swapRecords(bucket: string, chain: string, one: number, other: number): Promise<void> {
  const first = await readRecord(bucket, chain, one);
  const second = await readRecord(bucket, chain, other);
  await writeRecord(bucket, chain, one, second);
  await writeRecord(bucket, chain, other, first);
}

function sealed(record: Omit<AuditRecord, 'hash'> & { hash?: string }): AuditRecord {
  const { hash: _old, ...rest } = record;
  return { ...rest, hash: recordHash(rest) };
}

/** Rewrites the whole chain from `records` in their new order, re-numbered and re-hashed, as a forger would. */
async function rewriteChain(
  bucket: string,
  requestId: string,
  records: readonly AuditRecord[],
  closed = true,
): Promise<AuditRecord[]> {
  const rewritten: AuditRecord[] = [];
  for (const [seq, record] of records.entries()) {
    const next = sealed({
      ...record,
      seq,
      final: closed && seq === records.length - 1,
      prev_hash: rewritten.at(-1)?.hash ?? null,
    });
    rewritten.push(next);
    await writeRecord(bucket, requestId, seq, next);
  }
  return rewritten;
}

async function checksOf(context: ReturnType<typeof testContext>) {
  const io = collectingIo();
  const { exitCode, result } = await runVerifyAll(context, {}, io);
  return {
    exitCode,
    checks: [...new Set(result.findings.map((finding) => finding.check))].sort() as VerifyAllCheck[],
    findings: result.findings,
    output: io.stdout(),
  };
}

describe('svc-dsr verify --all', () => {
  it('exits 0 with a summary table and no finding when nothing was touched', async () => {
    // Prepare
    const { context } = await world();

    // Act
    const { exitCode, checks, output } = await checksOf(context);

    // Assess
    expect(checks).toEqual([]);
    expect(exitCode).toBe(0);
    expect(output).toMatch(/checked 2 request\(s\) \(all\) against 1 daily manifest\(s\)/);
    expect(output).toMatch(/^tail_rewritten\s+0$/m);
    expect(output).toMatch(/verified: no findings/);
  });

  it('counts an archive gone after its retention as expired, no finding; one gone before its retention ends is archive_missing', async () => {
    // Prepare: two erasure archives recorded, neither in the bucket; erasure archives are kept 30 days.
    const { names, ledger } = await world();
    const archives = { ...names, ArchiveBucketName: `${names.AuditBucketName}-archives` };
    await s3.send(new CreateBucketCommand({ Bucket: archives.ArchiveBucketName }));
    await archivedRequest(ledger, archives, '2026-10-01T09:00:00.000Z');
    const recent = await archivedRequest(ledger, archives, '2026-11-19T09:00:00.000Z');
    const context = testContext(
      { dynamoClient: dynamo.client, s3, names: { ...archives, ErasureArchiveRetentionDays: 30 } },
      () => DAY_TWO,
    );
    const io = collectingIo();

    // Act
    const { exitCode, result } = await runVerifyAll(context, {}, io);

    // Assess
    expect(result.expired_archives).toBe(1);
    expect(result.findings).toEqual([
      {
        request_id: recent.requestId,
        check: 'archive_missing',
        detail: `${recent.key} is not in the archive bucket, though its retention runs until 2026-12-19T09:00:00.000Z`,
      },
    ]);
    expect(exitCode).toBe(1);
    expect(io.stdout()).toContain('1 archive(s) expired by the retention policy (no finding)');
  });

  it('counts retention from the locked record: an archive deleted days after it was written is archive_missing, whatever time the ledger says', async () => {
    // Prepare: verified on day two and deleted since; the ledger's verified_at moved back past the 30 days.
    const { names, ledger } = await world();
    const archives = { ...names, ArchiveBucketName: `${names.AuditBucketName}-archives` };
    await s3.send(new CreateBucketCommand({ Bucket: archives.ArchiveBucketName }));
    const { requestId, key } = await archivedRequest(ledger, archives, DAY_TWO.toISOString());
    const item = await ledger.require(requestId);
    if (item.archive === undefined) throw new Error('the request has no archive');
    await ledger.update(
      requestId,
      { archive: { ...item.archive, verified_at: '2026-09-01T00:00:00.000Z' } },
      ['completed'],
    );
    const context = testContext(
      { dynamoClient: dynamo.client, s3, names: { ...archives, ErasureArchiveRetentionDays: 30 } },
      () => DAY_TWO,
    );

    // Act
    const all = await runVerifyAll(context, {}, collectingIo());
    const one = await runVerify(context, { requestId }, collectingIo());

    // Assess
    expect(all.result.expired_archives).toBe(0);
    expect(all.result.findings).toEqual([
      {
        request_id: requestId,
        check: 'archive_missing',
        detail: `${key} is not in the archive bucket, though its retention runs until 2026-12-21T09:00:00.000Z`,
      },
    ]);
    expect(one.result.archive.status).toBe('missing');
    expect(one.exitCode).toBe(1);
  });

  it("catches an archive swapped for another request's with the ledger's sha256 and bytes set to match: ledger_mismatch", async () => {
    // Prepare: two stored archives; the second request's is replaced by the first's, and its ledger
    // facts rewritten to the first's, so the stored object and the ledger agree.
    const { names, ledger } = await world();
    const archives = { ...names, ArchiveBucketName: `${names.AuditBucketName}-archives` };
    await s3.send(new CreateBucketCommand({ Bucket: archives.ArchiveBucketName }));
    const alice = await archivedRequest(ledger, archives, DAY_TWO.toISOString(), 'alice export');
    const chloe = await archivedRequest(ledger, archives, DAY_TWO.toISOString(), 'chloe export, longer');
    await s3.send(
      new PutObjectCommand({ Bucket: archives.ArchiveBucketName, Key: chloe.key, Body: 'alice export' }),
    );
    const aliceArchive = (await ledger.require(alice.requestId)).archive;
    const chloeArchive = (await ledger.require(chloe.requestId)).archive;
    if (aliceArchive === undefined || chloeArchive === undefined) throw new Error('no archive recorded');
    await ledger.update(
      chloe.requestId,
      { archive: { ...chloeArchive, bytes: aliceArchive.bytes, sha256: aliceArchive.sha256 } },
      ['completed'],
    );
    const context = testContext({ dynamoClient: dynamo.client, s3, names: archives }, () => DAY_TWO);

    // Act
    const all = await checksOf(context);
    const io = collectingIo();
    const one = await runVerify(context, { requestId: chloe.requestId }, io);

    // Assess
    expect(all.checks).toEqual(['ledger_mismatch']);
    expect(all.findings.map((finding) => finding.request_id)).toEqual([chloe.requestId, chloe.requestId]);
    expect(all.findings.map((finding) => finding.detail)).toEqual([
      `the ledger's archive bytes is ${aliceArchive.bytes}; record 1 (archive_verified) locked ${chloeArchive.bytes}`,
      `the ledger's archive sha256 is "${aliceArchive.sha256}"; record 1 (archive_verified) locked "${chloeArchive.sha256}"`,
    ]);
    expect(one.result.archive.status).toBe('match');
    expect(one.result.findings.map((finding) => finding.check)).toEqual([
      'ledger_mismatch',
      'ledger_mismatch',
    ]);
    expect(one.exitCode).toBe(1);
    expect(io.stdout()).toContain("audit    FAILED ledger_mismatch: the ledger's archive sha256 is");
  });

  it("catches the ledger's status, outcome and receipt changed after the records locked them: ledger_mismatch", async () => {
    // Prepare: one request said denied although its chain ends completed; one received later than it was.
    const { names, ledger } = await world();
    const archives = { ...names, ArchiveBucketName: `${names.AuditBucketName}-archives` };
    await s3.send(new CreateBucketCommand({ Bucket: archives.ArchiveBucketName }));
    const denied = await archivedRequest(ledger, archives, DAY_TWO.toISOString());
    const moved = await archivedRequest(ledger, archives, DAY_TWO.toISOString());
    await ledger.update(denied.requestId, { status: 'denied', outcome: null }, ['completed']);
    await ledger.update(moved.requestId, { received_at: '2026-11-19T09:00:00Z' }, ['completed']);
    const context = testContext({ dynamoClient: dynamo.client, s3, names: archives }, () => DAY_TWO);

    // Act
    const { findings } = await checksOf(context);

    // Assess: the archives were never stored, which is archive_missing beside these; the ledger is
    // scanned in no particular order.
    const mismatches = findings.filter((finding) => finding.check === 'ledger_mismatch');
    expect(mismatches).toHaveLength(3);
    expect(mismatches).toEqual(
      expect.arrayContaining([
        {
          request_id: denied.requestId,
          check: 'ledger_mismatch',
          detail: `the ledger's status is "denied"; record 2 (request_completed) locked "completed"`,
        },
        {
          request_id: denied.requestId,
          check: 'ledger_mismatch',
          detail: `the ledger's outcome is not set; record 2 (request_completed) locked "erased"`,
        },
        {
          request_id: moved.requestId,
          check: 'ledger_mismatch',
          detail: `the ledger's received_at is "2026-11-19T09:00:00Z"; record 0 (request_received) locked "2026-09-30T09:00:00Z"`,
        },
      ]),
    );
  });

  it('names a ledger item the schema refuses as ledger_broken, and still checks every other request', async () => {
    // Prepare: the first request's status is not one the ledger knows; the second's chain is cut.
    const { names, requests, context } = await world();
    const [broken = '', cut = ''] = requests;
    await dynamo.client.send(
      new UpdateItemCommand({
        TableName: names.LedgerTableName,
        Key: { request_id: { S: broken } },
        UpdateExpression: 'SET #status = :bogus',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':bogus': { S: 'bogus' } },
      }),
    );
    await deleteRecords(names.AuditBucketName, cut, [4]);

    // Act
    const { exitCode, checks, findings } = await checksOf(context);

    // Assess
    expect(checks).toEqual(['chain_truncated', 'final_missing', 'ledger_broken', 'manifest_mismatch']);
    expect(findings.find((finding) => finding.check === 'ledger_broken')).toEqual({
      request_id: broken,
      check: 'ledger_broken',
      detail: 'the ledger item does not match the schema (status), so nothing else of it was checked',
    });
    expect(
      findings.filter((finding) => finding.check !== 'ledger_broken').every((f) => f.request_id === cut),
    ).toBe(true);
    expect(exitCode).toBe(1);
  });

  it('verifies and reports requests minimised after their retention as before', async () => {
    // Prepare: both requests ended on day one; the retention pass runs 800 days later.
    const { ledger, requests, context } = await world();
    for (const requestId of requests) {
      await ledger.update(requestId, { completed_at: DAY_ONE.toISOString() }, ['completed']);
    }
    const later = new Ledger(
      dynamo.client,
      context.ledger.tableName,
      () => new Date(DAY_TWO.getTime() + 800 * DAY_MS),
    );
    const pass = await later.minimiseDue({ hmacKey: async () => HMAC_KEY, afterDays: 730 });
    const [first] = requests;
    if (first === undefined) throw new Error('world() made no requests');

    // Act
    const all = await runVerifyAll(context, {}, collectingIo());
    const one = await runVerify(context, { requestId: first }, collectingIo());
    const report = await runReport(context, { format: 'json' }, collectingIo());

    // Assess
    expect(pass).toEqual({ minimised: 2, skipped: 0 });
    expect((await ledger.require(first)).primary_key).toMatch(/^hmac-sha256:/);
    expect(all.result.findings).toEqual([]);
    expect(one.exitCode).toBe(0);
    expect(report.result.skipped).toBe(0);
    expect(report.result.records.map((record) => record.request_id).sort()).toEqual([...requests].sort());
  });

  it('keeps the head hash and record count of each chain in the ledger', async () => {
    // Prepare
    const { ledger, trail, requests } = await world();
    const [requestId = ''] = requests;

    // Act
    const item = await ledger.require(requestId);
    const chain = await trail.list(requestId);

    // Assess
    expect(item.audit_count).toBe(5);
    expect(item.audit_head).toBe(chain.at(-1)?.hash);
  });

  it('catches an edited record (edit): chain_broken', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    const record = await readRecord(names.AuditBucketName, requestId, 2);
    await writeRecord(names.AuditBucketName, requestId, 2, { ...record, facts: { edited: true } });

    const { exitCode, checks, findings } = await checksOf(context);

    expect(exitCode).toBe(1);
    expect(checks).toEqual(['chain_broken']);
    expect(findings[0]).toMatchObject({
      request_id: requestId,
      detail: expect.stringMatching(/hash does not match/),
    });
  });

  it('catches a deleted middle record (delete): chain_broken', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    await deleteRecords(names.AuditBucketName, requestId, [2]);

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_broken']);
    expect(findings[0]?.detail).toMatch(/record 2 is missing/);
  });

  it("catches two records swapped under each other's keys (swap): chain_broken", async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    await swapRecords(names.AuditBucketName, requestId, 1, 2);

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['chain_broken']);
  });

  it('catches a chain reordered and re-hashed whole (reorder and re-hash): tail_rewritten and manifest_mismatch', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    const records = await Promise.all(
      [0, 1, 2, 3, 4].map((seq) => readRecord(names.AuditBucketName, requestId, seq)),
    );
    await rewriteChain(
      names.AuditBucketName,
      requestId,
      [records[0], records[2], records[1], records[3], records[4]].filter((r) => r !== undefined),
    );

    const { checks } = await checksOf(context);

    // Rewritten a day after, the records are stored a day after the time they say.
    expect(checks).toEqual(['manifest_mismatch', 'record_time', 'tail_rewritten']);
  });

  it('catches a chain reordered and re-hashed with the ledger head rewritten to match: manifest_mismatch', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    const records = await Promise.all(
      [0, 1, 2, 3, 4].map((seq) => readRecord(names.AuditBucketName, requestId, seq)),
    );
    const forged = await rewriteChain(
      names.AuditBucketName,
      requestId,
      [records[0], records[2], records[1], records[3], records[4]].filter((r) => r !== undefined),
    );
    await dynamo.doc.send(
      new UpdateCommand({
        TableName: names.LedgerTableName,
        Key: { request_id: requestId },
        UpdateExpression: 'SET audit_head = :head',
        ExpressionAttributeValues: { ':head': forged.at(-1)?.hash },
      }),
    );

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['manifest_mismatch', 'record_time']);
  });

  it('catches the final record deleted (truncate): chain_truncated and final_missing', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    await deleteRecords(names.AuditBucketName, requestId, [4]);

    const { checks } = await checksOf(context);
    const io = collectingIo();
    const one = await runVerify(context, { requestId }, io);

    expect(checks).toEqual(['chain_truncated', 'final_missing', 'manifest_mismatch']);
    // One request alone: the same findings, the manifests read as --all reads them.
    expect(one.result.findings.map((finding) => finding.check)).toEqual([
      'chain_truncated',
      'final_missing',
      'manifest_mismatch',
    ]);
    expect(one.exitCode).toBe(1);
    expect(io.stdout()).toContain(
      'audit    FAILED final_missing: the request is completed but its chain ends without a final record',
    );
    expect(io.stdout()).toContain(`verification of ${requestId} FAILED`);
  });

  it('catches the final record rewritten and re-hashed (rewrite the tail): tail_rewritten', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    const last = await readRecord(names.AuditBucketName, requestId, 4);
    await writeRecord(
      names.AuditBucketName,
      requestId,
      4,
      sealed({ ...last, facts: { outcome: 'exported' } }),
    );

    const { checks } = await checksOf(context);

    // The rewritten final record also says another outcome than the ledger's.
    expect(checks).toEqual(['ledger_mismatch', 'manifest_mismatch', 'record_time', 'tail_rewritten']);
  });

  it('catches a whole chain deleted (delete a chain): chain_missing', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    await deleteRecords(names.AuditBucketName, requestId, [0, 1, 2, 3, 4]);

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_missing']);
    expect(findings[0]?.request_id).toBe(requestId);
  });

  it('catches a chain deleted with its ledger item: ledger_missing from the manifest', async () => {
    const { names, requests, context } = await world();
    const [requestId = ''] = requests;
    await deleteRecords(names.AuditBucketName, requestId, [0, 1, 2, 3, 4]);
    await dynamo.client.send(
      new DeleteItemCommand({
        TableName: names.LedgerTableName,
        Key: { request_id: { S: requestId } },
      }),
    );

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['ledger_missing']);
  });

  it('reports a terminal request whose chain was never closed: final_missing', async () => {
    const { names, ledger, context } = await world();
    const trail = new AuditTrail(
      { s3, bucket: names.AuditBucketName },
      { hmacKey: () => HMAC_KEY, clock: clockAt(DAY_TWO), heads: ledger },
    );
    const requestId = randomUUID();
    await ledger.createRejected(requestId, 'fp', ['type: required']);
    await trail.append(requestId, {
      eventId: 'Intake',
      step: 'Intake',
      action: 'request_rejected',
      facts: {},
    });

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['final_missing']);
  });
});

describe('svc-dsr verify --all on the notices chain (audit/<request_id>.notices/)', () => {
  it('keeps the notices chain head and count in the ledger, and the daily manifest locks it', async () => {
    const { names, ledger, trail, requests } = await world();
    const requestId = requests[1] ?? '';

    const item = await ledger.require(requestId);
    const notices = await trail.list(noticesChainOf(requestId));
    const manifest = await readStoredManifest(names.AuditBucketName, '2026-11-20');

    expect(item).toMatchObject({ notices_audit_count: 2, notices_audit_head: notices.at(-1)?.hash });
    expect(item.audit_count).toBe(5);
    expect(manifest.schema === 'svc-dsr.manifest/2' && manifest.records).toContainEqual({
      chain: noticesChainOf(requestId),
      seq: 1,
      hash: notices.at(-1)?.hash,
      stored_at: DAY_ONE.toISOString(),
    });
  });

  it('catches an edited notice record (edit): chain_broken', async () => {
    const { names, requests, context } = await world();
    const chain = noticesChainOf(requests[1] ?? '');
    const record = await readRecord(names.AuditBucketName, chain, 0);
    await writeRecord(names.AuditBucketName, chain, 0, {
      ...record,
      facts: { kind: 'receipt', channel: 'post' },
    });

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_broken']);
    expect(findings[0]).toMatchObject({
      request_id: requests[1],
      detail: expect.stringMatching(/^notices chain: .*hash does not match/),
    });
  });

  it("catches notice records swapped under each other's keys (swap, order): chain_broken", async () => {
    const { names, requests, context } = await world();
    const chain = noticesChainOf(requests[1] ?? '');
    await swapRecords(names.AuditBucketName, chain, 0, 1);

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['chain_broken']);
  });

  it('catches the last notice deleted (truncate): chain_truncated and manifest_mismatch', async () => {
    const { names, requests, context } = await world();
    const chain = noticesChainOf(requests[1] ?? '');
    await deleteRecords(names.AuditBucketName, chain, [1]);

    const { checks, findings } = await checksOf(context);

    // The ledger still records the response notice the deleted record locked.
    expect(checks).toEqual(['chain_truncated', 'ledger_mismatch', 'manifest_mismatch']);
    expect(findings.find((finding) => finding.check === 'ledger_mismatch')?.detail).toBe(
      'the ledger records a response notice, but no notices record locked one',
    );
  });

  it('catches the notices reordered and re-hashed (reorder and re-hash): tail_rewritten and manifest_mismatch', async () => {
    const { names, requests, context } = await world();
    const chain = noticesChainOf(requests[1] ?? '');
    const records = await Promise.all([0, 1].map((seq) => readRecord(names.AuditBucketName, chain, seq)));
    const reordered = [records[1], records[0]].filter((record) => record !== undefined);
    // A notices chain has no final record.
    await rewriteChain(names.AuditBucketName, chain, reordered, false);

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['manifest_mismatch', 'record_time', 'tail_rewritten']);
  });

  it('catches a deleted notices chain the ledger records (delete a chain): chain_missing', async () => {
    const { names, requests, context } = await world();
    const chain = noticesChainOf(requests[1] ?? '');
    await deleteRecords(names.AuditBucketName, chain, [0, 1]);

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_missing']);
    expect(findings[0]).toMatchObject({
      request_id: requests[1],
      detail: expect.stringMatching(/^notices chain/),
    });
  });

  it('catches a notices chain deleted with its ledger item: ledger_missing from the manifest', async () => {
    const { names, requests, context } = await world();
    const requestId = requests[1] ?? '';
    await deleteRecords(names.AuditBucketName, noticesChainOf(requestId), [0, 1]);
    await deleteRecords(names.AuditBucketName, requestId, [0, 1, 2, 3, 4]);
    await dynamo.client.send(
      new DeleteItemCommand({ TableName: names.LedgerTableName, Key: { request_id: { S: requestId } } }),
    );

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['ledger_missing']);
    expect(findings.map((finding) => [finding.request_id, finding.detail.includes('notices chain')])).toEqual(
      [
        [requestId, false],
        [requestId, true],
      ],
    );
  });
});

describe('svc-dsr verify --all on the packages chain (audit/<request_id>.packages/)', () => {
  /** The world's packages chain: the first request's archive, handed out three times. */
  async function packagesWorld() {
    const made = await world();
    const [requestId = ''] = made.requests;
    return { ...made, requestId, chain: sideChainOf('packages', requestId) };
  }

  it('keeps the packages chain head and count in the ledger, and the daily manifest locks it', async () => {
    // Prepare
    const { names, ledger, trail, requestId, chain } = await packagesWorld();

    // Act
    const item = await ledger.require(requestId);
    const records = await trail.list(chain);
    const manifest = await readStoredManifest(names.AuditBucketName, '2026-11-20');

    // Assess
    expect(records).toHaveLength(3);
    expect(item).toMatchObject({
      packages_audit_count: 3,
      packages_audit_head: records.at(-1)?.hash,
      packages_audit_at: DAY_ONE.toISOString(),
      // The request's own head is its own, untouched by the hand-outs.
      audit_count: 5,
    });
    expect(item.audit_head).not.toBe(item.packages_audit_head);
    const locked = manifest.schema === 'svc-dsr.manifest/2' ? manifest.records : [];
    expect(locked).toContainEqual({
      chain,
      seq: 2,
      hash: records.at(-1)?.hash,
      stored_at: DAY_ONE.toISOString(),
    });
    expect(locked).toContainEqual({
      chain: requestId,
      seq: 4,
      hash: item.audit_head,
      stored_at: DAY_ONE.toISOString(),
    });
  });

  it('locks each record on the day S3 stored it: a later hand-out goes into a later manifest alone', async () => {
    // Prepare: one more hand-out on day two; the manifest of day two is written on day three.
    const { names, ledger, requestId, chain } = await packagesWorld();
    const dayTwoTrail = new AuditTrail(
      { s3, bucket: names.AuditBucketName },
      { hmacKey: () => HMAC_KEY, clock: clockAt(DAY_TWO), heads: ledger },
    );
    await handOut(dayTwoTrail, requestId, 1, 3);
    const dayThree = new Date(DAY_TWO.getTime() + DAY_MS);

    // Act
    const written = await writeDailyManifests({
      s3,
      bucket: names.AuditBucketName,
      clock: () => dayThree,
    });
    const manifest = await readStoredManifest(names.AuditBucketName, '2026-11-21');
    const { checks } = await checksOf(
      testContext({ dynamoClient: dynamo.client, s3, names }, () => dayThree),
    );

    // Assess
    expect(written).toEqual(['2026-11-21']);
    expect(manifest.schema === 'svc-dsr.manifest/2' && manifest.records).toEqual([
      {
        chain,
        seq: 3,
        hash: (await ledger.require(requestId)).packages_audit_head,
        stored_at: DAY_TWO.toISOString(),
      },
    ]);
    expect(checks).toEqual([]);
  });

  it('catches an edited hand-out record (edit): chain_broken', async () => {
    const { names, requestId, chain, context } = await packagesWorld();
    const record = await readRecord(names.AuditBucketName, chain, 1);
    await writeRecord(names.AuditBucketName, chain, 1, {
      ...record,
      facts: { ...record.facts, operator: 'mallory' },
    });

    const { exitCode, checks, findings } = await checksOf(context);

    expect(exitCode).toBe(1);
    expect(checks).toEqual(['chain_broken']);
    expect(findings[0]).toMatchObject({
      request_id: requestId,
      detail: expect.stringMatching(/^packages chain: .*hash does not match/),
    });
  });

  it('catches a hand-out record deleted in the middle (delete): chain_broken', async () => {
    const { names, chain, context } = await packagesWorld();
    await deleteRecords(names.AuditBucketName, chain, [1]);

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_broken']);
    expect(findings[0]?.detail).toMatch(/^packages chain: record 1 is missing/);
  });

  it("catches hand-out records swapped under each other's keys (swap): chain_broken", async () => {
    const { names, chain, context } = await packagesWorld();
    await swapRecords(names.AuditBucketName, chain, 0, 1);

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['chain_broken']);
  });

  it('catches the last hand-out deleted (truncate): chain_truncated and manifest_mismatch', async () => {
    const { names, chain, context } = await packagesWorld();
    await deleteRecords(names.AuditBucketName, chain, [2]);

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_truncated', 'manifest_mismatch']);
    expect(findings.find((finding) => finding.check === 'chain_truncated')?.detail).toBe(
      'packages chain: the chain has 2 record(s); the ledger counted 3',
    );
  });

  it('catches the hand-outs reordered and re-hashed (reorder and re-hash): tail_rewritten and manifest_mismatch', async () => {
    const { names, chain, context } = await packagesWorld();
    const records = await Promise.all([0, 1, 2].map((seq) => readRecord(names.AuditBucketName, chain, seq)));
    await rewriteChain(names.AuditBucketName, chain, [...records].reverse(), false);

    const { checks } = await checksOf(context);

    expect(checks).toEqual(['manifest_mismatch', 'record_time', 'tail_rewritten']);
  });

  it('catches the hand-outs reordered and re-hashed with the ledger head rewritten to match: manifest_mismatch', async () => {
    const { names, requestId, chain, context } = await packagesWorld();
    const records = await Promise.all([0, 1, 2].map((seq) => readRecord(names.AuditBucketName, chain, seq)));
    const rewritten = await rewriteChain(names.AuditBucketName, chain, [...records].reverse(), false);
    await dynamo.doc.send(
      new UpdateCommand({
        TableName: names.LedgerTableName,
        Key: { request_id: requestId },
        UpdateExpression: 'SET packages_audit_head = :head',
        ExpressionAttributeValues: { ':head': rewritten.at(-1)?.hash },
      }),
    );

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['manifest_mismatch', 'record_time']);
    expect(findings[0]?.detail).toMatch(/^packages chain: manifest 2026-11-20 locked record 0/);
  });

  it('catches a deleted packages chain the ledger records (delete a chain): chain_missing', async () => {
    const { names, requestId, chain, context } = await packagesWorld();
    await deleteRecords(names.AuditBucketName, chain, [0, 1, 2]);

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_missing']);
    expect(findings[0]).toMatchObject({
      request_id: requestId,
      detail: `packages chain: the ledger records package hand-outs but the bucket has no audit/${chain}/ records`,
    });
  });

  it("catches a packages chain deleted with the ledger's head of it: chain_missing from the manifest", async () => {
    const { names, requestId, chain, context } = await packagesWorld();
    await deleteRecords(names.AuditBucketName, chain, [0, 1, 2]);
    await dynamo.doc.send(
      new UpdateCommand({
        TableName: names.LedgerTableName,
        Key: { request_id: requestId },
        UpdateExpression: 'REMOVE packages_audit_head, packages_audit_count, packages_audit_at',
      }),
    );

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['chain_missing']);
    expect(findings[0]).toMatchObject({
      request_id: requestId,
      detail: `packages chain: manifest 2026-11-20 locked it at 3 record(s), but the bucket has no audit/${chain}/ records`,
    });
  });

  it('catches a packages chain deleted with its ledger item: ledger_missing from the manifest', async () => {
    const { names, requestId, chain, context } = await packagesWorld();
    await deleteRecords(names.AuditBucketName, chain, [0, 1, 2]);
    await dynamo.client.send(
      new DeleteItemCommand({ TableName: names.LedgerTableName, Key: { request_id: { S: requestId } } }),
    );

    const { checks, findings } = await checksOf(context);

    expect(checks).toEqual(['ledger_missing']);
    expect(findings.map((finding) => finding.detail)).toContain(
      'manifest 2026-11-20 locked its packages chain, but the ledger has no such request',
    );
  });
});

describe('svc-dsr verify <request_id> on its side chains', () => {
  it('checks the notices and packages chains against their ledger heads', async () => {
    // Prepare
    const { requests, context } = await world();
    const [handedOut = '', told = ''] = requests;
    const io = collectingIo();

    // Act
    const first = await runVerify(context, { requestId: handedOut }, io);
    const second = await runVerify(context, { requestId: told }, collectingIo());

    // Assess
    expect(first.exitCode).toBe(0);
    expect(first.result.side_chains).toEqual([
      { kind: 'notices', chain: noticesChainOf(handedOut), records: 0, head: null, findings: [] },
      {
        kind: 'packages',
        chain: sideChainOf('packages', handedOut),
        records: 3,
        head: expect.stringMatching(/^sha256:/),
        findings: [],
      },
      { kind: 'effects', chain: sideChainOf('effects', handedOut), records: 0, head: null, findings: [] },
    ]);
    expect(io.stdout()).toMatch(/^notices {2}none recorded/m);
    expect(io.stdout()).toMatch(/^packages OK: 3 record\(s\) chained/m);
    expect(second.result.side_chains.map((side) => [side.kind, side.records])).toEqual([
      ['notices', 2],
      ['packages', 0],
      ['effects', 0],
    ]);
  });

  it('fails (exit 1) when a side chain is broken or shorter than the ledger counted', async () => {
    // Prepare: the last hand-out deleted, a notice edited.
    const { names, requests, context } = await world();
    const [handedOut = '', told = ''] = requests;
    const packages = sideChainOf('packages', handedOut);
    await deleteRecords(names.AuditBucketName, packages, [2]);
    const notice = await readRecord(names.AuditBucketName, noticesChainOf(told), 0);
    await writeRecord(names.AuditBucketName, noticesChainOf(told), 0, { ...notice, facts: {} });
    const io = collectingIo();

    // Act
    const first = await runVerify(context, { requestId: handedOut }, io);
    const second = await runVerify(context, { requestId: told }, collectingIo());

    // Assess
    expect(first.exitCode).toBe(1);
    expect(first.result.audit.ok).toBe(true);
    expect(first.result.side_chains[1]?.findings).toEqual([
      { check: 'chain_truncated', detail: 'the chain has 2 record(s); the ledger counted 3' },
      {
        check: 'manifest_mismatch',
        detail: expect.stringMatching(
          /^manifest 2026-11-20 locked record 2 with hash .*; the chain has no such record$/,
        ),
      },
    ]);
    expect(io.stdout()).toContain(
      'packages FAILED chain_truncated: the chain has 2 record(s); the ledger counted 3',
    );
    expect(io.stdout()).toContain(`verification of ${handedOut} FAILED`);
    expect(second.exitCode).toBe(1);
    expect(second.result.side_chains[0]?.findings.map((finding) => finding.check)).toEqual(['chain_broken']);
  });
});

describe('svc-dsr verify --all object versions', () => {
  it('reports every audit key with more than one version or a delete marker, as S3 lists them in AWS', async () => {
    // Prepare
    const awsS3 = new S3Client({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    });
    const awsDynamo = new DynamoDBClient({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    });
    const s3Mock = mockClient(awsS3);
    const dynamoMock = mockClient(awsDynamo);
    const requestId = randomUUID();
    dynamoMock.on(ScanCommand).resolves({ Items: [] });
    s3Mock.on(ListObjectsV2Command).resolves({ Contents: [] });
    s3Mock.on(ListObjectVersionsCommand, { Prefix: 'audit/' }).resolves({
      Versions: [
        { Key: auditRecordKey(requestId, 0), VersionId: 'v1' },
        { Key: auditRecordKey(requestId, 1), VersionId: 'v1' },
        { Key: auditRecordKey(requestId, 1), VersionId: 'v2' },
      ],
      DeleteMarkers: [{ Key: auditRecordKey(requestId, 0), VersionId: 'm1' }],
    });
    s3Mock.on(ListObjectVersionsCommand, { Prefix: 'manifests/' }).resolves({});

    // Act
    const { exitCode, result } = await runVerifyAll(
      testContext({ s3: awsS3, dynamoClient: awsDynamo }),
      {},
      collectingIo(),
    );

    // Assess
    expect(exitCode).toBe(1);
    expect(result.findings.map((finding) => [finding.request_id, finding.check])).toEqual([
      [requestId, 'multiple_versions'],
      [requestId, 'multiple_versions'],
    ]);
    expect(s3Mock).toHaveReceivedCommandWith(ListObjectVersionsCommand, {
      Bucket: 'audit',
      Prefix: 'audit/',
    });
  });
});
