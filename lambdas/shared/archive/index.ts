/**
 * ArchiveExport's machinery: copy the platform's export zip into S3 before its link expires, and
 * prove the stored copy intact. Everything streams: memory use does not depend on the archive's size.
 *
 * The public API is here; each file below does one part and is tested on its own:
 * - download.ts: the platform link over node:http, its redirects and statuses, the body pumped
 *   chunk by chunk, each chunk hashed and its CRC-32 computed once;
 * - crc32.ts: CRC-32s combined from the chunks' (for the parts and the stored zip entries);
 * - part-uploader.ts: the chunks cut into S3 parts, each with its CRC32, over kept-alive connections;
 * - continued-copy.ts: a copy that stops at a part boundary and is carried on by another invocation
 *   (ListParts against its checkpoint, the rest asked for with Range), and its proof by one read-back;
 * - zip-stream.ts: the zip checked as the chunks go past (entry CRC-32s, the central directory);
 * - verify.ts: the stored object proven by S3's checksum, or read back when it cannot be;
 * - range-reader.ts: ranged reads of the stored object, for a zip the stream check could not follow;
 * - options.ts: the types, option schemas and limits;
 * - stored-object.ts: the archive read back for the subject package, and the package stored beside it.
 */
import { assertDownloadAllowed } from '../download-policy.ts';
import {
  type ChunkSink,
  copyBody,
  DownloadTally,
  declaredLength,
  fetchGet,
  IdleWatchdog,
  nodeHttpGet,
  openDownload,
} from './download.ts';
import {
  type ArchiveTarget,
  type CopyOptions,
  type CopyResult,
  copyOptionsSchema,
  parseOptions,
  type VerifiedArchive,
  verifyOptionsSchema,
} from './options.ts';
import { PartUploader, type UploadResult } from './part-uploader.ts';
import { ZipStreamCheck } from './zip-stream.ts';

export {
  abortUpload,
  type ContinuableCopyOptions,
  type ContinuableCopyResult,
  type ContinuedCopyReceipt,
  type CopyCheckpoint,
  type CopyRestart,
  copyExportContinuable,
  partSizeFor,
  verifyContinuedCopy,
} from './continued-copy.ts';
export type { ArchiveTarget, CopyOptions, CopyResult, VerifiedArchive, VerifyOptions } from './options.ts';
export { REQUIRED_ENTRIES } from './options.ts';
export {
  putPackageStream,
  putVerifiedObject,
  readVerifiedObject,
  readVerifiedStream,
} from './stored-object.ts';
export { type CopyReceipt, entryLabel, hashStoredObject, verifyCopy, verifyStoredZip } from './verify.ts';

/**
 * Streams the link's body into an S3 multipart upload while hashing it, and checks the byte count
 * against Content-Length. With `options.verify`, the zip is checked on the way too (see
 * zip-stream.ts): a broken or oversized archive fails before the upload completes. On any failure
 * the upload is aborted, so no object is left at the key.
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
  const zip =
    options.verify === undefined
      ? undefined
      : new ZipStreamCheck(parseOptions(verifyOptionsSchema, options.verify, 'copyExportToS3'));
  const sink: ChunkSink =
    zip === undefined
      ? upload
      : {
          get failure() {
            return upload.failure;
          },
          async write(chunk, crc) {
            await zip.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength), crc);
            await upload.write(chunk, crc);
          },
        };
  try {
    const get = options.fetch === undefined ? nodeHttpGet : fetchGet(options.fetch);
    const response = await openDownload(link, options.policy, get, { signal: connection.signal, watchdog });
    const tally = new DownloadTally(declaredLength(response));
    let stored: UploadResult;
    let archive: VerifiedArchive | undefined;
    try {
      await copyBody(response.body, tally, watchdog, sink);
      // Judged before the last part goes: a broken archive is never completed into an object.
      archive = await zip?.finish(tally.bytes);
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
      ...(archive === undefined ? {} : { archive }),
      ...(output.VersionId === undefined ? {} : { versionId: output.VersionId }),
      ...(output.ETag === undefined ? {} : { etag: output.ETag }),
    };
  } finally {
    watchdog.stop();
    // Releases the platform connection when S3 failed first and nothing reads the body any more.
    connection.abort();
  }
}
