/**
 * The S3 side of the copy: cut the stream into parts and upload them a few at a time, or store a
 * body that fits in one part with a single PutObject. Knows nothing about the platform or zips.
 */

import { crc32 } from 'node:zlib';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { ConfigurationError, InvalidArchiveError, StorageAnswerInvalidError } from '../errors.ts';
import { crc32Append, crc32Base64 } from './crc32.ts';
import type { ArchiveTarget } from './options.ts';

/** What S3 answered for the stored object. */
export interface StoredOutput {
  readonly ETag?: string;
  readonly VersionId?: string;
  /** The CRC32 S3 computed on what it stored: of the whole body, or `<crc of part crcs>-<parts>`. */
  readonly ChecksumCRC32?: string;
}

/** What was stored, and the CRC32 this side computed on the bytes it sent, in S3's notation. */
export interface UploadResult {
  readonly output: StoredOutput;
  readonly checksumCrc32: string;
}

/** A part S3 has kept, as CompleteMultipartUpload names it. */
export interface UploadedPart {
  readonly PartNumber: number;
  readonly ETag: string;
  readonly ChecksumCRC32?: string;
}

/**
 * An upload carried on from an earlier invocation: its id, the parts S3 kept (1 to n, in order),
 * and the CRC32 of their CRC32s (big-endian, joined), which S3's COMPOSITE checksum is made of.
 */
export interface UploadResume {
  readonly uploadId: string;
  readonly parts: readonly UploadedPart[];
  readonly partsCrc32: number;
}

/**
 * How far an upload has got: its id, and the parts 1 to `parts` that S3 has acknowledged (every one
 * of them, with none missing below), with the CRC32 of their CRC32s. What a later invocation can
 * carry on from.
 */
export interface UploadCheckpoint {
  readonly uploadId: string;
  readonly parts: number;
  readonly partsCrc32: number;
}

/** S3 refuses a multipart upload with more parts than this. */
export const MAX_PARTS = 10_000;

/**
 * Cuts the body into parts and uploads up to `queueSize` of them at once; a body that fits in one
 * part is stored with a single PutObject. Every request carries the CRC32 of its body (zlib's,
 * native), which S3 checks before it keeps the part, and is sent with an unsigned payload: the
 * transport is TLS, and a SHA-256 per part would be a second pass over every byte beside the
 * whole-object SHA-256 the copy keeps. A part's buffer is refilled once S3 has taken it, so memory
 * stays at (queueSize + 1) parts whatever the size of the archive.
 */
export class PartUploader {
  /** The first S3 failure; it stops the copy. */
  failure: unknown;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #spare: Buffer[] = [];
  readonly #parts: UploadedPart[] = [];
  #buffer: Buffer | undefined;
  #filled = 0;
  /** The CRC32 of the part being filled. */
  #crc = 0;
  #partCount = 0;
  #uploadId: Promise<string> | undefined;
  /** The CRC32 of the part CRC32s sent so far, in part order: S3's COMPOSITE checksum before `-<parts>`. */
  #partsCrc32 = 0;
  /** Parts acknowledged by S3 beyond the contiguous run counted in #acknowledged. */
  readonly #landed = new Map<number, number>();
  #acknowledged: { parts: number; partsCrc32: number } = { parts: 0, partsCrc32: 0 };
  readonly #resumed: boolean;

  constructor(
    private readonly target: ArchiveTarget,
    private readonly partSize: number,
    private readonly queueSize: number,
    private readonly onFailure: () => void,
    resume?: UploadResume,
  ) {
    this.#resumed = resume !== undefined;
    if (resume !== undefined) {
      this.#uploadId = Promise.resolve(resume.uploadId);
      this.#parts.push(...resume.parts);
      this.#partCount = resume.parts.length;
      this.#partsCrc32 = resume.partsCrc32;
      this.#acknowledged = { parts: resume.parts.length, partsCrc32: resume.partsCrc32 };
    }
  }

  /** The multipart upload's id, once it is created (or carried on). */
  async uploadId(): Promise<string> {
    return this.#created();
  }

  /** How far S3 has acknowledged the parts without a gap; undefined before the upload exists. */
  async checkpoint(): Promise<UploadCheckpoint | undefined> {
    if (this.#uploadId === undefined) return undefined;
    return { uploadId: await this.#uploadId, ...this.#acknowledged };
  }

  /** Bytes written into parts so far, the one being filled included. */
  get bytesWritten(): number {
    return this.#partCount * this.partSize + this.#filled;
  }

  /**
   * Takes a chunk; resolves once there is room for the next, which is when S3 keeps up. With the
   * chunk's CRC32, a chunk that goes into one part whole is not read again for the part's.
   */
  async write(chunk: Uint8Array, crc?: number): Promise<void> {
    let offset = 0;
    while (offset < chunk.length) {
      // A full part waits for the next byte: only then is it known not to be the whole body.
      if (this.#filled === this.partSize) await this.#sendPart();
      this.#buffer ??= this.#spare.pop() ?? Buffer.allocUnsafe(this.partSize);
      const length = Math.min(chunk.length - offset, this.partSize - this.#filled);
      const piece = length === chunk.length ? chunk : chunk.subarray(offset, offset + length);
      this.#buffer.set(piece, this.#filled);
      this.#crc = crc32Append(this.#crc, piece, piece === chunk ? crc : undefined);
      this.#filled += length;
      offset += length;
    }
  }

  /** Stores what was written: one PutObject for a single part, else the last part and Complete. */
  async finish(): Promise<UploadResult> {
    if (this.#partCount === 0 && !this.#resumed) {
      const body = this.#buffer?.subarray(0, this.#filled) ?? Buffer.alloc(0);
      const checksumCrc32 = crc32Base64(this.#crc);
      const put = new PutObjectCommand({
        ...this.#objectParams(),
        Body: body,
        ChecksumAlgorithm: 'CRC32',
        ChecksumCRC32: checksumCrc32,
      });
      put.middlewareStack.add(unsignedUpload, UNSIGNED_UPLOAD);
      return { output: await this.target.s3.send(put), checksumCrc32 };
    }
    await this.#sendPart();
    await Promise.all(this.#inFlight);
    this.#throwIfFailed();
    const uploadId = await this.#created();
    const parts = [...this.#parts].sort((left, right) => left.PartNumber - right.PartNumber);
    const output = await this.target.s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: this.target.bucket,
        Key: this.target.key,
        UploadId: uploadId,
        MultipartUpload: { Parts: parts },
      }),
    );
    return { output, checksumCrc32: compositeOf(this.#partsCrc32, this.#partCount) };
  }

  /**
   * Stops at a part boundary without completing: sends the part being filled (which must be full),
   * waits for every part in flight, and answers how far S3 has taken the upload. The upload stays
   * open for a later invocation to carry on (or for abort()).
   */
  async pause(): Promise<UploadCheckpoint> {
    if (this.#filled !== 0 && this.#filled !== this.partSize) {
      throw new Error('PartUploader.pause: the part being filled is not full; pause only at a part boundary');
    }
    if (this.#filled === this.partSize) await this.#sendPart();
    await Promise.all(this.#inFlight);
    this.#throwIfFailed();
    const uploadId = await this.#created();
    return { uploadId, ...this.#acknowledged };
  }

  /** Waits for the parts in flight, whatever becomes of them, so a checkpoint taken next is final. */
  async settle(): Promise<void> {
    await Promise.all(this.#inFlight);
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
    const { bucket, key, kmsKeyId, tags, contentDisposition } = this.target;
    return {
      Bucket: bucket,
      Key: key,
      ContentType: 'application/zip',
      ...(contentDisposition === undefined ? {} : { ContentDisposition: contentDisposition }),
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
    const crc = this.#crc;
    this.#buffer = undefined;
    this.#filled = 0;
    this.#crc = 0;
    this.#partCount += 1;
    const partNumber = this.#partCount;
    if (partNumber > MAX_PARTS) {
      throw new ConfigurationError(
        `copyExportToS3: the archive needs more than ${MAX_PARTS} parts; raise partSizeBytes`,
      );
    }
    this.#partsCrc32 = crc32(crcBytes(crc), this.#partsCrc32);
    const task = this.#uploadPart(partNumber, body, crc).then(
      (part) => {
        this.#parts.push(part);
        this.#spare.push(buffer);
        this.#acknowledge(partNumber, crc);
      },
      (error: unknown) => this.#fail(error),
    );
    this.#inFlight.add(task);
    void task.then(() => this.#inFlight.delete(task));
  }

  /** Counts a part S3 took into the contiguous run when every part before it has landed too. */
  #acknowledge(partNumber: number, crc: number): void {
    this.#landed.set(partNumber, crc);
    let { parts, partsCrc32 } = this.#acknowledged;
    for (let next = this.#landed.get(parts + 1); next !== undefined; next = this.#landed.get(parts + 1)) {
      this.#landed.delete(parts + 1);
      partsCrc32 = crc32(crcBytes(next), partsCrc32);
      parts += 1;
    }
    this.#acknowledged = { parts, partsCrc32 };
  }

  async #uploadPart(partNumber: number, body: Buffer, crc: number): Promise<UploadedPart> {
    const checksum = crc32Base64(crc);
    const uploadId = await this.#created();
    const command = new UploadPartCommand({
      Bucket: this.target.bucket,
      Key: this.target.key,
      UploadId: uploadId,
      PartNumber: partNumber,
      Body: body,
      ChecksumAlgorithm: 'CRC32',
      ChecksumCRC32: checksum,
    });
    command.middlewareStack.add(unsignedUpload, UNSIGNED_UPLOAD);
    const output = await this.target.s3.send(command);
    if (output.ETag === undefined)
      throw new StorageAnswerInvalidError(`S3 returned no ETag for part ${partNumber}`);
    if (output.ChecksumCRC32 !== undefined && output.ChecksumCRC32 !== checksum) {
      throw new InvalidArchiveError(
        `S3 reports CRC32 ${output.ChecksumCRC32} for part ${partNumber}, which was sent with ${checksum}`,
      );
    }
    // Complete repeats the checksum S3 reported for each part; a stand-in that reports none gets none back.
    return {
      PartNumber: partNumber,
      ETag: output.ETag,
      ...(output.ChecksumCRC32 === undefined ? {} : { ChecksumCRC32: output.ChecksumCRC32 }),
    };
  }

  #created(): Promise<string> {
    if (this.#uploadId === undefined) {
      const created = this.target.s3
        .send(
          new CreateMultipartUploadCommand({
            ...this.#objectParams(),
            ChecksumAlgorithm: 'CRC32',
            ChecksumType: 'COMPOSITE',
          }),
        )
        .then((output) => {
          if (output.UploadId === undefined) throw new StorageAnswerInvalidError('S3 returned no UploadId');
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

/** A CRC32 as the four big-endian bytes S3's COMPOSITE checksum joins. */
export function crcBytes(crc: number): Buffer {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(crc >>> 0);
  return bytes;
}

/** S3's COMPOSITE CRC32 from the CRC32 of the joined part CRC32s and the number of parts. */
export function compositeOf(partsCrc32: number, parts: number): string {
  return `${crc32Base64(partsCrc32)}-${parts}`;
}

const UNSIGNED_UPLOAD = { step: 'build', priority: 'low', name: 'archiveUnsignedUpload' } as const;

/**
 * Runs after the S3 client's own build steps. The payload is unsigned: its integrity rests on the
 * signed CRC32 header, which S3 checks, and on TLS, so the signer need not hash the body again. And
 * no `Expect: 100-continue`: with it the SDK's handler opens a fresh connection for every part.
 */
function unsignedUpload<Args extends { request: unknown }, Output>(
  next: (args: Args) => Promise<Output>,
): (args: Args) => Promise<Output> {
  return (args) => {
    if (isHttpRequest(args.request)) {
      const { headers } = args.request;
      headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
      delete headers.Expect;
      delete headers.expect;
    }
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
