/**
 * A disk-backed S3 stand-in for local mode, so archives and audit records outlive a restart and a
 * person can open them. Each object is a plain file at `<root>/<bucket>/<key>`; its metadata lives
 * in a sidecar at `<root>/.meta/<bucket>/<key>.json`, multipart parts in progress under
 * `<root>/.uploads/`, and half-written files under `<root>/.tmp/`, so none of them shows up beside
 * the objects. It speaks the path-style S3 REST API that `@aws-sdk/client-s3` and lib-storage's
 * `Upload` use, on loopback, and verifies the checksums the SDK sends (CRC32, SHA-1, SHA-256, the
 * signed payload hash, Content-MD5), which the in-memory stand-in does not.
 *
 * Not modelled: versioning (PutBucketVersioning is accepted and ignored; a PUT overwrites the file,
 * GetBucketVersioning reports no status, and ListObjectVersions lists each object as its one version), Object Lock (mode and date are stored and echoed, but
 * nothing refuses a delete), signatures (any credentials pass), ACLs, tags, copies. One process per
 * root: writers in two processes sharing a root are not coordinated.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  createReadStream,
  createWriteStream,
  fdatasyncSync,
  fstatSync,
  lstatSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  type Stats,
  statSync,
  writeFileSync,
} from 'node:fs';
import {
  type FileHandle,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  rmdir,
  stat,
  unlink,
} from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { crc32 } from 'node:zlib';
import { z } from 'zod';
import { BodyTooLargeError, closeServer, LOOPBACK, listen, readBody, trackSockets } from '../http.ts';

/** A running disk S3; `close()` stops it and cuts kept-alive connections. */
export interface DiskS3 {
  /** `http://127.0.0.1:<port>`: give it to an S3Client with `forcePathStyle: true`. */
  readonly endpoint: string;
  /** The absolute data folder. */
  readonly root: string;
  close(): Promise<void>;
}

/** Options for {@link startDiskS3}. */
export interface DiskS3Options {
  /** Data folder; created when missing. */
  readonly root: string;
  /** Sees the HTTP server before it listens, to put a wrapper (local mode's AWS throttle) in front of it. */
  readonly wrapServer?: (server: Server) => void;
  /** @default 0 (a free port) */
  readonly port?: number;
  /**
   * Flush each object and its sidecar to the disk (fdatasync) before answering. Without it, a
   * write is still renamed into place whole before the answer, so a killed process never loses
   * or tears an answered write; only a power cut or an operating-system crash can lose the writes
   * of the last seconds, as it can for local mode's ledger (LevelDB does not sync either) and its
   * emulator file. `svc-dsr verify` finds an archive lost that way. The flush costs about 1.5 ms
   * per small object here, a sixth of a PUT and GET through the SDK.
   * @default false
   */
  readonly syncWrites?: boolean;
}

const META_DIR = '.meta';
const UPLOADS_DIR = '.uploads';
const TMP_DIR = '.tmp';
const MiB = 1024 * 1024;
const MAX_OBJECT_BYTES = 5 * 1024 * MiB;
/** A plain (not aws-chunked) body up to this size is received in memory and written in one call. */
const BUFFERED_BODY_BYTES = MiB;
const MIN_PART_BYTES = 5 * MiB;
const MAX_PART_NUMBER = 10_000;
const MAX_KEY_BYTES = 1024;
/** Most file systems refuse longer names, so such a key could not become a file. */
const MAX_SEGMENT_BYTES = 255;
const MAX_XML_BYTES = MiB;
const MAX_LIST_KEYS = 1000;
/** An aws-chunked size line or trailer line longer than this is not the SDK's framing. */
const MAX_FRAMING_LINE_BYTES = 4096;
const MAX_TRAILER_LINES = 16;
const XMLNS = 'http://s3.amazonaws.com/doc/2006-03-01/';
const DEFAULT_CONTENT_TYPE = 'binary/octet-stream';
const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const UPLOAD_ID = /^[0-9a-f]{32}$/;
const PART_FILE = /^[0-9a-f]{16}\.part$/;

// ---------------------------------------------------------------------------------------------
// Errors on the wire

/** An S3 error answer; never leaves this module (the handler turns it into XML). */
class S3Failure extends Error {
  override readonly name = 'S3Failure';

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

const noSuchBucket = () => new S3Failure(404, 'NoSuchBucket', 'The specified bucket does not exist');
const noSuchKey = () => new S3Failure(404, 'NoSuchKey', 'The specified key does not exist.');
const noSuchUpload = () =>
  new S3Failure(
    404,
    'NoSuchUpload',
    'The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.',
  );
const preconditionFailed = () =>
  new S3Failure(412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold');
const invalidArgument = (message: string) => new S3Failure(400, 'InvalidArgument', message);
const invalidRequest = (message: string) => new S3Failure(400, 'InvalidRequest', message);
const malformedXml = () =>
  new S3Failure(
    400,
    'MalformedXML',
    'The XML you provided was not well-formed or did not validate against our published schema.',
  );
const notImplemented = (what: string) =>
  new S3Failure(501, 'NotImplemented', `${what} is not implemented by the disk S3 stand-in.`);
const invalidPart = () =>
  new S3Failure(
    400,
    'InvalidPart',
    "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
  );
// A file cannot also be a folder, so `a` and `a/b` cannot both exist on disk (S3 would allow it).
const keyConflict = () =>
  invalidArgument(
    'The key collides with an existing key on disk: one key cannot also be a folder of other keys in the disk S3 stand-in.',
  );

// ---------------------------------------------------------------------------------------------
// Checksums

const CHECKSUM_ALGORITHMS = ['CRC32', 'SHA1', 'SHA256'] as const;
type ChecksumAlgorithm = (typeof CHECKSUM_ALGORITHMS)[number];
const DIGEST_BYTES: Readonly<Record<ChecksumAlgorithm, number>> = { CRC32: 4, SHA1: 20, SHA256: 32 };
const KNOWN_UNSUPPORTED_ALGORITHMS = new Set(['CRC32C', 'CRC64NVME']);
/** `x-amz-checksum-*` headers that carry settings rather than a checksum value. */
const CHECKSUM_SETTING_HEADERS = new Set([
  'x-amz-checksum-algorithm',
  'x-amz-checksum-type',
  'x-amz-checksum-mode',
]);

interface Digester {
  update(chunk: Buffer): void;
  digest(): Buffer;
}

function digester(algorithm: ChecksumAlgorithm): Digester {
  if (algorithm === 'CRC32') {
    let value = 0;
    return {
      update: (chunk) => {
        value = crc32(chunk, value);
      },
      digest: () => {
        const out = Buffer.alloc(4);
        out.writeUInt32BE(value >>> 0);
        return out;
      },
    };
  }
  const hash = createHash(algorithm === 'SHA256' ? 'sha256' : 'sha1');
  return { update: (chunk) => hash.update(chunk), digest: () => hash.digest() };
}

function checksumHeader(algorithm: ChecksumAlgorithm): string {
  return `x-amz-checksum-${algorithm.toLowerCase()}`;
}

/** The algorithm named by a header value or an `x-amz-checksum-<name>` suffix. */
function parseAlgorithm(name: string): ChecksumAlgorithm {
  const upper = name.toUpperCase();
  const known = CHECKSUM_ALGORITHMS.find((algorithm) => algorithm === upper);
  if (known !== undefined) return known;
  if (KNOWN_UNSUPPORTED_ALGORITHMS.has(upper)) {
    throw notImplemented(`The ${upper} checksum (use SHA256, SHA1 or CRC32)`);
  }
  throw invalidRequest(`Checksum algorithm ${name} is not valid.`);
}

/** A base64 checksum value of the right length for its algorithm, or a 400. */
function checkChecksumValue(algorithm: ChecksumAlgorithm, value: string): string {
  const trimmed = value.trim();
  const bytes = Buffer.from(trimmed, 'base64');
  if (bytes.length !== DIGEST_BYTES[algorithm] || bytes.toString('base64') !== trimmed) {
    throw invalidRequest(`Value for ${checksumHeader(algorithm)} header is invalid.`);
  }
  return trimmed;
}

// ---------------------------------------------------------------------------------------------
// Stored records (read back from disk, so validated)

const checksumSchema = z.object({
  algorithm: z.enum(CHECKSUM_ALGORITHMS),
  value: z.string(),
  type: z.enum(['FULL_OBJECT', 'COMPOSITE']),
});

const objectMetaSchema = z.object({
  format: z.literal(1),
  etag: z.string(),
  size: z.number().int().nonnegative(),
  /** The data file's mtime when the sidecar was written: a differing file means the sidecar is stale. */
  mtimeMs: z.number(),
  lastModified: z.iso.datetime(),
  /** Headers given at upload and echoed on reads: Content-Type, user metadata, SSE and lock fields. */
  headers: z.record(z.string(), z.string()),
  checksum: checksumSchema.optional(),
  parts: z.number().int().positive().optional(),
});
type ObjectMeta = z.infer<typeof objectMetaSchema>;

const uploadRecordSchema = z.object({
  format: z.literal(1),
  bucket: z.string(),
  key: z.string(),
  headers: z.record(z.string(), z.string()),
  checksumAlgorithm: z.enum(CHECKSUM_ALGORITHMS).optional(),
  initiated: z.iso.datetime(),
});
type UploadRecord = z.infer<typeof uploadRecordSchema>;

const partRecordSchema = z.object({
  format: z.literal(1),
  file: z.string().regex(PART_FILE),
  etag: z.string(),
  size: z.number().int().nonnegative(),
  /** Base64, in the upload's checksum algorithm. */
  checksum: z.string().optional(),
});
type PartRecord = z.infer<typeof partRecordSchema>;

// ---------------------------------------------------------------------------------------------
// Request bodies

interface ReceivedBody {
  readonly path: string;
  readonly size: number;
  readonly mtimeMs: number;
  readonly md5: Buffer;
  /** The client's checksum, verified against the bytes. */
  readonly sent?: { readonly algorithm: ChecksumAlgorithm; readonly value: string };
  readonly digests: ReadonlyMap<ChecksumAlgorithm, Buffer>;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

function parseLength(value: string | undefined): number | undefined {
  return value !== undefined && /^\d{1,16}$/.test(value.trim()) ? Number(value.trim()) : undefined;
}

/** The client's checksum as announced in a header or as a trailer name; the value may come later. */
function announcedChecksum(
  req: IncomingMessage,
  chunked: boolean,
): { algorithm: ChecksumAlgorithm; value?: string; trailer?: string } | undefined {
  const sent = Object.keys(req.headers).filter(
    (name) => name.startsWith('x-amz-checksum-') && !CHECKSUM_SETTING_HEADERS.has(name),
  );
  const trailer = header(req, 'x-amz-trailer')?.trim().toLowerCase();
  if (sent.length + (trailer === undefined ? 0 : 1) > 1) {
    throw invalidRequest(
      'Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.',
    );
  }
  const [name] = sent;
  if (name !== undefined) {
    const algorithm = parseAlgorithm(name.slice('x-amz-checksum-'.length));
    return { algorithm, value: checkChecksumValue(algorithm, header(req, name) ?? '') };
  }
  if (trailer === undefined) return undefined;
  if (!chunked) throw invalidRequest('x-amz-trailer needs an aws-chunked body.');
  if (!trailer.startsWith('x-amz-checksum-'))
    throw invalidRequest(`The trailer ${trailer} is not supported.`);
  return { algorithm: parseAlgorithm(trailer.slice('x-amz-checksum-'.length)), trailer };
}

/**
 * Streams the request body to a new file under `.tmp`, hashing it on the way, and checks every
 * checksum the client gave. `extra` adds an algorithm to compute even when the client sent none.
 * The file is removed when anything fails.
 */
async function receiveBody(
  req: IncomingMessage,
  path: string,
  extra: ChecksumAlgorithm | undefined,
  syncWrites: boolean,
): Promise<ReceivedBody> {
  const contentSha = header(req, 'x-amz-content-sha256')?.trim();
  const chunked =
    (header(req, 'content-encoding') ?? '').split(',').some((token) => token.trim() === 'aws-chunked') ||
    contentSha?.startsWith('STREAMING-') === true;
  const length = parseLength(header(req, chunked ? 'x-amz-decoded-content-length' : 'content-length'));
  if (length === undefined) {
    throw new S3Failure(411, 'MissingContentLength', 'You must provide the Content-Length HTTP header.');
  }
  const declared = length;
  if (declared > MAX_OBJECT_BYTES) {
    throw new S3Failure(400, 'EntityTooLarge', 'Your proposed upload exceeds the maximum allowed size');
  }
  const announced = announcedChecksum(req, chunked);
  const payloadSha = contentSha !== undefined && /^[0-9a-f]{64}$/i.test(contentSha) ? contentSha : undefined;
  const contentMd5 = header(req, 'content-md5')?.trim();
  if (contentMd5 !== undefined && Buffer.from(contentMd5, 'base64').length !== 16) {
    throw new S3Failure(400, 'InvalidDigest', 'The Content-MD5 you specified was invalid.');
  }

  const wanted = new Set<ChecksumAlgorithm>();
  if (announced !== undefined) wanted.add(announced.algorithm);
  if (extra !== undefined) wanted.add(extra);
  if (payloadSha !== undefined) wanted.add('SHA256');
  const digesters = new Map([...wanted].map((algorithm) => [algorithm, digester(algorithm)] as const));
  const md5 = createHash('md5');
  const trailers = new Map<string, string>();
  let size = 0;

  // Breaking out of the body must not destroy the socket: the error answer still has to go out.
  const raw: AsyncIterable<unknown> = req.iterator({ destroyOnReturn: false });
  const bytes = chunked ? decodeAwsChunked(raw, trailers) : asBuffers(raw);
  async function* measured(): AsyncGenerator<Buffer> {
    for await (const chunk of bytes) {
      size += chunk.length;
      if (size > declared) throw incompleteBody();
      md5.update(chunk);
      for (const hash of digesters.values()) hash.update(chunk);
      yield chunk;
    }
  }
  // A small plain body (an audit record, a sidecar-sized object) is gathered in memory and
  // written in one call; a stream pipeline costs more than the write itself at that size.
  const buffered = !chunked && declared <= BUFFERED_BODY_BYTES;
  let written: Stats | undefined;
  try {
    if (buffered) {
      const chunks: Buffer[] = [];
      for await (const chunk of measured()) chunks.push(chunk);
      written = writeNewFile(path, Buffer.concat(chunks, size), syncWrites);
    } else {
      await pipeline(
        Readable.from(measured(), { objectMode: false }),
        createWriteStream(path, { flags: 'wx' }),
      );
    }
    if (size !== declared) throw incompleteBody();
    const digests = new Map([...digesters].map(([algorithm, hash]) => [algorithm, hash.digest()] as const));
    const md5Digest = md5.digest();
    if (contentMd5 !== undefined && md5Digest.toString('base64') !== contentMd5) {
      throw new S3Failure(400, 'BadDigest', 'The Content-MD5 you specified did not match what we received.');
    }
    if (payloadSha !== undefined && digests.get('SHA256')?.toString('hex') !== payloadSha.toLowerCase()) {
      throw new S3Failure(
        400,
        'XAmzContentSHA256Mismatch',
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
      );
    }
    let sent: ReceivedBody['sent'];
    if (announced !== undefined) {
      const value =
        announced.trailer === undefined ? announced.value : trailerValue(trailers, announced.trailer);
      const algorithm = announced.algorithm;
      if (
        value === undefined ||
        digests.get(algorithm)?.toString('base64') !== checkChecksumValue(algorithm, value)
      ) {
        throw new S3Failure(
          400,
          'BadDigest',
          `The ${algorithm} you specified did not match the calculated checksum.`,
        );
      }
      sent = { algorithm, value };
    }
    const settled = written ?? (await settleFile(path, syncWrites));
    return {
      path,
      size,
      mtimeMs: settled.mtimeMs,
      md5: md5Digest,
      digests,
      ...(sent === undefined ? {} : { sent }),
    };
  } catch (error) {
    await rm(path, { force: true });
    throw error;
  }
}

function trailerValue(trailers: ReadonlyMap<string, string>, name: string): string {
  const value = trailers.get(name);
  if (value === undefined) {
    throw new S3Failure(
      400,
      'MalformedTrailerError',
      'The request contained trailing data that was not well-formed.',
    );
  }
  return value;
}

function incompleteBody(): S3Failure {
  return new S3Failure(
    400,
    'IncompleteBody',
    'You did not provide the number of bytes specified by the Content-Length HTTP header.',
  );
}

async function* asBuffers(source: AsyncIterable<unknown>): AsyncGenerator<Buffer> {
  for await (const chunk of source) {
    if (!Buffer.isBuffer(chunk)) throw new TypeError('the request body produced a non-byte chunk');
    yield chunk;
  }
}

/**
 * Undoes `Content-Encoding: aws-chunked`: `<hex size>[;chunk-signature=…]\r\n<data>\r\n` repeated,
 * then `0\r\n`, optional `name:value\r\n` trailers and a blank line. Data is passed on as slices of
 * the incoming buffers; only framing lines are ever held.
 */
async function* decodeAwsChunked(
  source: AsyncIterable<unknown>,
  trailers: Map<string, string>,
): AsyncGenerator<Buffer> {
  type State = 'size' | 'data' | 'data-end' | 'trailer' | 'done';
  let state: State = 'size';
  let remaining = 0;
  let pending = Buffer.alloc(0);
  const malformed = () => invalidRequest('The aws-chunked body is not framed correctly.');

  for await (const incoming of asBuffers(source)) {
    let chunk = incoming;
    while (chunk.length > 0) {
      if (state === 'data') {
        const take = Math.min(remaining, chunk.length);
        yield chunk.subarray(0, take);
        remaining -= take;
        chunk = chunk.subarray(take);
        if (remaining === 0) state = 'data-end';
        continue;
      }
      if (state === 'done') throw malformed();
      const newline = chunk.indexOf(0x0a);
      if (newline === -1) {
        pending = Buffer.concat([pending, chunk]);
        if (pending.length > MAX_FRAMING_LINE_BYTES) throw malformed();
        break;
      }
      const line = Buffer.concat([pending, chunk.subarray(0, newline + 1)]);
      pending = Buffer.alloc(0);
      chunk = chunk.subarray(newline + 1);
      if (line.length > MAX_FRAMING_LINE_BYTES || line.length < 2 || line[line.length - 2] !== 0x0d) {
        throw malformed();
      }
      const text = line.subarray(0, -2).toString('latin1');
      if (state === 'data-end') {
        if (text !== '') throw malformed();
        state = 'size';
      } else if (state === 'size') {
        const match = /^([0-9a-fA-F]{1,12})(?:;.*)?$/.exec(text);
        if (match?.[1] === undefined) throw malformed();
        remaining = Number.parseInt(match[1], 16);
        state = remaining === 0 ? 'trailer' : 'data';
      } else if (text === '') {
        state = 'done';
      } else {
        const colon = text.indexOf(':');
        if (colon <= 0 || trailers.size >= MAX_TRAILER_LINES) throw malformed();
        trailers.set(text.slice(0, colon).trim().toLowerCase(), text.slice(colon + 1).trim());
      }
    }
  }
  // The SDK ends the body right after `0\r\n` when it sends no trailer.
  const endedWithoutTrailer = state === 'trailer' && trailers.size === 0 && pending.length === 0;
  if (state !== 'done' && !endedWithoutTrailer) throw incompleteBody();
}

/** A finished file's stat, whose mtime the sidecar records; flushed to the disk first when asked. */
async function settleFile(path: string, flush: boolean): Promise<Stats> {
  if (!flush) return stat(path);
  const handle = await open(path, 'r+');
  try {
    await handle.datasync();
    return await handle.stat();
  } finally {
    await handle.close();
  }
}

/*
 * Small files (a buffered body, a sidecar, a rename) are written with synchronous calls. For a
 * file of a few KiB each call takes microseconds: far less than handing it to libuv's thread pool
 * and waking the event loop for the answer, which a PUT would otherwise do about ten times. Local
 * mode runs this store on a thread of its own, so nothing else waits meanwhile. Large bodies
 * still stream.
 */

/** Creates `path` holding `data` and answers its stat; flushed to the disk first when asked. */
function writeNewFile(path: string, data: Buffer, flush: boolean): Stats {
  const fd = openSync(path, 'wx');
  try {
    writeFileSync(fd, data);
    if (flush) fdatasyncSync(fd);
    return fstatSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Reads a small XML request body (bucket settings, a part list). */
async function readSmallBody(req: IncomingMessage): Promise<string> {
  try {
    return (await readBody(req, MAX_XML_BYTES)).toString('utf8');
  } catch (error) {
    throw error instanceof BodyTooLargeError ? malformedXml() : error;
  }
}

// ---------------------------------------------------------------------------------------------
// Headers kept with an object

/** Request headers stored with the object and returned on GET and HEAD, as S3 does. */
const STORED_HEADERS = [
  'cache-control',
  'content-disposition',
  'content-language',
  'expires',
  'x-amz-server-side-encryption',
  'x-amz-server-side-encryption-aws-kms-key-id',
  'x-amz-server-side-encryption-context',
  'x-amz-server-side-encryption-bucket-key-enabled',
  'x-amz-object-lock-mode',
  'x-amz-object-lock-retain-until-date',
  'x-amz-object-lock-legal-hold',
  'x-amz-storage-class',
  'x-amz-website-redirect-location',
  'x-amz-tagging',
];
/** Returned on PUT, UploadPart and CompleteMultipartUpload too. */
const SSE_HEADERS = [
  'x-amz-server-side-encryption',
  'x-amz-server-side-encryption-aws-kms-key-id',
  'x-amz-server-side-encryption-bucket-key-enabled',
];

function storedHeaders(req: IncomingMessage): Record<string, string> {
  if (Object.keys(req.headers).some((name) => name.startsWith('x-amz-server-side-encryption-customer-'))) {
    throw notImplemented('Server-side encryption with customer-provided keys');
  }
  const sse = header(req, 'x-amz-server-side-encryption');
  if (sse !== undefined && !['AES256', 'aws:kms', 'aws:kms:dsse'].includes(sse)) {
    throw invalidArgument('The encryption method specified is not supported');
  }
  const stored: Record<string, string> = {
    'content-type': header(req, 'content-type') ?? DEFAULT_CONTENT_TYPE,
  };
  const encoding = (header(req, 'content-encoding') ?? '')
    .split(',')
    .map((token) => token.trim())
    .filter((token) => token !== '' && token !== 'aws-chunked');
  if (encoding.length > 0) stored['content-encoding'] = encoding.join(',');
  for (const name of Object.keys(req.headers)) {
    const value = header(req, name);
    if (value !== undefined && (STORED_HEADERS.includes(name) || name.startsWith('x-amz-meta-'))) {
      stored[name] = value;
    }
  }
  return stored;
}

function pick(headers: Readonly<Record<string, string>>, names: readonly string[]): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const name of names) {
    const value = headers[name];
    if (value !== undefined) picked[name] = value;
  }
  return picked;
}

function checksumHeaders(checksum: ObjectMeta['checksum']): Record<string, string> {
  if (checksum === undefined) return {};
  return { [checksumHeader(checksum.algorithm)]: checksum.value, 'x-amz-checksum-type': checksum.type };
}

// ---------------------------------------------------------------------------------------------
// Keys and names

function checkBucketName(bucket: string): void {
  if (!BUCKET_NAME.test(bucket) || bucket.includes('..')) {
    throw new S3Failure(400, 'InvalidBucketName', 'The specified bucket is not valid.');
  }
}

/** A segment that could not be a path segment under the bucket folder, or could leave it. */
function isUnstorableSegment(segment: string): boolean {
  return (
    segment === '' || segment === '.' || segment === '..' || segment.includes('\0') || segment.includes('\\')
  );
}

/** Keys become paths under the bucket folder, so anything that could leave it is refused. */
function checkKey(key: string): void {
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

function compareUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function normalizeEtag(etag: string): string {
  return etag
    .trim()
    .replace(/^W\//, '')
    .replace(/^"(.*)"$/, '$1');
}

/** True when an If-Match / If-None-Match list names the object's ETag (or is `*`). */
function etagListMatches(list: string, etag: string): boolean {
  const wanted = normalizeEtag(etag);
  return list.split(',').some((item) => item.trim() === '*' || normalizeEtag(item) === wanted);
}

function isMissing(error: unknown): boolean {
  const code = errorCode(error);
  return code === 'ENOENT' || code === 'ENOTDIR';
}

function errorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  return typeof error.code === 'string' ? error.code : undefined;
}

// ---------------------------------------------------------------------------------------------
// The store

/** Serializes the short steps that change the tree (renames, unlinks, folder pruning). */
class Mutex {
  #tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(task);
    this.#tail = result.catch(() => undefined);
    return result;
  }
}

interface WriteCondition {
  readonly ifNoneMatch?: string;
  readonly ifMatch?: string;
}

class DiskStore {
  readonly #lock = new Mutex();
  readonly #background = new Set<Promise<unknown>>();
  /** Buckets seen to exist: nothing here deletes a bucket, so one stays known once seen. */
  readonly #buckets = new Set<string>();
  /** Folders made or seen by a write; forgotten when a delete prunes folders. */
  readonly #folders = new Set<string>();

  constructor(
    readonly root: string,
    readonly syncWrites: boolean,
  ) {}

  tempPath(): string {
    return join(this.root, TMP_DIR, randomBytes(12).toString('hex'));
  }

  #bucketDir(bucket: string): string {
    return join(this.root, bucket);
  }

  #objectPath(bucket: string, key: string): string {
    return pathWithin(this.#bucketDir(bucket), key);
  }

  #metaPath(bucket: string, key: string): string {
    return `${pathWithin(join(this.root, META_DIR, bucket), key)}.json`;
  }

  #uploadDir(uploadId: string): string {
    return join(this.root, UPLOADS_DIR, uploadId);
  }

  async bucketExists(bucket: string): Promise<boolean> {
    if (this.#buckets.has(bucket)) return true;
    try {
      const exists = (await stat(this.#bucketDir(bucket))).isDirectory();
      if (exists) this.#buckets.add(bucket);
      return exists;
    } catch (error) {
      if (isMissing(error)) return false;
      throw error;
    }
  }

  async requireBucket(bucket: string): Promise<void> {
    if (!(await this.bucketExists(bucket))) throw noSuchBucket();
  }

  async createBucket(bucket: string): Promise<void> {
    await this.#lock.run(async () => {
      try {
        await mkdir(this.#bucketDir(bucket));
        this.#buckets.add(bucket);
      } catch (error) {
        if (errorCode(error) !== 'EEXIST') throw error;
        throw new S3Failure(
          409,
          'BucketAlreadyOwnedByYou',
          'Your previous request to create the named bucket succeeded and you already own it.',
        );
      }
    });
  }

  /** The object's metadata, or undefined when there is no such object. */
  async describe(bucket: string, key: string, opened?: FileHandle): Promise<ObjectMeta | undefined> {
    let stats: Stats | undefined;
    try {
      stats =
        opened === undefined
          ? statSync(this.#objectPath(bucket, key), { throwIfNoEntry: false })
          : await opened.stat();
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
    if (stats === undefined || !stats.isFile()) return undefined;
    const stored = this.#readMeta(bucket, key);
    if (stored !== undefined && stored.size === stats.size && stored.mtimeMs === stats.mtimeMs) return stored;
    return this.#rebuildMeta(bucket, key, stats, stored, opened);
  }

  /** Opens the object for reading; the handle keeps serving these bytes even if a PUT replaces them. */
  async open(bucket: string, key: string): Promise<{ handle: FileHandle; meta: ObjectMeta } | undefined> {
    let handle: FileHandle;
    try {
      handle = await open(this.#objectPath(bucket, key), 'r');
    } catch (error) {
      if (isMissing(error) || errorCode(error) === 'EISDIR') return undefined;
      throw error;
    }
    try {
      const meta = await this.describe(bucket, key, handle);
      if (meta === undefined) {
        await handle.close();
        return undefined;
      }
      return { handle, meta };
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  #readMeta(bucket: string, key: string): ObjectMeta | undefined {
    let text: string;
    try {
      text = readFileSync(this.#metaPath(bucket, key), 'utf8');
    } catch (error) {
      if (isMissing(error) || errorCode(error) === 'EISDIR') return undefined;
      throw error;
    }
    return parseJson(objectMetaSchema, text);
  }

  /**
   * A file without a matching sidecar was put there by hand or outlived an interrupted write:
   * describe it from its bytes, keep what the old sidecar said about headers, and save that.
   */
  async #rebuildMeta(
    bucket: string,
    key: string,
    stats: Stats,
    stale: ObjectMeta | undefined,
    opened: FileHandle | undefined,
  ): Promise<ObjectMeta> {
    const path = this.#objectPath(bucket, key);
    const source =
      opened === undefined ? createReadStream(path) : opened.createReadStream({ start: 0, autoClose: false });
    const md5 = createHash('md5');
    for await (const chunk of asBuffers(source)) md5.update(chunk);
    const meta: ObjectMeta = {
      format: 1,
      etag: `"${md5.digest('hex')}"`,
      size: stats.size,
      mtimeMs: stats.mtimeMs,
      lastModified: wholeSeconds(stats.mtime),
      headers: stale?.headers ?? { 'content-type': DEFAULT_CONTENT_TYPE },
    };
    // Not awaited: a commit holding the lock may be the caller, and saving is only a cache.
    const saving = this.#lock
      .run(async () => {
        const now = await stat(path).catch(() => undefined);
        if (now?.ino !== stats.ino || now.mtimeMs !== stats.mtimeMs || now.size !== stats.size) return;
        const metaPath = this.#metaPath(bucket, key);
        await this.#prepareParent(metaPath);
        this.#writeAtomic(metaPath, JSON.stringify(meta, null, 2));
      })
      .catch(() => undefined)
      .finally(() => this.#background.delete(saving));
    this.#background.add(saving);
    return meta;
  }

  /** Resolves once the sidecars being saved in the background are written. */
  async idle(): Promise<void> {
    await Promise.all([...this.#background]);
  }

  /** Moves a received file into place with its sidecar, after checking the write's conditions. */
  async commit(bucket: string, key: string, file: string, meta: ObjectMeta, condition: WriteCondition) {
    await this.#lock.run(async () => {
      await this.requireBucket(bucket);
      if (condition.ifNoneMatch !== undefined || condition.ifMatch !== undefined) {
        const current = await this.describe(bucket, key);
        checkWriteCondition(current, condition);
      }
      const dataPath = this.#objectPath(bucket, key);
      const metaPath = this.#metaPath(bucket, key);
      try {
        await this.#place(file, dataPath, metaPath, meta);
      } catch (error) {
        // A folder removed by hand since this store last wrote there: make the folders again, once.
        if (!isMissing(error) || this.#folders.size === 0) throw error;
        this.#folders.clear();
        await this.#place(file, dataPath, metaPath, meta);
      }
    });
  }

  async #place(file: string, dataPath: string, metaPath: string, meta: ObjectMeta): Promise<void> {
    await this.#prepareParent(dataPath);
    await this.#prepareParent(metaPath);
    if (isDirectory(dataPath) || isDirectory(metaPath)) throw keyConflict();
    // Sidecar first: if the process dies between the renames, the sidecar no longer matches the
    // file's stat and the next read rebuilds it from the bytes.
    this.#writeAtomic(metaPath, JSON.stringify(meta, null, 2));
    renameSync(file, dataPath);
  }

  async remove(bucket: string, key: string): Promise<void> {
    await this.#lock.run(async () => {
      await this.requireBucket(bucket);
      const dataPath = this.#objectPath(bucket, key);
      const metaPath = this.#metaPath(bucket, key);
      // A key that names a folder of other keys is no object: there is nothing to delete.
      if (await isFile(dataPath)) await unlink(dataPath);
      if (await isFile(metaPath)) await unlink(metaPath);
      this.#folders.clear();
      await pruneEmptyFolders(dirname(dataPath), this.#bucketDir(bucket));
      await pruneEmptyFolders(dirname(metaPath), join(this.root, META_DIR));
    });
  }

  async #prepareParent(path: string): Promise<void> {
    const folder = dirname(path);
    if (this.#folders.has(folder)) return;
    try {
      await mkdir(folder, { recursive: true });
      this.#folders.add(folder);
    } catch (error) {
      const code = errorCode(error);
      if (code === 'ENOTDIR' || code === 'EEXIST') throw keyConflict();
      throw error;
    }
  }

  /** Replaces `path` with a small JSON file (a sidecar, an upload's record) in one rename. */
  #writeAtomic(path: string, text: string): void {
    const temp = this.tempPath();
    try {
      writeNewFile(temp, Buffer.from(text), this.syncWrites);
      renameSync(temp, path);
    } catch (error) {
      rmSync(temp, { force: true });
      throw error;
    }
  }

  /**
   * Keys under the prefix after `after`, in UTF-8 byte order, walking only the folders that can
   * hold such keys. `skip` is read live: keys starting with it are passed over (rolled-up prefixes).
   */
  async *keys(
    bucket: string,
    prefix: string,
    after: string | undefined,
    skip: { prefix?: string },
  ): AsyncGenerator<string> {
    const base = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    // No key has such a segment, so the prefix matches nothing (and its path must not be walked).
    if (base !== '' && base.slice(0, -1).split('/').some(isUnstorableSegment)) return;
    const wanted = (key: string) =>
      key.startsWith(prefix) &&
      (after === undefined || compareUtf8(key, after) > 0) &&
      (skip.prefix === undefined || !key.startsWith(skip.prefix));
    const worthEntering = (folder: string) =>
      (folder.startsWith(prefix) || prefix.startsWith(folder)) &&
      (after === undefined || compareUtf8(folder, after) > 0 || after.startsWith(folder)) &&
      (skip.prefix === undefined || !folder.startsWith(skip.prefix));
    const bucketDir = this.#bucketDir(bucket);

    async function* walk(folderPath: string, folderKey: string): AsyncGenerator<string> {
      let entries: { name: string; isDirectory(): boolean; isFile(): boolean }[];
      try {
        entries = await readdir(folderPath, { withFileTypes: true });
      } catch (error) {
        if (isMissing(error)) return;
        throw error;
      }
      // A folder sorts as its name plus "/", so a depth-first walk yields keys in byte order.
      const sorted = entries
        .filter((entry) => entry.isFile() || entry.isDirectory())
        .map((entry) => ({
          entry,
          sortKey: Buffer.from(entry.name + (entry.isDirectory() ? '/' : ''), 'utf8'),
        }))
        .sort((a, b) => Buffer.compare(a.sortKey, b.sortKey));
      for (const { entry } of sorted) {
        const key = folderKey + entry.name;
        if (entry.isDirectory()) {
          if (worthEntering(`${key}/`)) yield* walk(join(folderPath, entry.name), `${key}/`);
        } else if (wanted(key)) {
          yield key;
        }
      }
    }
    yield* walk(join(bucketDir, ...base.split('/').filter((segment) => segment !== '')), base);
  }

  // Multipart uploads ---------------------------------------------------------------------------

  async createUpload(record: UploadRecord): Promise<string> {
    const uploadId = randomBytes(16).toString('hex');
    const dir = this.#uploadDir(uploadId);
    await mkdir(dir, { recursive: true });
    this.#writeAtomic(join(dir, 'upload.json'), JSON.stringify(record, null, 2));
    return uploadId;
  }

  async readUpload(uploadId: string, bucket: string, key: string): Promise<UploadRecord> {
    if (!UPLOAD_ID.test(uploadId)) throw noSuchUpload();
    let text: string;
    try {
      text = await readFile(join(this.#uploadDir(uploadId), 'upload.json'), 'utf8');
    } catch (error) {
      if (isMissing(error)) throw noSuchUpload();
      throw error;
    }
    const record = parseJson(uploadRecordSchema, text);
    if (record === undefined || record.bucket !== bucket || record.key !== key) throw noSuchUpload();
    return record;
  }

  async putPart(
    uploadId: string,
    partNumber: number,
    file: string,
    part: Omit<PartRecord, 'file' | 'format'>,
  ) {
    await this.#lock.run(async () => {
      const dir = this.#uploadDir(uploadId);
      if (!(await isFile(join(dir, 'upload.json')))) throw noSuchUpload();
      const previous = await this.readPart(uploadId, partNumber);
      const record: PartRecord = { format: 1, file: `${randomBytes(8).toString('hex')}.part`, ...part };
      await rename(file, join(dir, record.file));
      this.#writeAtomic(join(dir, `${partNumber}.json`), JSON.stringify(record));
      if (previous !== undefined) await rm(join(dir, previous.file), { force: true });
    });
  }

  async readPart(uploadId: string, partNumber: number): Promise<PartRecord | undefined> {
    let text: string;
    try {
      text = await readFile(join(this.#uploadDir(uploadId), `${partNumber}.json`), 'utf8');
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
    return parseJson(partRecordSchema, text);
  }

  partPath(uploadId: string, part: PartRecord): string {
    return join(this.#uploadDir(uploadId), part.file);
  }

  async removeUpload(uploadId: string): Promise<void> {
    await this.#lock.run(() => rm(this.#uploadDir(uploadId), { recursive: true, force: true }));
  }
}

/** The key's path under `folder`; checkKey already refused anything that could leave it, this makes sure. */
function pathWithin(folder: string, key: string): string {
  const path = join(folder, ...key.split('/'));
  if (!path.startsWith(folder + sep)) throw invalidArgument('The key would leave its bucket folder.');
  return path;
}

function parseJson<T extends z.ZodType>(schema: T, text: string): z.infer<T> | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = schema.safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}

function checkWriteCondition(current: ObjectMeta | undefined, condition: WriteCondition): void {
  if (condition.ifNoneMatch !== undefined && current !== undefined) throw preconditionFailed();
  if (condition.ifMatch !== undefined) {
    if (current === undefined) throw noSuchKey();
    if (!etagListMatches(condition.ifMatch, current.etag)) throw preconditionFailed();
  }
}

function isDirectory(path: string): boolean {
  try {
    return lstatSync(path, { throwIfNoEntry: false })?.isDirectory() === true;
  } catch {
    // A path through a file (ENOTDIR) or one it may not read names no directory either.
    return false;
  }
}

async function isFile(path: string): Promise<boolean> {
  return (await lstat(path).catch(() => undefined))?.isFile() === true;
}

/** S3 has no empty folders: once a folder's last key is gone, the folder goes too. */
async function pruneEmptyFolders(from: string, stopAt: string): Promise<void> {
  let folder = from;
  while (folder.startsWith(stopAt + sep)) {
    try {
      await rmdir(folder);
    } catch {
      return;
    }
    folder = dirname(folder);
  }
}

function wholeSeconds(date: Date): string {
  return new Date(Math.floor(date.getTime() / 1000) * 1000).toISOString();
}

// ---------------------------------------------------------------------------------------------
// HTTP

interface Target {
  readonly method: string;
  readonly bucket: string | undefined;
  readonly key: string | undefined;
  readonly query: URLSearchParams;
  readonly resource: string;
}

/** One request to an operation, once its bucket name is known to be valid. */
interface Call {
  readonly store: DiskStore;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly bucket: string;
  readonly query: URLSearchParams;
}

/**
 * Path-style only. The raw path is split by hand: WHATWG URL parsing would resolve `..` segments
 * (even percent-encoded ones) and quietly turn a traversal key into some other key.
 */
function parseTarget(req: IncomingMessage): Target {
  const url = req.url ?? '/';
  const queryAt = url.indexOf('?');
  const rawPath = queryAt === -1 ? url : url.slice(0, queryAt);
  const query = new URLSearchParams(queryAt === -1 ? '' : url.slice(queryAt + 1));
  if (!rawPath.startsWith('/')) throw new S3Failure(400, 'InvalidURI', "Couldn't parse the specified URI.");
  const slash = rawPath.indexOf('/', 1);
  const rawBucket = slash === -1 ? rawPath.slice(1) : rawPath.slice(1, slash);
  const rawKey = slash === -1 ? '' : rawPath.slice(slash + 1);
  let bucket: string;
  let key: string;
  try {
    bucket = decodeURIComponent(rawBucket);
    key = decodeURIComponent(rawKey);
  } catch {
    throw new S3Failure(400, 'InvalidURI', "Couldn't parse the specified URI.");
  }
  return {
    method: req.method ?? 'GET',
    bucket: bucket === '' ? undefined : bucket,
    key: key === '' ? undefined : key,
    query,
    resource: rawPath,
  };
}

/** Query parameters that add nothing to an operation: the SDK's operation tag. */
const NEUTRAL_QUERY = new Set(['x-id']);
/** A presigned URL's signature parameters (signatures are not checked; expiry is). */
const PRESIGN_QUERY = /^x-amz-/i;

/** Refuses a query parameter the operation does not understand rather than ignoring what it asks for. */
function allowQuery(query: URLSearchParams, allowed: readonly string[]): void {
  for (const name of query.keys()) {
    if (!NEUTRAL_QUERY.has(name) && !PRESIGN_QUERY.test(name) && !allowed.includes(name)) {
      throw notImplemented(`The ${name} parameter`);
    }
  }
}

/** A presigned URL past its X-Amz-Date + X-Amz-Expires is refused, as S3 refuses it. */
function refuseExpiredPresign(query: URLSearchParams, now = Date.now()): void {
  const date = query.get('X-Amz-Date');
  const expires = query.get('X-Amz-Expires');
  if (date === null || expires === null) return;
  const match = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(date);
  if (match === null)
    throw new S3Failure(400, 'AuthorizationQueryParametersError', 'X-Amz-Date must be yyyyMMddTHHmmssZ.');
  const [, year, month, day, hour, minute, second] = match.map(Number);
  const signedAt = Date.UTC(year ?? 0, (month ?? 1) - 1, day ?? 1, hour ?? 0, minute ?? 0, second ?? 0);
  if (now > signedAt + Number(expires) * 1000)
    throw new S3Failure(403, 'AccessDenied', 'Request has expired');
}

const XML_ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
  '\r': '&#x0D;',
  '\n': '&#x0A;',
  '\t': '&#x09;',
};

function xmlEscape(text: string): string {
  return text.replace(/[&<>"'\r\n\t]/g, (char) => XML_ESCAPES[char] ?? char);
}

function xmlUnescape(text: string): string {
  return text.replace(/&(?:#(\d+)|#x([0-9a-fA-F]+)|(amp|lt|gt|quot|apos));/g, (_match, dec, hex, name) => {
    if (typeof dec === 'string') return String.fromCodePoint(Number(dec));
    if (typeof hex === 'string') return String.fromCodePoint(Number.parseInt(hex, 16));
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[String(name)] ?? '';
  });
}

function element(name: string, value: string | number | boolean | undefined): string {
  return value === undefined ? '' : `<${name}>${xmlEscape(String(value))}</${name}>`;
}

function sendXml(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}) {
  const bytes = Buffer.from(`<?xml version="1.0" encoding="UTF-8"?>\n${body}`, 'utf8');
  res.writeHead(status, { ...headers, 'content-type': 'application/xml', 'content-length': bytes.length });
  res.end(bytes);
}

function sendEmpty(res: ServerResponse, status: number, headers: Record<string, string> = {}) {
  res.writeHead(status, { ...headers, 'content-length': 0 });
  res.end();
}

function sendError(req: IncomingMessage, res: ServerResponse, failure: S3Failure, resource: string) {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  // Whatever of the body was not read is drained, so the client sees the answer, not a reset.
  req.resume();
  if (req.method === 'HEAD') {
    sendEmpty(res, failure.status, failure.headers);
    return;
  }
  sendXml(
    res,
    failure.status,
    `<Error>${element('Code', failure.code)}${element('Message', failure.message)}${element('Resource', resource)}${element('RequestId', String(res.getHeader('x-amz-request-id') ?? ''))}</Error>`,
    failure.headers,
  );
}

async function handle(store: DiskStore, req: IncomingMessage, res: ServerResponse): Promise<void> {
  res.setHeader('x-amz-request-id', randomBytes(8).toString('hex').toUpperCase());
  let resource = req.url ?? '/';
  try {
    const target = parseTarget(req);
    resource = target.resource;
    refuseExpiredPresign(target.query);
    await dispatch(store, req, res, target);
  } catch (error) {
    const failure =
      error instanceof S3Failure
        ? error
        : new S3Failure(
            500,
            'InternalError',
            `We encountered an internal error${errorCode(error) === undefined ? '' : ` (${errorCode(error)})`}. Please try again.`,
          );
    sendError(req, res, failure, resource);
  }
}

async function dispatch(store: DiskStore, req: IncomingMessage, res: ServerResponse, target: Target) {
  const { bucket, key, method, query } = target;
  if (bucket === undefined) throw notImplemented('ListBuckets');
  checkBucketName(bucket);
  const call: Call = { store, req, res, bucket, query };
  if (key === undefined) {
    if (method === 'PUT' && query.has('versioning')) return putBucketVersioning(call);
    if (method === 'GET' && query.has('versioning')) return getBucketVersioning(call);
    if (method === 'GET' && query.get('list-type') === '2') return listObjectsV2(call);
    if (method === 'GET' && query.has('versions')) return listObjectVersions(call);
    if (method === 'PUT') return createBucket(call);
    if (method === 'HEAD') return headBucket(call);
    throw notImplemented(
      `${method} on a bucket${query.size > 0 ? ` with ${[...query.keys()].join(', ')}` : ''}`,
    );
  }
  checkKey(key);
  switch (method) {
    case 'PUT':
      if (header(req, 'x-amz-copy-source') !== undefined) throw notImplemented('CopyObject');
      if (query.has('uploadId') || query.has('partNumber')) return uploadPart(call, key);
      return putObject(call, key);
    case 'GET':
    case 'HEAD':
      return getObject(call, key);
    case 'DELETE':
      if (query.has('uploadId')) return abortMultipartUpload(call, key);
      return deleteObject(call, key);
    case 'POST':
      if (query.has('uploads')) return createMultipartUpload(call, key);
      if (query.has('uploadId')) return completeMultipartUpload(call, key);
      throw notImplemented(
        `POST on an object${query.size > 0 ? ` with ${[...query.keys()].join(', ')}` : ''}`,
      );
    default:
      throw new S3Failure(
        405,
        'MethodNotAllowed',
        'The specified method is not allowed against this resource.',
      );
  }
}

// Buckets --------------------------------------------------------------------------------------

async function createBucket(call: Call) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, []);
  await readSmallBody(req);
  await store.createBucket(bucket);
  sendEmpty(res, 200, { location: `/${bucket}` });
}

async function headBucket(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, []);
  await store.requireBucket(bucket);
  sendEmpty(res, 200, { 'x-amz-bucket-region': 'us-east-1' });
}

/** Accepted so local setup runs unchanged; objects keep no versions (see the module comment). */
async function putBucketVersioning(call: Call) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['versioning']);
  await store.requireBucket(bucket);
  const body = await readSmallBody(req);
  const status = /<Status>([^<]*)<\/Status>/.exec(body)?.[1];
  if (
    !/<VersioningConfiguration[\s>/]/.test(body) ||
    (status !== undefined && !['Enabled', 'Suspended'].includes(status))
  ) {
    throw malformedXml();
  }
  sendEmpty(res, 200);
}

async function getBucketVersioning(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versioning']);
  await store.requireBucket(bucket);
  sendXml(res, 200, `<VersioningConfiguration xmlns="${XMLNS}"/>`);
}

async function listObjectsV2(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, [
    'list-type',
    'prefix',
    'delimiter',
    'max-keys',
    'continuation-token',
    'start-after',
    'fetch-owner',
    'encoding-type',
  ]);
  await store.requireBucket(bucket);
  if (query.has('encoding-type')) throw notImplemented('The encoding-type parameter');
  const prefix = query.get('prefix') ?? '';
  const delimiter = query.get('delimiter') || undefined;
  const maxKeysText = query.get('max-keys');
  if (maxKeysText !== null && !/^\d{1,9}$/.test(maxKeysText))
    throw invalidArgument('Provided max-keys not an integer or within integer range');
  const maxKeys = Math.min(maxKeysText === null ? MAX_LIST_KEYS : Number(maxKeysText), MAX_LIST_KEYS);
  const token = query.get('continuation-token') ?? undefined;
  const startAfter = query.get('start-after') ?? undefined;
  const after = token === undefined ? startAfter || undefined : decodeToken(token);

  const skip: { prefix?: string } = {};
  // A token that is a rolled-up prefix resumes after everything under that prefix.
  if (
    after !== undefined &&
    delimiter !== undefined &&
    after.startsWith(prefix) &&
    after.slice(prefix.length).includes(delimiter)
  ) {
    skip.prefix = after;
  }
  const contents: { key: string; meta: ObjectMeta }[] = [];
  const commonPrefixes: string[] = [];
  let last: string | undefined;
  let truncated = false;
  for await (const key of store.keys(bucket, prefix, after, skip)) {
    const rest = key.slice(prefix.length);
    const cut = delimiter === undefined ? -1 : rest.indexOf(delimiter);
    if (contents.length + commonPrefixes.length >= maxKeys) {
      truncated = maxKeys > 0;
      break;
    }
    if (delimiter !== undefined && cut !== -1) {
      const rolled = prefix + rest.slice(0, cut + delimiter.length);
      commonPrefixes.push(rolled);
      skip.prefix = rolled;
      last = rolled;
      continue;
    }
    const meta = await store.describe(bucket, key);
    if (meta === undefined) continue;
    contents.push({ key, meta });
    last = key;
  }

  const items = contents
    .map(
      ({ key, meta }) =>
        `<Contents>${element('Key', key)}${element('LastModified', meta.lastModified)}${element('ETag', meta.etag)}${element('ChecksumAlgorithm', meta.checksum?.algorithm)}${element('ChecksumType', meta.checksum?.type)}${element('Size', meta.size)}${element('StorageClass', 'STANDARD')}</Contents>`,
    )
    .join('');
  const prefixes = commonPrefixes
    .map((rolled) => `<CommonPrefixes>${element('Prefix', rolled)}</CommonPrefixes>`)
    .join('');
  sendXml(
    res,
    200,
    `<ListBucketResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', prefix)}${element('Delimiter', delimiter)}${element('MaxKeys', maxKeys)}${element('KeyCount', contents.length + commonPrefixes.length)}${element('IsTruncated', truncated)}${element('ContinuationToken', token)}${element('NextContinuationToken', truncated && last !== undefined ? encodeToken(last) : undefined)}${element('StartAfter', startAfter)}${items}${prefixes}</ListBucketResult>`,
  );
}

/**
 * ListObjectVersions, as far as objects without versions go: each object under the prefix is its
 * one version, "null", and is the latest. Enough for code that deletes every version of a key.
 */
async function listObjectVersions(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versions', 'prefix', 'max-keys', 'encoding-type']);
  await store.requireBucket(bucket);
  if (query.has('encoding-type')) throw notImplemented('The encoding-type parameter');
  const prefix = query.get('prefix') ?? '';
  const versions: string[] = [];
  for await (const key of store.keys(bucket, prefix, undefined, {})) {
    if (versions.length >= MAX_LIST_KEYS) throw notImplemented('More than 1000 versions in one listing');
    const meta = await store.describe(bucket, key);
    if (meta === undefined) continue;
    versions.push(
      `<Version>${element('Key', key)}${element('VersionId', 'null')}${element('IsLatest', true)}${element('LastModified', meta.lastModified)}${element('ETag', meta.etag)}${element('Size', meta.size)}${element('StorageClass', 'STANDARD')}</Version>`,
    );
  }
  sendXml(
    res,
    200,
    `<ListVersionsResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', prefix)}${element('MaxKeys', MAX_LIST_KEYS)}${element('IsTruncated', false)}${versions.join('')}</ListVersionsResult>`,
  );
}

function encodeToken(after: string): string {
  return Buffer.from(after, 'utf8').toString('base64url');
}

function decodeToken(token: string): string {
  const after = Buffer.from(token, 'base64url').toString('utf8');
  if (after === '' || encodeToken(after) !== token) {
    throw invalidArgument('The continuation token provided is incorrect');
  }
  return after;
}

// Objects --------------------------------------------------------------------------------------

function writeCondition(req: IncomingMessage): WriteCondition {
  const ifNoneMatch = header(req, 'if-none-match')?.trim();
  const ifMatch = header(req, 'if-match')?.trim();
  if (ifNoneMatch !== undefined && ifNoneMatch !== '*')
    throw notImplemented('If-None-Match other than * on a write');
  return {
    ...(ifNoneMatch === undefined ? {} : { ifNoneMatch }),
    ...(ifMatch === undefined ? {} : { ifMatch }),
  };
}

async function putObject(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, []);
  await store.requireBucket(bucket);
  const condition = writeCondition(req);
  const headers = storedHeaders(req);
  // Answer a lost race before a large body is read; the commit checks again in case of a tie.
  const small =
    (parseLength(header(req, 'content-length')) ?? Number.POSITIVE_INFINITY) <= BUFFERED_BODY_BYTES;
  if (!small && (condition.ifNoneMatch !== undefined || condition.ifMatch !== undefined)) {
    checkWriteCondition(await store.describe(bucket, key), condition);
  }
  const received = await receiveBody(req, store.tempPath(), undefined, store.syncWrites);
  const checksum =
    received.sent === undefined ? undefined : { ...received.sent, type: 'FULL_OBJECT' as const };
  const meta: ObjectMeta = {
    format: 1,
    etag: `"${received.md5.toString('hex')}"`,
    size: received.size,
    mtimeMs: received.mtimeMs,
    lastModified: wholeSeconds(new Date()),
    headers,
    ...(checksum === undefined ? {} : { checksum }),
  };
  try {
    await store.commit(bucket, key, received.path, meta, condition);
  } catch (error) {
    await rm(received.path, { force: true });
    throw error;
  }
  sendEmpty(res, 200, { etag: meta.etag, ...checksumHeaders(checksum), ...pick(headers, SSE_HEADERS) });
}

/** The byte range a Range header asks for, or undefined to send the whole object. */
function parseRange(value: string | undefined, size: number): { start: number; end: number } | undefined {
  const match = value === undefined ? null : /^bytes=(\d*)-(\d*)$/.exec(value.trim());
  // Like S3, a Range it cannot parse (several ranges, other units) is ignored.
  if (match === null) return undefined;
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return undefined;
  const unsatisfiable = new S3Failure(416, 'InvalidRange', 'The requested range is not satisfiable', {
    'content-range': `bytes */${size}`,
  });
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0 || size === 0) throw unsatisfiable;
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  if (last !== '' && Number(last) < start) return undefined;
  if (start >= size) throw unsatisfiable;
  return { start, end };
}

const RESPONSE_OVERRIDES = [
  'response-content-type',
  'response-content-language',
  'response-expires',
  'response-cache-control',
  'response-content-disposition',
  'response-content-encoding',
];

async function getObject(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, RESPONSE_OVERRIDES);
  await store.requireBucket(bucket);
  const opened = await store.open(bucket, key);
  if (opened === undefined) throw noSuchKey();
  const { handle, meta } = opened;
  let streaming = false;
  try {
    const ifMatch = header(req, 'if-match');
    const ifNoneMatch = header(req, 'if-none-match');
    if (ifMatch !== undefined && !etagListMatches(ifMatch, meta.etag)) throw preconditionFailed();
    const lastModified = new Date(meta.lastModified).toUTCString();
    if (ifNoneMatch !== undefined && etagListMatches(ifNoneMatch, meta.etag)) {
      res.writeHead(304, { etag: meta.etag, 'last-modified': lastModified });
      res.end();
      return;
    }
    const range = parseRange(header(req, 'range'), meta.size);
    const headers: Record<string, string | number> = {
      ...meta.headers,
      etag: meta.etag,
      'last-modified': lastModified,
      'accept-ranges': 'bytes',
      'content-length': range === undefined ? meta.size : range.end - range.start + 1,
      ...(meta.parts === undefined ? {} : { 'x-amz-mp-parts-count': String(meta.parts) }),
      // Like S3, a checksum comes only when asked for, and only for the whole object.
      ...(range === undefined && header(req, 'x-amz-checksum-mode')?.toUpperCase() === 'ENABLED'
        ? checksumHeaders(meta.checksum)
        : {}),
      ...(range === undefined ? {} : { 'content-range': `bytes ${range.start}-${range.end}/${meta.size}` }),
    };
    for (const name of RESPONSE_OVERRIDES) {
      const value = query.get(name);
      if (value !== null) headers[name.slice('response-'.length)] = value;
    }
    res.writeHead(range === undefined ? 200 : 206, headers);
    if (req.method === 'HEAD' || meta.size === 0) {
      res.end();
      return;
    }
    streaming = true;
    await pipeline(
      handle.createReadStream({
        start: range?.start ?? 0,
        end: range?.end ?? meta.size - 1,
        autoClose: true,
      }),
      res,
    );
  } finally {
    if (!streaming) await handle.close();
  }
}

async function deleteObject(call: Call, key: string) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versionId']);
  // Each object is its one version, "null" (what S3 calls a version written without versioning).
  const versionId = query.get('versionId');
  if (versionId !== null && versionId !== 'null') throw invalidArgument('Invalid version id specified');
  await store.remove(bucket, key);
  sendEmpty(res, 204);
}

// Multipart ------------------------------------------------------------------------------------

async function createMultipartUpload(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['uploads']);
  await store.requireBucket(bucket);
  const algorithmName = header(req, 'x-amz-checksum-algorithm');
  const checksumAlgorithm = algorithmName === undefined ? undefined : parseAlgorithm(algorithmName);
  const checksumType = header(req, 'x-amz-checksum-type')?.toUpperCase();
  if (checksumType !== undefined && checksumType !== 'COMPOSITE') {
    throw notImplemented(`The ${checksumType} checksum type for multipart uploads`);
  }
  const headers = storedHeaders(req);
  await readSmallBody(req);
  const uploadId = await store.createUpload({
    format: 1,
    bucket,
    key,
    headers,
    ...(checksumAlgorithm === undefined ? {} : { checksumAlgorithm }),
    initiated: new Date().toISOString(),
  });
  sendXml(
    res,
    200,
    `<InitiateMultipartUploadResult xmlns="${XMLNS}">${element('Bucket', bucket)}${element('Key', key)}${element('UploadId', uploadId)}</InitiateMultipartUploadResult>`,
    {
      ...pick(headers, SSE_HEADERS),
      ...(checksumAlgorithm === undefined
        ? {}
        : { 'x-amz-checksum-algorithm': checksumAlgorithm, 'x-amz-checksum-type': 'COMPOSITE' }),
    },
  );
}

function parsePartNumber(value: string | null): number {
  if (value === null || !/^\d{1,5}$/.test(value) || Number(value) < 1 || Number(value) > MAX_PART_NUMBER) {
    throw invalidArgument(`Part number must be an integer between 1 and ${MAX_PART_NUMBER}, inclusive`);
  }
  return Number(value);
}

async function uploadPart(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['uploadId', 'partNumber']);
  await store.requireBucket(bucket);
  const uploadId = query.get('uploadId') ?? '';
  const partNumber = parsePartNumber(query.get('partNumber'));
  const upload = await store.readUpload(uploadId, bucket, key);
  const algorithm = upload.checksumAlgorithm;
  const received = await receiveBody(req, store.tempPath(), algorithm, store.syncWrites);
  try {
    if (algorithm !== undefined && received.sent !== undefined && received.sent.algorithm !== algorithm) {
      throw invalidRequest(
        `Checksum Type mismatch occurred, expected checksum Type: ${algorithm.toLowerCase()}, actual checksum Type: ${received.sent.algorithm.toLowerCase()}`,
      );
    }
    const checksum =
      algorithm === undefined ? undefined : received.digests.get(algorithm)?.toString('base64');
    const etag = `"${received.md5.toString('hex')}"`;
    await store.putPart(uploadId, partNumber, received.path, {
      etag,
      size: received.size,
      ...(checksum === undefined ? {} : { checksum }),
    });
    const echoed =
      algorithm === undefined
        ? received.sent
        : checksum === undefined
          ? undefined
          : { algorithm, value: checksum };
    sendEmpty(res, 200, {
      etag,
      ...(echoed === undefined ? {} : { [checksumHeader(echoed.algorithm)]: echoed.value }),
      ...pick(upload.headers, SSE_HEADERS),
    });
  } finally {
    await rm(received.path, { force: true });
  }
}

interface ListedPart {
  readonly partNumber: number;
  readonly etag: string;
  readonly checksums: ReadonlyMap<ChecksumAlgorithm, string>;
}

/** The part list of a CompleteMultipartUpload body: a fixed, flat shape, so no XML library. */
function parseCompleteBody(xml: string): ListedPart[] {
  if (!/<CompleteMultipartUpload[\s>]/.test(xml) || !/<\/CompleteMultipartUpload>\s*$/.test(xml)) {
    throw malformedXml();
  }
  const field = (part: string, name: string) => {
    const value = new RegExp(`<${name}>([^<]*)</${name}>`).exec(part)?.[1];
    return value === undefined ? undefined : xmlUnescape(value).trim();
  };
  const parts = [...xml.matchAll(/<Part>([\s\S]*?)<\/Part>/g)].map(([, inner = '']) => {
    const partNumber = field(inner, 'PartNumber');
    const etag = field(inner, 'ETag');
    if (partNumber === undefined || etag === undefined || !/^\d{1,5}$/.test(partNumber)) throw malformedXml();
    const checksums = new Map<ChecksumAlgorithm, string>();
    for (const algorithm of CHECKSUM_ALGORITHMS) {
      const value = field(inner, `Checksum${algorithm}`);
      if (value !== undefined) checksums.set(algorithm, value);
    }
    return { partNumber: Number(partNumber), etag, checksums };
  });
  if (parts.length === 0) throw malformedXml();
  return parts;
}

async function completeMultipartUpload(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['uploadId']);
  await store.requireBucket(bucket);
  const uploadId = query.get('uploadId') ?? '';
  const upload = await store.readUpload(uploadId, bucket, key);
  const condition = writeCondition(req);
  const listed = parseCompleteBody(await readSmallBody(req));
  const algorithm = upload.checksumAlgorithm;

  const parts: PartRecord[] = [];
  for (const [index, item] of listed.entries()) {
    const previous = listed[index - 1];
    if (previous !== undefined && item.partNumber <= previous.partNumber) {
      throw new S3Failure(
        400,
        'InvalidPartOrder',
        'The list of parts was not in ascending order. Parts must be ordered by part number.',
      );
    }
    const part = await store.readPart(uploadId, item.partNumber);
    if (part === undefined || normalizeEtag(item.etag) !== normalizeEtag(part.etag)) throw invalidPart();
    if (algorithm !== undefined) {
      const given = item.checksums.get(algorithm);
      if (given === undefined) {
        throw invalidRequest(
          `The upload was created using a ${algorithm.toLowerCase()} checksum. The complete request must include the checksum for each part. It was missing for part ${item.partNumber} in the request.`,
        );
      }
      if (given !== part.checksum) throw invalidPart();
    }
    parts.push(part);
  }
  for (const [index, part] of parts.entries()) {
    if (index < parts.length - 1 && part.size < MIN_PART_BYTES) {
      throw new S3Failure(
        400,
        'EntityTooSmall',
        'Your proposed upload is smaller than the minimum allowed object size.',
      );
    }
  }
  if (condition.ifNoneMatch !== undefined || condition.ifMatch !== undefined) {
    checkWriteCondition(await store.describe(bucket, key), condition);
  }

  const temp = store.tempPath();
  const paths = parts.map((part) => store.partPath(uploadId, part));
  async function* concatenated(): AsyncGenerator<Buffer> {
    for (const path of paths) yield* asBuffers(createReadStream(path));
  }
  let meta: ObjectMeta;
  try {
    await pipeline(
      Readable.from(concatenated(), { objectMode: false }),
      createWriteStream(temp, { flags: 'wx' }),
    );
    const settled = await settleFile(temp, store.syncWrites);
    const md5s = Buffer.concat(parts.map((part) => Buffer.from(normalizeEtag(part.etag), 'hex')));
    let checksum: ObjectMeta['checksum'];
    if (algorithm !== undefined) {
      const composite = digester(algorithm);
      for (const part of parts) composite.update(Buffer.from(part.checksum ?? '', 'base64'));
      checksum = {
        algorithm,
        value: `${composite.digest().toString('base64')}-${parts.length}`,
        type: 'COMPOSITE',
      };
    }
    meta = {
      format: 1,
      etag: `"${createHash('md5').update(md5s).digest('hex')}-${parts.length}"`,
      size: settled.size,
      mtimeMs: settled.mtimeMs,
      lastModified: wholeSeconds(new Date()),
      headers: upload.headers,
      parts: parts.length,
      ...(checksum === undefined ? {} : { checksum }),
    };
    await store.commit(bucket, key, temp, meta, condition);
  } finally {
    await rm(temp, { force: true });
  }
  await store.removeUpload(uploadId);
  const host = header(req, 'host') ?? LOOPBACK;
  const location = `http://${host}/${encodeURIComponent(bucket)}/${key.split('/').map(encodeURIComponent).join('/')}`;
  const checksumElement =
    meta.checksum === undefined
      ? ''
      : `${element(`Checksum${meta.checksum.algorithm}`, meta.checksum.value)}${element('ChecksumType', meta.checksum.type)}`;
  sendXml(
    res,
    200,
    `<CompleteMultipartUploadResult xmlns="${XMLNS}">${element('Location', location)}${element('Bucket', bucket)}${element('Key', key)}${element('ETag', meta.etag)}${checksumElement}</CompleteMultipartUploadResult>`,
    pick(upload.headers, SSE_HEADERS),
  );
}

async function abortMultipartUpload(call: Call, key: string) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['uploadId']);
  await store.requireBucket(bucket);
  const uploadId = query.get('uploadId') ?? '';
  await store.readUpload(uploadId, bucket, key);
  await store.removeUpload(uploadId);
  sendEmpty(res, 204);
}

// ---------------------------------------------------------------------------------------------
// Server

/**
 * Starts the disk S3 on loopback. Leftovers of interrupted writes under `.tmp` are removed;
 * objects, sidecars and unfinished multipart uploads are kept.
 */
export async function startDiskS3(options: DiskS3Options): Promise<DiskS3> {
  const root = resolve(options.root);
  await mkdir(join(root, META_DIR), { recursive: true });
  await mkdir(join(root, UPLOADS_DIR), { recursive: true });
  await rm(join(root, TMP_DIR), { recursive: true, force: true });
  await mkdir(join(root, TMP_DIR), { recursive: true });
  const store = new DiskStore(root, options.syncWrites ?? false);
  const server = createServer((req, res) => {
    void handle(store, req, res);
  });
  options.wrapServer?.(server);
  const sockets = trackSockets(server);
  const { endpoint } = await listen(server, options.port ?? 0);
  let closing: Promise<void> | undefined;
  return {
    endpoint,
    root,
    close() {
      closing ??= closeServer(server, sockets).then(() => store.idle());
      return closing;
    },
  };
}
