/**
 * The verified archive read back for the subject package (streamed, checked by SHA-256), and the
 * package stored beside it (streamed into parts).
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { InvalidArchiveError } from '../errors.ts';
import { type ArchiveTarget, MiB } from './options.ts';
import { PartUploader } from './part-uploader.ts';
import { getBody, isNotFound } from './range-reader.ts';

function sha256Digest(body: Uint8Array): Buffer {
  return createHash('sha256').update(body).digest();
}

/**
 * Reads a stored object as a stream and checks its size and SHA-256 against what the ledger
 * recorded: a copy changed or swapped since it was verified fails the stream with an
 * InvalidArchiveError (at its end, or as soon as it is longer), so a reader that keeps what it
 * read only once the stream ended never keeps a copy that does not match. Reads the recorded
 * version when known.
 */
export async function readVerifiedStream(
  target: ArchiveTarget,
  expected: { bytes: number; sha256: string; versionId?: string },
): Promise<AsyncIterable<Buffer>> {
  let body: Readable;
  try {
    body = await getBody(target, expected.versionId === undefined ? {} : { VersionId: expected.versionId });
  } catch (error) {
    if (isNotFound(error) || (error instanceof Error && error.name === 'NoSuchVersion')) {
      throw new InvalidArchiveError('the archive object is missing from the bucket');
    }
    throw error;
  }
  return (async function* () {
    const hash = createHash('sha256');
    let bytes = 0;
    try {
      for await (const chunk of body) {
        if (!Buffer.isBuffer(chunk))
          throw new InvalidArchiveError('the stored archive produced a non-byte chunk');
        bytes += chunk.length;
        if (bytes > expected.bytes) {
          throw new InvalidArchiveError(
            `the stored archive is larger than the ${expected.bytes} bytes recorded`,
          );
        }
        hash.update(chunk);
        yield chunk;
      }
    } finally {
      body.destroy();
    }
    const sha256 = hash.digest('hex');
    if (bytes !== expected.bytes || sha256 !== expected.sha256.toLowerCase()) {
      throw new InvalidArchiveError(
        `the stored archive (${bytes} bytes, sha256 ${sha256}) no longer matches the ledger (${expected.bytes} bytes, sha256 ${expected.sha256})`,
      );
    }
  })();
}

/** Reads a small stored object whole, checked as `readVerifiedStream` checks it. */
export async function readVerifiedObject(
  target: ArchiveTarget,
  expected: { bytes: number; sha256: string; versionId?: string },
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await readVerifiedStream(target, expected)) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/**
 * Stores a subject package from a stream: one PutObject when it fits in a part, else a multipart
 * upload, every part checked by S3 against its CRC32 (part-uploader.ts); memory stays at a few
 * parts whatever the package's size. Tagged with the request type the lifecycle rules expire by,
 * and named for download. On failure the upload is aborted, so no partial package is left.
 */
export async function putPackageStream(
  target: ArchiveTarget,
  body: AsyncIterable<Uint8Array>,
  options: { fileName: string; partSizeBytes?: number; queueSize?: number },
): Promise<{ versionId?: string }> {
  const upload = new PartUploader(
    { ...target, contentDisposition: contentDisposition(options.fileName) },
    options.partSizeBytes ?? 8 * MiB,
    options.queueSize ?? 2,
    () => undefined,
  );
  try {
    for await (const chunk of body) await upload.write(chunk);
    const { output } = await upload.finish();
    return output.VersionId === undefined ? {} : { versionId: output.VersionId };
  } catch (error) {
    await upload.abort();
    throw upload.failure ?? error;
  }
}

function contentDisposition(fileName: string): string {
  return `attachment; filename="${fileName.replace(/[^A-Za-z0-9._-]/g, '_')}"`;
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
    ContentDisposition: contentDisposition(options.fileName),
    ChecksumAlgorithm: 'SHA256',
    ChecksumSHA256: checksum.toString('base64'),
    ...(tags === undefined ? {} : { Tagging: new URLSearchParams(Object.entries(tags)).toString() }),
    ...(kmsKeyId === undefined ? {} : { ServerSideEncryption: 'aws:kms' as const, SSEKMSKeyId: kmsKeyId }),
  });
  const output = await target.s3.send(put);
  return output.VersionId === undefined ? {} : { versionId: output.VersionId };
}
