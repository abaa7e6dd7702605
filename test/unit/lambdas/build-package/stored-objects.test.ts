import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { putVerifiedObject, readVerifiedObject } from '#shared/archive';
import { InvalidArchiveError } from '#shared/errors';

const s3 = new S3Client({ region: 'eu-west-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } });
const s3Mock = mockClient(s3);
const target = { s3, bucket: 'archives', key: 'exports/r1/attempt-1.zip', kmsKeyId: 'key-1' };
const body = Buffer.from('PK\u0003\u0004 zip bytes');
const sha256 = createHash('sha256').update(body).digest('hex');

beforeEach(() => {
  s3Mock.reset();
});

/** Answers GetObject with `bytes` as a stream, as S3 does. */
function serve(bytes: Buffer) {
  s3Mock.on(GetObjectCommand).callsFake(() => ({ Body: Readable.from([bytes]) }));
}

describe('readVerifiedObject', () => {
  it('reads the recorded version and answers its bytes when size and SHA-256 match the ledger', async () => {
    serve(body);

    const read = await readVerifiedObject(target, { bytes: body.length, sha256, versionId: 'v7' });

    expect(read.equals(body)).toBe(true);
    expect(s3Mock).toHaveReceivedCommandWith(GetObjectCommand, {
      Bucket: 'archives',
      Key: 'exports/r1/attempt-1.zip',
      VersionId: 'v7',
    });
  });

  it('refuses an object whose bytes changed since the ledger recorded them', async () => {
    const swapped = Buffer.from(body);
    swapped[5] = 0x41;
    serve(swapped);

    const reading = readVerifiedObject(target, { bytes: body.length, sha256 });

    await expect(reading).rejects.toBeInstanceOf(InvalidArchiveError);
    await expect(readVerifiedObject(target, { bytes: body.length, sha256 })).rejects.toThrow(
      /no longer matches the ledger/,
    );
  });

  it('stops reading an object larger than recorded', async () => {
    serve(Buffer.concat([body, body]));
    await expect(readVerifiedObject(target, { bytes: body.length, sha256 })).rejects.toThrow(
      /larger than the \d+ bytes recorded/,
    );
  });

  it('says the archive is missing when S3 has no such key', async () => {
    s3Mock.on(GetObjectCommand).rejects(Object.assign(new Error('gone'), { name: 'NoSuchKey' }));
    await expect(readVerifiedObject(target, { bytes: 1, sha256 })).rejects.toThrow(/missing from the bucket/);
  });
});

describe('putVerifiedObject', () => {
  it('puts the package with its SHA-256 for S3 to check, its tag, its key and its download name', async () => {
    s3Mock.on(PutObjectCommand).resolves({ VersionId: 'v1' });

    const result = await putVerifiedObject(
      { ...target, key: 'exports/r1/subject-package.zip', tags: { 'request-type': 'access' } },
      body,
      { fileName: 'your-data-2026-11-23.zip', contentType: 'application/zip' },
    );

    expect(result).toEqual({ versionId: 'v1' });
    expect(s3Mock).toHaveReceivedCommandWith(PutObjectCommand, {
      Bucket: 'archives',
      Key: 'exports/r1/subject-package.zip',
      ChecksumAlgorithm: 'SHA256',
      ChecksumSHA256: createHash('sha256').update(body).digest('base64'),
      ContentType: 'application/zip',
      ContentDisposition: 'attachment; filename="your-data-2026-11-23.zip"',
      Tagging: 'request-type=access',
      ServerSideEncryption: 'aws:kms',
      SSEKMSKeyId: 'key-1',
    });
  });

  it('keeps a file name that could break the header out of it', async () => {
    s3Mock.on(PutObjectCommand).resolves({});
    await putVerifiedObject(target, body, { fileName: 'a"; b=c\r\n.zip', contentType: 'application/zip' });
    expect(s3Mock).toHaveReceivedCommandWith(PutObjectCommand, {
      ContentDisposition: 'attachment; filename="a___b_c__.zip"',
    });
  });
});
