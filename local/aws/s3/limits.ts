/** The disk S3's limits and names: S3's own (object, part and key sizes) and its folders on disk. */
export const META_DIR = '.meta';
export const UPLOADS_DIR = '.uploads';
export const TMP_DIR = '.tmp';
/** Every version's bytes, `<bucket>/<2 hex>/<blob>`: the current one is also hard-linked at its plain path. */
export const VERSIONS_DIR = '.versions';
/** Each bucket's settings (versioning, Object Lock), a JSON file per bucket. */
export const BUCKETS_DIR = '.buckets';
const MiB = 1024 * 1024;
export const MAX_OBJECT_BYTES = 5 * 1024 * MiB;
/** A plain (not aws-chunked) body up to this size is received in memory and written in one call. */
export const BUFFERED_BODY_BYTES = MiB;
export const MIN_PART_BYTES = 5 * MiB;
export const MAX_PART_NUMBER = 10_000;
export const MAX_KEY_BYTES = 1024;
/** Most file systems refuse longer names, so such a key could not become a file. */
export const MAX_SEGMENT_BYTES = 255;
export const MAX_XML_BYTES = MiB;
export const MAX_LIST_KEYS = 1000;
/** An aws-chunked size line or trailer line longer than this is not the SDK's framing. */
export const MAX_FRAMING_LINE_BYTES = 4096;
export const MAX_TRAILER_LINES = 16;
export const XMLNS = 'http://s3.amazonaws.com/doc/2006-03-01/';
export const DEFAULT_CONTENT_TYPE = 'binary/octet-stream';
export const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
export const UPLOAD_ID = /^[0-9a-f]{32}$/;
export const PART_FILE = /^[0-9a-f]{16}\.part$/;
export const BLOB_NAME = /^[0-9a-f]{32}$/;
/**
 * A version id this stand-in gives: 11 base-36 digits of a creation sequence (so ids of one key sort
 * by age, as S3's paging needs), then 21 random characters.
 */
export const VERSION_ID = /^[0-9a-z]{11}[0-9A-Za-z]{21}$/;
/** The version id S3 gives a write while versioning is off (or suspended). */
export const NULL_VERSION = 'null';
