/**
 * The S3 side of the copy: cut the stream into parts and upload them a few at a time, or store a
 * body that fits in one part with a single PutObject. Knows nothing about the platform or zips.
 */
import { createHash } from 'node:crypto';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { ConfigurationError } from '../errors.ts';
import type { ArchiveTarget } from './options.ts';

/** What S3 answered for the stored object. */
export interface StoredOutput {
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
export class PartUploader {
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
