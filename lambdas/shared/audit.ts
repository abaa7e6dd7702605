/**
 * The audit trail: one JSON record per workflow step in an S3 bucket under Object Lock, hash-chained
 * per request, so an auditor can prove years later what happened and that nothing was changed,
 * removed or inserted. Subject identifiers appear only as a keyed hash (HMAC): the locked records
 * never hold personal data that an erasure would have to remove.
 */
import { createHash } from 'node:crypto';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { subjectHash } from './audit-chains.ts';
import {
  AuditChainClosedError,
  AuditEventRefusedError,
  AuditRecordInvalidError,
  AuditWriteConflictError,
  ConfigurationError,
} from './errors.ts';
import { identifierProblem } from './redact.ts';

export {
  type HashedKind,
  noticesChainOf,
  parseChainId,
  SIDE_CHAIN_KINDS,
  type SideChainKind,
  sideChainOf,
  subjectHash,
} from './audit-chains.ts';

/** The value of every record's `schema` field; a new layout gets a new version. */
export const AUDIT_SCHEMA = 'svc-dsr.audit/1';

/** Folder of all audit records; a request's records live under `audit/<request_id>/`. */
export const AUDIT_PREFIX = 'audit/';

/**
 * The records that may follow a final record: an operator's action on a failed request, which is
 * still owed an answer (a retry, an extension of its deadline, a denial), opens a new segment of
 * the chain, linked to the final record it follows.
 */
export const SEGMENT_OPENER = {
  step: 'Operator',
  actions: ['request_retried', 'deadline_extended', 'request_denied'],
} as const;

/** Actions of final records a retry may reopen: only a failure is still owed an answer. */
export const REOPENABLE_FINAL_ACTIONS: readonly string[] = ['request_failed'];

/** CCPA record keeping: a per-object retention shorter than this is a configuration mistake. */
export const MINIMUM_RETENTION_MONTHS = 24;

/** An HMAC key shorter than this makes low-entropy identifiers (numeric user ids) guessable. */
export const MINIMUM_HMAC_KEY_LENGTH = 32;

/** Chains kept in memory between appends (a Lambda container serves few requests; local mode, many). */
const CACHED_CHAINS = 1000;

/** How often append re-reads and tries again after another writer took the same key. */
const CONFLICT_RETRIES = 3;
const MAX_FACT_LENGTH = 256;
const MAX_SEQ = 999_999;

/** A request id is a path segment of the key, so it must not contain `/` or anything exotic. */
const REQUEST_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const STEP_PATTERN = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const ACTION_PATTERN = /^[A-Za-z][A-Za-z0-9_.:-]{0,63}$/;
const EVENT_ID_PATTERN = /^[\x21-\x7e]{1,128}$/;
const FACT_KEY_PATTERN = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;
const RECORD_NAME_PATTERN = /^(\d{6})\.json$/;

/**
 * Fact names that would only ever hold an identifier, a credential or a link. Compared in lower
 * case without underscores, so `primaryKey`, `primary_key` and `PRIMARY_KEY` are all caught.
 */
const FORBIDDEN_FACT_KEYS = new Set([
  'primarykey',
  'svcuserid',
  'userid',
  'username',
  'displayname',
  'name',
  'email',
  'emailaddress',
  'token',
  'accesstoken',
  'exporttoken',
  'link',
  'downloadlink',
  'downloadurl',
  'url',
]);

const sha256Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);
const hmacDigest = z.string().regex(/^hmac-sha256:[0-9a-f]{64}$/);

/** Validates a stored audit record (strict: an unknown field is an error). */
export const auditRecordSchema = z.strictObject({
  schema: z.literal(AUDIT_SCHEMA),
  request_id: z.string().regex(REQUEST_ID_PATTERN),
  seq: z.number().int().min(0).max(MAX_SEQ),
  event_id: z.string().regex(EVENT_ID_PATTERN),
  step: z.string().regex(STEP_PATTERN),
  action: z.string().regex(ACTION_PATTERN),
  at: z.iso.datetime(),
  facts: z.record(
    z.string().regex(FACT_KEY_PATTERN),
    z.union([z.string(), z.number(), z.boolean(), z.null()]),
  ),
  subject_hashes: z
    .strictObject({
      primary_key: hmacDigest.optional(),
      svc_user_id: hmacDigest.optional(),
      verified_by: hmacDigest.optional(),
      submitted_by: hmacDigest.optional(),
    })
    .optional(),
  final: z.boolean(),
  prev_hash: sha256Digest.nullable(),
  hash: sha256Digest,
});

/** One stored audit record. */
export type AuditRecord = z.infer<typeof auditRecordSchema>;

/**
 * The subject of a request, as the caller knows it, and the people the intake record names (who
 * verified the identity, who submitted the request): only their HMACs are ever stored, the same
 * keyed hashes the ledger keeps once it is minimised.
 */
export interface AuditSubject {
  readonly primaryKey?: string;
  readonly svcUserId?: string;
  readonly verifiedBy?: string;
  readonly submittedBy?: string;
}

/** What a step appends. `facts` holds only non-personal step facts (export id, status, poll count, archive key, bytes, sha256, outcome, error code...). */
export interface AuditEvent {
  /** Idempotency key, e.g. 'StartExport:attempt-2': appending the same eventId twice returns the existing record and writes nothing. */
  readonly eventId: string;
  /** The workflow step: 'Intake' | 'ResolveSubject' | ... | 'RecordOutcome' | 'RecordFailure'. */
  readonly step: string;
  /** Short verb phrase: 'export_started', 'archive_verified', 'subject_deleted', ... */
  readonly action: string;
  readonly facts: Readonly<Record<string, string | number | boolean | null>>;
  /**
   * Facts whose values are personal data (a correction's old and new profile values): each is
   * stored only as its keyed hash, `hmac-sha256:...` of `profile_value:<value>`, so an auditor with
   * the key can confirm a value without the record holding it.
   */
  readonly hashedFacts?: Readonly<Record<string, string>>;
  /** Hashed with the HMAC key before storage, never stored raw. */
  readonly subject?: AuditSubject;
  /** The request's last record: nothing can be appended after it. */
  readonly final?: boolean;
}

/** Where the records go. */
export interface AuditStore {
  readonly s3: S3Client;
  readonly bucket: string;
  /** SSE-KMS with this key when given; otherwise the bucket default encryption applies. */
  readonly kmsKeyId?: string;
  /** Per-object compliance retention; the bucket's default retention applies when this returns undefined. */
  readonly retainUntil?: (now: Date) => Date | undefined;
}

/** A chain's head: the hash of its last record, how many records it has, and when the last was written. */
export interface AuditHead {
  readonly hash: string;
  readonly count: number;
  readonly at: string;
}

/** Where each chain's head is kept besides the bucket (the ledger), so a cut or rewritten tail shows. */
export interface AuditHeadStore {
  /** Records the head; a head with fewer records than the one kept is ignored (a late writer). */
  recordAuditHead(requestId: string, head: AuditHead): Promise<void>;
}

/** What the trail needs besides the bucket. */
export interface AuditTrailDeps {
  /** Told the new head after every append; verification compares the chain with it. */
  readonly heads?: AuditHeadStore;
  /** The HMAC key for subject hashes; called per use so a rotated secret is picked up. */
  readonly hmacKey: () => Promise<string> | string;
  readonly clock?: () => Date;
}

/** Options of AuditTrail.verify. */
export interface AuditVerifyOptions {
  /** Key to check subject hashes with; defaults to the trail's own key. */
  readonly hmacKey?: string;
  /** When given, every stored hash of a given identifier must match it, and at least one must exist. */
  readonly subject?: AuditSubject;
}

/**
 * The answer of AuditTrail.verify. `at` is the seq of the first record with a problem, or -1 for a
 * problem of the chain as a whole.
 */
export type AuditVerification =
  | {
      readonly ok: true;
      readonly records: number;
      readonly head: string;
      /** Whether the last record is a final record (the request has ended). */
      readonly final: boolean;
      /** The hash of every record by seq, for comparing with heads recorded elsewhere. */
      readonly hashes: readonly string[];
      /** The records themselves, by seq: what they locked, to compare with what the ledger says now. */
      readonly chain: readonly AuditRecord[];
      /**
       * When S3 stored each record, by seq (its LastModified, set by S3, never by the writer), or
       * null when the listing did not say: a record whose own `at` is far from it was written at
       * another time than it claims.
       */
      readonly stored_at: readonly (string | null)[];
    }
  | { readonly ok: false; readonly problem: string; readonly at: number };

/** The HMAC of each identifier the subject carries, under its field name. */
function hashSubject(hmacKey: string, subject: AuditSubject): NonNullable<AuditRecord['subject_hashes']> {
  return {
    ...(subject.primaryKey === undefined
      ? {}
      : { primary_key: subjectHash(hmacKey, 'primary_key', subject.primaryKey) }),
    ...(subject.svcUserId === undefined
      ? {}
      : { svc_user_id: subjectHash(hmacKey, 'svc_user_id', subject.svcUserId) }),
    ...(subject.verifiedBy === undefined
      ? {}
      : { verified_by: subjectHash(hmacKey, 'verified_by', subject.verifiedBy) }),
    ...(subject.submittedBy === undefined
      ? {}
      : { submitted_by: subjectHash(hmacKey, 'submitted_by', subject.submittedBy) }),
  };
}

/**
 * JSON with object keys sorted (by UTF-16 code unit, as RFC 8785) and no whitespace: the exact bytes
 * a record's hash covers. Accepts only what JSON can represent without loss.
 */
export function canonicalJson(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('canonicalJson: numbers must be finite');
      return JSON.stringify(value);
    case 'string':
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item)).join(',')}]`;
      const prototype: unknown = Object.getPrototypeOf(value);
      if (prototype !== Object.prototype && prototype !== null) {
        throw new TypeError('canonicalJson: only plain objects, arrays and primitives can be encoded');
      }
      const members = Object.entries(value)
        .filter(([, item]) => item !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`);
      return `{${members.join(',')}}`;
    }
    default:
      throw new TypeError(`canonicalJson: a ${typeof value} cannot be encoded`);
  }
}

/**
 * `'sha256:' + hex(SHA-256(canonicalJson(value)))`: how a record locks a ledger fact it must not
 * hold in the clear (free text such as a ticket reference or field errors), so that verify can
 * compare the ledger's value with it.
 */
export function factDigest(value: unknown): string {
  return `sha256:${createHash('sha256').update(canonicalJson(value), 'utf8').digest('hex')}`;
}

/** `'sha256:' + hex(SHA-256(canonicalJson(record without its hash field)))`. */
export function recordHash(record: Readonly<Record<string, unknown>>): string {
  const { hash: _ignored, ...covered } = record;
  return `sha256:${createHash('sha256').update(canonicalJson(covered), 'utf8').digest('hex')}`;
}

/**
 * The S3 key of a record: `audit/<request_id>/<seq, 6 digits>.json`. The key depends on the seq
 * alone, so the conditional write lets exactly one writer take each seq and the chain cannot fork.
 */
export function auditRecordKey(requestId: string, seq: number): string {
  return `${requestPrefix(requestId)}${String(seq).padStart(6, '0')}.json`;
}

/**
 * Appends, lists and verifies the hash-chained audit records of each request. Writes are
 * idempotent per eventId and conditional per key, so a retried or doubled Lambda cannot fork a chain.
 */
export class AuditTrail {
  readonly #store: AuditStore;
  readonly #deps: AuditTrailDeps;
  readonly #clock: () => Date;
  readonly #chains = new Map<string, AuditRecord[]>();

  constructor(store: AuditStore, deps: AuditTrailDeps) {
    this.#store = store;
    this.#deps = deps;
    this.#clock = deps.clock ?? (() => new Date());
  }

  /**
   * Appends the event as the request's next record, or returns the record already written for its
   * eventId. `newChain` says the request was created just now, so its chain is taken to be empty
   * without listing the bucket; should it not be, the conditional write fails and the chain is read.
   */
  async append(
    requestId: string,
    event: AuditEvent,
    options: { newChain?: boolean } = {},
  ): Promise<AuditRecord> {
    assertRequestId(requestId);
    assertEvent(event);
    const subjectHashes = event.subject === undefined ? undefined : await this.#subjectHashes(event.subject);
    const hashedFacts = await this.#hashedFacts(event);

    for (let attempt = 0; ; attempt++) {
      // A chain this trail wrote last is read from memory; should another writer have appended
      // meanwhile, the conditional write fails and the loop re-reads the bucket.
      const cached =
        attempt === 0
          ? (this.#chains.get(requestId) ?? (options.newChain === true ? [] : undefined))
          : undefined;
      const records = cached ?? (await this.list(requestId));
      const existing = records.find((record) => record.event_id === event.eventId);
      const last = records.at(-1);
      if (existing !== undefined) {
        // A re-run after a write whose head update was lost (the process died between them) catches up.
        if (last !== undefined) await this.#recordHead(last);
        return existing;
      }
      if (last?.final === true && !opensSegmentAfter(event, last)) {
        // The chain this trail remembers may have been reopened since by another writer (a retry
        // from the CLI): only the bucket can say it is closed.
        if (cached !== undefined) {
          this.#chains.delete(requestId);
          const fresh = (await this.list(requestId)).at(-1);
          if (fresh?.final !== true || opensSegmentAfter(event, fresh)) continue;
        }
        throw new AuditChainClosedError(
          `audit: request ${requestId} is closed by its final record (seq ${last.seq}, ${last.action}); event ${event.eventId} was not appended`,
        );
      }
      const seq = last === undefined ? 0 : last.seq + 1;
      if (seq > MAX_SEQ)
        throw new AuditEventRefusedError(`audit: request ${requestId} has reached ${MAX_SEQ} records`);

      const now = this.#clock();
      const record = sealRecord({
        schema: AUDIT_SCHEMA,
        request_id: requestId,
        seq,
        event_id: event.eventId,
        step: event.step,
        action: event.action,
        at: now.toISOString(),
        facts: { ...event.facts, ...hashedFacts },
        ...(subjectHashes === undefined ? {} : { subject_hashes: subjectHashes }),
        final: event.final === true,
        prev_hash: last === undefined ? null : last.hash,
      });
      try {
        await this.#put(record, now);
        this.#remember(requestId, [...records, record]);
        await this.#recordHead(record);
        return record;
      } catch (error) {
        this.#chains.delete(requestId);
        if (!isWriteConflict(error)) throw error;
        if (attempt >= CONFLICT_RETRIES) {
          throw new AuditWriteConflictError(
            `audit: request ${requestId} kept losing the race for its next record after ${CONFLICT_RETRIES} retries`,
            { cause: error },
          );
        }
      }
    }
  }

  async #recordHead(record: AuditRecord): Promise<void> {
    await this.#deps.heads?.recordAuditHead(record.request_id, {
      hash: record.hash,
      count: record.seq + 1,
      at: record.at,
    });
  }

  /** The request's records in sequence order; throws when a stored object is not a valid record. */
  async list(requestId: string): Promise<AuditRecord[]> {
    assertRequestId(requestId);
    const objects = await this.#readObjects(requestId);
    const records = objects.map((object) => {
      const checked = checkObject(requestId, object);
      if (!checked.ok) throw new AuditRecordInvalidError(`audit: ${object.key} ${checked.problem}`);
      return checked.record;
    });
    this.#remember(requestId, records);
    return records;
  }

  /** How many chains it holds in memory: open ones only, at most {@link CACHED_CHAINS}. */
  get chainsInMemory(): number {
    return this.#chains.size;
  }

  /**
   * Keeps the chains this trail read or wrote last, so the next append need not re-read them. A
   * chain closed by its final record is not kept: little is appended to it after (a retry's new
   * segment, which reads the bucket first anyway), and a long local run would keep every request's.
   */
  #remember(requestId: string, records: AuditRecord[]): void {
    this.#chains.delete(requestId);
    if (records.at(-1)?.final === true) return;
    this.#chains.set(requestId, records);
    if (this.#chains.size > CACHED_CHAINS) {
      const oldest = this.#chains.keys().next();
      if (!oldest.done) this.#chains.delete(oldest.value);
    }
  }

  /**
   * Recomputes every hash and link of the request's chain and checks seq continuity, request ids,
   * the final record and (optionally) the subject hashes. Reports the first problem found.
   */
  async verify(requestId: string, options: AuditVerifyOptions = {}): Promise<AuditVerification> {
    assertRequestId(requestId);
    const objects = await this.#readObjects(requestId);
    if (objects.length === 0) return { ok: false, problem: 'no audit records for this request', at: 0 };

    const expected = await this.#expectedSubjectHashes(options);
    const seen = { primary_key: false, svc_user_id: false };
    const hashes: string[] = [];
    const chain: AuditRecord[] = [];
    const storedAt: (string | null)[] = [];
    let previous: AuditRecord | undefined;

    for (const [index, object] of objects.entries()) {
      const name = parseRecordName(requestId, object.key);
      if (name === undefined) return { ok: false, problem: `unexpected object ${object.key}`, at: index };
      if (name.seq < index)
        return { ok: false, problem: `more than one record has seq ${name.seq}`, at: name.seq };
      if (name.seq > index) return { ok: false, problem: `record ${index} is missing`, at: index };

      const checked = checkObject(requestId, object);
      if (!checked.ok) return { ok: false, problem: checked.problem, at: index };
      const record = checked.record;

      if (previous?.final === true && !opensSegmentAfter(record, previous)) {
        return {
          ok: false,
          problem: `a record follows the final record ${previous.seq} (only an operator's retry of a failure may)`,
          at: index,
        };
      }
      const expectedPrev = previous === undefined ? null : previous.hash;
      if (record.prev_hash !== expectedPrev) {
        return {
          ok: false,
          problem:
            previous === undefined
              ? 'the first record has a prev_hash'
              : `prev_hash does not match the hash of record ${previous.seq}`,
          at: index,
        };
      }
      for (const kind of ['primary_key', 'svc_user_id'] as const) {
        const stored = record.subject_hashes?.[kind];
        const wanted = expected[kind];
        if (stored === undefined || wanted === undefined) continue;
        seen[kind] = true;
        if (stored !== wanted) {
          return { ok: false, problem: `the ${kind} hash does not match the given subject`, at: index };
        }
      }
      hashes.push(record.hash);
      chain.push(record);
      storedAt.push(object.storedAt ?? null);
      previous = record;
    }

    for (const kind of ['primary_key', 'svc_user_id'] as const) {
      if (expected[kind] !== undefined && !seen[kind]) {
        return { ok: false, problem: `no record carries a ${kind} hash to compare`, at: -1 };
      }
    }
    return {
      ok: true,
      records: objects.length,
      head: previous?.hash ?? '',
      final: previous?.final === true,
      hashes,
      chain,
      stored_at: storedAt,
    };
  }

  async #put(record: AuditRecord, now: Date): Promise<void> {
    // Pretty-printed for people who open the bucket; the hash covers the canonical form, not these bytes.
    const body = `${JSON.stringify(record, null, 2)}\n`;
    const retainUntil = this.#retainUntil(now);
    await this.#store.s3.send(
      new PutObjectCommand({
        Bucket: this.#store.bucket,
        Key: auditRecordKey(record.request_id, record.seq),
        Body: body,
        ContentType: 'application/json',
        // Two writers racing for the same key: exactly one wins, the other re-reads the chain.
        IfNoneMatch: '*',
        ChecksumAlgorithm: 'SHA256',
        ChecksumSHA256: createHash('sha256').update(body, 'utf8').digest('base64'),
        ...(this.#store.kmsKeyId === undefined
          ? {}
          : { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: this.#store.kmsKeyId }),
        ...(retainUntil === undefined
          ? {}
          : { ObjectLockMode: 'COMPLIANCE', ObjectLockRetainUntilDate: retainUntil }),
      }),
    );
  }

  #retainUntil(now: Date): Date | undefined {
    const until = this.#store.retainUntil?.(now);
    if (until === undefined) return undefined;
    const minimum = new Date(now);
    minimum.setUTCMonth(minimum.getUTCMonth() + MINIMUM_RETENTION_MONTHS);
    if (Number.isNaN(until.getTime()) || until.getTime() < minimum.getTime()) {
      throw new ConfigurationError(
        `audit: retainUntil gave ${String(until)}, expected a date at least ${MINIMUM_RETENTION_MONTHS} months after the write; return undefined to use the bucket default retention`,
      );
    }
    return until;
  }

  async #hmacKey(override?: string): Promise<string> {
    const key = override ?? (await this.#deps.hmacKey());
    if (typeof key !== 'string' || key.length < MINIMUM_HMAC_KEY_LENGTH) {
      throw new ConfigurationError(
        `audit: the HMAC key must be a string of at least ${MINIMUM_HMAC_KEY_LENGTH} characters; check the audit HMAC secret`,
      );
    }
    return key;
  }

  async #hashedFacts(event: AuditEvent): Promise<Record<string, string>> {
    const entries = Object.entries(event.hashedFacts ?? {});
    if (entries.length === 0) return {};
    const key = await this.#hmacKey();
    return Object.fromEntries(
      entries.map(([name, value]) => [name, subjectHash(key, 'profile_value', value)]),
    );
  }

  async #subjectHashes(subject: AuditSubject): Promise<AuditRecord['subject_hashes']> {
    if (subject.primaryKey === '' || subject.svcUserId === '') {
      throw new AuditEventRefusedError('audit: a subject identifier is empty');
    }
    if (Object.values(subject).every((value) => value === undefined)) return undefined;
    return hashSubject(await this.#hmacKey(), subject);
  }

  async #expectedSubjectHashes(
    options: AuditVerifyOptions,
  ): Promise<{ primary_key?: string; svc_user_id?: string }> {
    const subject = options.subject;
    if (subject === undefined || (subject.primaryKey === undefined && subject.svcUserId === undefined)) {
      return {};
    }
    return hashSubject(await this.#hmacKey(options.hmacKey), subject);
  }

  /** Every object under the request's prefix, in key order (which is seq order). */
  async #readObjects(requestId: string): Promise<StoredObject[]> {
    const { s3, bucket } = this.#store;
    const prefix = requestPrefix(requestId);
    const listed = await listStoredKeys(s3, bucket, prefix);
    // Chains are tens of records, so reading them all at once is cheap.
    return Promise.all(
      listed.map(async ({ key, storedAt }) => {
        const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        return { key, storedAt, body: (await answer.Body?.transformToString('utf-8')) ?? '' };
      }),
    );
  }
}

interface StoredObject {
  readonly key: string;
  readonly body: string;
  /** The object's LastModified (ISO), when the listing gave it. */
  readonly storedAt?: string;
}

/** An object of a listing: its key and when S3 stored it (LastModified), in key order. */
export interface StoredKey {
  readonly key: string;
  readonly storedAt?: string;
}

/** Every key under `prefix` with its LastModified, in key order (ListObjectsV2, paginated). */
export async function listStoredKeys(s3: S3Client, bucket: string, prefix: string): Promise<StoredKey[]> {
  const keys: StoredKey[] = [];
  let continuationToken: string | undefined;
  do {
    const page = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: continuationToken }),
    );
    for (const object of page.Contents ?? []) {
      if (object.Key === undefined) continue;
      const storedAt = object.LastModified?.toISOString();
      keys.push({ key: object.Key, ...(storedAt === undefined ? {} : { storedAt }) });
    }
    continuationToken = page.IsTruncated === true ? page.NextContinuationToken : undefined;
  } while (continuationToken !== undefined);
  return keys.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/**
 * The chain id and seq of a record key (`audit/<chain id>/<seq>.json`), or undefined for any other
 * key: how a listing of the whole bucket is read chain by chain.
 */
export function parseRecordKey(key: string): { chainId: string; seq: number } | undefined {
  if (!key.startsWith(AUDIT_PREFIX)) return undefined;
  const [chainId, name, ...rest] = key.slice(AUDIT_PREFIX.length).split('/');
  if (chainId === undefined || name === undefined || rest.length > 0 || !REQUEST_ID_PATTERN.test(chainId))
    return undefined;
  const [, seq] = RECORD_NAME_PATTERN.exec(name) ?? [];
  return seq === undefined ? undefined : { chainId, seq: Number(seq) };
}

/**
 * Parses a stored record and checks it against its key and its own hash (not its links): what the
 * daily manifest reads of each record it locks.
 */
export function checkStoredRecord(
  key: string,
  body: string,
): { ok: true; record: AuditRecord } | { ok: false; problem: string } {
  const parsed = parseRecordKey(key);
  if (parsed === undefined) return { ok: false, problem: 'is not named like an audit record' };
  return checkObject(parsed.chainId, { key, body });
}

type CheckedObject = { ok: true; record: AuditRecord } | { ok: false; problem: string };

const jsonObjectSchema = z.record(z.string(), z.unknown());

/** Parses one stored object and checks it against its own key and hash. */
function checkObject(requestId: string, object: StoredObject): CheckedObject {
  const name = parseRecordName(requestId, object.key);
  if (name === undefined) return { ok: false, problem: 'is not named like an audit record' };
  let raw: unknown;
  try {
    raw = JSON.parse(object.body);
  } catch {
    return { ok: false, problem: 'is not valid JSON' };
  }
  const parsed = auditRecordSchema.safeParse(raw);
  const asObject = jsonObjectSchema.safeParse(raw);
  if (!parsed.success || !asObject.success) {
    const fields = parsed.success ? [] : parsed.error.issues.map((issue) => issue.path.join('.') || '(root)');
    return { ok: false, problem: `does not match ${AUDIT_SCHEMA} (${[...new Set(fields)].join(', ')})` };
  }
  const record = parsed.data;
  if (record.request_id !== requestId) return { ok: false, problem: 'belongs to another request' };
  if (record.seq !== name.seq)
    return { ok: false, problem: `holds seq ${record.seq} under a key for ${name.seq}` };
  // Hash what was stored, not zod's copy of it, so nothing can hide in a field the schema drops.
  if (recordHash(asObject.data) !== record.hash) {
    return { ok: false, problem: 'hash does not match the record content' };
  }
  return { ok: true, record };
}

function parseRecordName(requestId: string, key: string): { seq: number } | undefined {
  const prefix = requestPrefix(requestId);
  if (!key.startsWith(prefix)) return undefined;
  const [, seq] = RECORD_NAME_PATTERN.exec(key.slice(prefix.length)) ?? [];
  return seq === undefined ? undefined : { seq: Number(seq) };
}

/**
 * Whether `next` may follow the final record `final`: an operator's action on a failed request
 * (SEGMENT_OPENER). `next` is an event being appended or a stored record.
 */
function opensSegmentAfter(next: { step: string; action: string }, final: AuditRecord): boolean {
  return (
    next.step === SEGMENT_OPENER.step &&
    (SEGMENT_OPENER.actions as readonly string[]).includes(next.action) &&
    REOPENABLE_FINAL_ACTIONS.includes(final.action)
  );
}

function sealRecord(unsealed: Omit<AuditRecord, 'hash'>): AuditRecord {
  return auditRecordSchema.parse({ ...unsealed, hash: recordHash(unsealed) });
}

function requestPrefix(requestId: string): string {
  return `${AUDIT_PREFIX}${requestId}/`;
}

function assertRequestId(requestId: string): void {
  if (!REQUEST_ID_PATTERN.test(requestId)) {
    throw new AuditEventRefusedError('audit: the request id must be 1-128 letters, digits, ".", "_" or "-"');
  }
}

/** The guard that keeps personal data, credentials and links out of records nobody can delete. */
function assertEvent(event: AuditEvent): void {
  const problem = auditEventProblem(event);
  if (problem !== undefined) throw new AuditEventRefusedError(`audit: ${problem}`);
}

/**
 * What the trail would refuse about `event`, or undefined when it can be appended. Callers that
 * must not fail after a first write (intake) ask this before it.
 */
export function auditEventProblem(event: AuditEvent): string | undefined {
  if (!EVENT_ID_PATTERN.test(event.eventId) || identifierProblem(event.eventId) !== undefined) {
    return 'eventId must be 1-128 printable characters without spaces and not an e-mail';
  }
  if (!STEP_PATTERN.test(event.step)) {
    return 'step must be a name of letters, digits, "_" or "-" (it is part of the key)';
  }
  if (!ACTION_PATTERN.test(event.action)) return 'action must be a short word such as export_started';
  for (const [key, value] of Object.entries(event.facts)) {
    if (!FACT_KEY_PATTERN.test(key)) return `fact name "${key.slice(0, 64)}" must be letters, digits and "_"`;
    if (FORBIDDEN_FACT_KEYS.has(key.toLowerCase().replaceAll('_', ''))) {
      return `fact "${key}" would hold an identifier, a credential or a link; use subject instead`;
    }
    if (typeof value === 'number' && !Number.isFinite(value)) return `fact "${key}" must be a finite number`;
    if (typeof value !== 'string') continue;
    if (value.length > MAX_FACT_LENGTH) return `fact "${key}" is longer than ${MAX_FACT_LENGTH} characters`;
    const identifier = identifierProblem(value);
    if (identifier !== undefined) {
      return `fact "${key}" ${identifier}; audit facts must not hold personal data, credentials or links`;
    }
  }
  for (const key of Object.keys(event.hashedFacts ?? {})) {
    if (!FACT_KEY_PATTERN.test(key)) return `fact name "${key.slice(0, 64)}" must be letters, digits and "_"`;
    if (Object.hasOwn(event.facts, key)) return `fact "${key}" is given both plain and hashed`;
  }
  return undefined;
}

const writeConflictSchema = z.object({
  name: z.string(),
  $metadata: z.object({ httpStatusCode: z.number().optional() }).optional(),
});

/** True when S3 refused the write because the key exists or another conditional write was in flight. */
export function isWriteConflict(error: unknown): boolean {
  const parsed = writeConflictSchema.safeParse(error);
  if (!parsed.success) return false;
  const { name, $metadata } = parsed.data;
  return (
    name === 'PreconditionFailed' ||
    name === 'ConditionalRequestConflict' ||
    $metadata?.httpStatusCode === 412
  );
}
