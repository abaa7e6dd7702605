/**
 * Small stored objects read and written whole, checked by SHA-256: the verified archive read back
 * for the subject package, and the package stored beside it.
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { InvalidArchiveError } from '../errors.ts';
import type { ArchiveTarget } from './options.ts';
import { getBody, isNotFound } from './range-reader.ts';

function sha256Digest(body: Uint8Array): Buffer {
  return createHash('sha256').update(body).digest();
}

/**
 * Reads a stored object whole (the subject package step parses every file of it) and checks its
 * size and SHA-256 against what the ledger recorded: a copy changed or swapped since it was
 * verified is an InvalidArchiveError, never a package. Reads the recorded version when known.
 */
export async function readVerifiedObject(
  target: ArchiveTarget,
  expected: { bytes: number; sha256: string; versionId?: string },
): Promise<Buffer> {
  let body: Readable;
  try {
    body = await getBody(target, expected.versionId === undefined ? {} : { VersionId: expected.versionId });
  } catch (error) {
    if (isNotFound(error) || (error instanceof Error && error.name === 'NoSuchVersion')) {
      throw new InvalidArchiveError('the archive object is missing from the bucket');
    }
    throw error;
  }
  const chunks: Buffer[] = [];
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of body) {
    if (!Buffer.isBuffer(chunk))
      throw new InvalidArchiveError('the stored archive produced a non-byte chunk');
    bytes += chunk.length;
    if (bytes > expected.bytes) {
      body.destroy();
      throw new InvalidArchiveError(`the stored archive is larger than the ${expected.bytes} bytes recorded`);
    }
    hash.update(chunk);
    chunks.push(chunk);
  }
  const sha256 = hash.digest('hex');
  if (bytes !== expected.bytes || sha256 !== expected.sha256.toLowerCase()) {
    throw new InvalidArchiveError(
      `the stored archive (${bytes} bytes, sha256 ${sha256}) no longer matches the ledger (${expected.bytes} bytes, sha256 ${expected.sha256})`,
    );
  }
  return Buffer.concat(chunks);
}

/**
 * Stores a small object (the subject package) in one PUT, with its SHA-256 for S3 to check, the
 * request type tag the lifecycle rules expire by, and the name a browser saves it under.
 */
export async function putVerifiedObject(
  target: ArchiveTarget,
  body: Buffer,
  options: { fileName: string; contentType: string },
): Promise<{ versionId?: string }> {
  const checksum = sha256Digest(body);
  const { bucket, key, kmsKeyId, tags } = target;
  const put = new PutObjectCommand({
    Bucket: bucket,
    Key: key,
    Body: body,
    ContentType: options.contentType,
    ContentDisposition: `attachment; filename="${options.fileName.replace(/[^A-Za-z0-9._-]/g, '_')}"`,
    ChecksumAlgorithm: 'SHA256',
    ChecksumSHA256: checksum.toString('base64'),
    ...(tags === undefined ? {} : { Tagging: new URLSearchParams(Object.entries(tags)).toString() }),
    ...(kmsKeyId === undefined ? {} : { ServerSideEncryption: 'aws:kms' as const, SSEKMSKeyId: kmsKeyId }),
  });
  const output = await target.s3.send(put);
  return output.VersionId === undefined ? {} : { versionId: output.VersionId };
}
