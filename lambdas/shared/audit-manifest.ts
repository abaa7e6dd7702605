/**
 * The daily audit manifest: one JSON object a day in the audit bucket (under the same Object Lock as
 * the records) that locks the head hash and record count of every chain that changed that day
 * (a request's chain under its request id, its side chains under `<request_id>.notices` and
 * `<request_id>.packages`).
 * Manifests are chained to each other as records are, so a chain rewritten whole later (reordered
 * and re-hashed, its ledger head rewritten too) can no longer match the head a manifest locked.
 */
import { createHash } from 'node:crypto';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { isWriteConflict, recordHash, sideChainOf } from './audit.ts';
import { AuditRecordInvalidError } from './errors.ts';
import { chainHeadFields, type Ledger, SIDE_CHAINS } from './ledger/index.ts';

/** The value of every manifest's `schema` field. */
export const MANIFEST_SCHEMA = 'svc-dsr.manifest/1';

/** Folder of the manifests: `manifests/<YYYY-MM-DD>.json`, one per UTC day. */
export const MANIFEST_PREFIX = 'manifests/';

/** Days one run writes at most when it catches up after a pause; the next run writes the rest. */
const MAX_DAYS_PER_RUN = 31;
const DAY_MS = 24 * 3600 * 1000;
const MANIFEST_NAME_PATTERN = /^manifests\/(\d{4}-\d{2}-\d{2})\.json$/;
const sha256Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);

/** Validates a stored manifest (strict: an unknown field is an error). */
export const manifestSchema = z.strictObject({
  schema: z.literal(MANIFEST_SCHEMA),
  day: z.iso.date(),
  written_at: z.iso.datetime(),
  chains: z.array(
    z.strictObject({ request_id: z.string(), count: z.number().int().positive(), head: sha256Digest }),
  ),
  prev_hash: sha256Digest.nullable(),
  hash: sha256Digest,
});
export type Manifest = z.infer<typeof manifestSchema>;

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

/** What writing manifests reads besides the bucket: the ledger's chain heads, and a clock. */
export interface ManifestDeps extends ManifestStore {
  readonly ledger: Pick<Ledger, 'scan'>;
  readonly clock: () => Date;
}

/**
 * Writes the manifest of every whole UTC day not written yet, up to yesterday: after the last
 * manifest, or yesterday alone when there is none. Each locks the head of every chain whose last
 * record was written that day (a chain that changed again since is locked by a later day), and
 * links to the manifest before it. Safe to run again and concurrently: a day already written is
 * read, never replaced. Answers the days written.
 */
export async function writeDailyManifests(deps: ManifestDeps): Promise<string[]> {
  const yesterday = dayOf(new Date(deps.clock().getTime() - DAY_MS));
  const keys = await manifestKeys(deps);
  const lastKey = keys.at(-1);
  let previous = lastKey === undefined ? undefined : await readManifest(deps, lastKey);
  let day = previous === undefined ? yesterday : nextDay(previous.day);
  const written: string[] = [];
  while (day <= yesterday && written.length < MAX_DAYS_PER_RUN) {
    const chains: Manifest['chains'] = [];
    const start = `${day}T00:00:00.000Z`;
    const end = `${nextDay(day)}T00:00:00.000Z`;
    // One scan finds every item one of whose chains changed that day: the request's own chain,
    // and its side chains, each locked under its own chain id (`<request_id>.notices`, ...).
    const anchors = [
      { fields: chainHeadFields(undefined), chainOf: (requestId: string) => requestId },
      ...SIDE_CHAINS.map((side) => ({
        fields: side.fields,
        chainOf: (requestId: string) => sideChainOf(side.kind, requestId),
      })),
    ];
    const times = anchors.map((anchor) => anchor.fields.at);
    for await (const item of deps.ledger.scan({ field: times, from: start, to: end })) {
      for (const { fields, chainOf } of anchors) {
        const at = item[fields.at];
        const head = item[fields.head];
        const count = item[fields.count];
        if (at === undefined || at < start || at >= end) continue;
        if (head === undefined || count === undefined || count === 0) continue;
        chains.push({ request_id: chainOf(item.request_id), count, head });
      }
    }
    chains.sort((a, b) => (a.request_id < b.request_id ? -1 : a.request_id > b.request_id ? 1 : 0));
    const unsealed = {
      schema: MANIFEST_SCHEMA,
      day,
      written_at: deps.clock().toISOString(),
      chains,
      prev_hash: previous?.hash ?? null,
    } as const;
    const manifest = manifestSchema.parse({ ...unsealed, hash: recordHash(unsealed) });
    previous = (await putManifest(deps, manifest)) ? manifest : await readManifest(deps, manifestKey(day));
    if (previous?.day === day) written.push(day);
    day = nextDay(day);
  }
  return written;
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
