/** The sidecar records kept beside objects and uploads, validated when read back from disk. */
import { z } from 'zod';
import { CHECKSUM_ALGORITHMS } from './checksums.ts';
import { PART_FILE } from './limits.ts';

const checksumSchema = z.object({
  algorithm: z.enum(CHECKSUM_ALGORITHMS),
  value: z.string(),
  type: z.enum(['FULL_OBJECT', 'COMPOSITE']),
});

export const objectMetaSchema = z.object({
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
export type ObjectMeta = z.infer<typeof objectMetaSchema>;

export const uploadRecordSchema = z.object({
  format: z.literal(1),
  bucket: z.string(),
  key: z.string(),
  headers: z.record(z.string(), z.string()),
  checksumAlgorithm: z.enum(CHECKSUM_ALGORITHMS).optional(),
  initiated: z.iso.datetime(),
});
export type UploadRecord = z.infer<typeof uploadRecordSchema>;

export const partRecordSchema = z.object({
  format: z.literal(1),
  file: z.string().regex(PART_FILE),
  etag: z.string(),
  size: z.number().int().nonnegative(),
  /** Base64, in the upload's checksum algorithm. */
  checksum: z.string().optional(),
});
export type PartRecord = z.infer<typeof partRecordSchema>;

/** What a bucket was created or configured with: kept in `<root>/.buckets/<bucket>.json`. */
export const bucketSettingsSchema = z.object({
  format: z.literal(1),
  created: z.iso.datetime(),
  versioning: z.enum(['Enabled', 'Suspended']).optional(),
  objectLock: z
    .object({
      defaultRetention: z
        .object({ mode: z.enum(['COMPLIANCE', 'GOVERNANCE']), days: z.number().int().positive() })
        .optional(),
    })
    .optional(),
});
export type BucketSettings = z.infer<typeof bucketSettingsSchema>;
