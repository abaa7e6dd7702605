/**
 * A copy carried across invocations (docs/design.md, "Copies longer than one invocation"): the
 * download goes into one S3 multipart upload until the caller says time is short; the copy then
 * stops at a part boundary and answers a checkpoint (the upload id, the parts S3 acknowledged, the
 * CRC32 of their CRC32s, the part size and the archive's size). The next invocation lists the
 * upload's parts (ListParts) against that checkpoint, asks the platform for the rest with
 * `Range: bytes=<offset>-`, and goes on from the next part. Nothing already uploaded is sent again
 * unless it was never acknowledged; a part sent again keeps its number, so it replaces, never
 * duplicates. A copy that was continued is proven afterwards by reading the stored object back
 * (verify.ts verifyContinuedCopy): Node's SHA-256 and inflate states cannot be carried over.
 */

import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { crc32 } from 'node:zlib';
import { AbortMultipartUploadCommand, ListPartsCommand, type Part } from '@aws-sdk/client-s3';
import { assertDownloadAllowed } from '../download-policy.ts';
import { awsTransientError, DsrError, InvalidArchiveError } from '../errors.ts';
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
  MiB,
  parseOptions,
  type VerifiedArchive,
  type VerifyOptions,
  verifyOptionsSchema,
} from './options.ts';
import { MAX_PARTS, PartUploader, type UploadedPart, type UploadResume } from './part-uploader.ts';
import { getBody, isNotFound } from './range-reader.ts';
import { storedChecksumMatches, verifyStoredZip } from './verify.ts';
import { ZipStreamCheck } from './zip-stream.ts';

/** How far a copy got, as a later invocation carries it on. Step facts only: no link, no identifier. */
export interface CopyCheckpoint {
  readonly uploadId: string;
  readonly partSizeBytes: number;
  /** Parts 1 to `parts` are in S3: the copy goes on at byte `parts * partSizeBytes`. */
  readonly parts: number;
  /** The CRC32 of those parts' CRC32s, joined big-endian: what ListParts must give back. */
  readonly partsCrc32: number;
  /** The archive's size, as the first download announced it; every later range must agree. */
  readonly totalBytes: number;
}

/** Options of a copy that may stop and be carried on. */
export interface ContinuableCopyOptions extends CopyOptions {
  /** The checkpoint of an earlier invocation to carry on from. @default a new copy */
  readonly checkpoint?: CopyCheckpoint;
  /** Asked at every part boundary: true stops the copy there with a checkpoint. */
  readonly shouldStop: () => boolean;
  /**
   * Called once the upload exists, then as parts land, at most every `checkpointEveryMs`: where the
   * copy stands should the invocation die without returning. Its failure fails the copy.
   */
  readonly onCheckpoint?: (checkpoint: CopyCheckpoint) => Promise<void>;
  /** @default 30000 */
  readonly checkpointEveryMs?: number;
  /**
   * Called once the platform has answered the download with the archive, before its body is read:
   * from here the platform no longer counts the export as open. Its failure fails the copy.
   */
  readonly onDownloadOpened?: () => Promise<void>;
}

/** A copy that ended, or stopped for another invocation to go on. */
export type ContinuableCopyResult =
  | { readonly done: CopyResult; readonly continued: false; readonly restarted?: CopyRestart }
  | {
      /** A copy carried on from a checkpoint: its SHA-256 and zip are proven by reading it back. */
      readonly done: Omit<CopyResult, 'sha256' | 'archive'>;
      readonly continued: true;
      /** Why an earlier checkpoint could not be carried on, when it could not (a new upload began). */
      readonly restarted?: CopyRestart;
    }
  | { readonly paused: CopyCheckpoint; readonly restarted?: CopyRestart };

/** Why a checkpoint was not carried on: S3 no longer has the upload, or its parts are not the ones recorded. */
export type CopyRestart = 'upload_gone' | 'parts_differ';

/** Thrown inside the sink to stop the body at a part boundary; never leaves this module. */
class StopAtBoundary extends Error {
  override readonly name = 'StopAtBoundary';
}

/**
 * The part size for an archive of `totalBytes`: the configured one, or larger when the archive
 * would otherwise need more than S3's 10,000 parts (rounded up to a whole MiB).
 */
export function partSizeFor(totalBytes: number, configured: number): number {
  const needed = Math.ceil(totalBytes / MAX_PARTS / MiB) * MiB;
  return Math.max(configured, needed);
}

/**
 * Copies the link's body into S3 as copyExportToS3 does, but in a way another invocation can carry
 * on: see the module comment. A failure worth retrying (the download broke off, S3 or the platform
 * throttled) leaves the upload open and reports where it stands through `onCheckpoint`, so Step
 * Functions' retry goes on from there; any other failure aborts the upload.
 */
export async function copyExportContinuable(
  link: URL,
  target: ArchiveTarget,
  options: ContinuableCopyOptions,
): Promise<ContinuableCopyResult> {
  const { partSizeBytes, idleTimeoutMs, queueSize } = parseOptions(
    copyOptionsSchema,
    options,
    'copyExportContinuable',
  );
  assertDownloadAllowed(link, options.policy);
  let restarted: CopyRestart | undefined;
  let resume: (UploadResume & { checkpoint: CopyCheckpoint }) | undefined;
  if (options.checkpoint !== undefined) {
    const carried = await carryOn(target, options.checkpoint);
    if (typeof carried === 'string') restarted = carried;
    else resume = carried;
  }
  const connection = new AbortController();
  const watchdog = new IdleWatchdog(idleTimeoutMs, () => connection.abort());
  const get = options.fetch === undefined ? nodeHttpGet : fetchGet(options.fetch);
  const from = resume === undefined ? 0 : resume.parts.length * resume.checkpoint.partSizeBytes;
  try {
    const response = await openDownload(
      link,
      options.policy,
      get,
      { signal: connection.signal, watchdog },
      resume === undefined ? undefined : { from, totalBytes: resume.checkpoint.totalBytes },
    );
    await options.onDownloadOpened?.();
    const declared = declaredLength(response);
    const totalBytes = resume === undefined ? declared : resume.checkpoint.totalBytes;
    // Without an announced size there is no range to ask for later: such a copy runs in one go.
    const continuable = totalBytes !== undefined && totalBytes > 0;
    const partSize =
      resume?.checkpoint.partSizeBytes ??
      (totalBytes === undefined ? partSizeBytes : partSizeFor(totalBytes, partSizeBytes));
    const upload = new PartUploader(target, partSize, queueSize, () => connection.abort(), resume);
    const zip =
      resume !== undefined || options.verify === undefined
        ? undefined
        : new ZipStreamCheck(parseOptions(verifyOptionsSchema, options.verify, 'copyExportContinuable'));
    const tally = new DownloadTally(declared);
    const recorder = checkpointRecorder(upload, partSize, totalBytes ?? 0, options);
    const sink: ChunkSink = {
      get failure() {
        return upload.failure;
      },
      async write(chunk, crc) {
        let offset = 0;
        while (offset < chunk.length) {
          const written = upload.bytesWritten;
          const toBoundary = partSize - (written % partSize);
          const length = Math.min(toBoundary, chunk.length - offset);
          const whole = offset === 0 && length === chunk.length;
          const piece = whole ? chunk : chunk.subarray(offset, offset + length);
          const pieceCrc = whole ? crc : undefined;
          await zip?.write(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength), pieceCrc);
          await upload.write(piece, pieceCrc);
          offset += length;
          const atBoundary = upload.bytesWritten % partSize === 0;
          if (continuable && atBoundary && upload.bytesWritten < (totalBytes ?? 0)) {
            await recorder.maybe();
            if (options.shouldStop()) throw new StopAtBoundary();
          }
        }
      },
    };
    try {
      await copyBody(response.body, tally, watchdog, sink);
      const archive = await zip?.finish(tally.bytes);
      const stored = await upload.finish();
      const { output, checksumCrc32 } = stored;
      const common = {
        bytes: from + tally.bytes,
        checksumCrc32,
        ...(output.VersionId === undefined ? {} : { versionId: output.VersionId }),
        ...(output.ETag === undefined ? {} : { etag: output.ETag }),
      };
      if (resume === undefined) {
        return {
          continued: false,
          done: {
            ...common,
            sha256: tally.hash.digest('hex'),
            ...(archive === undefined ? {} : { archive }),
          },
          ...(restarted === undefined ? {} : { restarted }),
        };
      }
      return { continued: true, done: common };
    } catch (thrown) {
      let error = thrown;
      if (error instanceof StopAtBoundary) {
        // A part that failed meanwhile fails the stop too, and goes the failure's way below.
        const paused = await upload.pause().catch((failure: unknown) => {
          error = failure;
          return undefined;
        });
        if (paused !== undefined)
          return {
            paused: {
              uploadId: paused.uploadId,
              partSizeBytes: partSize,
              parts: paused.parts,
              partsCrc32: paused.partsCrc32,
              totalBytes: totalBytes ?? 0,
            },
            ...(restarted === undefined ? {} : { restarted }),
          };
      }
      const cause = tally.failure ?? upload.failure ?? error;
      if (continuable && worthRetrying(cause)) {
        // The retry goes on from what S3 has: the parts still in flight are let land first.
        await upload.settle();
        await recorder.now().catch(() => undefined);
      } else {
        await upload.abort();
      }
      throw cause;
    }
  } finally {
    watchdog.stop();
    connection.abort();
  }
}

/** A failure the same copy may get past when run again: the platform's or AWS's transient ones. */
function worthRetrying(error: unknown): boolean {
  if (error instanceof DsrError) return error.retryable;
  return awsTransientError(error) !== undefined;
}

/**
 * Reports the checkpoint once the upload exists and then whenever more parts landed, at most every
 * `checkpointEveryMs`. Only whole parts before the archive's last byte count: the part that holds
 * the last byte is always downloaded again, so a carried-on copy always has a range to ask for.
 */
function checkpointRecorder(
  upload: PartUploader,
  partSize: number,
  totalBytes: number,
  options: ContinuableCopyOptions,
): { maybe(): Promise<void>; now(): Promise<void> } {
  const every = options.checkpointEveryMs ?? 30_000;
  const fullParts = Math.floor((totalBytes - 1) / partSize);
  let recordedParts = -1;
  let recordedAt = Number.NEGATIVE_INFINITY;
  const record = async () => {
    const onCheckpoint = options.onCheckpoint;
    if (onCheckpoint === undefined) return;
    const checkpoint = await upload.checkpoint();
    if (checkpoint === undefined) return;
    const { parts, partsCrc32 } = checkpoint;
    // The last part landed (the copy failed as it completed): the checkpoint taken before stands.
    if (parts > fullParts || parts === recordedParts) return;
    recordedParts = parts;
    recordedAt = Date.now();
    await onCheckpoint({
      uploadId: checkpoint.uploadId,
      partSizeBytes: partSize,
      parts,
      partsCrc32,
      totalBytes,
    });
  };
  return {
    async maybe() {
      if (recordedParts >= 0 && Date.now() - recordedAt < every) return;
      await record();
    },
    now: record,
  };
}

/**
 * The parts of `checkpoint.uploadId` that S3 lists (ListParts, page by page), checked against the
 * checkpoint: parts 1 to `parts` are all there, each of the part size, and, when S3 reports their
 * CRC32s, the CRC32 of those CRC32s is the recorded one. Parts listed beyond them were sent after
 * the checkpoint was taken; they are sent again under the same numbers. An upload S3 no longer has
 * (aborted by its lifecycle rule, or by hand) or whose parts differ is aborted and the copy begins
 * anew, saying why.
 */
async function carryOn(
  target: ArchiveTarget,
  checkpoint: CopyCheckpoint,
): Promise<(UploadResume & { checkpoint: CopyCheckpoint }) | CopyRestart> {
  let listed: Part[];
  try {
    listed = await listParts(target, checkpoint.uploadId);
  } catch (error) {
    if (error instanceof Error && error.name === 'NoSuchUpload') return 'upload_gone';
    throw error;
  }
  const byNumber = new Map(listed.map((part) => [part.PartNumber, part]));
  const parts: UploadedPart[] = [];
  let partsCrc32 = 0;
  let checksums = true;
  for (let number = 1; number <= checkpoint.parts; number += 1) {
    const part = byNumber.get(number);
    if (part?.ETag === undefined || part.Size !== checkpoint.partSizeBytes) {
      await abortUpload(target, checkpoint.uploadId);
      return 'parts_differ';
    }
    if (part.ChecksumCRC32 === undefined) checksums = false;
    else partsCrc32 = crc32(Buffer.from(part.ChecksumCRC32, 'base64'), partsCrc32);
    parts.push({
      PartNumber: number,
      ETag: part.ETag,
      ...(part.ChecksumCRC32 === undefined ? {} : { ChecksumCRC32: part.ChecksumCRC32 }),
    });
  }
  if (checksums && checkpoint.parts > 0 && partsCrc32 !== checkpoint.partsCrc32 >>> 0) {
    await abortUpload(target, checkpoint.uploadId);
    return 'parts_differ';
  }
  return { uploadId: checkpoint.uploadId, parts, partsCrc32: checkpoint.partsCrc32, checkpoint };
}

async function listParts(target: ArchiveTarget, uploadId: string): Promise<Part[]> {
  const parts: Part[] = [];
  let marker: string | undefined;
  for (;;) {
    const page = await target.s3.send(
      new ListPartsCommand({
        Bucket: target.bucket,
        Key: target.key,
        UploadId: uploadId,
        ...(marker === undefined ? {} : { PartNumberMarker: marker }),
      }),
    );
    parts.push(...(page.Parts ?? []));
    if (page.IsTruncated !== true || page.NextPartNumberMarker === undefined) return parts;
    marker = page.NextPartNumberMarker;
  }
}

/** Aborts a multipart upload that will not be completed: its parts hold the subject's data. */
export async function abortUpload(target: ArchiveTarget, uploadId: string): Promise<void> {
  try {
    await target.s3.send(
      new AbortMultipartUploadCommand({ Bucket: target.bucket, Key: target.key, UploadId: uploadId }),
    );
  } catch (error) {
    if (error instanceof Error && error.name === 'NoSuchUpload') return;
    throw error;
  }
}

/** What a copy carried across invocations knows of what it stored: no SHA-256, no streamed zip check. */
export interface ContinuedCopyReceipt {
  readonly bytes: number;
  /** The COMPOSITE CRC32 of the parts sent, from each part's CRC32 (computed on the bytes downloaded). */
  readonly checksumCrc32: string;
  readonly versionId?: string;
}

/**
 * Proves a copy that was carried across invocations, whose SHA-256 and zip check could not be
 * carried with it (Node cannot save a hash's or an inflater's state):
 * - the stored object is the bytes downloaded: HeadObject's size and COMPOSITE CRC32 against the
 *   one made of the parts' CRC32s, each computed on the downloaded bytes and checked by S3 when it
 *   took the part (no read);
 * - one streaming read of the stored object then gives its SHA-256 (the ledger's fingerprint, equal
 *   to the download's by the point above) and checks the zip as the copy does while it streams; a
 *   zip that check cannot follow is read once more with ranged GETs (verifyStoredZip).
 * A store that keeps no checksum (a stand-in) is proven by the read alone.
 */
export async function verifyContinuedCopy(
  target: ArchiveTarget,
  copied: ContinuedCopyReceipt,
  options: VerifyOptions = {},
): Promise<VerifiedArchive & { readonly sha256: string }> {
  const limits = parseOptions(verifyOptionsSchema, options, 'verifyContinuedCopy');
  await storedChecksumMatches(target, copied);
  let body: Readable;
  try {
    body = await getBody(target, copied.versionId === undefined ? {} : { VersionId: copied.versionId });
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArchiveError('the archive object is missing from the bucket');
    throw error;
  }
  const hash = createHash('sha256');
  const zip = new ZipStreamCheck(limits);
  let bytes = 0;
  try {
    for await (const chunk of body) {
      if (!Buffer.isBuffer(chunk))
        throw new InvalidArchiveError('the stored archive produced a non-byte chunk');
      bytes += chunk.length;
      hash.update(chunk);
      await zip.write(chunk);
    }
  } finally {
    body.destroy();
  }
  if (bytes !== copied.bytes) {
    throw new InvalidArchiveError(`the stored archive is ${bytes} bytes, but ${copied.bytes} were copied`);
  }
  const sha256 = hash.digest('hex');
  const streamed = await zip.finish(bytes);
  const archive = streamed ?? (await verifyStoredZip(target, { bytes }, limits));
  return { ...archive, sha256 };
}
