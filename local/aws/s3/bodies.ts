/**
 * Request bodies: plain and aws-chunked (with its trailers), measured and checked as they arrive.
 */
import { createHash } from 'node:crypto';
import {
  closeSync,
  createWriteStream,
  fdatasyncSync,
  fstatSync,
  openSync,
  type Stats,
  writeFileSync,
} from 'node:fs';
import { open, rm, stat } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BodyTooLargeError, readBody } from '../../http.ts';
import {
  CHECKSUM_SETTING_HEADERS,
  type ChecksumAlgorithm,
  checkChecksumValue,
  digester,
  parseAlgorithm,
} from './checksums.ts';
import { invalidRequest, malformedXml, S3Failure } from './errors.ts';
import {
  BUFFERED_BODY_BYTES,
  MAX_FRAMING_LINE_BYTES,
  MAX_OBJECT_BYTES,
  MAX_TRAILER_LINES,
  MAX_XML_BYTES,
} from './limits.ts';

interface ReceivedBody {
  readonly path: string;
  readonly size: number;
  readonly mtimeMs: number;
  readonly md5: Buffer;
  /** The client's checksum, verified against the bytes. */
  readonly sent?: { readonly algorithm: ChecksumAlgorithm; readonly value: string };
  readonly digests: ReadonlyMap<ChecksumAlgorithm, Buffer>;
}

export function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

export function parseLength(value: string | undefined): number | undefined {
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
export async function receiveBody(
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

export async function* asBuffers(source: AsyncIterable<unknown>): AsyncGenerator<Buffer> {
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
export async function settleFile(path: string, flush: boolean): Promise<Stats> {
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
export function writeNewFile(path: string, data: Buffer, flush: boolean): Stats {
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
export async function readSmallBody(req: IncomingMessage): Promise<string> {
  try {
    return (await readBody(req, MAX_XML_BYTES)).toString('utf8');
  } catch (error) {
    throw error instanceof BodyTooLargeError ? malformedXml() : error;
  }
}
