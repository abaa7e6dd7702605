import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { DynamoDBClient, GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import {
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  NotFound,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  fetchLink,
  type LinkDownloader,
  runPackage,
  runPackageLink,
} from '../../../bin/cli/commands/package.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { ledgerRecord, NOW, OPERATOR, REQUEST_ID, storedItem, testContext } from './helpers.ts';

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

/**
 * The archive bucket behind the links the operator function signs: it serves `objects` (by key
 * and version, `<key>@<version>`) at the bucket's own host, as S3 serves a presigned GET, and
 * keeps every link it was asked for.
 */
function bucketServing(objects: Record<string, Buffer>): LinkDownloader & { links: string[] } {
  const links: string[] = [];
  const download: LinkDownloader = async (url) => {
    links.push(url);
    const link = new URL(url);
    const body = link.hostname.startsWith('archives.')
      ? objects[`${decodeURIComponent(link.pathname.slice(1))}@${link.searchParams.get('versionId') ?? ''}`]
      : undefined;
    return body === undefined
      ? { status: 404, errorCode: 'NoSuchKey' }
      : { status: 200, body: Readable.from([body]) };
  };
  return Object.assign(download, { links });
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

/** The audit records the operator function wrote, with their keys. */
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
  it('downloads the recorded version through a short link the operator function signs, checks it against the ledger, and writes it readable only by the owner', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    const bucket = bucketServing({ [`${KEY}@v-3`]: ZIP });
    const out = join(dir, 'ok.zip');
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out },
      io,
      bucket,
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(s3Mock).toHaveReceivedCommandWith(HeadObjectCommand, {
      Bucket: 'archives',
      Key: KEY,
      VersionId: 'v-3',
    });
    // The CLI reads no object itself: its policy has no read of the archive bucket.
    expect(s3Mock).not.toHaveReceivedCommand(GetObjectCommand);
    expect(bucket.links).toHaveLength(1);
    const link = new URL(bucket.links[0] ?? '');
    expect(link.searchParams.get('X-Amz-Expires')).toBe('300');
    expect(await readFile(out)).toEqual(ZIP);
    expect((await stat(out)).mode & 0o777).toBe(0o600);
    expect(result).toMatchObject({ path: out, bytes: ZIP.length, version_id: 'v-3', verified: true });
    expect(io.stdout()).toContain('(matches the ledger)');
    expect(io.stdout() + io.stderr()).not.toContain('X-Amz-Signature');
  });

  it('records the hand-out of a file before the download: who, how, until when, the archive, and never the path or the link', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    const bucket = bucketServing({ [`${KEY}@v-3`]: ZIP });
    const out = join(dir, 'alice-export.zip');
    // Act
    await runPackage(testContext(), { requestId: REQUEST_ID, raw: true, out }, collectingIo(), bucket);
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
        link_expires_at: new Date(NOW.getTime() + 300_000).toISOString(),
        type: 'access',
        package: 'platform_archive',
        key: KEY,
        version_id: 'v-3',
        reason: null,
      },
    });
    const written = JSON.stringify(records);
    expect(written).not.toContain('alice-export');
    expect(written).not.toContain(new URL(bucket.links[0] ?? '').searchParams.get('X-Amz-Signature'));
    expect(written).not.toContain('X-Amz-');
  });

  it("refuses an erasure request's archive without --reason (exit 1), before any link", async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(erased()) });
    const bucket = bucketServing({ [`${KEY}@v-3`]: ZIP });
    const out = join(dir, 'erased.zip');
    // Act
    const refused = runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out },
      collectingIo(),
      bucket,
    );
    // Assess
    await expect(refused).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('is an erasure: its archive is the copy of the subject'),
    });
    expect(bucket.links).toEqual([]);
    expect(s3Mock).not.toHaveReceivedCommand(HeadObjectCommand);
    expect(auditRecords()).toEqual([]);
    expect((await readdir(dir)).filter((name) => name.startsWith('erased'))).toEqual([]);
  });

  it("hands out an erasure request's archive with --reason, recording the reason", async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(erased()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    const out = join(dir, 'erased-with-reason.zip');
    // Act
    const { exitCode } = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out, reason: 'restore after a wrongful erasure, ticket DSR-77' },
      collectingIo(),
      bucketServing({ [`${KEY}@v-3`]: ZIP }),
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(auditRecords()[0]?.record).toMatchObject({
      action: 'package_handed_out',
      facts: { type: 'erasure', delivery: 'file', reason: 'restore after a wrongful erasure, ticket DSR-77' },
    });
  });

  it('hands out no link and writes no copy when the hand-out cannot be recorded (exit 1)', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    s3Mock.on(PutObjectCommand).rejects(new Error('AccessDenied'));
    const bucket = bucketServing({ [`${KEY}@v-3`]: ZIP });
    const out = join(dir, 'unrecorded.zip');
    // Act
    const refused = runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out },
      collectingIo(),
      bucket,
    );
    // Assess
    await expect(refused).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining(`nothing was handed out for ${REQUEST_ID}, but its audit record`),
    });
    expect(bucket.links).toEqual([]);
    expect((await readdir(dir)).filter((name) => name.startsWith('unrecorded'))).toEqual([]);
  });

  it('deletes the copy and exits 1 when its SHA-256 differs from the ledger', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    const tampered = Buffer.from(ZIP);
    tampered[10] = 0x21;
    const out = join(dir, 'tampered.zip');
    // Act
    const error = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out },
      collectingIo(),
      bucketServing({ [`${KEY}@v-3`]: tampered }),
    ).catch((caught: unknown) => caught);
    // Assess
    expect(error).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('does not match the ledger'),
    });
    expect((await readdir(dir)).filter((name) => name.startsWith('tampered'))).toEqual([]);
  });

  it('exits 1, recording nothing, when the archive has gone from the bucket or is not the size recorded', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock
      .on(HeadObjectCommand)
      .rejectsOnce(new NotFound({ message: 'gone', $metadata: {} }))
      .resolves({ ContentLength: ZIP.length + 1 });
    const bucket = bucketServing({ [`${KEY}@v-3`]: ZIP });
    const attempt = () =>
      runPackage(
        testContext(),
        { requestId: REQUEST_ID, raw: true, out: join(dir, 'gone.zip') },
        collectingIo(),
        bucket,
      );
    // Act + Assess
    await expect(attempt()).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('no longer in the bucket'),
    });
    await expect(attempt()).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining(`the ledger says ${ZIP.length}; run npx svc-dsr verify`),
    });
    expect(bucket.links).toEqual([]);
    expect(auditRecords()).toEqual([]);
  });

  it('exits 1 with neither the link nor any part of it in the message when the link is refused or the download breaks', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    const links: string[] = [];
    const refusing: LinkDownloader = async (url) => {
      links.push(url);
      return { status: 403, errorCode: 'AccessDenied' };
    };
    const breaking: LinkDownloader = async (url) => {
      links.push(url);
      const cause = Object.assign(new Error(`socket hang up on ${url}`), { code: 'ECONNRESET' });
      throw new TypeError(`fetch failed: ${url}`, { cause });
    };
    const attempt = (download: LinkDownloader) =>
      runPackage(
        testContext(),
        { requestId: REQUEST_ID, raw: true, out: join(dir, 'refused.zip') },
        collectingIo(),
        download,
      ).then(
        () => new Error('the download was expected to fail'),
        (caught: unknown) => (caught instanceof Error ? caught : new Error(String(caught))),
      );
    // Act
    const refused = await attempt(refusing);
    const broken = await attempt(breaking);
    // Assess
    expect(refused).toMatchObject({ exitCode: 1, message: expect.stringContaining('HTTP 403 AccessDenied') });
    expect(broken).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('(TypeError, caused by Error ECONNRESET)'),
    });
    expect(links).toHaveLength(2);
    for (const error of [refused, broken]) {
      for (const link of links) {
        expect(error.message).not.toContain(link);
        expect(error.message).not.toContain(new URL(link).searchParams.get('X-Amz-Signature'));
      }
      expect(error.message).not.toContain('amazonaws.com');
    }
    expect((await readdir(dir)).filter((name) => name.startsWith('refused'))).toEqual([]);
  });

  it('refuses to replace an existing file unless --force', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    const bucket = bucketServing({ [`${KEY}@v-3`]: ZIP });
    const out = join(dir, 'exists.zip');
    await writeFile(out, 'keep me');
    await expect(
      runPackage(testContext(), { requestId: REQUEST_ID, raw: true, out }, collectingIo(), bucket),
    ).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('pass --force'),
    });
    expect(await readFile(out, 'utf8')).toBe('keep me');
    expect(auditRecords()).toEqual([]);
    await runPackage(
      testContext(),
      { requestId: REQUEST_ID, raw: true, out, force: true },
      collectingIo(),
      bucket,
    );
    expect(await readFile(out)).toEqual(ZIP);
  });

  it('refuses a request without an archive or not completed (exit 1)', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolvesOnce({ Item: storedItem(completed({ outcome: 'no_data', archive: undefined })) });
    const bucket = bucketServing({});
    await expect(
      runPackage(
        testContext(),
        { requestId: REQUEST_ID, raw: true, out: join(dir, 'x.zip') },
        collectingIo(),
        bucket,
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
        bucket,
      ),
    ).rejects.toThrow('is running; a package exists only for a completed request');
    expect(s3Mock.calls()).toHaveLength(0);
    expect(bucket.links).toEqual([]);
  });

  it('names the ledger and the target for an unknown request (exit 1)', async () => {
    ledgerMock.on(GetItemCommand).resolves({});
    await expect(
      runPackage(
        testContext(),
        { requestId: REQUEST_ID, raw: true, out: join(dir, 'unknown.zip') },
        collectingIo(),
        bucketServing({}),
      ),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: `no request ${REQUEST_ID} in the ledger (ledger, target aws): check the id, or the --target/--stack-outputs you meant`,
    });
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
      { requestId: REQUEST_ID, raw: true, expiresIn: '1800', json: true },
      io,
    );
    expect(exitCode).toBe(0);
    const url = new URL(result.url);
    expect(url.pathname).toContain('exports/r/attempt-1.zip');
    expect(url.searchParams.get('X-Amz-Expires')).toBe('1800');
    expect(url.searchParams.get('versionId')).toBe('v-7');
    expect(s3Mock).toHaveReceivedCommandWith(HeadObjectCommand, {
      Key: 'exports/r/attempt-1.zip',
      VersionId: 'v-7',
    });
    expect(JSON.parse(io.stdout())).toMatchObject({
      bytes: 42,
      key: 'exports/r/attempt-1.zip',
      expires_at: '2026-11-21T12:30:00.000Z',
    });
    const [handOut] = auditRecords();
    expect(handOut?.record).toMatchObject({
      action: 'package_handed_out',
      facts: {
        operator: OPERATOR,
        delivery: 'link',
        link_expires_at: '2026-11-21T12:30:00.000Z',
        key: 'exports/r/attempt-1.zip',
      },
    });
    expect(handOut?.record.facts).not.toHaveProperty('file_mode');
    expect(JSON.stringify(handOut)).not.toContain(url.searchParams.get('X-Amz-Signature'));
  });

  it('ends the link with the credentials that signed it when they end sooner, and says when', async () => {
    // Prepare: the function's session has ten minutes left.
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(completed()) });
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: ZIP.length });
    const expiration = new Date(Date.now() + 600_000);
    const s3 = new S3Client({
      region: 'eu-west-1',
      credentials: async () => ({
        accessKeyId: 'ASIATEST',
        secretAccessKey: 'test',
        sessionToken: 'session',
        expiration,
      }),
    });
    // Act
    const { result } = await runPackageLink(
      testContext({ s3 }, () => new Date(expiration.getTime() - 600_000)),
      { requestId: REQUEST_ID, raw: true, expiresIn: '3600', json: true },
      collectingIo(),
    );
    // Assess
    expect(new URL(result.url).searchParams.get('X-Amz-Expires')).toBe('600');
    expect(result.expires_at).toBe(expiration.toISOString());
    expect(auditRecords()[0]?.record).toMatchObject({
      facts: { link_expires_at: expiration.toISOString() },
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
    expect(auditRecords()).toEqual([]);
  });

  it('refuses an expiry beyond one hour before any AWS call', async () => {
    await expect(
      runPackageLink(testContext(), { requestId: REQUEST_ID, raw: true, expiresIn: '3601' }, collectingIo()),
    ).rejects.toThrow('--expires-in: must be at most 3600 seconds');
    expect(ledgerMock.calls()).toHaveLength(0);
    expect(s3Mock.calls()).toHaveLength(0);
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
    s3Mock.on(HeadObjectCommand).resolves({ ContentLength: PACKAGE.length });
    const bucket = bucketServing({ [`${PACKAGE_KEY}@v-9`]: PACKAGE, [`${KEY}@v-3`]: ZIP });
    const out = join(dir, 'your-data.zip');

    const { exitCode, result } = await runPackage(
      testContext(),
      { requestId: REQUEST_ID, out },
      collectingIo(),
      bucket,
    );

    expect(exitCode).toBe(0);
    expect(s3Mock).toHaveReceivedCommandWith(HeadObjectCommand, { Key: PACKAGE_KEY, VersionId: 'v-9' });
    expect(s3Mock).not.toHaveReceivedCommandWith(HeadObjectCommand, { Key: KEY });
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
    const bucket = bucketServing({});

    await expect(
      runPackage(testContext(), { requestId: REQUEST_ID, out }, collectingIo(), bucket),
    ).rejects.toThrow(/is an erasure: it has no subject package.*only with --raw and --reason/);
    expect(bucket.links).toEqual([]);
  });
});

describe('fetchLink', () => {
  it('streams a 2xx body, and keeps only the error code of a refusal', async () => {
    // Prepare: a loopback stand-in for S3 that serves one path and refuses the rest as S3 does.
    const server = createServer((request, response) => {
      if (request.url === '/ok') {
        response.writeHead(200, { 'content-length': String(ZIP.length) }).end(ZIP);
        return;
      }
      response.writeHead(403, { 'content-type': 'application/xml' });
      response.end(
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message><X-Amz-Expires>300</X-Amz-Expires></Error>',
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      // Act
      const ok = await fetchLink(`${base}/ok`);
      const refused = await fetchLink(`${base}/expired?X-Amz-Signature=abc`);
      // Assess
      expect(ok.status).toBe(200);
      const chunks: Buffer[] = [];
      for await (const chunk of ok.body ?? []) chunks.push(Buffer.from(chunk));
      expect(Buffer.concat(chunks)).toEqual(ZIP);
      expect(refused).toEqual({ status: 403, errorCode: 'AccessDenied' });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
