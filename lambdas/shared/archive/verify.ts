/**
 * Proving a stored zip intact: its structure judged from the central directory (duplicates,
 * encryption, methods, zip-bomb limits, the documented files) and every entry's data checked
 * against its CRC-32. Messages never quote an untrusted entry name.
 */
import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { HeadObjectCommand, type HeadObjectCommandOutput } from '@aws-sdk/client-s3';
import yauzl from 'yauzl';
import { ArchiveTooLargeError, InvalidArchiveError } from '../errors.ts';
import {
  type ArchiveTarget,
  MiB,
  parseOptions,
  REQUIRED_ENTRIES,
  type VerifiedArchive,
  type VerifyLimits,
  type VerifyOptions,
  verifyOptionsSchema,
} from './options.ts';
import { hashObject, isNotFound, openArchive, S3RangeReader, StorageReadError } from './range-reader.ts';

/** Entries smaller than this are exempt from the ratio limit: tiny JSON files compress very well. */
const RATIO_EXEMPT_BYTES = MiB;

/**
 * Re-reads the stored object with ranged GETs (the first, a suffix, also gives its size), never
 * whole in memory: its size matches, it is a zip, the four documented files are present, every
 * entry's CRC-32 matches its data, no entry is encrypted, and the zip-bomb limits hold; with
 * `expected.sha256`, the SHA-256 too.
 */
export async function verifyStoredZip(
  target: ArchiveTarget,
  expected: { bytes: number; sha256?: string },
  options: VerifyOptions = {},
): Promise<VerifiedArchive> {
  const limits = parseOptions(verifyOptionsSchema, options, 'verifyStoredZip');
  const { stored, tail } = await openArchive(target);
  if (stored.size !== expected.bytes) {
    throw new InvalidArchiveError(
      `the stored archive is ${stored.size} bytes, but ${expected.bytes} were copied`,
    );
  }
  const reader = new S3RangeReader(target, stored, tail);
  let zip: yauzl.ZipFile;
  try {
    zip = await yauzl.fromRandomAccessReaderPromise(reader, stored.size, {
      autoClose: false,
      lazyEntries: true,
      validateEntrySizes: true,
      strictFileNames: false,
    });
  } catch (error) {
    throw archiveError(error, 'the stored object is not a readable zip');
  }
  // Errors during reads reach the promise that waits on them; this keeps a late one from crashing.
  zip.on('error', () => {});
  let entries: yauzl.Entry[];
  try {
    entries = await readCentralDirectory(zip, limits.maxEntries);
    checkStructure(entries, limits);
    for (const entry of entries) await checkEntryData(zip, entry);
  } finally {
    zip.close();
  }
  if (expected.sha256 !== undefined) {
    // A zip small enough to have come whole in one read is hashed from that read, not fetched again.
    const whole = await reader.wholeObject();
    const recomputed =
      whole === undefined
        ? await hashObject(target, stored.etag)
        : { bytes: whole.length, sha256: createHash('sha256').update(whole).digest('hex') };
    if (recomputed.bytes !== expected.bytes || recomputed.sha256 !== expected.sha256.toLowerCase()) {
      throw new InvalidArchiveError(
        'the SHA-256 of the stored archive does not match the one measured during the copy',
      );
    }
  }
  return verifiedArchive(entries);
}

/** Recomputes the SHA-256 of the stored object by streaming it (for `svc-dsr verify`). */
export async function hashStoredObject(target: ArchiveTarget): Promise<{ bytes: number; sha256: string }> {
  return hashObject(target, undefined);
}

export async function readCentralDirectory(zip: yauzl.ZipFile, maxEntries: number): Promise<yauzl.Entry[]> {
  if (zip.entryCount > maxEntries) {
    throw new InvalidArchiveError(
      `the archive has ${zip.entryCount} entries, above the limit of ${maxEntries}`,
    );
  }
  const entries: yauzl.Entry[] = [];
  try {
    for await (const entry of zip.eachEntry()) entries.push(entry);
  } catch (error) {
    throw archiveError(error, "the zip's central directory is damaged");
  }
  return entries;
}

/** Everything that can be judged from the central directory, before a byte of data is read. */
export function checkStructure(entries: readonly yauzl.Entry[], limits: VerifyLimits): void {
  const names = new Set<string>();
  let totalUncompressed = 0;
  for (const entry of entries) {
    const name = entry.fileName;
    if (names.has(name)) throw new InvalidArchiveError(`${entryLabel(name)} appears twice`);
    names.add(name);
    if (entry.isEncrypted()) throw new InvalidArchiveError(`${entryLabel(name)} is encrypted`);
    if (!entry.canDecodeFileData()) {
      throw new InvalidArchiveError(
        `${entryLabel(name)} uses compression method ${entry.compressionMethod}, which is not supported`,
      );
    }
    if (
      entry.uncompressedSize >= RATIO_EXEMPT_BYTES &&
      entry.uncompressedSize > entry.compressedSize * limits.maxRatio
    ) {
      const ratio = Math.round(entry.uncompressedSize / Math.max(entry.compressedSize, 1));
      throw new InvalidArchiveError(
        `${entryLabel(name)} expands ${ratio}:1, above the ${limits.maxRatio}:1 limit`,
      );
    }
    totalUncompressed += entry.uncompressedSize;
  }
  if (totalUncompressed > limits.maxUncompressedBytes) {
    throw new ArchiveTooLargeError(limits.maxUncompressedBytes, totalUncompressed);
  }
  const missing = REQUIRED_ENTRIES.filter((required) => !names.has(required));
  if (missing.length > 0) throw new InvalidArchiveError(`the archive lacks ${missing.join(', ')}`);
}

async function checkEntryData(zip: yauzl.ZipFile, entry: yauzl.Entry): Promise<void> {
  const name = entry.fileName;
  let computed = 0;
  try {
    const stream = await zip.openReadStreamPromise(entry);
    for await (const chunk of stream) {
      if (!Buffer.isBuffer(chunk)) throw new InvalidArchiveError(`${entryLabel(name)}: unreadable data`);
      computed = crc32(chunk, computed);
    }
  } catch (error) {
    throw archiveError(error, `${entryLabel(name)} cannot be read`);
  }
  if (computed >>> 0 !== entry.crc32 >>> 0) {
    throw new InvalidArchiveError(
      `${entryLabel(name)}: the data's CRC-32 ${hex32(computed)} does not match the recorded ${hex32(entry.crc32)}; the entry is corrupt`,
    );
  }
}

export function hex32(value: number): string {
  return (value >>> 0).toString(16).padStart(8, '0');
}

/**
 * How a message names an entry. Entry names come from the platform, so they are untrusted: one may
 * hold an e-mail address, a link or terminal escapes, and messages reach workflow state, the ledger
 * and reports. Only the four documented names are quoted; any other is described, never shown.
 */
export function entryLabel(name: string): string {
  return (REQUIRED_ENTRIES as readonly string[]).includes(name)
    ? `entry ${name}`
    : 'an entry whose name is not one of the four documented files';
}

/** The zip reader's complaints that quote an entry name, up to where the name starts. */
const NAME_QUOTING_PROBLEMS = [
  'invalid characters in fileName: ',
  'absolute path: ',
  'invalid relative path: ',
];

/** What the zip reader said, without the entry name some of its messages end with. */
function zipReaderProblem(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const quoting = NAME_QUOTING_PROBLEMS.find((prefix) => message.startsWith(prefix));
  if (quoting !== undefined)
    return `${quoting.slice(0, -2)} in an entry name (the name is not repeated here)`;
  // Its other messages are fixed text with numbers; anything else is not repeated either.
  return /^[\x20-\x7e]{1,300}$/.test(message) && !/@|:\/\//.test(message) ? message : 'unreadable';
}

/** An S3 failure passes through; anything else the zip reader said makes the archive invalid. */
export function archiveError(error: unknown, context: string): unknown {
  if (error instanceof StorageReadError) return error.cause;
  if (error instanceof InvalidArchiveError || error instanceof ArchiveTooLargeError) return error;
  return new InvalidArchiveError(`${context} (${zipReaderProblem(error)})`);
}

/** What a finished copy measured: the facts the stored object is proven against. */
export interface CopyReceipt {
  readonly bytes: number;
  readonly sha256: string;
  /** The CRC32 S3 should hold for the object (CopyResult.checksumCrc32). */
  readonly checksumCrc32?: string;
  readonly versionId?: string;
  /** The entries, when the zip was checked as it streamed. */
  readonly archive?: VerifiedArchive;
}

/**
 * Proves a finished copy with as few reads of the stored object as the store allows:
 * - that the stored object is the bytes that streamed: HeadObject's size, and the CRC32 S3 computed
 *   on the parts it accepted, against the CRC32 computed here on the bytes sent (no read);
 * - that those bytes are an intact zip: checked as they streamed (no read).
 * A zip the stream check could not follow is read once with ranged GETs; a store that keeps no
 * checksum (a stand-in) is hashed once more instead, as before. docs/security.md says why the
 * checksum proof is as strong as hashing the stored copy again.
 */
export async function verifyCopy(
  target: ArchiveTarget,
  copied: CopyReceipt,
  options: VerifyOptions = {},
): Promise<VerifiedArchive> {
  const proven = copied.checksumCrc32 !== undefined && (await storedChecksumMatches(target, copied));
  if (copied.archive !== undefined) {
    if (!proven) await checkStoredHash(target, copied);
    return copied.archive;
  }
  return verifyStoredZip(
    target,
    proven ? { bytes: copied.bytes } : { bytes: copied.bytes, sha256: copied.sha256 },
    options,
  );
}

/**
 * HeadObject with ChecksumMode: true when S3's CRC32 and size for the object (the copy's version,
 * when the bucket keeps versions) equal the copy's; false when the store reports no CRC32; a
 * mismatch or a missing object is an InvalidArchiveError.
 */
export async function storedChecksumMatches(
  target: ArchiveTarget,
  copied: Pick<CopyReceipt, 'bytes' | 'checksumCrc32' | 'versionId'>,
): Promise<boolean> {
  let head: HeadObjectCommandOutput;
  try {
    head = await target.s3.send(
      new HeadObjectCommand({
        Bucket: target.bucket,
        Key: target.key,
        ChecksumMode: 'ENABLED',
        ...(copied.versionId === undefined ? {} : { VersionId: copied.versionId }),
      }),
    );
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArchiveError('the archive object is missing from the bucket');
    throw error;
  }
  if (head.ContentLength !== copied.bytes) {
    throw new InvalidArchiveError(
      `the stored archive is ${head.ContentLength ?? 'an unknown number of'} bytes, but ${copied.bytes} were copied`,
    );
  }
  if (head.ChecksumCRC32 === undefined) return false;
  if (head.ChecksumCRC32 !== copied.checksumCrc32) {
    throw new InvalidArchiveError(
      'the CRC32 S3 holds for the stored archive differs from the one computed on the bytes sent; the stored object is not the copy',
    );
  }
  return true;
}

/** One streaming read of the stored object, for a store that cannot vouch for it with a checksum. */
async function checkStoredHash(target: ArchiveTarget, copied: CopyReceipt): Promise<void> {
  const recomputed = await hashObject(target, undefined);
  if (recomputed.bytes !== copied.bytes || recomputed.sha256 !== copied.sha256.toLowerCase()) {
    throw new InvalidArchiveError(
      'the SHA-256 of the stored archive does not match the one measured during the copy',
    );
  }
}

/** What a verification answers: each entry of the central directory as checked. */
export function verifiedArchive(entries: readonly yauzl.Entry[]): VerifiedArchive {
  return {
    entries: entries.map((entry) => ({
      name: entry.fileName,
      compressedSize: entry.compressedSize,
      uncompressedSize: entry.uncompressedSize,
      crc32: entry.crc32,
    })),
  };
}
