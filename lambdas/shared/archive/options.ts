/** The archive module's public types, its option schemas and the limits they default to. */
import type { S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { ARCHIVE_MAX_EXPANDED_BYTES } from '../config.ts';
import type { DownloadPolicy } from '../download-policy.ts';
import { ConfigurationError } from '../errors.ts';

export const MiB = 1024 * 1024;
export const GiB = 1024 * MiB;

/** Where an archive lives in S3. */
export interface ArchiveTarget {
  readonly s3: S3Client;
  readonly bucket: string;
  readonly key: string;
  /** KMS key for SSE-KMS; without it the bucket's default encryption applies. */
  readonly kmsKeyId?: string;
  /** Object tags set with the upload (the lifecycle rules expire archives by request type). */
  readonly tags?: Readonly<Record<string, string>>;
  /** The object's Content-Disposition (the name a browser saves a subject package under). @default none */
  readonly contentDisposition?: string;
}

/** What was stored: the byte count and SHA-256 measured on the bytes as they went to S3. */
export interface CopyResult {
  readonly bytes: number;
  /** Lowercase hex. */
  readonly sha256: string;
  /**
   * The CRC32 of what was sent, as S3 reports it for the stored object: base64 of the whole body,
   * or of the parts' CRC32s followed by `-<parts>`. Compared with HeadObject's to prove the copy.
   */
  readonly checksumCrc32: string;
  /** With `verify`: the entries, when the zip could be checked as it streamed (else read it back). */
  readonly archive?: VerifiedArchive;
  readonly versionId?: string;
  readonly etag?: string;
}

/** Tuning for copyExportToS3. */
export interface CopyOptions {
  readonly policy: DownloadPolicy;
  /** Downloads through this fetch rather than node:http (tests serve what real HTTP cannot with it). */
  readonly fetch?: typeof fetch;
  /** Multipart part size; S3 needs at least 5 MiB. @default 8 MiB */
  readonly partSizeBytes?: number;
  /** Longest wait for the next byte from the platform. @default 30000 */
  readonly idleTimeoutMs?: number;
  /** Parts uploaded at once; memory is about (queueSize + 1) x partSizeBytes. @default 2 */
  readonly queueSize?: number;
  /** Check the zip while it streams, within these limits. @default not checked */
  readonly verify?: VerifyOptions;
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
  /** Sum of all entries' uncompressed sizes (stack setting archiveMaxExpandedBytes). @default 4 GiB */
  readonly maxUncompressedBytes?: number;
  /** Uncompressed:compressed ratio of one entry, for entries of 1 MiB or more. @default 200 */
  readonly maxRatio?: number;
  /** Entries in the archive; the entry list is held in memory. @default 10000 */
  readonly maxEntries?: number;
}

/** The files docs/platform-api.md documents in every export. */
export const REQUIRED_ENTRIES = ['dislikes.json', 'likes.json', 'messages.json', 'profile.json'] as const;

export const copyOptionsSchema = z.object({
  partSizeBytes: z
    .number()
    .int()
    .min(5 * MiB)
    .max(5 * GiB)
    .default(8 * MiB),
  idleTimeoutMs: z.number().int().positive().default(30_000),
  queueSize: z.number().int().min(1).max(16).default(2),
});

export const verifyOptionsSchema = z.object({
  maxUncompressedBytes: z.number().int().positive().default(ARCHIVE_MAX_EXPANDED_BYTES.default),
  maxRatio: z.number().positive().default(200),
  maxEntries: z.number().int().positive().default(10_000),
});

/** Verification limits after their defaults are applied. */
export type VerifyLimits = z.infer<typeof verifyOptionsSchema>;

/** Parses options with `schema`; a failure names the operation and every bad field. */

export function parseOptions<T extends z.ZodType>(
  schema: T,
  options: unknown,
  operation: string,
): z.infer<T> {
  const parsed = schema.safeParse(options);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
  throw new ConfigurationError(`${operation}: invalid options (${issues.join('; ')})`);
}
