import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  type ArchiveTarget,
  copyExportToS3,
  hashStoredObject,
} from '../../../../../../lambdas/shared/archive/index.ts';
import { ConfigurationError, InvalidArchiveError } from '../../../../../../lambdas/shared/errors.ts';
import {
  BUCKET,
  commandNames,
  compositeCrc32,
  crc32Base64,
  failure,
  LINK_SECRET,
  localS3Client,
  MiB,
  origin,
  policy,
  pseudoRandomBytes,
  sendBody,
  serve,
  sha256,
  target,
  useArchiveStandIns,
} from '../../../../../../test/unit/lambdas/shared/archive/fixtures.ts';
import { startDiskS3 } from '../../../../../aws/s3-disk.ts';

useArchiveStandIns();

describe('copyExportToS3: the upload', () => {
  it('uploads a body larger than one part as a multipart upload and keeps the bytes in order', async () => {
    // Prepare
    const body = pseudoRandomBytes(11 * MiB + 123);
    const link = serve(origin, '/exports/big.zip', (response) => sendBody(response, body));
    const stored = target();
    // Act
    const result = await copyExportToS3(link, stored, { policy, partSizeBytes: 5 * MiB });
    // Assess
    expect(result).toMatchObject({ bytes: body.length, sha256: sha256(body) });
    expect(commandNames().filter((name) => name === 'UploadPartCommand')).toHaveLength(3);
    expect(commandNames()).toContain('CompleteMultipartUploadCommand');
    expect(await hashStoredObject(stored)).toEqual({ bytes: body.length, sha256: sha256(body) });
  });

  it('passes an S3 failure through unchanged and hangs up on the platform', async () => {
    // Prepare: a body far longer than the copy will ever read, sent until the client hangs up
    const chunk = pseudoRandomBytes(64 * 1024);
    let hungUp: Promise<void> | undefined;
    const link = serve(origin, '/exports/nowhere.zip', async (response) => {
      const closed = once(response, 'close').then(() => undefined);
      hungUp = closed;
      response.writeHead(200, { 'content-length': String(1024 * MiB) });
      while (!response.destroyed) {
        if (!response.write(chunk)) await Promise.race([once(response, 'drain'), closed]);
      }
    });
    // Act
    const error = await failure(
      copyExportToS3(link, target({ bucket: 'no-such-bucket' }), { policy, partSizeBytes: 5 * MiB }),
    );
    // Assess
    expect(error.name).toBe('NoSuchBucket');
    expect(hungUp).toBeDefined();
    await hungUp;
  });

  it('rejects a part size S3 would refuse before any request is made', async () => {
    // Prepare
    const link = serve(origin, '/exports/1.zip', (response) => response.writeHead(200).end('PK'));
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy, partSizeBytes: MiB }));
    // Assess
    expect(error).toBeInstanceOf(ConfigurationError);
    expect(error.message).toContain('partSizeBytes');
    expect(origin.requests).toHaveLength(0);
  });

  it('asks S3 for composite CRC32 part checksums and SSE-KMS on the multipart upload', async () => {
    // Prepare: a mocked client, since no local stand-in checks or echoes checksums
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(CreateMultipartUploadCommand).resolves({ UploadId: 'upload-1' });
    s3Mock.on(UploadPartCommand).resolves({ ETag: '"part"' });
    s3Mock.on(CompleteMultipartUploadCommand).resolves({ ETag: '"whole-2"', VersionId: 'version-7' });
    const body = pseudoRandomBytes(6 * MiB);
    const fakeFetch: typeof fetch = async () =>
      new Response(body, { status: 200, headers: { 'content-length': String(body.length) } });
    const link = new URL(`https://exports.example.com/x.zip?sig=${LINK_SECRET}`);
    // Act
    const result = await copyExportToS3(
      link,
      {
        s3: client,
        bucket: BUCKET,
        key: 'archives/kms.zip',
        kmsKeyId: 'arn:aws:kms:us-east-1:111122223333:key/k-1',
        tags: { 'request-type': 'erasure' },
      },
      { policy, fetch: fakeFetch, partSizeBytes: 5 * MiB },
    );
    // Assess
    expect(s3Mock).toHaveReceivedCommandWith(CreateMultipartUploadCommand, {
      Bucket: BUCKET,
      Key: 'archives/kms.zip',
      ChecksumAlgorithm: 'CRC32',
      ChecksumType: 'COMPOSITE',
      ServerSideEncryption: 'aws:kms',
      SSEKMSKeyId: 'arn:aws:kms:us-east-1:111122223333:key/k-1',
      ContentType: 'application/zip',
      Tagging: 'request-type=erasure',
    });
    expect(s3Mock).toHaveReceivedCommandTimes(UploadPartCommand, 2);
    expect(s3Mock).toHaveReceivedCommandWith(UploadPartCommand, {
      UploadId: 'upload-1',
      PartNumber: 1,
      ChecksumAlgorithm: 'CRC32',
      ChecksumCRC32: crc32Base64(body.subarray(0, 5 * MiB)),
    });
    expect(s3Mock).toHaveReceivedCommandWith(UploadPartCommand, {
      PartNumber: 2,
      ChecksumCRC32: crc32Base64(body.subarray(5 * MiB)),
    });
    expect(s3Mock).toHaveReceivedCommandTimes(CompleteMultipartUploadCommand, 1);
    expect(result).toEqual({
      bytes: body.length,
      sha256: sha256(body),
      checksumCrc32: compositeCrc32([body.subarray(0, 5 * MiB), body.subarray(5 * MiB)]),
      etag: '"whole-2"',
      versionId: 'version-7',
    });
    s3Mock.restore();
  });

  it('leaves encryption to the bucket default when no KMS key is given', async () => {
    // Prepare
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(PutObjectCommand).resolves({ ETag: '"small"' });
    const fakeFetch: typeof fetch = async () => new Response(Buffer.from('PK small'), { status: 200 });
    // Act
    await copyExportToS3(
      new URL('https://exports.example.com/x.zip'),
      { s3: client, bucket: BUCKET, key: 'archives/plain.zip' },
      { policy, fetch: fakeFetch },
    );
    // Assess
    const [put] = s3Mock.commandCalls(PutObjectCommand);
    expect(put?.args[0].input).toMatchObject({
      ChecksumAlgorithm: 'CRC32',
      ChecksumCRC32: crc32Base64(Buffer.from('PK small')),
      ContentType: 'application/zip',
    });
    expect(put?.args[0].input).not.toHaveProperty('ServerSideEncryption');
    expect(put?.args[0].input).not.toHaveProperty('SSEKMSKeyId');
    expect(put?.args[0].input).not.toHaveProperty('Tagging');
    s3Mock.restore();
  });
});

describe('copyExportToS3 part uploads', () => {
  const signedRequest = z.object({
    query: z.record(z.string(), z.unknown()),
    headers: z.record(z.string(), z.string()),
  });

  it('sends each part with its own CRC32, an unsigned payload and no Expect header, refilling part buffers without mixing bytes', async () => {
    // Prepare: the disk stand-in refuses a part whose checksum does not match its bytes;
    // one part in flight at a time, so later parts refill the buffers of earlier ones.
    const root = await mkdtemp(join(tmpdir(), 'archive-parts-'));
    const disk = await startDiskS3({ root });
    const s3 = localS3Client(disk.endpoint);
    const sentParts = new Map<number, { payloadHash?: string; checksum?: string; expect?: string }>();
    s3.middlewareStack.add(
      (next) => async (args) => {
        const request = signedRequest.safeParse(args.request);
        const partNumber = request.success ? Number(request.data.query.partNumber) : Number.NaN;
        if (request.success && Number.isInteger(partNumber)) {
          sentParts.set(partNumber, {
            payloadHash: request.data.headers['x-amz-content-sha256'],
            checksum: request.data.headers['x-amz-checksum-crc32'],
            ...(request.data.headers.Expect === undefined ? {} : { expect: request.data.headers.Expect }),
          });
        }
        return next(args);
      },
      { step: 'deserialize', name: 'recordSignedParts' },
    );
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
    const partSize = 5 * MiB;
    const body = pseudoRandomBytes(3 * partSize + MiB + 17, 11);
    const link = serve(origin, '/exports/parts.zip', (response) => sendBody(response, body));
    const stored: ArchiveTarget = { s3, bucket: BUCKET, key: 'archives/parts.zip' };
    try {
      // Act
      const result = await copyExportToS3(link, stored, { policy, partSizeBytes: partSize, queueSize: 1 });
      // Assess
      expect(result).toMatchObject({ bytes: body.length, sha256: sha256(body) });
      expect(await hashStoredObject(stored)).toEqual({ bytes: body.length, sha256: sha256(body) });
      expect([...sentParts.keys()].sort()).toEqual([1, 2, 3, 4]);
      for (const [partNumber, sent] of sentParts) {
        const part = body.subarray((partNumber - 1) * partSize, partNumber * partSize);
        expect(sent).toEqual({ payloadHash: 'UNSIGNED-PAYLOAD', checksum: crc32Base64(part) });
      }
      const head = await s3.send(
        new HeadObjectCommand({ Bucket: BUCKET, Key: 'archives/parts.zip', ChecksumMode: 'ENABLED' }),
      );
      const parts = [0, 1, 2, 3].map((index) => body.subarray(index * partSize, (index + 1) * partSize));
      expect(result.checksumCrc32).toBe(compositeCrc32(parts));
      expect(head.ChecksumCRC32).toBe(result.checksumCrc32);
    } finally {
      s3.destroy();
      await disk.close();
      await rm(root, { recursive: true, force: true });
    }
  });

  it('aborts the multipart upload and reports the S3 error when a part is refused', async () => {
    // Prepare
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(CreateMultipartUploadCommand).resolves({ UploadId: 'upload-9' });
    s3Mock
      .on(UploadPartCommand)
      .rejects(Object.assign(new Error('We encountered an internal error.'), { name: 'InternalError' }));
    s3Mock.on(AbortMultipartUploadCommand).resolves({});
    const body = pseudoRandomBytes(12 * MiB);
    const fakeFetch: typeof fetch = async () =>
      new Response(body, { status: 200, headers: { 'content-length': String(body.length) } });
    // Act
    const error = await failure(
      copyExportToS3(
        new URL(`https://exports.example.com/x.zip?sig=${LINK_SECRET}`),
        { s3: client, bucket: BUCKET, key: 'archives/refused.zip' },
        { policy, fetch: fakeFetch, partSizeBytes: 5 * MiB },
      ),
    );
    // Assess
    expect(error.name).toBe('InternalError');
    expect(s3Mock).toHaveReceivedCommandWith(AbortMultipartUploadCommand, {
      Bucket: BUCKET,
      Key: 'archives/refused.zip',
      UploadId: 'upload-9',
    });
    expect(s3Mock).not.toHaveReceivedCommand(CompleteMultipartUploadCommand);
    s3Mock.restore();
  });

  it('aborts the upload when S3 reports a part CRC32 other than the one sent', async () => {
    // Prepare: S3 answers a checksum of different bytes for every part
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(CreateMultipartUploadCommand).resolves({ UploadId: 'upload-3' });
    s3Mock.on(UploadPartCommand).resolves({ ETag: '"part"', ChecksumCRC32: 'AAAAAA==' });
    s3Mock.on(AbortMultipartUploadCommand).resolves({});
    const body = pseudoRandomBytes(12 * MiB);
    const fakeFetch: typeof fetch = async () =>
      new Response(body, { status: 200, headers: { 'content-length': String(body.length) } });
    // Act
    const error = await failure(
      copyExportToS3(
        new URL(`https://exports.example.com/x.zip?sig=${LINK_SECRET}`),
        { s3: client, bucket: BUCKET, key: 'archives/mismatch.zip' },
        { policy, fetch: fakeFetch, partSizeBytes: 5 * MiB },
      ),
    );
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toMatch(/^S3 reports CRC32 AAAAAA== for part \d, which was sent with /);
    expect(error.message).not.toContain(LINK_SECRET);
    expect(s3Mock).toHaveReceivedCommandWith(AbortMultipartUploadCommand, { UploadId: 'upload-3' });
    expect(s3Mock).not.toHaveReceivedCommand(CompleteMultipartUploadCommand);
    s3Mock.restore();
  });
});
