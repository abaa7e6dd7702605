/**
 * The S3 side of the copy: cut the stream into parts and upload them a few at a time, or store a
 * body that fits in one part with a single PutObject. Knows nothing about the platform or zips.
 */
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { ConfigurationError, InvalidArchiveError, StorageAnswerInvalidError } from '../errors.ts';
import { compositeCrc32, crc32Append, crc32Base64 } from './crc32.ts';
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

interface UploadedPart {
  readonly PartNumber: number;
  readonly ETag: string;
  readonly ChecksumCRC32?: string;
}

/** S3 refuses a multipart upload with more parts than this. */
const MAX_PARTS = 10_000;

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
  readonly #crcs: number[] = [];

  constructor(
    private readonly target: ArchiveTarget,
    private readonly partSize: number,
    private readonly queueSize: number,
    private readonly onFailure: () => void,
  ) {}

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
    if (this.#partCount === 0) {
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
    return { output, checksumCrc32: compositeCrc32(this.#crcs) };
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
    const task = this.#uploadPart(partNumber, body, crc).then(
      (part) => {
        this.#parts.push(part);
        this.#spare.push(buffer);
      },
      (error: unknown) => this.#fail(error),
    );
    this.#inFlight.add(task);
    void task.then(() => this.#inFlight.delete(task));
  }

  async #uploadPart(partNumber: number, body: Buffer, crc: number): Promise<UploadedPart> {
    this.#crcs[partNumber - 1] = crc;
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
