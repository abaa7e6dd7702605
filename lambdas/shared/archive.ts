/**
 * ArchiveExport's machinery: copy the platform's export zip into S3 before its link expires, and
 * prove the stored copy intact. Everything streams: memory use does not depend on the archive's size.
 */
import { createHash } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import { crc32 } from 'node:zlib';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
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
  /** Object tags set with the upload (the lifecycle rules expire archives by request type). */
  readonly tags?: Readonly<Record<string, string>>;
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
  /** Parts uploaded at once; memory is about (queueSize + 1) x partSizeBytes. @default 2 */
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
  // An S3 failure hangs up on the platform at once, rather than after the next part is read.
  const upload = new PartUploader(target, partSizeBytes, queueSize, () => connection.abort());
  try {
    const response = await openDownload(link, options.policy, options.fetch ?? globalThis.fetch, {
      signal: connection.signal,
      watchdog,
    });
    const tally = new DownloadTally(declaredLength(response));
    let output: StoredOutput;
    try {
      await copyBody(response.body, tally, watchdog, upload);
      output = await upload.finish();
    } catch (error) {
      await upload.abort();
      // The download's own failure says what went wrong, even if a part in flight failed after it.
      throw tally.failure ?? upload.failure ?? error;
    }
    return {
      bytes: tally.bytes,
      sha256: tally.hash.digest('hex'),
      ...(output.VersionId === undefined ? {} : { versionId: output.VersionId }),
      ...(output.ETag === undefined ? {} : { etag: output.ETag }),
    };
  } finally {
    watchdog.stop();
    // Releases the platform connection when S3 failed first and nothing reads the body any more.
    connection.abort();
  }
}

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
 * Reads the body straight from fetch's reader, hashing, counting and handing each chunk to the
 * upload. The idle timer runs only while waiting on the platform, not while S3 is slow to take a
 * part, so a slow upload is never mistaken for a stall.
 */
async function copyBody(
  body: ReadableStream<Uint8Array> | null,
  tally: DownloadTally,
  watchdog: IdleWatchdog,
  upload: PartUploader,
): Promise<void> {
  // A reader rather than an async iterator: one promise per chunk and no stream adapter between.
  const reader = (body ?? new Blob([]).stream()).getReader();
  try {
    await pump(reader, tally, watchdog, upload);
  } finally {
    // Stops a body nobody reads any more; a finished or broken one ignores this.
    reader.cancel().catch(() => undefined);
  }
  if (tally.declared !== undefined && tally.bytes < tally.declared) {
    throw tally.fail(
      new TruncatedDownloadError(
        `${DOWNLOAD}: the download ended after ${tally.bytes} bytes${tally.announced}`,
      ),
    );
  }
}

async function pump(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  tally: DownloadTally,
  watchdog: IdleWatchdog,
  upload: PartUploader,
): Promise<void> {
  for (;;) {
    let next: Awaited<ReturnType<typeof reader.read>>;
    watchdog.arm();
    try {
      next = await reader.read();
    } catch {
      // S3 failed first and hung up on the platform: its error is the one that matters.
      if (upload.failure !== undefined) throw upload.failure;
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
    if (!(chunk instanceof Uint8Array)) {
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
    await upload.write(chunk);
  }
}

function idleTimeout(watchdog: IdleWatchdog): PlatformTimeoutError {
  return new PlatformTimeoutError(`${DOWNLOAD}: no bytes arrived for ${watchdog.ms} ms`);
}

/**
 * A timer armed while waiting on the platform; when it fires the download is aborted. It is armed
 * once per chunk, so it reuses one timer: disarming only marks it, and a marked timer that fires
 * does nothing.
 */
class IdleWatchdog {
  fired = false;
  #armed = false;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    readonly ms: number,
    private readonly onIdle: () => void,
  ) {}

  arm(): void {
    this.#armed = true;
    if (this.#timer === undefined) {
      this.#timer = setTimeout(() => {
        if (!this.#armed) return;
        this.fired = true;
        this.onIdle();
      }, this.ms);
    } else {
      this.#timer.refresh();
    }
  }

  disarm(): void {
    this.#armed = false;
  }

  /** Disarms for good and lets the process exit. */
  stop(): void {
    this.#armed = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Upload

/** What S3 answered for the stored object. */
interface StoredOutput {
  readonly ETag?: string;
  readonly VersionId?: string;
}

interface UploadedPart {
  readonly PartNumber: number;
  readonly ETag: string;
  readonly ChecksumSHA256?: string;
}

/** S3 refuses a multipart upload with more parts than this. */
const MAX_PARTS = 10_000;

/**
 * Cuts the body into parts and uploads up to `queueSize` of them at once; a body that fits in one
 * part is stored with a single PutObject. Every request carries the SHA-256 of its body, computed
 * once here: S3 checks it, and the same digest is the SigV4 payload hash, which the SDK would
 * otherwise compute again. A part's buffer is refilled once S3 has taken it, so memory stays at
 * (queueSize + 1) parts whatever the size of the archive.
 */
class PartUploader {
  /** The first S3 failure; it stops the copy. */
  failure: unknown;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #spare: Buffer[] = [];
  readonly #parts: UploadedPart[] = [];
  #buffer: Buffer | undefined;
  #filled = 0;
  #partCount = 0;
  #uploadId: Promise<string> | undefined;

  constructor(
    private readonly target: ArchiveTarget,
    private readonly partSize: number,
    private readonly queueSize: number,
    private readonly onFailure: () => void,
  ) {}

  /** Takes a chunk; resolves once there is room for the next, which is when S3 keeps up. */
  async write(chunk: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < chunk.length) {
      // A full part waits for the next byte: only then is it known not to be the whole body.
      if (this.#filled === this.partSize) await this.#sendPart();
      this.#buffer ??= this.#spare.pop() ?? Buffer.allocUnsafe(this.partSize);
      const length = Math.min(chunk.length - offset, this.partSize - this.#filled);
      this.#buffer.set(
        length === chunk.length ? chunk : chunk.subarray(offset, offset + length),
        this.#filled,
      );
      this.#filled += length;
      offset += length;
    }
  }

  /** Stores what was written: one PutObject for a single part, else the last part and Complete. */
  async finish(): Promise<StoredOutput> {
    if (this.#partCount === 0) {
      const body = this.#buffer?.subarray(0, this.#filled) ?? Buffer.alloc(0);
      const checksum = sha256Digest(body);
      const put = new PutObjectCommand({
        ...this.#objectParams(),
        Body: body,
        ChecksumAlgorithm: 'SHA256',
        ChecksumSHA256: checksum.toString('base64'),
      });
      put.middlewareStack.add(payloadHash(checksum), PAYLOAD_HASH);
      return this.target.s3.send(put);
    }
    await this.#sendPart();
    await Promise.all(this.#inFlight);
    this.#throwIfFailed();
    const uploadId = await this.#created();
    const parts = [...this.#parts].sort((left, right) => left.PartNumber - right.PartNumber);
    return this.target.s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: this.target.bucket,
        Key: this.target.key,
        UploadId: uploadId,
        MultipartUpload: { Parts: parts },
      }),
    );
  }

  /** Removes an unfinished multipart upload, so no object and no billed parts are left behind. */
  async abort(): Promise<void> {
    if (this.#uploadId === undefined) return;
    // A part still on its way could otherwise land after the abort and be kept.
    await Promise.all(this.#inFlight);
    let uploadId: string;
    try {
      uploadId = await this.#uploadId;
    } catch {
      return;
    }
    await this.target.s3
      .send(
        new AbortMultipartUploadCommand({
          Bucket: this.target.bucket,
          Key: this.target.key,
          UploadId: uploadId,
        }),
      )
      // The failure that led here is the one to report; the bucket's lifecycle rule removes leftovers.
      .catch(() => undefined);
  }

  #objectParams() {
    const { bucket, key, kmsKeyId, tags } = this.target;
    return {
      Bucket: bucket,
      Key: key,
      ContentType: 'application/zip',
      ...(tags === undefined ? {} : { Tagging: new URLSearchParams(Object.entries(tags)).toString() }),
      ...(kmsKeyId === undefined ? {} : { ServerSideEncryption: 'aws:kms' as const, SSEKMSKeyId: kmsKeyId }),
    };
  }

  async #sendPart(): Promise<void> {
    while (this.#inFlight.size >= this.queueSize) await Promise.race(this.#inFlight);
    this.#throwIfFailed();
    const buffer = this.#buffer;
    if (buffer === undefined) return;
    const body = buffer.subarray(0, this.#filled);
    this.#buffer = undefined;
    this.#filled = 0;
    this.#partCount += 1;
    const partNumber = this.#partCount;
    if (partNumber > MAX_PARTS) {
      throw new ConfigurationError(
        `copyExportToS3: the archive needs more than ${MAX_PARTS} parts; raise partSizeBytes`,
      );
    }
    const task = this.#uploadPart(partNumber, body).then(
      (part) => {
        this.#parts.push(part);
        this.#spare.push(buffer);
      },
      (error: unknown) => this.#fail(error),
    );
    this.#inFlight.add(task);
    void task.then(() => this.#inFlight.delete(task));
  }

  async #uploadPart(partNumber: number, body: Buffer): Promise<UploadedPart> {
    const checksum = sha256Digest(body);
    const uploadId = await this.#created();
    const command = new UploadPartCommand({
      Bucket: this.target.bucket,
      Key: this.target.key,
      UploadId: uploadId,
      PartNumber: partNumber,
      Body: body,
      ChecksumAlgorithm: 'SHA256',
      ChecksumSHA256: checksum.toString('base64'),
    });
    command.middlewareStack.add(payloadHash(checksum), PAYLOAD_HASH);
    const output = await this.target.s3.send(command);
    if (output.ETag === undefined) throw new Error(`S3 returned no ETag for part ${partNumber}`);
    // Complete repeats the checksum S3 reported; a stand-in that reports none gets none back.
    return {
      PartNumber: partNumber,
      ETag: output.ETag,
      ...(output.ChecksumSHA256 === undefined ? {} : { ChecksumSHA256: output.ChecksumSHA256 }),
    };
  }

  #created(): Promise<string> {
    if (this.#uploadId === undefined) {
      const created = this.target.s3
        .send(new CreateMultipartUploadCommand({ ...this.#objectParams(), ChecksumAlgorithm: 'SHA256' }))
        .then((output) => {
          if (output.UploadId === undefined) throw new Error('S3 returned no UploadId');
          return output.UploadId;
        });
      // Awaited by every part and by abort(); this keeps a failure from counting as unhandled meanwhile.
      created.catch(() => undefined);
      this.#uploadId = created;
    }
    return this.#uploadId;
  }

  #fail(error: unknown): void {
    if (this.failure !== undefined) return;
    this.failure = error;
    this.onFailure();
  }

  #throwIfFailed(): void {
    if (this.failure !== undefined) throw this.failure;
  }
}

function sha256Digest(body: Uint8Array): Buffer {
  return createHash('sha256').update(body).digest();
}

const PAYLOAD_HASH = { step: 'build', name: 'archivePayloadHash' } as const;

/**
 * The body's SHA-256 is already in the checksum header: handing it to the signer as the payload
 * hash saves it a second pass over the body. The value is the one the signer would compute.
 */
function payloadHash(sha256: Buffer) {
  const hex = sha256.toString('hex');
  return <Args extends { request: unknown }, Output>(next: (args: Args) => Promise<Output>) =>
    (args: Args): Promise<Output> => {
      if (isHttpRequest(args.request)) args.request.headers['x-amz-content-sha256'] = hex;
      return next(args);
    };
}

function isHttpRequest(request: unknown): request is { headers: Record<string, string> } {
  return (
    typeof request === 'object' &&
    request !== null &&
    'headers' in request &&
    typeof request.headers === 'object' &&
    request.headers !== null
  );
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

/** The last bytes of the stored object, where a zip keeps its directory: all of a small one. */
interface StoredTail {
  readonly start: number;
  readonly bytes: Buffer;
}

/**
 * The stored object's size, its ETag and its last READ_AHEAD_BYTES, from one suffix-range GET
 * (no HEAD first): the answer's Content-Range carries the size. A store that refuses the suffix
 * (S3 does for an empty object, some stand-ins for any) is asked with a HEAD instead.
 */
async function openArchive(target: ArchiveTarget): Promise<{ stored: StoredObject; tail: StoredTail }> {
  let response: Awaited<ReturnType<typeof sendTailGet>>;
  try {
    response = await sendTailGet(target);
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArchiveError('the archive object is missing from the bucket');
    if (!(error instanceof Error && error.name === 'InvalidRange')) throw error;
    const stored = await headArchive(target);
    return { stored, tail: { start: stored.size, bytes: Buffer.alloc(0) } };
  }
  if (!(response.Body instanceof Readable)) throw new Error('S3 returned no readable body');
  const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(response.ContentRange ?? '');
  const start = range === null ? 0 : Number(range[1]);
  const size = range === null ? response.ContentLength : Number(range[3]);
  if (size === undefined) {
    response.Body.destroy();
    throw new InvalidArchiveError('S3 did not report the archive size');
  }
  const bytes = await readAll(response.Body);
  if (start + bytes.length !== size) throw new StorageReadError(new Error('S3 returned a short range'));
  return { stored: { size, etag: response.ETag }, tail: { start, bytes } };
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

/** A ranged GET's body, whole: it is at most one read-ahead window. */
async function readAll(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) {
    if (Buffer.isBuffer(chunk)) chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function sendTailGet(target: ArchiveTarget) {
  return target.s3.send(
    new GetObjectCommand({ Bucket: target.bucket, Key: target.key, Range: `bytes=-${READ_AHEAD_BYTES}` }),
  );
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

function hex32(value: number): string {
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
function archiveError(error: unknown, context: string): unknown {
  if (error instanceof StorageReadError) return error.cause;
  if (error instanceof InvalidArchiveError) return error;
  return new InvalidArchiveError(`${context} (${zipReaderProblem(error)})`);
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
    tail: StoredTail,
  ) {
    super();
    // yauzl starts at the end, with the directory: those reads are served from the tail in hand.
    this.#window = {
      start: tail.start,
      end: tail.start + tail.bytes.length,
      bytes: Promise.resolve(tail.bytes),
    };
  }

  /** The whole object, when one read-ahead window holds all of it. */
  async wholeObject(): Promise<Buffer | undefined> {
    const window = this.#window;
    if (window === undefined || window.start !== 0 || window.end !== this.stored.size) return undefined;
    return window.bytes.catch(() => undefined);
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
    const bytes = await readAll(body);
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
    const response = await target.s3.send(
      new GetObjectCommand({
        Bucket: target.bucket,
        Key: target.key,
        ...(expected.versionId === undefined ? {} : { VersionId: expected.versionId }),
      }),
    );
    if (!(response.Body instanceof Readable)) throw new Error('S3 returned no readable body');
    body = response.Body;
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
  put.middlewareStack.add(payloadHash(checksum), PAYLOAD_HASH);
  const output = await target.s3.send(put);
  return output.VersionId === undefined ? {} : { versionId: output.VersionId };
}
