/** The sidecar records kept beside objects and uploads, validated when read back from disk. */
import { z } from 'zod';
import { CHECKSUM_ALGORITHMS } from './checksums.ts';
import { BLOB_NAME, PART_FILE } from './limits.ts';

const checksumSchema = z.object({
  algorithm: z.enum(CHECKSUM_ALGORITHMS),
  value: z.string(),
  type: z.enum(['FULL_OBJECT', 'COMPOSITE']),
});

/**
 * A key's sidecar as the first layout kept it (format 1): one object per key, no versions. A data
 * dir written then is read with it, and each key is moved to the versioned layout when first used.
 */
export const legacyObjectMetaSchema = z.object({
  format: z.literal(1),
  etag: z.string(),
  size: z.number().int().nonnegative(),
  /** The data file's mtime when the sidecar was written: a differing file means it changed since. */
  mtimeMs: z.number(),
  lastModified: z.iso.datetime(),
  headers: z.record(z.string(), z.string()),
  checksum: checksumSchema.optional(),
  parts: z.number().int().positive().optional(),
});
export type LegacyObjectMeta = z.infer<typeof legacyObjectMetaSchema>;

/** A version that holds bytes. */
const objectVersionSchema = z.object({
  kind: z.literal('object'),
  /** What S3 calls it: 32 characters in a versioned bucket, "null" for a write while versioning was off. */
  versionId: z.string(),
  /** When the stand-in stored it, by its own clock: no writer sets it, and a file's mtime does not. */
  lastModified: z.iso.datetime(),
  etag: z.string(),
  size: z.number().int().nonnegative(),
  /** Headers given at upload and echoed on reads: Content-Type, user metadata, SSE and lock fields. */
  headers: z.record(z.string(), z.string()),
  checksum: checksumSchema.optional(),
  parts: z.number().int().positive().optional(),
  /** Each part's size, in order: how a multipart ETag is computed again from the bytes. */
  partSizes: z.array(z.number().int().nonnegative()).optional(),
  /**
   * The file under `.versions/<bucket>/` holding this version's bytes. Absent when they are gone:
   * the plain file was changed in place on disk (it and this file were one), or a file of the
   * first layout was changed before it was moved to this one. Such a version is listed, not served.
   */
  blob: z.string().regex(BLOB_NAME).optional(),
});
export type ObjectVersion = z.infer<typeof objectVersionSchema>;

const deleteMarkerSchema = z.object({
  kind: z.literal('marker'),
  versionId: z.string(),
  lastModified: z.iso.datetime(),
});
export type DeleteMarker = z.infer<typeof deleteMarkerSchema>;
export type Version = ObjectVersion | DeleteMarker;

/**
 * What a file is, as far as the stand-in can tell without reading it: a change made on disk changes
 * at least one of these (the change time is set by the kernel, so `touch` cannot put it back).
 */
export const fileIdentitySchema = z.object({
  ino: z.number(),
  size: z.number().int().nonnegative(),
  mtimeMs: z.number(),
  ctimeMs: z.number(),
});
export type FileIdentity = z.infer<typeof fileIdentitySchema>;

/** A key's versions, kept in `<root>/.meta/<bucket>/<key>.json`: the stand-in's own record of it. */
export const keyRecordSchema = z.object({
  format: z.literal(2),
  /** Newest first; the first is the current one (a delete marker: the key reads as deleted). */
  versions: z.array(z.discriminatedUnion('kind', [objectVersionSchema, deleteMarkerSchema])).min(1),
  /** The plain file `<root>/<bucket>/<key>` as the stand-in last placed or checked it; absent when there is none. */
  file: fileIdentitySchema.optional(),
  /**
   * A write between its two steps: the first version's file is about to be renamed into place.
   * Read after a crash, a plain file with this identity finishes the write, any other undoes it.
   */
  pending: z
    .object({
      ino: z.number(),
      size: z.number().int().nonnegative(),
      mtimeMs: z.number(),
      /** The "null" version the write replaces, kept until the write is finished. */
      replaced: objectVersionSchema.optional(),
    })
    .optional(),
});
export type KeyRecord = z.infer<typeof keyRecordSchema>;

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
