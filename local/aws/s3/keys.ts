/** Bucket names and object keys: S3's rules, and the ones a key must follow to become a file. */
import { invalidArgument, S3Failure } from './errors.ts';
import { BUCKET_NAME, MAX_KEY_BYTES, MAX_SEGMENT_BYTES } from './limits.ts';

export function checkBucketName(bucket: string): void {
  if (!BUCKET_NAME.test(bucket) || bucket.includes('..')) {
    throw new S3Failure(400, 'InvalidBucketName', 'The specified bucket is not valid.');
  }
}

/** A segment that could not be a path segment under the bucket folder, or could leave it. */
export function isUnstorableSegment(segment: string): boolean {
  return (
    segment === '' || segment === '.' || segment === '..' || segment.includes('\0') || segment.includes('\\')
  );
}

/** Keys become paths under the bucket folder, so anything that could leave it is refused. */
export function checkKey(key: string): void {
  if (Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES) {
    throw new S3Failure(400, 'KeyTooLongError', 'Your key is too long');
  }
  const segments = key.split('/');
  if (segments.some(isUnstorableSegment)) {
    throw invalidArgument(
      'The key has an empty, "." or ".." path segment, a NUL or a backslash, which the disk S3 stand-in cannot store.',
    );
  }
  if (segments.some((segment) => Buffer.byteLength(segment, 'utf8') > MAX_SEGMENT_BYTES)) {
    throw new S3Failure(400, 'KeyTooLongError', 'A path segment of the key is longer than 255 bytes');
  }
}

export function compareUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

export function normalizeEtag(etag: string): string {
  return etag
    .trim()
    .replace(/^W\//, '')
    .replace(/^"(.*)"$/, '$1');
}

/** True when an If-Match / If-None-Match list names the object's ETag (or is `*`). */
export function etagListMatches(list: string, etag: string): boolean {
  const wanted = normalizeEtag(etag);
  return list.split(',').some((item) => item.trim() === '*' || normalizeEtag(item) === wanted);
}

export function isMissing(error: unknown): boolean {
  const code = errorCode(error);
  return code === 'ENOENT' || code === 'ENOTDIR';
}

export function errorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  return typeof error.code === 'string' ? error.code : undefined;
}
