import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient, GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import {
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  NoSuchKey,
  NotFound,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runPackage, runPackageLink } from '../../../bin/cli/commands/package.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { ledgerRecord, OPERATOR, REQUEST_ID, s3Body, storedItem, testContext } from './helpers.ts';

/** The ledger reads through a plain DynamoDB client. */
const ledgerMock = mockClient(DynamoDBClient);
const s3Mock = mockClient(S3Client);
const ZIP = Buffer.from('PK\u0003\u0004 pretend this is the export of the subject');
const KEY = `exports/${REQUEST_ID}/attempt-1.zip`;
let dir: string;

function completed(overrides: Partial<Parameters<typeof ledgerRecord>[0]> = {}) {
  return ledgerRecord({
    status: 'completed',
    step: undefined,
    outcome: 'exported',
    archive: {
      key: KEY,
      bytes: ZIP.length,
      sha256: createHash('sha256').update(ZIP).digest('hex'),
      version_id: 'v-3',
      verified_at: '2026-11-20T10:00:00Z',
      entries: 4,
    },
    completed_at: '2026-11-20T10:00:01Z',
    ...overrides,
  });
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-dsr-package-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
beforeEach(() => {
  ledgerMock.reset();
  s3Mock.reset();
  // The audit bucket: every hand-out appends a record to the request's packages chain.
  s3Mock.on(ListObjectsV2Command).resolves({ Contents: [], KeyCount: 0 });
  s3Mock.on(PutObjectCommand).resolves({});
});

/** The audit records the command wrote, with their keys. */
function auditRecords(): { key: string; record: Record<string, unknown> }[] {
  return s3Mock.commandCalls(PutObjectCommand).map((call) => ({
    key: String(call.args[0].input.Key),
    record: JSON.parse(String(call.args[0].input.Body)) as Record<string, unknown>,
  }));
}

const erased = () =>
  completed({
    type: 'erasure',
    outcome: 'erased',
    erasure: { outcome: 'deleted', platform_status: 204, at: '2026-11-20T10:00:00Z' },
  });

describe('runPackage --raw --out', () => {
  it('downloads the recorded version of the archive, checks it against the ledger, and writes it readable only by the owner', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: s3Body(ZIP), ContentLength: ZIP.length }));
    const out = join(dir, 'ok.zip');
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out },
      io,
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(s3Mock).toHaveReceivedCommandWith(GetObjectCommand, {
      Bucket: 'archives',
      Key: KEY,
      VersionId: 'v-3',
    });
    expect(await readFile(out)).toEqual(ZIP);
    expect((await stat(out)).mode & 0o777).toBe(0o600);
    expect(result).toMatchObject({ path: out, bytes: ZIP.length, verified: true });
    expect(io.stdout()).toContain('(matches the ledger)');
  });

  it('records the hand-out of a file: who, how, the archive, and never the path', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: s3Body(ZIP), ContentLength: ZIP.length }));
    const out = join(dir, 'alice-export.zip');
    // Act
    await runPackage(testContext(), { requestId: REQUEST_ID, raw: true, out }, collectingIo());
    // Assess
    const records = auditRecords();
    expect(records).toHaveLength(1);
    expect(records[0]?.key).toBe(`audit/${REQUEST_ID}.packages/000000.json`);
    expect(records[0]?.record).toMatchObject({
      step: 'Operator',
      action: 'package_handed_out',
      at: expect.any(String),
      facts: {
        operator: OPERATOR,
        delivery: 'file',
        file_mode: '0600',
        type: 'access',
        key: KEY,
        version_id: 'v-3',
        reason: null,
      },
    });
    expect(JSON.stringify(records)).not.toContain('alice-export');
  });

  it("refuses an erasure request's archive without --reason (exit 1), before any download", async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(erased()) });
    const out = join(dir, 'erased.zip');
    // Act
    const refused = runPackage(testContext(), { requestId: REQUEST_ID, raw: true, out }, collectingIo());
    // Assess
    await expect(refused).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('is an erasure: its archive is the copy of the subject'),
    });
    expect(s3Mock.commandCalls(GetObjectCommand)).toHaveLength(0);
    expect(auditRecords()).toEqual([]);
    expect((await readdir(dir)).filter((name) => name.startsWith('erased'))).toEqual([]);
  });

  it("hands out an erasure request's archive with --reason, recording the reason", async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(erased()) });
    s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: s3Body(ZIP), ContentLength: ZIP.length }));
    const out = join(dir, 'erased-with-reason.zip');
    // Act
    const { exitCode } = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out, reason: 'restore after a wrongful erasure, ticket DSR-77' },
      collectingIo(),
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(auditRecords()[0]?.record).toMatchObject({
      action: 'package_handed_out',
      facts: { type: 'erasure', delivery: 'file', reason: 'restore after a wrongful erasure, ticket DSR-77' },
    });
  });

  it('writes no copy when the hand-out cannot be recorded (exit 1)', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: s3Body(ZIP), ContentLength: ZIP.length }));
    s3Mock.on(PutObjectCommand).rejects(new Error('AccessDenied'));
    const out = join(dir, 'unrecorded.zip');
    // Act
    const refused = runPackage(testContext(), { requestId: REQUEST_ID, raw: true, out }, collectingIo());
    // Assess
    await expect(refused).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining(`nothing was handed out for ${REQUEST_ID}, but its audit record`),
    });
    expect((await readdir(dir)).filter((name) => name.startsWith('unrecorded'))).toEqual([]);
  });

  it('deletes the copy and exits 1 when its SHA-256 differs from the ledger', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    const tampered = Buffer.from(ZIP);
    tampered[10] = 0x21;
    s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: s3Body(tampered) }));
    const out = join(dir, 'tampered.zip');
    // Act
    const error = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    // Assess
    expect(error).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('does not match the ledger'),
    });
    expect((await readdir(dir)).filter((name) => name.startsWith('tampered'))).toEqual([]);
  });

  it('exits 1 when the archive has gone from the bucket', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(GetObjectCommand).rejects(new NoSuchKey({ message: 'gone', $metadata: {} }));
    await expect(
      runPackage(
        testContext(),
        { requestId: REQUEST_ID, raw: true, out: join(dir, 'gone.zip') },
        collectingIo(),
      ),
    ).rejects.toMatchObject({ exitCode: 1, message: expect.stringContaining('no longer in the bucket') });
  });

  it('refuses to replace an existing file unless --force', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: s3Body(ZIP) }));
    const out = join(dir, 'exists.zip');
    await writeFile(out, 'keep me');
    await expect(
      runPackage(testContext(), { requestId: REQUEST_ID, raw: true, out }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('pass --force'),
    });
    expect(await readFile(out, 'utf8')).toBe('keep me');
    await runPackage(testContext(), { requestId: REQUEST_ID, raw: true, out, force: true }, collectingIo());
    expect(await readFile(out)).toEqual(ZIP);
  });

  it('refuses a request without an archive or not completed (exit 1)', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolvesOnce({ Item: storedItem(completed({ outcome: 'no_data', archive: undefined })) });
    await expect(
      runPackage(
        testContext(),
        { requestId: REQUEST_ID, raw: true, out: join(dir, 'x.zip') },
        collectingIo(),
      ),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('has no archive (outcome no_data)'),
    });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(ledgerRecord()) });
    await expect(
      runPackage(
        testContext(),
        { requestId: REQUEST_ID, raw: true, out: join(dir, 'x.zip') },
        collectingIo(),
      ),
    ).rejects.toThrow('is running; a package exists only for a completed request');
    expect(s3Mock.calls()).toHaveLength(0);
  });
});

describe('runPackageLink --raw', () => {
  it('prints a presigned link to the recorded archive version that expires when asked', async () => {
    const record = ledgerRecord({
      status: 'completed',
      outcome: 'exported',
      archive: {
        key: 'exports/r/attempt-1.zip',
        bytes: 42,
        sha256: 'ab'.repeat(32),
        entries: 4,
        verified_at: 'x',
        version_id: 'v-7',
      },
    });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(record) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: 42 });
    const io = collectingIo();
    const { exitCode, result } = await runPackageLink(
      testContext(),
      { requestId: REQUEST_ID, raw: true, expiresIn: '86400', json: true },
      io,
    );
    expect(exitCode).toBe(0);
    const url = new URL(result.url);
    expect(url.pathname).toContain('exports/r/attempt-1.zip');
    expect(url.searchParams.get('X-Amz-Expires')).toBe('86400');
    expect(url.searchParams.get('versionId')).toBe('v-7');
    expect(s3Mock).toHaveReceivedCommandWith(HeadObjectCommand, {
      Key: 'exports/r/attempt-1.zip',
      VersionId: 'v-7',
    });
    expect(JSON.parse(io.stdout())).toMatchObject({ bytes: 42, key: 'exports/r/attempt-1.zip' });
    expect(auditRecords()[0]?.record).toMatchObject({
      action: 'package_handed_out',
      facts: {
        operator: OPERATOR,
        delivery: 'link',
        link_expires_at: '2026-11-22T12:00:00.000Z',
        key: 'exports/r/attempt-1.zip',
      },
    });
  });

  it("keeps the packages chain's head on the request's ledger item, beside the request's own head", async () => {
    // Prepare: the first hand-out of the archive.
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    // Act
    const { exitCode } = await runPackageLink(
      testContext(),
      { requestId: REQUEST_ID, raw: true },
      collectingIo(),
    );
    // Assess
    expect(exitCode).toBe(0);
    const [record] = auditRecords();
    expect(ledgerMock).toHaveReceivedCommandWith(UpdateItemCommand, {
      Key: { request_id: { S: REQUEST_ID } },
      ExpressionAttributeNames: {
        '#head': 'packages_audit_head',
        '#count': 'packages_audit_count',
        '#at': 'packages_audit_at',
      },
      ExpressionAttributeValues: expect.objectContaining({
        ':head': { S: String(record?.record.hash) },
        ':count': { N: '1' },
      }),
    });
  });

  it("refuses a link to an erasure request's archive without --reason, and prints none when the record fails", async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(erased()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    s3Mock.on(PutObjectCommand).rejects(new Error('AccessDenied'));
    const io = collectingIo();
    // Act
    const withoutReason = runPackageLink(testContext(), { requestId: REQUEST_ID, raw: true }, io);
    const unrecorded = runPackageLink(
      testContext(),
      { requestId: REQUEST_ID, raw: true, reason: 'court order 12/3' },
      io,
    );
    // Assess
    await expect(withoutReason).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('--reason'),
    });
    await expect(unrecorded).rejects.toMatchObject({ exitCode: 1 });
    expect(io.stdout()).toBe('');
  });

  it('refuses with exit 1 when the archive is gone from the bucket', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          status: 'completed',
          outcome: 'exported',
          archive: { key: 'k', bytes: 42, sha256: 'ab', entries: 4, verified_at: 'x' },
        }),
      ),
    });
    s3Mock.on(HeadObjectCommand).rejects(new NotFound({ message: 'gone', $metadata: {} }));
    await expect(
      runPackageLink(testContext(), { requestId: REQUEST_ID, raw: true }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
    });
  });

  it('refuses an expiry beyond 7 days before any AWS call', async () => {
    await expect(
      runPackageLink(
        testContext(),
        { requestId: REQUEST_ID, raw: true, expiresIn: '604801' },
        collectingIo(),
      ),
    ).rejects.toThrow('--expires-in: must be at most 604800 seconds');
    expect(ledgerMock.calls()).toHaveLength(0);
  });
});

describe('package without --raw: the subject package', () => {
  const PACKAGE = Buffer.from('PK\u0003\u0004 pretend this is the subject package');
  const PACKAGE_KEY = `exports/${REQUEST_ID}/subject-package.zip`;
  const withPackage = () =>
    completed({
      subject_package: {
        key: PACKAGE_KEY,
        bytes: PACKAGE.length,
        sha256: createHash('sha256').update(PACKAGE).digest('hex'),
        version_id: 'v-9',
        file_name: 'your-data-2026-11-23.zip',
        built_at: '2026-11-23T12:00:00Z',
        conversation_details: 'complete',
      },
    });

  it('downloads the recorded subject package, not the archive, and records which package went out', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(withPackage()) });
    s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: s3Body(PACKAGE), ContentLength: PACKAGE.length }));
    const out = join(dir, 'your-data.zip');

    const { exitCode, result } = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, out },
      collectingIo(),
    );

    expect(exitCode).toBe(0);
    expect(s3Mock).toHaveReceivedCommandWith(GetObjectCommand, { Key: PACKAGE_KEY, VersionId: 'v-9' });
    expect(s3Mock).not.toHaveReceivedCommandWith(GetObjectCommand, { Key: KEY });
    expect(await readFile(out)).toEqual(PACKAGE);
    expect(result).toMatchObject({ package: 'subject_package', key: PACKAGE_KEY, verified: true });
    expect(auditRecords()[0]?.record).toMatchObject({
      facts: { package: 'subject_package', key: PACKAGE_KEY, delivery: 'file' },
    });
  });

  it('prints a link that saves the package under its your-data name', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(withPackage()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: PACKAGE.length });
    const io = collectingIo();

    const { result } = await runPackageLink(testContext(), { requestId: REQUEST_ID, json: true }, io);

    const url = new URL(result.url);
    expect(url.pathname).toContain(PACKAGE_KEY);
    expect(url.searchParams.get('response-content-disposition')).toBe(
      'attachment; filename="your-data-2026-11-23.zip"',
    );
    expect(result).toMatchObject({ package: 'subject_package', file_name: 'your-data-2026-11-23.zip' });
    expect(auditRecords()[0]?.record).toMatchObject({
      facts: { package: 'subject_package', delivery: 'link' },
    });
  });

  it('--raw still hands out the platform archive of a request that has both', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(withPackage()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });

    const { result } = await runPackageLink(
      testContext(),
      { requestId: REQUEST_ID, raw: true, json: true },
      collectingIo(),
    );

    expect(result).toMatchObject({ package: 'platform_archive', key: KEY });
    expect(new URL(result.url).searchParams.get('response-content-disposition')).toBeNull();
  });

  it('sends an access request completed before packages existed to --raw (exit 1), before any S3 call', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });

    const attempt = runPackageLink(testContext(), { requestId: REQUEST_ID }, collectingIo());

    await expect(attempt).rejects.toMatchObject({ exitCode: 1 });
    await expect(runPackageLink(testContext(), { requestId: REQUEST_ID }, collectingIo())).rejects.toThrow(
      /has no subject package .*hand out the platform archive with --raw/,
    );
    expect(s3Mock).not.toHaveReceivedCommand(HeadObjectCommand);
    expect(auditRecords()).toEqual([]);
  });

  it('tells an erasure request has no subject package, and how its archive is handed out (exit 1)', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(erased()) });
    const out = join(dir, 'erased.zip');

    await expect(runPackage(testContext(), { requestId: REQUEST_ID, out }, collectingIo())).rejects.toThrow(
      /is an erasure: it has no subject package.*only with --raw and --reason/,
    );
    expect(s3Mock).not.toHaveReceivedCommand(GetObjectCommand);
  });
});
