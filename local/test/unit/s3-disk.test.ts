import { createHash, randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import { syncBuiltinESMExports } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  type ListObjectVersionsCommandOutput,
  ListPartsCommand,
  NoSuchKey,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import yazl from 'yazl';
import { type DiskS3, startDiskS3 } from '#local/aws/s3-disk';
import { copyExportToS3, verifyStoredZip } from '../../../lambdas/shared/archive/index.ts';
import { type AuditEvent, AuditTrail } from '../../../lambdas/shared/audit.ts';

const MiB = 1024 * 1024;
const BUCKET = 'svc-dsr-archive';

let root: string;
let server: DiskS3;
let s3: S3Client;

function clientFor(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-disk-'));
  server = await startDiskS3({ root });
  s3 = clientFor(server.endpoint);
  await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
});

afterAll(async () => {
  s3.destroy();
  await server.close();
  await rm(root, { recursive: true, force: true });
});

function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

function md5Hex(data: Uint8Array | string): string {
  return createHash('md5').update(data).digest('hex');
}

function statusOf(error: unknown): unknown {
  if (typeof error !== 'object' || error === null || !('$metadata' in error)) return undefined;
  const metadata = error.$metadata;
  return typeof metadata === 'object' && metadata !== null && 'httpStatusCode' in metadata
    ? metadata.httpStatusCode
    : undefined;
}

async function rejectionOf(promise: Promise<unknown>): Promise<{ name?: unknown; status?: unknown }> {
  try {
    await promise;
  } catch (error) {
    if (typeof error !== 'object' || error === null) return {};
    return { name: 'name' in error ? error.name : undefined, status: statusOf(error) };
  }
  throw new Error('expected the promise to reject');
}

/** A header of an SDK request as a middleware sees it (the request is typed unknown there). */
function requestHeader(request: unknown, name: string): unknown {
  if (typeof request !== 'object' || request === null || !('headers' in request)) return undefined;
  const headers = request.headers;
  if (typeof headers !== 'object' || headers === null) return undefined;
  return Object.entries(headers).find(([key]) => key === name)?.[1];
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function readText(key: string, bucket = BUCKET): Promise<string> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return (await answer.Body?.transformToString()) ?? '';
}

async function put(key: string, body: string, bucket = BUCKET): Promise<void> {
  await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
}

interface RawAnswer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
}

/** A hand-made request, for framing and paths the SDK would never produce. */
function rawRequest(
  method: string,
  path: string,
  headers: Record<string, string>,
  chunks: readonly Buffer[] = [],
): Promise<RawAnswer> {
  const { hostname, port } = new URL(server.endpoint);
  return new Promise((resolve, reject) => {
    const outgoing = request({ host: hostname, port, method, path, headers, agent: false }, (answer) => {
      const received: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => received.push(chunk));
      answer.on('end', () =>
        resolve({
          status: answer.statusCode ?? 0,
          headers: answer.headers,
          body: Buffer.concat(received).toString('utf8'),
        }),
      );
    });
    outgoing.on('error', reject);
    // One write per chunk, so framing lines arrive split across reads.
    (async () => {
      for (const chunk of chunks) {
        outgoing.write(chunk);
        await new Promise((next) => setImmediate(next));
      }
      outgoing.end();
    })().catch(reject);
  });
}

/** The aws-chunked framing the SDK sends for a streaming body, cut into small writes. */
function awsChunked(data: Buffer, trailer: string, chunkSize: number): Buffer[] {
  const frames: Buffer[] = [];
  for (let offset = 0; offset < data.length; offset += chunkSize) {
    const slice = data.subarray(offset, offset + chunkSize);
    frames.push(
      Buffer.from(`${slice.length.toString(16)};chunk-signature=abc\r\n`),
      slice,
      Buffer.from('\r\n'),
    );
  }
  const tail = Buffer.from(`0\r\n${trailer}\r\n\r\n`);
  // Split every framing line byte by byte at the end, the hardest case for a line parser.
  return [...frames, ...[...tail].map((byte) => Buffer.from([byte]))];
}

describe('startDiskS3', () => {
  it('listens on loopback and reports an absolute data folder', () => {
    // Assess
    expect(server.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(server.root).toBe(root);
  });

  it('stops answering once closed, even with kept-alive connections open', async () => {
    // Prepare
    const folder = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-close-'));
    const local = await startDiskS3({ root: folder });
    const client = clientFor(local.endpoint);
    await client.send(new CreateBucketCommand({ Bucket: 'closing' }));

    // Act
    await local.close();
    await local.close();
    const after = client.send(new HeadBucketCommand({ Bucket: 'closing' }));

    // Assess
    await expect(after).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    client.destroy();
    await rm(folder, { recursive: true, force: true });
  });
});

describe('LastModified', () => {
  it("is the stand-in's own time of the write, whatever the writer sends", async () => {
    // Prepare: the stand-in's clock says day one; the writer claims an older time in every header it can.
    const folder = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-time-'));
    const storedAt = new Date('2026-11-20T10:00:00.000Z');
    const local = await startDiskS3({ root: folder, clock: () => storedAt });
    const client = clientFor(local.endpoint);
    await client.send(new CreateBucketCommand({ Bucket: 'times' }));
    client.middlewareStack.add(
      (next) => async (args) => {
        const request = args.request as { headers?: Record<string, string> };
        if (request.headers) {
          request.headers['last-modified'] = 'Wed, 01 Jan 2025 00:00:00 GMT';
          request.headers['x-amz-date'] = '20250101T000000Z';
        }
        return next(args);
      },
      { step: 'finalizeRequest', name: 'claimOldTime' },
    );

    // Act
    await client.send(new PutObjectCommand({ Bucket: 'times', Key: 'record.json', Body: '{}' }));
    const listed = await client.send(new ListObjectsV2Command({ Bucket: 'times' }));
    const head = await client.send(new HeadObjectCommand({ Bucket: 'times', Key: 'record.json' }));

    // Assess
    expect(listed.Contents?.map((object) => object.LastModified?.toISOString())).toEqual([
      storedAt.toISOString(),
    ]);
    expect(head.LastModified?.toISOString()).toBe(storedAt.toISOString());
    client.destroy();
    await local.close();
    await rm(folder, { recursive: true, force: true });
  });
});

describe('syncWrites', () => {
  async function datasyncsOfOnePut(syncWrites: boolean | undefined): Promise<number> {
    const folder = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-sync-'));
    // Small files are flushed with fdatasyncSync, streamed ones through their FileHandle.
    const probe = await open(join(folder, 'probe'), 'w');
    const datasync = vi.spyOn(Object.getPrototypeOf(probe), 'datasync');
    await probe.close();
    const datasyncSync = vi.spyOn(fs, 'fdatasyncSync');
    syncBuiltinESMExports();
    const local = await startDiskS3(
      syncWrites === undefined ? { root: folder } : { root: folder, syncWrites },
    );
    const client = clientFor(local.endpoint);
    try {
      await client.send(new CreateBucketCommand({ Bucket: 'flushed' }));
      const beforePut = datasync.mock.calls.length + datasyncSync.mock.calls.length;
      await client.send(new PutObjectCommand({ Bucket: 'flushed', Key: 'a/b.json', Body: '{"a":1}' }));
      const stored = await readFile(join(folder, 'flushed', 'a', 'b.json'), 'utf8');
      expect(stored).toBe('{"a":1}');
      return datasync.mock.calls.length + datasyncSync.mock.calls.length - beforePut;
    } finally {
      datasync.mockRestore();
      datasyncSync.mockRestore();
      syncBuiltinESMExports();
      client.destroy();
      await local.close();
      await rm(folder, { recursive: true, force: true });
    }
  }

  it('flushes the object and its sidecar to the disk before answering when asked to', async () => {
    // Act
    const flushes = await datasyncsOfOnePut(true);

    // Assess
    expect(flushes).toBe(2);
  });

  it('leaves flushing to the operating system by default', async () => {
    // Act
    const flushes = await datasyncsOfOnePut(undefined);

    // Assess
    expect(flushes).toBe(0);
  });
});

describe('buckets', () => {
  it('creates a bucket as a folder and answers BucketAlreadyOwnedByYou the second time', async () => {
    // Prepare
    await s3.send(new CreateBucketCommand({ Bucket: 'twice' }));

    // Act
    const again = await rejectionOf(s3.send(new CreateBucketCommand({ Bucket: 'twice' })));

    // Assess
    expect(again).toEqual({ name: 'BucketAlreadyOwnedByYou', status: 409 });
    expect((await stat(join(root, 'twice'))).isDirectory()).toBe(true);
  });

  it('answers HeadBucket for an existing bucket and NotFound for a missing one', async () => {
    // Act
    const found = await s3.send(new HeadBucketCommand({ Bucket: BUCKET }));
    const missing = await rejectionOf(s3.send(new HeadBucketCommand({ Bucket: 'no-such-bucket' })));

    // Assess
    expect(found.$metadata.httpStatusCode).toBe(200);
    expect(missing).toEqual({ name: 'NotFound', status: 404 });
  });

  it('answers NoSuchBucket for object calls on a missing bucket', async () => {
    // Act
    const putting = await rejectionOf(
      s3.send(new PutObjectCommand({ Bucket: 'no-such-bucket', Key: 'k', Body: 'x' })),
    );
    const listing = await rejectionOf(s3.send(new ListObjectsV2Command({ Bucket: 'no-such-bucket' })));

    // Assess
    expect(putting).toEqual({ name: 'NoSuchBucket', status: 404 });
    expect(listing).toEqual({ name: 'NoSuchBucket', status: 404 });
    expect(await exists(join(root, 'no-such-bucket'))).toBe(false);
  });

  it('refuses a bucket name that could not be a folder of its own', async () => {
    // Act
    const answer = await rawRequest('PUT', '/.meta', {});

    // Assess
    expect(answer.status).toBe(400);
    expect(answer.body).toContain('<Code>InvalidBucketName</Code>');
  });

  it('keeps the versioning status it is given, and from then on a version per write', async () => {
    // Prepare
    await s3.send(new CreateBucketCommand({ Bucket: 'versioned' }));
    const before = await s3.send(new PutObjectCommand({ Bucket: 'versioned', Key: 'a.txt', Body: 'v0' }));
    await s3.send(
      new PutBucketVersioningCommand({ Bucket: 'versioned', VersioningConfiguration: { Status: 'Enabled' } }),
    );

    // Act
    const first = await s3.send(new PutObjectCommand({ Bucket: 'versioned', Key: 'a.txt', Body: 'v1' }));
    const second = await s3.send(new PutObjectCommand({ Bucket: 'versioned', Key: 'a.txt', Body: 'v2' }));
    const versioning = await s3.send(new GetBucketVersioningCommand({ Bucket: 'versioned' }));

    // Assess
    expect(before.VersionId).toBeUndefined();
    expect(first.VersionId).toMatch(/^[0-9a-z]{11}[0-9A-Za-z]{21}$/);
    expect(second.VersionId).not.toBe(first.VersionId);
    expect(versioning.Status).toBe('Enabled');
    expect(await readFile(join(root, 'versioned', 'a.txt'), 'utf8')).toBe('v2');
    expect(await readText('a.txt', 'versioned')).toBe('v2');
  });
});

describe('PutObject and GetObject', () => {
  it('stores the object as a plain file at <root>/<bucket>/<key> with its metadata in a hidden sidecar', async () => {
    // Prepare
    const key = `exports/${randomUUID()}/attempt-1.zip`;
    const body = randomBytes(3000);

    // Act
    const written = await s3.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: key,
        Body: body,
        ContentType: 'application/zip',
        ServerSideEncryption: 'aws:kms',
        SSEKMSKeyId: 'alias/archive',
        Metadata: { purpose: 'test' },
      }),
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }));

    // Assess
    expect((await readFile(join(root, BUCKET, ...key.split('/')))).equals(body)).toBe(true);
    const sidecar = JSON.parse(await readFile(join(root, '.meta', BUCKET, `${key}.json`), 'utf8'));
    expect(sidecar).toMatchObject({ format: 2, versions: [{ etag: `"${md5Hex(body)}"`, size: 3000 }] });
    expect(sidecar.versions[0].headers).toMatchObject({
      'content-type': 'application/zip',
      'x-amz-server-side-encryption': 'aws:kms',
      'x-amz-server-side-encryption-aws-kms-key-id': 'alias/archive',
    });
    expect(written).toMatchObject({
      ETag: `"${md5Hex(body)}"`,
      ServerSideEncryption: 'aws:kms',
      SSEKMSKeyId: 'alias/archive',
    });
    expect(head).toMatchObject({
      ContentLength: 3000,
      ContentType: 'application/zip',
      ETag: `"${md5Hex(body)}"`,
      ServerSideEncryption: 'aws:kms',
      SSEKMSKeyId: 'alias/archive',
      Metadata: { purpose: 'test' },
    });
    expect(head.LastModified).toBeInstanceOf(Date);
  });

  it('refuses a second write with If-None-Match: * with 412 PreconditionFailed and keeps the first', async () => {
    // Prepare
    const key = `audit/${randomUUID()}/000000-Intake.json`;
    await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'first', IfNoneMatch: '*' }));

    // Act
    const second = await rejectionOf(
      s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'second', IfNoneMatch: '*' })),
    );

    // Assess
    expect(second).toEqual({ name: 'PreconditionFailed', status: 412 });
    expect(await readText(key)).toBe('first');
  });

  it('checks a ChecksumSHA256 against the body: BadDigest on a mismatch, and nothing is stored', async () => {
    // Prepare
    const key = `audit/${randomUUID()}/000000-Intake.json`;
    const wrong = createHash('sha256').update('something else').digest('base64');

    // Act
    const refused = await rejectionOf(
      s3.send(
        new PutObjectCommand({
          Bucket: BUCKET,
          Key: key,
          Body: '{"seq":0}',
          ChecksumAlgorithm: 'SHA256',
          ChecksumSHA256: wrong,
        }),
      ),
    );

    // Assess
    expect(refused).toEqual({ name: 'BadDigest', status: 400 });
    expect(await exists(join(root, BUCKET, ...key.split('/')))).toBe(false);
    expect(await readdir(join(root, '.tmp'))).toEqual([]);
  });

  it('keeps a correct SHA-256 checksum and returns it when the reader asks for checksums', async () => {
    // Prepare
    const key = `audit/${randomUUID()}/000000-Intake.json`;
    const checksum = createHash('sha256').update('{"seq":0}').digest('base64');
    await s3.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: key,
        Body: '{"seq":0}',
        ChecksumAlgorithm: 'SHA256',
        ChecksumSHA256: checksum,
      }),
    );

    // Act
    const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key, ChecksumMode: 'ENABLED' }));

    // Assess
    expect(head.ChecksumSHA256).toBe(checksum);
    expect(head.ChecksumType).toBe('FULL_OBJECT');
  });

  it('decodes the aws-chunked body the SDK sends for a stream and verifies its trailing checksum', async () => {
    // Prepare
    const key = `streams/${randomUUID()}.bin`;
    const body = randomBytes(200_000);
    const encodings: unknown[] = [];
    const client = clientFor(server.endpoint);
    client.middlewareStack.add(
      (next) => async (args) => {
        encodings.push(requestHeader(args.request, 'content-encoding'));
        return next(args);
      },
      { step: 'finalizeRequest', name: 'recordEncoding' },
    );

    // Act
    await client.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: key,
        Body: Readable.from([body.subarray(0, 70_000), body.subarray(70_000)]),
        ContentLength: body.length,
        ChecksumAlgorithm: 'SHA256',
      }),
    );
    client.destroy();

    // Assess
    expect(encodings).toEqual(['aws-chunked']);
    expect((await readFile(join(root, BUCKET, 'streams', key.slice('streams/'.length)))).equals(body)).toBe(
      true,
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key, ChecksumMode: 'ENABLED' }));
    expect(head.ChecksumSHA256).toBe(createHash('sha256').update(body).digest('base64'));
  });

  it('refuses a checksum it does not compute (SHA-1, CRC32C) with NotImplemented, storing nothing', async () => {
    // Act
    const answers = await Promise.all(
      ['sha1', 'crc32c'].map((algorithm) =>
        rawRequest(
          'PUT',
          `/${BUCKET}/unsupported/${algorithm}.txt`,
          { [`x-amz-checksum-${algorithm}`]: 'AAAAAA==', 'content-length': '2' },
          [Buffer.from('{}')],
        ),
      ),
    );

    // Assess
    for (const answer of answers) {
      expect(answer.status).toBe(501);
      expect(answer.body).toContain('<Code>NotImplemented</Code>');
    }
    expect(await exists(join(root, BUCKET, 'unsupported'))).toBe(false);
  });

  it('answers BadDigest when an aws-chunked trailer checksum does not match, and accepts the right one', async () => {
    // Prepare
    const data = Buffer.from('chunked body split across many small reads');
    const headers = {
      'content-encoding': 'aws-chunked',
      'x-amz-content-sha256': 'STREAMING-UNSIGNED-PAYLOAD-TRAILER',
      'x-amz-decoded-content-length': String(data.length),
      'x-amz-trailer': 'x-amz-checksum-sha256',
      'transfer-encoding': 'chunked',
    };
    const good = createHash('sha256').update(data).digest('base64');
    const bad = createHash('sha256').update('other').digest('base64');

    // Act
    const refused = await rawRequest(
      'PUT',
      `/${BUCKET}/chunked/bad.txt`,
      headers,
      awsChunked(data, `x-amz-checksum-sha256:${bad}`, 7),
    );
    const accepted = await rawRequest(
      'PUT',
      `/${BUCKET}/chunked/good.txt`,
      headers,
      awsChunked(data, `x-amz-checksum-sha256:${good}`, 7),
    );

    // Assess
    expect(refused.status).toBe(400);
    expect(refused.body).toContain('<Code>BadDigest</Code>');
    expect(await exists(join(root, BUCKET, 'chunked', 'bad.txt'))).toBe(false);
    expect(accepted.status).toBe(200);
    expect(await readFile(join(root, BUCKET, 'chunked', 'good.txt'), 'utf8')).toBe(data.toString());
  });

  // 100,000 bytes are received in memory, 3 MiB through a stream to the file.
  it.each([100_000, 3 * MiB])(
    'leaves neither the object nor a temporary file when the client drops a %d-byte body midway',
    async (length) => {
      // Prepare
      const { hostname, port } = new URL(server.endpoint);
      const key = `dropped/${randomUUID()}.bin`;
      const outgoing = request({
        host: hostname,
        port,
        method: 'PUT',
        path: `/${BUCKET}/${key}`,
        headers: { 'content-length': String(length) },
        agent: false,
      });
      outgoing.on('error', () => undefined);

      // Act
      outgoing.write(randomBytes(length / 2));
      await new Promise((resolve) => setTimeout(resolve, 50));
      outgoing.destroy();
      await new Promise((resolve) => setTimeout(resolve, 100));

      // Assess
      expect(await readdir(join(root, '.tmp'))).toEqual([]);
      expect(await exists(join(root, BUCKET, ...key.split('/')))).toBe(false);
      expect(await put(`dropped/${randomUUID()}.txt`, 'still serving')).toBeUndefined();
    },
  );

  it('refuses an aws-chunked body shorter than its declared decoded length', async () => {
    // Prepare
    const data = Buffer.from('short');

    // Act
    const answer = await rawRequest(
      'PUT',
      `/${BUCKET}/chunked/short.txt`,
      {
        'content-encoding': 'aws-chunked',
        'x-amz-content-sha256': 'STREAMING-UNSIGNED-PAYLOAD-TRAILER',
        'x-amz-decoded-content-length': '100',
        'transfer-encoding': 'chunked',
      },
      awsChunked(data, 'x-amz-meta-none:1', 5),
    );

    // Assess
    expect(answer.status).toBe(400);
    expect(answer.body).toContain('<Code>IncompleteBody</Code>');
    expect(await exists(join(root, BUCKET, 'chunked', 'short.txt'))).toBe(false);
  });

  it('serves byte ranges: bytes=a-b, bytes=a-, a suffix bytes=-n, and a suffix longer than the object', async () => {
    // Prepare
    const key = `ranges/${randomUUID()}.txt`;
    await put(key, '0123456789');
    const read = async (Range: string) => {
      const answer = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key, Range }));
      return {
        status: answer.$metadata.httpStatusCode,
        range: answer.ContentRange,
        body: await answer.Body?.transformToString(),
      };
    };

    // Act
    const middle = await read('bytes=2-5');
    const open = await read('bytes=7-');
    const suffix = await read('bytes=-3');
    const longSuffix = await read('bytes=-50');
    const clipped = await read('bytes=8-100');

    // Assess
    expect(middle).toEqual({ status: 206, range: 'bytes 2-5/10', body: '2345' });
    expect(open).toEqual({ status: 206, range: 'bytes 7-9/10', body: '789' });
    expect(suffix).toEqual({ status: 206, range: 'bytes 7-9/10', body: '789' });
    expect(longSuffix).toEqual({ status: 206, range: 'bytes 0-9/10', body: '0123456789' });
    expect(clipped).toEqual({ status: 206, range: 'bytes 8-9/10', body: '89' });
  });

  it('answers 416 InvalidRange for a range that starts past the end', async () => {
    // Prepare
    const key = `ranges/${randomUUID()}.txt`;
    await put(key, '0123456789');

    // Act
    const refused = await rejectionOf(
      s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key, Range: 'bytes=10-' })),
    );

    // Assess
    expect(refused).toEqual({ name: 'InvalidRange', status: 416 });
  });

  it('answers 412 when If-Match names another ETag, and serves the object when it matches', async () => {
    // Prepare
    const key = `pinned/${randomUUID()}.txt`;
    await put(key, 'first');
    const { ETag } = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }));
    await put(key, 'replaced');

    // Act
    const stale = await rejectionOf(
      s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key, IfMatch: ETag, Range: 'bytes=0-1' })),
    );
    const { ETag: current } = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }));
    const fresh = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key, IfMatch: current }));

    // Assess
    expect(stale).toEqual({ name: 'PreconditionFailed', status: 412 });
    expect(await fresh.Body?.transformToString()).toBe('replaced');
  });

  it('answers NoSuchKey with an XML error on GET and a bare 404 on HEAD', async () => {
    // Act
    const getting = s3
      .send(new GetObjectCommand({ Bucket: BUCKET, Key: 'missing/key.txt' }))
      .catch((error) => error);
    const heading = await rejectionOf(
      s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'missing/key.txt' })),
    );
    const raw = await rawRequest('HEAD', `/${BUCKET}/missing/key.txt`, {});
    const rawGet = await rawRequest('GET', `/${BUCKET}/missing/key.txt`, {});

    // Assess
    expect(await getting).toBeInstanceOf(NoSuchKey);
    expect(heading).toEqual({ name: 'NotFound', status: 404 });
    expect(raw).toMatchObject({ status: 404, body: '' });
    expect(rawGet.body).toMatch(/<Error><Code>NoSuchKey<\/Code><Message>[^<]+<\/Message>/);
  });

  it('answers NoSuchKey for a key that names a folder of other keys', async () => {
    // Prepare
    await put('folders/inner/file.txt', 'x');

    // Act
    const getting = await rejectionOf(
      s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'folders/inner' })),
    );

    // Assess
    expect(getting).toEqual({ name: 'NoSuchKey', status: 404 });
  });

  it('deletes the file, its sidecar and the folders left empty, and answers 204 for a missing key too', async () => {
    // Prepare
    const folder = randomUUID();
    await put(`deleting/${folder}/only.txt`, 'x');

    // Act
    const deleted = await s3.send(
      new DeleteObjectCommand({ Bucket: BUCKET, Key: `deleting/${folder}/only.txt` }),
    );
    const again = await s3.send(
      new DeleteObjectCommand({ Bucket: BUCKET, Key: `deleting/${folder}/only.txt` }),
    );

    // Assess
    expect(deleted.$metadata.httpStatusCode).toBe(204);
    expect(again.$metadata.httpStatusCode).toBe(204);
    expect(await exists(join(root, BUCKET, 'deleting', folder))).toBe(false);
    expect(await exists(join(root, '.meta', BUCKET, 'deleting', folder))).toBe(false);
    expect(await exists(join(root, BUCKET))).toBe(true);
  });

  it('refuses a key that is both an object and a folder of other keys', async () => {
    // Prepare
    const base = `conflict/${randomUUID()}`;
    await put(base, 'file');

    // Act
    const nested = await rejectionOf(put(`${base}/child`, 'nested'));

    // Assess
    expect(nested).toEqual({ name: 'InvalidArgument', status: 400 });
    expect(await readText(base)).toBe('file');
  });

  it('refuses a key under a folder that was replaced by a file after this store wrote there', async () => {
    // Prepare: the store has written into base/folder, then someone puts a file in its place.
    const base = `conflict/${randomUUID()}`;
    await put(`${base}/folder/one`, 'one');
    await rm(join(root, BUCKET, base, 'folder'), { recursive: true });
    await writeFile(join(root, BUCKET, base, 'folder'), 'by hand');

    // Act
    const refused = await rejectionOf(put(`${base}/folder/two`, 'two'));

    // Assess
    expect(refused).toEqual({ name: 'InvalidArgument', status: 400 });
    expect(await readFile(join(root, BUCKET, base, 'folder'), 'utf8')).toBe('by hand');
  });
});

describe('keys that could leave the data folder', () => {
  const outside = () => join(root, '..', 'escaped.txt');

  it.each([
    ['a parent segment', '../../escaped.txt'],
    ['a nested parent segment', 'a/../../../escaped.txt'],
    ['a current-folder segment', 'a/./b.txt'],
    ['an empty segment', 'a//b.txt'],
    ['a NUL', 'a\0b.txt'],
  ])('refuses %s with 400 and writes nothing', async (_label, key) => {
    // Act
    const refused = await rejectionOf(put(key, 'x'));

    // Assess
    expect(refused).toEqual({ name: 'InvalidArgument', status: 400 });
    expect(await exists(outside())).toBe(false);
  });

  it('refuses percent-encoded parent segments that a URL parser would resolve', async () => {
    // Act
    const answer = await rawRequest(
      'PUT',
      `/${BUCKET}/%2e%2e/%2E%2E/escaped.txt`,
      { 'content-length': '1' },
      [Buffer.from('x')],
    );
    const reading = await rawRequest('GET', `/${BUCKET}/..%2f..%2fescaped.txt`, {});

    // Assess
    expect(answer.status).toBe(400);
    expect(answer.body).toContain('<Code>InvalidArgument</Code>');
    expect(reading.status).toBe(400);
    expect(await exists(outside())).toBe(false);
  });
});

describe('ListObjectsV2', () => {
  const bucket = 'listing';
  const keys = ['a', 'a-c/x', 'a0', 'b/c/d.json', 'b/c.json', 'b/c/e.json', 'Z', '~tilde', 'é/1', 'b-/z'];
  const byteOrder = [...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));

  beforeAll(async () => {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    for (const key of keys) await put(key, key, bucket);
    // An upload in progress must never show up as an object.
    await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'pending.bin' }));
  });

  it('lists every key in UTF-8 byte order and nothing from the hidden trees', async () => {
    // Act
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));

    // Assess
    expect(listed.Contents?.map((object) => object.Key)).toEqual(byteOrder);
    expect(listed).toMatchObject({ KeyCount: keys.length, IsTruncated: false });
    expect(listed.Contents?.[0]).toMatchObject({ Size: 1, ETag: `"${md5Hex(byteOrder[0] ?? '')}"` });
  });

  it('pages with max-keys and continuation tokens without losing or repeating a key', async () => {
    // Act
    const pages: { keys: string[]; count?: number; truncated?: boolean }[] = [];
    let token: string | undefined;
    do {
      const page = await s3.send(
        new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 3, ContinuationToken: token }),
      );
      pages.push({
        keys: page.Contents?.map((object) => object.Key ?? '') ?? [],
        count: page.KeyCount,
        truncated: page.IsTruncated,
      });
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
    } while (token !== undefined);

    // Assess
    expect(pages.flatMap((page) => page.keys)).toEqual(byteOrder);
    expect(pages.map((page) => page.count)).toEqual([3, 3, 3, 1]);
    expect(pages.map((page) => page.truncated)).toEqual([true, true, true, false]);
  });

  it('lists only keys under a prefix and after start-after', async () => {
    // Act
    const prefixed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'b/c' }));
    const after = await s3.send(new ListObjectsV2Command({ Bucket: bucket, StartAfter: 'b/c/d.json' }));

    // Assess
    expect(prefixed.Contents?.map((object) => object.Key)).toEqual(['b/c.json', 'b/c/d.json', 'b/c/e.json']);
    expect(after.Contents?.map((object) => object.Key)).toEqual(
      byteOrder.slice(byteOrder.indexOf('b/c/d.json') + 1),
    );
  });

  it('rolls keys up into common prefixes with a delimiter, across pages', async () => {
    // Act
    const first = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: 'b', Delimiter: '/', MaxKeys: 1 }),
    );
    const second = await s3.send(
      new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: 'b',
        Delimiter: '/',
        MaxKeys: 1,
        ContinuationToken: first.NextContinuationToken,
      }),
    );

    // Assess
    expect(first.CommonPrefixes?.map((entry) => entry.Prefix)).toEqual(['b-/']);
    expect(second.CommonPrefixes?.map((entry) => entry.Prefix)).toEqual(['b/']);
    expect(second.IsTruncated).toBe(false);
  });

  it('refuses a continuation token it did not issue', async () => {
    // Act
    const refused = await rejectionOf(
      s3.send(new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: 'not a token!' })),
    );

    // Assess
    expect(refused).toEqual({ name: 'InvalidArgument', status: 400 });
  });
});

describe('ListObjectVersions', () => {
  const bucket = 'version-listing';
  // More than one default page; names that sort differently by UTF-16 and by UTF-8 bytes.
  const keys = [
    ...Array.from({ length: 1090 }, (_, index) => `audit/${String(index).padStart(4, '0')}.json`),
    ...['a', 'a-c/x', 'a0', 'b/c.json', 'b/c/d.json', 'Z', '~tilde', 'é/1', '\u{1F600}', '\uFF5E'],
  ];
  const byteOrder = [...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));

  beforeAll(async () => {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    for (let start = 0; start < keys.length; start += 50) {
      await Promise.all(keys.slice(start, start + 50).map((key) => put(key, key, bucket)));
    }
    // Written twice and written then deleted in a bucket without versioning: neither leaves a version.
    await put('a0', 'again', bucket);
    await put('deleted', 'gone', bucket);
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'deleted' }));
  }, 60_000);

  /** Lists every page as the verify command does, from NextKeyMarker and NextVersionIdMarker. */
  async function listAllPages(maxKeys?: number): Promise<ListObjectVersionsCommandOutput[]> {
    const pages: ListObjectVersionsCommandOutput[] = [];
    let markers: { KeyMarker?: string; VersionIdMarker?: string } = {};
    for (;;) {
      const page = await s3.send(
        new ListObjectVersionsCommand({ Bucket: bucket, MaxKeys: maxKeys, ...markers }),
      );
      pages.push(page);
      if (page.IsTruncated !== true) return pages;
      markers = { KeyMarker: page.NextKeyMarker, VersionIdMarker: page.NextVersionIdMarker };
    }
  }

  it('pages through more than 1000 versions with max-keys 3, each once and in UTF-8 byte order', async () => {
    // Act
    const pages = await listAllPages(3);

    // Assess
    const listed = pages.flatMap((page) => page.Versions ?? []);
    expect(listed.map((version) => version.Key)).toEqual(byteOrder);
    expect(listed.every((version) => version.VersionId === 'null' && version.IsLatest === true)).toBe(true);
    expect(pages.some((page) => page.DeleteMarkers !== undefined)).toBe(false);
    expect(pages).toHaveLength(Math.ceil(keys.length / 3));
    for (const page of pages.slice(0, -1)) {
      expect(page).toMatchObject({
        IsTruncated: true,
        MaxKeys: 3,
        NextKeyMarker: page.Versions?.at(-1)?.Key,
        NextVersionIdMarker: 'null',
      });
      expect(page.Versions).toHaveLength(3);
    }
    expect(pages.at(-1)?.IsTruncated).toBe(false);
    expect(pages.at(-1)?.NextKeyMarker).toBeUndefined();
    expect(pages.at(-1)?.NextVersionIdMarker).toBeUndefined();
  });

  it('lists 1000 versions a page by default and the rest on the next page', async () => {
    // Act
    const pages = await listAllPages();

    // Assess
    expect(pages.map((page) => page.Versions?.length)).toEqual([1000, keys.length - 1000]);
    expect(pages.map((page) => page.IsTruncated)).toEqual([true, false]);
    expect(pages[0]).toMatchObject({ MaxKeys: 1000, NextKeyMarker: byteOrder[999] });
    expect(pages.flatMap((page) => page.Versions ?? []).map((version) => version.Key)).toEqual(byteOrder);
  });

  it('resumes after the key-marker key when given no version-id-marker, also for a key that is not stored', async () => {
    // Act
    const afterKey = await s3.send(
      new ListObjectVersionsCommand({ Bucket: bucket, KeyMarker: 'a0', MaxKeys: 3 }),
    );
    const betweenKeys = await s3.send(
      new ListObjectVersionsCommand({ Bucket: bucket, KeyMarker: 'b/c', MaxKeys: 2 }),
    );

    // Assess
    const at = byteOrder.indexOf('a0');
    expect(afterKey.Versions?.map((version) => version.Key)).toEqual(byteOrder.slice(at + 1, at + 4));
    expect(afterKey).toMatchObject({ KeyMarker: 'a0', IsTruncated: true, NextKeyMarker: byteOrder[at + 3] });
    expect(betweenKeys.Versions?.map((version) => version.Key)).toEqual(['b/c.json', 'b/c/d.json']);
  });

  it("resumes after the marker version within a prefix, and ends untruncated on the prefix's last key", async () => {
    // Act
    const first = await s3.send(new ListObjectVersionsCommand({ Bucket: bucket, Prefix: 'b/', MaxKeys: 1 }));
    const second = await s3.send(
      new ListObjectVersionsCommand({
        Bucket: bucket,
        Prefix: 'b/',
        MaxKeys: 1,
        KeyMarker: first.NextKeyMarker,
        VersionIdMarker: first.NextVersionIdMarker,
      }),
    );

    // Assess
    expect(first).toMatchObject({
      IsTruncated: true,
      NextKeyMarker: 'b/c.json',
      NextVersionIdMarker: 'null',
    });
    expect(second.Versions?.map((version) => version.Key)).toEqual(['b/c/d.json']);
    expect(second).toMatchObject({ IsTruncated: false, KeyMarker: 'b/c.json', VersionIdMarker: 'null' });
  });

  it('refuses a version-id-marker without a key-marker, or naming a version it never gave', async () => {
    // Act
    const withoutKey = await rejectionOf(
      s3.send(new ListObjectVersionsCommand({ Bucket: bucket, VersionIdMarker: 'null' })),
    );
    const unknown = await rejectionOf(
      s3.send(
        new ListObjectVersionsCommand({
          Bucket: bucket,
          KeyMarker: 'a',
          VersionIdMarker: '3HL4kqtJlcpXroDTDmJ',
        }),
      ),
    );
    const badMaxKeys = await rawRequest('GET', `/${bucket}?versions&max-keys=lots`, {});

    // Assess
    expect(withoutKey).toEqual({ name: 'InvalidArgument', status: 400 });
    expect(unknown).toEqual({ name: 'InvalidArgument', status: 400 });
    expect(badMaxKeys.status).toBe(400);
    expect(badMaxKeys.body).toContain('<Code>InvalidArgument</Code>');
  });
});

describe('multipart uploads', () => {
  it('assembles a lib-storage Upload byte for byte at the plain key, with a multipart ETag and no leftovers', async () => {
    // Prepare
    const key = `exports/${randomUUID()}/attempt-1.zip`;
    const body = randomBytes(12 * MiB + 123);
    const partMd5s = [0, 1, 2].map((index) =>
      createHash('md5')
        .update(body.subarray(index * 5 * MiB, (index + 1) * 5 * MiB))
        .digest(),
    );
    const uploadsBefore = await readdir(join(root, '.uploads'));
    const upload = new Upload({
      client: s3,
      params: {
        Bucket: BUCKET,
        Key: key,
        Body: body,
        ContentType: 'application/zip',
        ChecksumAlgorithm: 'SHA256',
        ServerSideEncryption: 'aws:kms',
        SSEKMSKeyId: 'alias/archive',
      },
      partSize: 5 * MiB,
      queueSize: 2,
    });

    // Act
    const done = await upload.done();
    const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key, ChecksumMode: 'ENABLED' }));
    const read = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    const readBack = await read.Body?.transformToByteArray();

    // Assess
    expect(sha256Hex(readBack ?? new Uint8Array())).toBe(sha256Hex(body));
    const onDisk = await readFile(join(root, BUCKET, 'exports', key.split('/')[1] ?? '', 'attempt-1.zip'));
    expect(sha256Hex(onDisk)).toBe(sha256Hex(body));
    expect(done.ETag).toBe(`"${md5Hex(Buffer.concat(partMd5s))}-3"`);
    expect(done.ChecksumSHA256).toMatch(/-3$/);
    expect(head).toMatchObject({
      ContentLength: body.length,
      ContentType: 'application/zip',
      ETag: done.ETag,
      ServerSideEncryption: 'aws:kms',
      ChecksumSHA256: done.ChecksumSHA256,
      ChecksumType: 'COMPOSITE',
    });
    expect(await readdir(join(root, '.uploads'))).toEqual(uploadsBefore);
  });

  it('lists the parts of an upload with ListParts, page by page, with their sizes, ETags and CRC32s', async () => {
    // Prepare
    const key = `multipart/${randomUUID()}.bin`;
    const { UploadId } = await s3.send(
      new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: key, ChecksumAlgorithm: 'CRC32' }),
    );
    const sent = [];
    for (const PartNumber of [3, 1, 2]) {
      const body = Buffer.from(`part ${PartNumber} `.repeat(PartNumber));
      const { ETag, ChecksumCRC32 } = await s3.send(
        new UploadPartCommand({
          Bucket: BUCKET,
          Key: key,
          UploadId,
          PartNumber,
          Body: body,
          ChecksumAlgorithm: 'CRC32',
        }),
      );
      sent.push({ PartNumber, ETag, ChecksumCRC32, Size: body.length });
    }

    // Act
    const first = await s3.send(new ListPartsCommand({ Bucket: BUCKET, Key: key, UploadId, MaxParts: 2 }));
    const rest = await s3.send(
      new ListPartsCommand({
        Bucket: BUCKET,
        Key: key,
        UploadId,
        PartNumberMarker: first.NextPartNumberMarker,
      }),
    );
    const gone = await rejectionOf(
      s3.send(new ListPartsCommand({ Bucket: BUCKET, Key: key, UploadId: 'f'.repeat(32) })),
    );

    // Assess
    const listed = [...(first.Parts ?? []), ...(rest.Parts ?? [])].map(
      ({ PartNumber, ETag, ChecksumCRC32, Size }) => ({
        PartNumber,
        ETag,
        ChecksumCRC32,
        Size,
      }),
    );
    expect(first).toMatchObject({ IsTruncated: true, NextPartNumberMarker: '2' });
    expect(rest.IsTruncated).toBe(false);
    expect(listed).toEqual([...sent].sort((a, b) => a.PartNumber - b.PartNumber));
    expect(gone?.name).toBe('NoSuchUpload');
  });

  it('answers InvalidPart for a wrong ETag and InvalidPartOrder for parts out of order', async () => {
    // Prepare
    const key = `multipart/${randomUUID()}.bin`;
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: key }));
    const parts = [];
    for (const PartNumber of [1, 2]) {
      const { ETag } = await s3.send(
        new UploadPartCommand({ Bucket: BUCKET, Key: key, UploadId, PartNumber, Body: `part ${PartNumber}` }),
      );
      parts.push({ PartNumber, ETag });
    }
    const complete = (Parts: { PartNumber: number; ETag?: string }[]) =>
      s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: BUCKET,
          Key: key,
          UploadId,
          MultipartUpload: { Parts },
        }),
      );

    // Act
    const wrongEtag = await rejectionOf(
      complete([{ PartNumber: 1, ETag: '"0123456789abcdef0123456789abcdef"' }]),
    );
    const unknownPart = await rejectionOf(complete([{ PartNumber: 3, ETag: parts[0]?.ETag }]));
    const reversed = await rejectionOf(complete([...parts].reverse()));
    const tooSmall = await rejectionOf(complete(parts));

    // Assess
    expect(wrongEtag).toEqual({ name: 'InvalidPart', status: 400 });
    expect(unknownPart).toEqual({ name: 'InvalidPart', status: 400 });
    expect(reversed).toEqual({ name: 'InvalidPartOrder', status: 400 });
    expect(tooSmall).toEqual({ name: 'EntityTooSmall', status: 400 });
    expect(await exists(join(root, BUCKET, 'multipart', key.slice('multipart/'.length)))).toBe(false);
  });

  it('requires each part checksum when the upload was created with a checksum algorithm', async () => {
    // Prepare
    const key = `multipart/${randomUUID()}.bin`;
    const { UploadId } = await s3.send(
      new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: key, ChecksumAlgorithm: 'SHA256' }),
    );
    const part = await s3.send(
      new UploadPartCommand({
        Bucket: BUCKET,
        Key: key,
        UploadId,
        PartNumber: 1,
        Body: 'only part',
        ChecksumAlgorithm: 'SHA256',
      }),
    );

    // Act
    const missing = await rejectionOf(
      s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: BUCKET,
          Key: key,
          UploadId,
          MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag }] },
        }),
      ),
    );
    const completed = await s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: BUCKET,
        Key: key,
        UploadId,
        MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag, ChecksumSHA256: part.ChecksumSHA256 }] },
      }),
    );

    // Assess
    expect(part.ChecksumSHA256).toBe(createHash('sha256').update('only part').digest('base64'));
    expect(missing).toEqual({ name: 'InvalidRequest', status: 400 });
    expect(completed.ETag).toMatch(/-1"$/);
    expect(await readText(key)).toBe('only part');
  });

  it('answers BadDigest for a part whose checksum does not match its bytes', async () => {
    // Prepare
    const key = `multipart/${randomUUID()}.bin`;
    const { UploadId } = await s3.send(
      new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: key, ChecksumAlgorithm: 'SHA256' }),
    );

    // Act
    const refused = await rejectionOf(
      s3.send(
        new UploadPartCommand({
          Bucket: BUCKET,
          Key: key,
          UploadId,
          PartNumber: 1,
          Body: 'part bytes',
          ChecksumSHA256: createHash('sha256').update('other bytes').digest('base64'),
        }),
      ),
    );

    // Assess
    expect(refused).toEqual({ name: 'BadDigest', status: 400 });
    await s3.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key: key, UploadId }));
  });

  it('aborts an upload: its parts are removed and later calls answer NoSuchUpload', async () => {
    // Prepare
    const key = `multipart/${randomUUID()}.bin`;
    const { UploadId = '' } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: key }));
    await s3.send(new UploadPartCommand({ Bucket: BUCKET, Key: key, UploadId, PartNumber: 1, Body: 'x' }));
    expect(await exists(join(root, '.uploads', UploadId))).toBe(true);

    // Act
    const aborted = await s3.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key: key, UploadId }));
    const late = await rejectionOf(
      s3.send(new UploadPartCommand({ Bucket: BUCKET, Key: key, UploadId, PartNumber: 2, Body: 'y' })),
    );
    const abortAgain = await rejectionOf(
      s3.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key: key, UploadId })),
    );

    // Assess
    expect(aborted.$metadata.httpStatusCode).toBe(204);
    expect(await exists(join(root, '.uploads', UploadId))).toBe(false);
    expect(late).toEqual({ name: 'NoSuchUpload', status: 404 });
    expect(abortAgain).toEqual({ name: 'NoSuchUpload', status: 404 });
  });

  it('answers NoSuchUpload for an upload id that is not one of its own', async () => {
    // Act
    const refused = await rejectionOf(
      s3.send(
        new UploadPartCommand({ Bucket: BUCKET, Key: 'k', UploadId: '../../etc', PartNumber: 1, Body: 'x' }),
      ),
    );

    // Assess
    expect(refused).toEqual({ name: 'NoSuchUpload', status: 404 });
  });
});

describe('persistence', () => {
  it('keeps objects and their metadata across a restart on the same data folder', async () => {
    // Prepare
    const folder = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-restart-'));
    const first = await startDiskS3({ root: folder });
    const writer = clientFor(first.endpoint);
    await writer.send(new CreateBucketCommand({ Bucket: 'kept' }));
    await writer.send(
      new PutObjectCommand({
        Bucket: 'kept',
        Key: 'audit/r-1/000000-Intake.json',
        Body: '{"seq":0}',
        ContentType: 'application/json',
        ServerSideEncryption: 'aws:kms',
        SSEKMSKeyId: 'alias/audit',
        ChecksumSHA256: createHash('sha256').update('{"seq":0}').digest('base64'),
      }),
    );
    const before = await writer.send(
      new HeadObjectCommand({ Bucket: 'kept', Key: 'audit/r-1/000000-Intake.json' }),
    );
    writer.destroy();
    await first.close();

    // Act
    const second = await startDiskS3({ root: folder });
    const reader = clientFor(second.endpoint);
    const after = await reader.send(
      new HeadObjectCommand({ Bucket: 'kept', Key: 'audit/r-1/000000-Intake.json', ChecksumMode: 'ENABLED' }),
    );
    const listed = await reader.send(new ListObjectsV2Command({ Bucket: 'kept' }));
    reader.destroy();
    await second.close();
    await rm(folder, { recursive: true, force: true });

    // Assess
    expect(after).toMatchObject({
      ETag: before.ETag,
      ContentType: 'application/json',
      ContentLength: 9,
      ServerSideEncryption: 'aws:kms',
      SSEKMSKeyId: 'alias/audit',
      ChecksumSHA256: createHash('sha256').update('{"seq":0}').digest('base64'),
      LastModified: before.LastModified,
    });
    expect(listed.Contents?.map((object) => object.Key)).toEqual(['audit/r-1/000000-Intake.json']);
  });

  it('serves a file a person put into the bucket folder, describing it from its bytes', async () => {
    // Prepare
    await mkdir(join(root, BUCKET, 'dropped'), { recursive: true });
    await writeFile(join(root, BUCKET, 'dropped', 'by-hand.txt'), 'hand made');

    // Act
    const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'dropped/by-hand.txt' }));
    const body = await readText('dropped/by-hand.txt');

    // Assess
    expect(head).toMatchObject({ ETag: `"${md5Hex('hand made')}"`, ContentLength: 9 });
    expect(body).toBe('hand made');
  });

  it('makes a folder again when a person removed it while the stand-in runs', async () => {
    // Prepare
    const folder = `removed-${randomUUID()}`;
    await put(`${folder}/first.txt`, 'one');
    await rm(join(root, BUCKET, folder), { recursive: true });
    await rm(join(root, '.meta', BUCKET, folder), { recursive: true });

    // Act
    await put(`${folder}/second.txt`, 'two');

    // Assess
    expect(await readFile(join(root, BUCKET, folder, 'second.txt'), 'utf8')).toBe('two');
    expect(await readText(`${folder}/second.txt`)).toBe('two');
  });

  it('notices a file edited by hand and serves its new bytes with their ETag', async () => {
    // Prepare
    const key = `edited/${randomUUID()}.txt`;
    await s3.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'original', ContentType: 'text/plain' }),
    );
    await new Promise((resolve) => setTimeout(resolve, 20));
    await writeFile(join(root, BUCKET, 'edited', key.slice('edited/'.length)), 'edited!!');

    // Act
    const read = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    const body = await read.Body?.transformToString();

    // Assess
    expect(body).toBe('edited!!');
    expect(read).toMatchObject({ ETag: `"${md5Hex('edited!!')}"`, ContentType: 'text/plain' });
  });

  it('judges If-Match on a write by the bytes of a hand-edited file', async () => {
    // Prepare
    const key = `edited/${randomUUID()}.txt`;
    await put(key, 'original');
    await new Promise((resolve) => setTimeout(resolve, 20));
    await writeFile(join(root, BUCKET, 'edited', key.slice('edited/'.length)), 'edited');

    // Act
    const refused = await rejectionOf(
      s3.send(
        new PutObjectCommand({
          Bucket: BUCKET,
          Key: key,
          Body: 'new',
          IfMatch: '"0123456789abcdef0123456789abcdef"',
        }),
      ),
    );
    const replaced = await s3.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'new', IfMatch: `"${md5Hex('edited')}"` }),
    );

    // Assess
    expect(refused).toEqual({ name: 'PreconditionFailed', status: 412 });
    expect(replaced.ETag).toBe(`"${md5Hex('new')}"`);
    expect(await readText(key)).toBe('new');
  });
});

describe('svc-dsr modules on the disk S3', () => {
  async function buildExportZip(): Promise<Buffer> {
    const zip = new yazl.ZipFile();
    const mtime = new Date('2020-01-01T00:00:00Z');
    for (const name of ['profile.json', 'likes.json', 'dislikes.json', 'messages.json']) {
      zip.addBuffer(Buffer.from(JSON.stringify({ name, filler: 'x'.repeat(500) })), name, { mtime });
    }
    zip.end();
    const chunks: Buffer[] = [];
    for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
    return Buffer.concat(chunks);
  }

  it('copies an export with copyExportToS3 and proves it with verifyStoredZip', async () => {
    // Prepare
    const zip = await buildExportZip();
    const platform: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/zip', 'content-length': zip.length }).end(zip);
    });
    await new Promise<void>((resolve) => platform.listen(0, '127.0.0.1', resolve));
    const address: AddressInfo | string | null = platform.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    const key = `exports/${randomUUID()}/attempt-1.zip`;
    const target = { s3, bucket: BUCKET, key, kmsKeyId: 'alias/archive' };

    // Act
    const copied = await copyExportToS3(new URL(`http://127.0.0.1:${port}/export.zip`), target, {
      policy: { allowedHosts: [], insecureHosts: [`127.0.0.1:${port}`], maxRedirects: 0 },
    });
    const verified = await verifyStoredZip(target, { bytes: copied.bytes, sha256: copied.sha256 });
    platform.closeAllConnections();
    await new Promise((resolve) => platform.close(resolve));

    // Assess
    expect(copied).toMatchObject({ bytes: zip.length, sha256: sha256Hex(zip) });
    expect(verified.entries.map((entry) => entry.name).sort()).toEqual([
      'dislikes.json',
      'likes.json',
      'messages.json',
      'profile.json',
    ]);
    expect((await readFile(join(root, BUCKET, ...key.split('/')))).equals(zip)).toBe(true);
  });

  it('verifies a small stored zip with one suffix-range GET and no HEAD', async () => {
    // Prepare
    const zip = await buildExportZip();
    const key = `exports/${randomUUID()}/attempt-1.zip`;
    await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: zip }));
    const counted = clientFor(server.endpoint);
    const commands: { name: string; range?: string }[] = [];
    counted.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { Range?: string };
        commands.push({
          name: context.commandName ?? 'unknown',
          ...(input.Range ? { range: input.Range } : {}),
        });
        return next(args);
      },
      { step: 'initialize', name: 'countCommands' },
    );

    // Act
    const verified = await verifyStoredZip(
      { s3: counted, bucket: BUCKET, key },
      { bytes: zip.length, sha256: sha256Hex(zip) },
    );
    const tooLong = await verifyStoredZip(
      { s3: counted, bucket: BUCKET, key },
      { bytes: zip.length + 1, sha256: sha256Hex(zip) },
    ).catch((error: unknown) => error);
    counted.destroy();

    // Assess
    expect(verified.entries).toHaveLength(4);
    expect(commands).toEqual([
      { name: 'GetObjectCommand', range: 'bytes=-262144' },
      { name: 'GetObjectCommand', range: 'bytes=-262144' },
    ]);
    expect(tooLong).toMatchObject({
      name: 'InvalidArchiveError',
      message: `the stored archive is ${zip.length} bytes, but ${zip.length + 1} were copied`,
    });
  });

  const HMAC_KEY = 'k'.repeat(40);
  const event = (eventId: string, step: string): AuditEvent => ({
    eventId,
    step,
    action: 'recorded',
    facts: { attempt: 1 },
  });

  it('appends and verifies an audit chain whose records are readable files', async () => {
    // Prepare
    await s3.send(new CreateBucketCommand({ Bucket: 'svc-dsr-audit' }));
    const trail = new AuditTrail({ s3, bucket: 'svc-dsr-audit' }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();

    // Act
    await trail.append(requestId, event('Intake:accepted', 'Intake'));
    await trail.append(requestId, event('ResolveSubject:found', 'ResolveSubject'));
    await trail.append(requestId, { ...event('RecordOutcome:done', 'RecordOutcome'), final: true });
    const verdict = await trail.verify(requestId);

    // Assess
    expect(verdict).toMatchObject({ ok: true, records: 3 });
    const files = await readdir(join(root, 'svc-dsr-audit', 'audit', requestId));
    expect(files).toEqual(['000000.json', '000001.json', '000002.json']);
    const first = JSON.parse(
      await readFile(join(root, 'svc-dsr-audit', 'audit', requestId, files[0] ?? ''), 'utf8'),
    );
    expect(first).toMatchObject({ seq: 0, event_id: 'Intake:accepted' });
  });

  it('makes a second writer at the same seq get 412, and the trail retries after the winner', async () => {
    // Prepare
    const requestId = randomUUID();
    const rival = new AuditTrail({ s3, bucket: 'svc-dsr-audit' }, { hmacKey: () => HMAC_KEY });
    await rival.append(requestId, event('Intake:accepted', 'Intake'));
    const client = clientFor(server.endpoint);
    const putStatuses: unknown[] = [];
    let raced = false;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'PutObjectCommand') return next(args);
        // Just before this writer's first PUT, the rival takes the same seq (and so the same key).
        if (!raced) {
          raced = true;
          await rival.append(requestId, event('ResolveSubject:rival', 'ResolveSubject'));
        }
        try {
          const output = await next(args);
          putStatuses.push(200);
          return output;
        } catch (error) {
          putStatuses.push(statusOf(error));
          throw error;
        }
      },
      { step: 'initialize', name: 'raceRival' },
    );
    const trail = new AuditTrail({ s3: client, bucket: 'svc-dsr-audit' }, { hmacKey: () => HMAC_KEY });

    // Act
    const record = await trail.append(requestId, event('ResolveSubject:found', 'ResolveSubject'));
    const verdict = await trail.verify(requestId);
    client.destroy();

    // Assess
    expect(putStatuses).toEqual([412, 200]);
    expect(record.seq).toBe(2);
    expect(verdict).toMatchObject({ ok: true, records: 3 });
    expect(await readdir(join(root, 'svc-dsr-audit', 'audit', requestId))).toEqual([
      '000000.json',
      '000001.json',
      '000002.json',
    ]);
  });
});

describe('presigned GET', () => {
  it('serves a presigned link and refuses it once expired', async () => {
    const key = `presign/${randomUUID()}.zip`;
    await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'archive bytes' }));
    const { getSignedUrl } = await import('@aws-sdk/s3-request-presigner');
    const fresh = await getSignedUrl(s3, new GetObjectCommand({ Bucket: BUCKET, Key: key }), {
      expiresIn: 600,
    });
    const stale = await getSignedUrl(s3, new GetObjectCommand({ Bucket: BUCKET, Key: key }), {
      expiresIn: 1,
      signingDate: new Date(Date.now() - 60_000),
    });

    const served = await fetch(fresh);
    const refused = await fetch(stale);

    expect(served.status).toBe(200);
    expect(await served.text()).toBe('archive bytes');
    expect(refused.status).toBe(403);
    expect(await refused.text()).toContain('Request has expired');
  });
});

describe('AuditTrail chain cache', () => {
  it('recovers when another writer appended after this trail last wrote', async () => {
    const bucket = 'svc-dsr-audit-cache';
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    const key = 'k'.repeat(40);
    const first = new AuditTrail({ s3, bucket }, { hmacKey: () => key });
    const second = new AuditTrail({ s3, bucket }, { hmacKey: () => key });
    const requestId = randomUUID();
    const step = (eventId: string): AuditEvent => ({
      eventId,
      step: 'CheckExport',
      action: 'polled',
      facts: {},
    });
    await first.append(requestId, step('a'));
    await second.append(requestId, step('b'));

    // first still remembers a one-record chain; its write at seq 1 must lose and re-read
    const record = await first.append(requestId, step('c'));

    expect(record.seq).toBe(2);
    expect(await first.verify(requestId)).toMatchObject({ ok: true, records: 3 });
  });
});
