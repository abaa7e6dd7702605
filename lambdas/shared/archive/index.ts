/**
 * ArchiveExport's machinery: copy the platform's export zip into S3 before its link expires, and
 * prove the stored copy intact. Everything streams: memory use does not depend on the archive's size.
 */
import { assertDownloadAllowed } from '../download-policy.ts';
import { copyBody, DownloadTally, declaredLength, IdleWatchdog, openDownload } from './download.ts';
import {
  type ArchiveTarget,
  type CopyOptions,
  type CopyResult,
  copyOptionsSchema,
  parseOptions,
} from './options.ts';
import { PartUploader, type UploadResult } from './part-uploader.ts';

export type { ArchiveTarget, CopyOptions, CopyResult, VerifiedArchive, VerifyOptions } from './options.ts';
export { REQUIRED_ENTRIES } from './options.ts';
export { entryLabel, hashStoredObject, verifyStoredZip } from './verify.ts';

/**
 * Streams the link's body into an S3 multipart upload while hashing it, and checks the byte count
 * against Content-Length. On any failure the upload is aborted, so no object is left at the key.
 */
export async function copyExportToS3(
  link: URL,
  target: ArchiveTarget,
  options: CopyOptions,
): Promise<CopyResult> {
  const { partSizeBytes, idleTimeoutMs, queueSize } = parseOptions(
    copyOptionsSchema,
    options,
    'copyExportToS3',
  );
  assertDownloadAllowed(link, options.policy);
  const connection = new AbortController();
  const watchdog = new IdleWatchdog(idleTimeoutMs, () => connection.abort());
  // An S3 failure hangs up on the platform at once, rather than after the next part is read.
  const upload = new PartUploader(target, partSizeBytes, queueSize, () => connection.abort());
  try {
    const response = await openDownload(link, options.policy, options.fetch ?? globalThis.fetch, {
      signal: connection.signal,
      watchdog,
    });
    const tally = new DownloadTally(declaredLength(response));
    let stored: UploadResult;
    try {
      await copyBody(response.body, tally, watchdog, upload);
      stored = await upload.finish();
    } catch (error) {
      await upload.abort();
      // The download's own failure says what went wrong, even if a part in flight failed after it.
      throw tally.failure ?? upload.failure ?? error;
    }
    const { output, checksumCrc32 } = stored;
    return {
      bytes: tally.bytes,
      sha256: tally.hash.digest('hex'),
      checksumCrc32,
      ...(output.VersionId === undefined ? {} : { versionId: output.VersionId }),
      ...(output.ETag === undefined ? {} : { etag: output.ETag }),
    };
  } finally {
    watchdog.stop();
    // Releases the platform connection when S3 failed first and nothing reads the body any more.
    connection.abort();
  }
}
