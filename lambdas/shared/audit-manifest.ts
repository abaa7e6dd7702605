/**
 * The daily audit manifest: one JSON object a day in the audit bucket (under the same Object Lock as
 * the records) that locks every record S3 stored that day: its chain, seq and hash, and the time S3
 * stored it (LastModified, which no writer sets). It is built from a listing of the bucket, never
 * from the ledger, so a chain whose ledger item was deleted, or whose ledger head was rewritten, is
 * locked all the same.
 * Manifests are chained to each other as records are (each names the day before by its hash), so a
 * chain rewritten whole later (re-hashed, its ledger head rewritten too) can no longer match the
 * hashes a manifest locked, and a record rewritten the same day is stored later than its own time.
 */
import { createHash } from 'node:crypto';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import {
  AUDIT_PREFIX,
  checkStoredRecord,
  isWriteConflict,
  listStoredKeys,
  parseRecordKey,
  recordHash,
} from './audit.ts';
import { AuditRecordInvalidError } from './errors.ts';

/** The value of the `schema` field of the manifests written now. */
export const MANIFEST_SCHEMA = 'svc-dsr.manifest/2';
/** The first layout, built from the ledger's chain heads: still read, never written. */
export const LEGACY_MANIFEST_SCHEMA = 'svc-dsr.manifest/1';

/** Folder of the manifests: `manifests/<YYYY-MM-DD>.json`, one per UTC day. */
export const MANIFEST_PREFIX = 'manifests/';

/** Days one run writes at most when it catches up after a pause; the next run writes the rest. */
const MAX_DAYS_PER_RUN = 31;
/** Records read at once while a day's manifest is built. */
const READ_CONCURRENCY = 16;
const DAY_MS = 24 * 3600 * 1000;
/** How long after midnight UTC the day before is written: every record stored that day is listed by then. */
export const DAY_SETTLE_MS = 10 * 60 * 1000;
const MANIFEST_NAME_PATTERN = /^manifests\/(\d{4}-\d{2}-\d{2})\.json$/;
const sha256Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);

/** One record a manifest locks: which chain, which seq, its hash, and when S3 stored it. */
export const lockedRecordSchema = z.strictObject({
  chain: z.string(),
  seq: z.number().int().nonnegative(),
  hash: sha256Digest,
  stored_at: z.iso.datetime(),
});
export type LockedRecord = z.infer<typeof lockedRecordSchema>;

const currentManifestSchema = z.strictObject({
  schema: z.literal(MANIFEST_SCHEMA),
  day: z.iso.date(),
  written_at: z.iso.datetime(),
  records: z.array(lockedRecordSchema),
  prev_hash: sha256Digest.nullable(),
  hash: sha256Digest,
});

const legacyManifestSchema = z.strictObject({
  schema: z.literal(LEGACY_MANIFEST_SCHEMA),
  day: z.iso.date(),
  written_at: z.iso.datetime(),
  chains: z.array(
    z.strictObject({ request_id: z.string(), count: z.number().int().positive(), head: sha256Digest }),
  ),
  prev_hash: sha256Digest.nullable(),
  hash: sha256Digest,
});

/** Validates a stored manifest of either layout (strict: an unknown field is an error). */
export const manifestSchema = z.discriminatedUnion('schema', [currentManifestSchema, legacyManifestSchema]);
export type Manifest = z.infer<typeof manifestSchema>;

/**
 * What a manifest locks, as chain heads: for each locked record, that the chain's record `count - 1`
 * has `head` (and was stored at `stored_at`); for a legacy manifest, the heads it copied.
 */
export function lockedHeadsOf(
  manifest: Manifest,
): { chain: string; count: number; head: string; stored_at?: string }[] {
  if (manifest.schema === LEGACY_MANIFEST_SCHEMA) {
    return manifest.chains.map((chain) => ({
      chain: chain.request_id,
      count: chain.count,
      head: chain.head,
    }));
  }
  return manifest.records.map((record) => ({
    chain: record.chain,
    count: record.seq + 1,
    head: record.hash,
    stored_at: record.stored_at,
  }));
}

/** The S3 key of a day's manifest. */
export function manifestKey(day: string): string {
  return `${MANIFEST_PREFIX}${day}.json`;
}

/** Where the manifests go: the audit bucket. */
export interface ManifestStore {
  readonly s3: S3Client;
  readonly bucket: string;
  readonly kmsKeyId?: string;
}

/** What writing manifests needs besides the bucket: a clock. */
export interface ManifestDeps extends ManifestStore {
  readonly clock: () => Date;
}

/**
 * Writes the manifest of every whole UTC day not written yet, up to yesterday: after the last
 * manifest, or yesterday alone when there is none. Each locks every record S3 stored that day
 * (listed from the bucket with its LastModified, read for its hash), and links to the manifest
 * before it. Safe to run again and concurrently: a day already written is read, never replaced.
 * Answers the days written.
 */
export async function writeDailyManifests(deps: ManifestDeps): Promise<string[]> {
  // A record put a moment before midnight may still be arriving just after it: a day is written
  // once it has been over for a while.
  const yesterday = dayOf(new Date(deps.clock().getTime() - DAY_MS - DAY_SETTLE_MS));
  const keys = await manifestKeys(deps);
  const lastKey = keys.at(-1);
  let previous = lastKey === undefined ? undefined : await readManifest(deps, lastKey);
  let day = previous === undefined ? yesterday : nextDay(previous.day);
  if (day > yesterday) return [];
  // One listing of the bucket serves every day this run writes.
  const stored = await listStoredKeys(deps.s3, deps.bucket, AUDIT_PREFIX);
  const written: string[] = [];
  while (day <= yesterday && written.length < MAX_DAYS_PER_RUN) {
    const start = `${day}T00:00:00.000Z`;
    const end = `${nextDay(day)}T00:00:00.000Z`;
    const ofDay = stored.filter(
      (object) =>
        object.storedAt !== undefined &&
        object.storedAt >= start &&
        object.storedAt < end &&
        parseRecordKey(object.key) !== undefined,
    );
    const records = await lockRecords(deps, ofDay);
    const unsealed = {
      schema: MANIFEST_SCHEMA,
      day,
      written_at: deps.clock().toISOString(),
      records,
      prev_hash: previous?.hash ?? null,
    } as const;
    const manifest = manifestSchema.parse({ ...unsealed, hash: recordHash(unsealed) });
    previous = (await putManifest(deps, manifest)) ? manifest : await readManifest(deps, manifestKey(day));
    if (previous?.day === day) written.push(day);
    day = nextDay(day);
  }
  return written;
}

/**
 * The locked form of each listed record, in chain and seq order: its own hash when it reads as a
 * record, else the SHA-256 of its bytes (verify reports such a record as a broken chain anyway).
 */
async function lockRecords(
  store: ManifestStore,
  listed: readonly { key: string; storedAt?: string }[],
): Promise<LockedRecord[]> {
  const locked: LockedRecord[] = [];
  for (let index = 0; index < listed.length; index += READ_CONCURRENCY) {
    const batch = listed.slice(index, index + READ_CONCURRENCY);
    locked.push(
      ...(await Promise.all(
        batch.map(async ({ key, storedAt }) => {
          const answer = await store.s3.send(new GetObjectCommand({ Bucket: store.bucket, Key: key }));
          const body = (await answer.Body?.transformToString('utf-8')) ?? '';
          const checked = checkStoredRecord(key, body);
          const name = parseRecordKey(key);
          return {
            chain: name?.chainId ?? key,
            seq: name?.seq ?? 0,
            hash: checked.ok
              ? checked.record.hash
              : `sha256:${createHash('sha256').update(body, 'utf8').digest('hex')}`,
            stored_at: storedAt ?? '',
          };
        }),
      )),
    );
  }
  return locked.sort((a, b) => (a.chain < b.chain ? -1 : a.chain > b.chain ? 1 : a.seq - b.seq));
}

/** Every manifest in day order, with the first problem of their own chain (or undefined when it holds). */
export async function readManifests(
  store: ManifestStore,
): Promise<{ manifests: Manifest[]; problem: string | undefined }> {
  const manifests: Manifest[] = [];
  let problem: string | undefined;
  for (const key of await manifestKeys(store)) {
    const manifest = await readManifest(store, key).catch((error: unknown) => {
      problem ??= error instanceof Error ? error.message : String(error);
      return undefined;
    });
    if (manifest === undefined) continue;
    const previous = manifests.at(-1);
    if (manifest.prev_hash !== (previous?.hash ?? null)) {
      problem ??= `manifest ${manifest.day}: prev_hash does not match the hash of ${previous === undefined ? 'nothing (it is the first)' : `manifest ${previous.day}`}`;
    }
    manifests.push(manifest);
  }
  return { manifests, problem };
}

/** The manifest keys in the bucket, in day order. */
async function manifestKeys(store: ManifestStore): Promise<string[]> {
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await store.s3.send(
      new ListObjectsV2Command({ Bucket: store.bucket, Prefix: MANIFEST_PREFIX, ContinuationToken: token }),
    );
    for (const object of page.Contents ?? []) {
      if (object.Key !== undefined && MANIFEST_NAME_PATTERN.test(object.Key)) keys.push(object.Key);
    }
    token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
  } while (token !== undefined);
  return keys.sort();
}

/** Reads and checks one manifest: schema, its own hash, and its day against its key. */
async function readManifest(store: ManifestStore, key: string): Promise<Manifest> {
  const answer = await store.s3.send(new GetObjectCommand({ Bucket: store.bucket, Key: key }));
  const body = (await answer.Body?.transformToString('utf-8')) ?? '';
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch {
    throw new AuditRecordInvalidError(`audit manifest ${key} is not valid JSON`);
  }
  const parsed = manifestSchema.safeParse(raw);
  const asObject = z.record(z.string(), z.unknown()).safeParse(raw);
  if (!parsed.success || !asObject.success) {
    throw new AuditRecordInvalidError(`audit manifest ${key} does not match ${MANIFEST_SCHEMA}`);
  }
  if (recordHash(asObject.data) !== parsed.data.hash) {
    throw new AuditRecordInvalidError(`audit manifest ${key}: hash does not match its content`);
  }
  if (manifestKey(parsed.data.day) !== key)
    throw new AuditRecordInvalidError(`audit manifest ${key} holds day ${parsed.data.day}`);
  return parsed.data;
}

/** Writes a manifest unless its day is written; answers false when another writer was first. */
async function putManifest(store: ManifestStore, manifest: Manifest): Promise<boolean> {
  const body = `${JSON.stringify(manifest, null, 2)}\n`;
  try {
    await store.s3.send(
      new PutObjectCommand({
        Bucket: store.bucket,
        Key: manifestKey(manifest.day),
        Body: body,
        ContentType: 'application/json',
        IfNoneMatch: '*',
        ChecksumAlgorithm: 'SHA256',
        ChecksumSHA256: createHash('sha256').update(body, 'utf8').digest('base64'),
        ...(store.kmsKeyId === undefined
          ? {}
          : { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: store.kmsKeyId }),
      }),
    );
    return true;
  } catch (error) {
    if (isWriteConflict(error)) return false;
    throw error;
  }
}

function dayOf(date: Date): string {
  return date.toISOString().slice(0, 10);
}

function nextDay(day: string): string {
  return dayOf(new Date(Date.parse(`${day}T00:00:00.000Z`) + DAY_MS));
}
