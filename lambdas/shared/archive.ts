/**
 * ArchiveExport's machinery: copy the platform's export zip into S3 before its link expires, and
 * prove the stored copy intact. Everything streams: memory use does not depend on the archive's size.
 */
import { createHash } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import { crc32 } from 'node:zlib';
import { GetObjectCommand, HeadObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import yauzl from 'yauzl';
import { z } from 'zod';
import { assertDownloadAllowed, type DownloadPolicy } from './download-policy.ts';
import {
  ConfigurationError,
  DownloadLinkExpiredError,
  type DsrError,
  InvalidArchiveError,
  PlatformRejectedError,
  PlatformResponseInvalidError,
  PlatformThrottledError,
  PlatformTimeoutError,
  PlatformUnavailableError,
  TruncatedDownloadError,
} from './errors.ts';
import { classifyNetworkError, parseRetryAfter } from './platform-client.ts';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

/** Where an archive lives in S3. */
export interface ArchiveTarget {
  readonly s3: S3Client;
  readonly bucket: string;
  readonly key: string;
  /** KMS key for SSE-KMS; without it the bucket's default encryption applies. */
  readonly kmsKeyId?: string;
}

/** What was stored: the byte count and SHA-256 measured on the bytes as they went to S3. */
export interface CopyResult {
  readonly bytes: number;
  /** Lowercase hex. */
  readonly sha256: string;
  readonly versionId?: string;
  readonly etag?: string;
}

/** Tuning for copyExportToS3. */
export interface CopyOptions {
  readonly policy: DownloadPolicy;
  readonly fetch?: typeof fetch;
  /** Multipart part size; S3 needs at least 5 MiB. @default 8 MiB */
  readonly partSizeBytes?: number;
  /** Longest wait for the next byte from the platform. @default 30000 */
  readonly idleTimeoutMs?: number;
  /** Parts uploaded at once; memory is about (queueSize + 2) x partSizeBytes. @default 2 */
  readonly queueSize?: number;
}

/** The entries of a verified archive, as its central directory lists them. */
export interface VerifiedArchive {
  readonly entries: readonly {
    name: string;
    compressedSize: number;
    uncompressedSize: number;
    crc32: number;
  }[];
}

/** Limits that stop a hostile zip before it costs real time. */
export interface VerifyOptions {
  /** Sum of all entries' uncompressed sizes. @default 4 GiB */
  readonly maxUncompressedBytes?: number;
  /** Uncompressed:compressed ratio of one entry, for entries of 1 MiB or more. @default 200 */
  readonly maxRatio?: number;
  /** Entries in the archive; the entry list is held in memory. @default 10000 */
  readonly maxEntries?: number;
}

/** The files svc-api.md documents in every export. */
export const REQUIRED_ENTRIES = ['dislikes.json', 'likes.json', 'messages.json', 'profile.json'] as const;

const copyOptionsSchema = z.object({
  partSizeBytes: z
    .number()
    .int()
    .min(5 * MiB)
    .max(5 * GiB)
    .default(8 * MiB),
  idleTimeoutMs: z.number().int().positive().default(30_000),
  queueSize: z.number().int().min(1).max(16).default(2),
});

const verifyOptionsSchema = z.object({
  maxUncompressedBytes: z
    .number()
    .int()
    .positive()
    .default(4 * GiB),
  maxRatio: z.number().positive().default(200),
  maxEntries: z.number().int().positive().default(10_000),
});

/** Entries smaller than this are exempt from the ratio limit: tiny JSON files compress very well. */
const RATIO_EXEMPT_BYTES = MiB;
/** Reads up to this size (zip headers, small entries) are served from one read-ahead window... */
const SMALL_READ_BYTES = 128 * 1024;
/** ...of this size, so walking the central directory costs a few GETs rather than one per header. */
const READ_AHEAD_BYTES = 256 * 1024;

const DOWNLOAD = 'downloadExport';

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
  let body: Readable | undefined;
  try {
    const response = await openDownload(link, options.policy, options.fetch ?? globalThis.fetch, {
      signal: connection.signal,
      watchdog,
    });
    const tally = new DownloadTally(declaredLength(response));
    const source = response.body === null ? Readable.from([]) : Readable.fromWeb(response.body);
    body = Readable.from(hashAndCount(source, tally, watchdog), { objectMode: false });
    const upload = new Upload({
      client: target.s3,
      params: {
        Bucket: target.bucket,
        Key: target.key,
        Body: body,
        ContentType: 'application/zip',
        // Real S3 then checks every part against a SHA-256 computed before it left this process.
        ChecksumAlgorithm: 'SHA256',
        ...(target.kmsKeyId === undefined
          ? {}
          : { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: target.kmsKeyId }),
      },
      partSize: partSizeBytes,
      queueSize,
      leavePartsOnError: false,
    });
    let output: Awaited<ReturnType<Upload['done']>>;
    try {
      output = await upload.done();
    } catch (error) {
      // The download's own failure says what went wrong, even if aborting the upload failed too.
      throw tally.failure ?? error;
    }
    return {
      bytes: tally.bytes,
      sha256: tally.hash.digest('hex'),
      ...(output.VersionId === undefined ? {} : { versionId: output.VersionId }),
      ...(output.ETag === undefined ? {} : { etag: output.ETag }),
    };
  } finally {
    watchdog.disarm();
    // Releases the platform connection when S3 failed first and nothing reads the body any more.
    connection.abort();
    body?.destroy();
  }
}

/**
 * Re-reads the stored object with HEAD and ranged GETs, never whole in memory: its size matches,
 * it is a zip, the four documented files are present, every entry's CRC-32 matches its data, no
 * entry is encrypted, and the zip-bomb limits hold; with `expected.sha256`, the SHA-256 too.
 */
export async function verifyStoredZip(
  target: ArchiveTarget,
  expected: { bytes: number; sha256?: string },
  options: VerifyOptions = {},
): Promise<VerifiedArchive> {
  const limits = parseOptions(verifyOptionsSchema, options, 'verifyStoredZip');
  const stored = await headArchive(target);
  if (stored.size !== expected.bytes) {
    throw new InvalidArchiveError(
      `the stored archive is ${stored.size} bytes, but ${expected.bytes} were copied`,
    );
  }
  const reader = new S3RangeReader(target, stored);
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
    const recomputed = await hashObject(target, stored.etag);
    if (recomputed.bytes !== expected.bytes || recomputed.sha256 !== expected.sha256.toLowerCase()) {
      throw new InvalidArchiveError(
        'the SHA-256 of the stored archive does not match the one measured during the copy',
      );
    }
  }
  return {
    entries: entries.map((entry) => ({
      name: entry.fileName,
      compressedSize: entry.compressedSize,
      uncompressedSize: entry.uncompressedSize,
      crc32: entry.crc32,
    })),
  };
}

/** Recomputes the SHA-256 of the stored object by streaming it (for `svc-dsr verify`). */
export async function hashStoredObject(target: ArchiveTarget): Promise<{ bytes: number; sha256: string }> {
  return hashObject(target, undefined);
}

// ---------------------------------------------------------------------------------------------
// Download

interface DownloadControl {
  readonly signal: AbortSignal;
  readonly watchdog: IdleWatchdog;
}

async function openDownload(
  link: URL,
  policy: DownloadPolicy,
  fetchImpl: typeof fetch,
  control: DownloadControl,
): Promise<Response> {
  let url = link;
  for (let hop = 0; ; hop += 1) {
    const response = await fetchOnce(url, fetchImpl, control);
    if (!isFollowableRedirect(response.status)) {
      await throwForStatus(response);
      return response;
    }
    await discard(response);
    if (hop >= policy.maxRedirects) {
      throw new PlatformRejectedError(
        `${DOWNLOAD}: more than ${policy.maxRedirects} redirects; raise maxRedirects if the platform's CDN needs them`,
        response.status,
      );
    }
    const location = response.headers.get('location');
    if (location === null || !URL.canParse(location, url.href)) {
      throw new PlatformResponseInvalidError(
        `${DOWNLOAD}: a ${response.status} redirect without a usable Location`,
      );
    }
    url = new URL(location, url);
    // Checked before the next request, so nothing is ever fetched from a host off the list.
    assertDownloadAllowed(url, policy);
  }
}

async function fetchOnce(
  url: URL,
  fetchImpl: typeof fetch,
  { signal, watchdog }: DownloadControl,
): Promise<Response> {
  watchdog.arm();
  try {
    return await fetchImpl(url, {
      method: 'GET',
      // A redirect is followed only after its target passed the allowlist.
      redirect: 'manual',
      // fetch would decode a compressed transfer, and Content-Length would then not count the bytes stored.
      headers: {
        accept: 'application/zip, application/octet-stream;q=0.9, */*;q=0.1',
        'accept-encoding': 'identity',
      },
      signal,
    });
  } catch (error) {
    // The original error is dropped: it can quote the link.
    throw watchdog.fired ? idleTimeout(watchdog) : classifyNetworkError(DOWNLOAD, error, watchdog.ms);
  } finally {
    watchdog.disarm();
  }
}

function isFollowableRedirect(status: number): boolean {
  return status === 301 || status === 302 || status === 303 || status === 307 || status === 308;
}

async function throwForStatus(response: Response): Promise<void> {
  const { status } = response;
  if (status === 200) return;
  await discard(response);
  // Signed links answer 403 once expired; the platform's own links 410; a removed file 404.
  if (status === 401 || status === 403 || status === 404 || status === 410) {
    throw new DownloadLinkExpiredError(
      `${DOWNLOAD}: the download link is no longer valid (${status}); the export must be started again`,
    );
  }
  if (status === 429) {
    const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
    throw new PlatformThrottledError(
      `${DOWNLOAD}: the download is throttled (429${retryAfter === undefined ? '' : `, retry after ${retryAfter} s`})`,
      retryAfter,
    );
  }
  if (status >= 500) {
    throw new PlatformUnavailableError(`${DOWNLOAD}: the download answered ${status}`, status);
  }
  if (status >= 200 && status < 300) {
    throw new PlatformResponseInvalidError(`${DOWNLOAD}: the download answered ${status} instead of 200`);
  }
  throw new PlatformRejectedError(`${DOWNLOAD}: the download answered ${status}`, status);
}

async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

/** The announced length, when it counts the bytes fetch hands over. */
function declaredLength(response: Response): number | undefined {
  const encoding = response.headers.get('content-encoding');
  if (encoding !== null && encoding.trim().toLowerCase() !== 'identity') return undefined;
  const value = response.headers.get('content-length')?.trim();
  return value !== undefined && /^\d+$/.test(value) ? Number(value) : undefined;
}

/** What has gone through so far, and why the download stopped when it did not finish. */
class DownloadTally {
  readonly hash = createHash('sha256');
  bytes = 0;
  failure: DsrError | undefined;

  constructor(readonly declared: number | undefined) {}

  fail(error: DsrError): DsrError {
    this.failure = error;
    return error;
  }

  get announced(): string {
    return this.declared === undefined ? '' : ` of the announced ${this.declared}`;
  }
}

/**
 * Passes the body through, hashing and counting. The idle timer runs only while waiting on the
 * platform, not while S3 is slow to take a part, so a slow upload is never mistaken for a stall.
 */
async function* hashAndCount(
  source: Readable,
  tally: DownloadTally,
  watchdog: IdleWatchdog,
): AsyncGenerator<Buffer> {
  const chunks = source[Symbol.asyncIterator]();
  try {
    for (;;) {
      let next: IteratorResult<unknown>;
      watchdog.arm();
      try {
        next = await chunks.next();
      } catch {
        throw tally.fail(
          watchdog.fired
            ? idleTimeout(watchdog)
            : new TruncatedDownloadError(
                `${DOWNLOAD}: the download broke off after ${tally.bytes} bytes${tally.announced}`,
              ),
        );
      } finally {
        watchdog.disarm();
      }
      if (next.done) break;
      const chunk = next.value;
      if (!Buffer.isBuffer(chunk)) {
        throw tally.fail(
          new PlatformResponseInvalidError(`${DOWNLOAD}: the body stream produced a non-byte chunk`),
        );
      }
      tally.bytes += chunk.length;
      if (tally.declared !== undefined && tally.bytes > tally.declared) {
        throw tally.fail(
          new TruncatedDownloadError(
            `${DOWNLOAD}: the download sent more than the announced ${tally.declared} bytes; the transfer is corrupt`,
          ),
        );
      }
      tally.hash.update(chunk);
      yield chunk;
    }
  } finally {
    source.destroy();
  }
  if (tally.declared !== undefined && tally.bytes < tally.declared) {
    throw tally.fail(
      new TruncatedDownloadError(
        `${DOWNLOAD}: the download ended after ${tally.bytes} bytes${tally.announced}`,
      ),
    );
  }
}

function idleTimeout(watchdog: IdleWatchdog): PlatformTimeoutError {
  return new PlatformTimeoutError(`${DOWNLOAD}: no bytes arrived for ${watchdog.ms} ms`);
}

/** A timer armed while waiting on the platform; when it fires the download is aborted. */
class IdleWatchdog {
  fired = false;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    readonly ms: number,
    private readonly onIdle: () => void,
  ) {}

  arm(): void {
    this.disarm();
    this.#timer = setTimeout(() => {
      this.fired = true;
      this.onIdle();
    }, this.ms);
  }

  disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Verification

interface StoredObject {
  readonly size: number;
  /** Every later GET is pinned to this ETag, so a replaced object cannot be half-read. */
  readonly etag: string | undefined;
}

/** An S3 failure met while reading: rethrown as it is, since it says nothing about the archive. */
class StorageReadError extends Error {
  override readonly name = 'StorageReadError';

  constructor(cause: unknown) {
    super('reading the stored archive failed', { cause });
  }
}

async function headArchive(target: ArchiveTarget): Promise<StoredObject> {
  let response: Awaited<ReturnType<typeof sendHead>>;
  try {
    response = await sendHead(target);
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArchiveError('the archive object is missing from the bucket');
    throw error;
  }
  if (response.ContentLength === undefined)
    throw new InvalidArchiveError('S3 did not report the archive size');
  return { size: response.ContentLength, etag: response.ETag };
}

function sendHead(target: ArchiveTarget) {
  return target.s3.send(new HeadObjectCommand({ Bucket: target.bucket, Key: target.key }));
}

function isNotFound(error: unknown): boolean {
  return error instanceof Error && (error.name === 'NotFound' || error.name === 'NoSuchKey');
}

async function readCentralDirectory(zip: yauzl.ZipFile, maxEntries: number): Promise<yauzl.Entry[]> {
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
function checkStructure(entries: readonly yauzl.Entry[], limits: z.infer<typeof verifyOptionsSchema>): void {
  const names = new Set<string>();
  let totalUncompressed = 0;
  for (const entry of entries) {
    const name = entry.fileName;
    if (names.has(name)) throw new InvalidArchiveError(`entry ${name} appears twice`);
    names.add(name);
    if (entry.isEncrypted()) throw new InvalidArchiveError(`entry ${name} is encrypted`);
    if (!entry.canDecodeFileData()) {
      throw new InvalidArchiveError(
        `entry ${name} uses compression method ${entry.compressionMethod}, which is not supported`,
      );
    }
    if (
      entry.uncompressedSize >= RATIO_EXEMPT_BYTES &&
      entry.uncompressedSize > entry.compressedSize * limits.maxRatio
    ) {
      const ratio = Math.round(entry.uncompressedSize / Math.max(entry.compressedSize, 1));
      throw new InvalidArchiveError(`entry ${name} expands ${ratio}:1, above the ${limits.maxRatio}:1 limit`);
    }
    totalUncompressed += entry.uncompressedSize;
  }
  if (totalUncompressed > limits.maxUncompressedBytes) {
    throw new InvalidArchiveError(
      `the entries expand to ${totalUncompressed} bytes, above the limit of ${limits.maxUncompressedBytes}`,
    );
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
      if (!Buffer.isBuffer(chunk)) throw new InvalidArchiveError(`entry ${name}: unreadable data`);
      computed = crc32(chunk, computed);
    }
  } catch (error) {
    throw archiveError(error, `entry ${name} cannot be read`);
  }
  if (computed >>> 0 !== entry.crc32 >>> 0) {
    throw new InvalidArchiveError(
      `entry ${name}: the data's CRC-32 ${hex32(computed)} does not match the recorded ${hex32(entry.crc32)}; the entry is corrupt`,
    );
  }
}

function hex32(value: number): string {
  return (value >>> 0).toString(16).padStart(8, '0');
}

/** An S3 failure passes through; anything else the zip reader said makes the archive invalid. */
function archiveError(error: unknown, context: string): unknown {
  if (error instanceof StorageReadError) return error.cause;
  if (error instanceof InvalidArchiveError) return error;
  return new InvalidArchiveError(`${context} (${error instanceof Error ? error.message : String(error)})`);
}

async function hashObject(
  target: ArchiveTarget,
  etag: string | undefined,
): Promise<{ bytes: number; sha256: string }> {
  let body: Readable;
  try {
    body = await getBody(target, { IfMatch: etag });
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArchiveError('the archive object is missing from the bucket');
    throw error;
  }
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of body) {
    if (!Buffer.isBuffer(chunk))
      throw new InvalidArchiveError('the stored archive produced a non-byte chunk');
    bytes += chunk.length;
    hash.update(chunk);
  }
  return { bytes, sha256: hash.digest('hex') };
}

async function getBody(
  target: ArchiveTarget,
  conditions: { Range?: string; IfMatch?: string | undefined },
  abortSignal?: AbortSignal,
): Promise<Readable> {
  const response = await target.s3.send(
    new GetObjectCommand({ Bucket: target.bucket, Key: target.key, ...conditions }),
    abortSignal === undefined ? {} : { abortSignal },
  );
  if (!(response.Body instanceof Readable)) throw new Error('S3 returned no readable body');
  if (
    conditions.Range !== undefined &&
    response.ContentRange?.startsWith(`bytes ${conditions.Range.slice(6)}/`) !== true
  ) {
    response.Body.destroy();
    throw new Error('S3 answered a ranged GET with a different range');
  }
  return response.Body;
}

/**
 * Lets yauzl read the zip through ranged GETs. yauzl wants a stream back synchronously, so each
 * read returns a PassThrough that the GET fills once it answers.
 */
class S3RangeReader extends yauzl.RandomAccessReader {
  #window: { start: number; end: number; bytes: Promise<Buffer> } | undefined;

  constructor(
    private readonly target: ArchiveTarget,
    private readonly stored: StoredObject,
  ) {
    super();
  }

  override _readStreamForRange(start: number, end: number): Readable {
    return end - start <= SMALL_READ_BYTES ? this.#fromWindow(start, end) : this.#streamRange(start, end);
  }

  #streamRange(start: number, end: number): Readable {
    const out = new PassThrough();
    const request = new AbortController();
    // yauzl destroys a stream it no longer wants; the GET behind it must not keep a socket busy.
    out.once('close', () => request.abort());
    getBody(
      this.target,
      { Range: `bytes=${start}-${end - 1}`, IfMatch: this.stored.etag },
      request.signal,
    ).then(
      (body) => {
        if (out.destroyed) {
          body.destroy();
          return;
        }
        out.once('close', () => body.destroy());
        body.once('error', (error) => out.destroy(new StorageReadError(error)));
        body.pipe(out);
      },
      (error: unknown) => out.destroy(new StorageReadError(error)),
    );
    return out;
  }

  #fromWindow(start: number, end: number): Readable {
    let window = this.#window;
    if (window === undefined || start < window.start || end > window.end) {
      const windowEnd = Math.min(this.stored.size, Math.max(end, start + READ_AHEAD_BYTES));
      const fresh = { start, end: windowEnd, bytes: this.#readBytes(start, windowEnd) };
      fresh.bytes.catch(() => {
        if (this.#window === fresh) this.#window = undefined;
      });
      this.#window = fresh;
      window = fresh;
    }
    const out = new PassThrough();
    const windowStart = window.start;
    window.bytes.then(
      (bytes) => out.end(bytes.subarray(start - windowStart, end - windowStart)),
      (error: unknown) => out.destroy(new StorageReadError(error)),
    );
    return out;
  }

  async #readBytes(start: number, end: number): Promise<Buffer> {
    const body = await getBody(this.target, {
      Range: `bytes=${start}-${end - 1}`,
      IfMatch: this.stored.etag,
    });
    const chunks: Buffer[] = [];
    for await (const chunk of body) {
      if (Buffer.isBuffer(chunk)) chunks.push(chunk);
    }
    const bytes = Buffer.concat(chunks);
    if (bytes.length !== end - start) throw new Error('S3 returned a short range');
    return bytes;
  }
}

// ---------------------------------------------------------------------------------------------

function parseOptions<T extends z.ZodType>(schema: T, options: unknown, operation: string): z.infer<T> {
  const parsed = schema.safeParse(options);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
  throw new ConfigurationError(`${operation}: invalid options (${issues.join('; ')})`);
}
