/**
 * Reading the stored object back: its size and ETag from one suffix-range GET, ranged reads for
 * the zip reader (every later GET pinned to that ETag), and a whole-object SHA-256 pass.
 */
import { createHash } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import yauzl from 'yauzl';
import { InvalidArchiveError, StorageAnswerInvalidError } from '../errors.ts';
import type { ArchiveTarget } from './options.ts';

/** Reads up to this size (zip headers, small entries) are served from one read-ahead window... */
const SMALL_READ_BYTES = 128 * 1024;
/** ...of this size, so walking the central directory costs a few GETs rather than one per header. */
const READ_AHEAD_BYTES = 256 * 1024;

export interface StoredObject {
  readonly size: number;
  /** Every later GET is pinned to this ETag, so a replaced object cannot be half-read. */
  readonly etag: string | undefined;
}

/** An S3 failure met while reading: rethrown as it is, since it says nothing about the archive. */
export class StorageReadError extends Error {
  override readonly name = 'StorageReadError';

  constructor(cause: unknown) {
    super('reading the stored archive failed', { cause });
  }
}

/** The last bytes of the stored object, where a zip keeps its directory: all of a small one. */
export interface StoredTail {
  readonly start: number;
  readonly bytes: Buffer;
}

/**
 * The stored object's size, its ETag and its last READ_AHEAD_BYTES, from one suffix-range GET
 * (no HEAD first): the answer's Content-Range carries the size. A store that refuses the suffix
 * (S3 does for an empty object, some stand-ins for any) is asked with a HEAD instead.
 */
export async function openArchive(
  target: ArchiveTarget,
): Promise<{ stored: StoredObject; tail: StoredTail }> {
  let response: Awaited<ReturnType<typeof sendTailGet>>;
  try {
    response = await sendTailGet(target);
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArchiveError('the archive object is missing from the bucket');
    if (!(error instanceof Error && error.name === 'InvalidRange')) throw error;
    const stored = await headArchive(target);
    return { stored, tail: { start: stored.size, bytes: Buffer.alloc(0) } };
  }
  if (!(response.Body instanceof Readable))
    throw new StorageAnswerInvalidError('S3 returned no readable body');
  const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(response.ContentRange ?? '');
  const start = range === null ? 0 : Number(range[1]);
  const size = range === null ? response.ContentLength : Number(range[3]);
  if (size === undefined) {
    response.Body.destroy();
    throw new InvalidArchiveError('S3 did not report the archive size');
  }
  const bytes = await readAll(response.Body);
  if (start + bytes.length !== size)
    throw new StorageReadError(new StorageAnswerInvalidError('S3 returned a short range'));
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

export function isNotFound(error: unknown): boolean {
  return error instanceof Error && (error.name === 'NotFound' || error.name === 'NoSuchKey');
}

export async function hashObject(
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

/** The body of a GET of the stored object, with its conditions; a ranged GET must answer that range. */
export async function getBody(
  target: ArchiveTarget,
  conditions: { Range?: string; IfMatch?: string | undefined; VersionId?: string },
  abortSignal?: AbortSignal,
): Promise<Readable> {
  const response = await target.s3.send(
    new GetObjectCommand({ Bucket: target.bucket, Key: target.key, ...conditions }),
    abortSignal === undefined ? {} : { abortSignal },
  );
  if (!(response.Body instanceof Readable))
    throw new StorageAnswerInvalidError('S3 returned no readable body');
  if (
    conditions.Range !== undefined &&
    response.ContentRange?.startsWith(`bytes ${conditions.Range.slice(6)}/`) !== true
  ) {
    response.Body.destroy();
    throw new StorageAnswerInvalidError('S3 answered a ranged GET with a different range');
  }
  return response.Body;
}

/**
 * Lets yauzl read the zip through ranged GETs. yauzl wants a stream back synchronously, so each
 * read returns a PassThrough that the GET fills once it answers.
 */
export class S3RangeReader extends yauzl.RandomAccessReader {
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
    if (bytes.length !== end - start) throw new StorageAnswerInvalidError('S3 returned a short range');
    return bytes;
  }
}
