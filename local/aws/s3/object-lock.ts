/**
 * Object Lock as S3 enforces it, version by version: a version under retention (until its
 * retain-until date) or under a legal hold cannot be deleted by its version id; a write or a DELETE
 * without one adds a version or a delete marker and leaves it in place. COMPLIANCE retention cannot
 * be shortened or loosened by anyone, GOVERNANCE only with `x-amz-bypass-governance-retention`. The
 * bucket's default retention is stamped on each version written without retention of its own, as
 * S3 does.
 */
import type { IncomingMessage } from 'node:http';
import { header, readSmallBody } from './bodies.ts';
import { invalidRequest, malformedXml, S3Failure } from './errors.ts';
import { XMLNS } from './limits.ts';
import { parseVersionId } from './objects.ts';
import { allowQuery, type Call, element, sendEmpty, sendXml } from './protocol.ts';
import type { BucketSettings, ObjectVersion } from './records.ts';
import { requireObject } from './store.ts';

const MODE = 'x-amz-object-lock-mode';
const RETAIN_UNTIL = 'x-amz-object-lock-retain-until-date';
const LEGAL_HOLD = 'x-amz-object-lock-legal-hold';
const DAY_MS = 24 * 3600 * 1000;

export const objectLocked = () =>
  new S3Failure(403, 'AccessDenied', 'Access Denied because object protected by object lock.');
const missingLockConfiguration = () => invalidRequest('Bucket is missing Object Lock Configuration');
const noObjectLockConfiguration = () =>
  new S3Failure(
    404,
    'NoSuchObjectLockConfiguration',
    'The specified object does not have a ObjectLock configuration',
  );

/** Whether the request asks to lift GOVERNANCE retention (S3 also checks s3:BypassGovernanceRetention). */
export function bypassesGovernance(req: IncomingMessage): boolean {
  return header(req, 'x-amz-bypass-governance-retention')?.toLowerCase() === 'true';
}

/** The headers without the version's lock: what a new version made from it starts with. */
export function withoutLock(headers: Readonly<Record<string, string>>): Record<string, string> {
  const { [MODE]: _mode, [RETAIN_UNTIL]: _until, [LEGAL_HOLD]: _hold, ...rest } = headers;
  return rest;
}

/** Refuses the permanent delete (or replacement) of `current` while it is under retention or a legal hold. */
export function refuseIfLocked(
  current: ObjectVersion | undefined,
  override: { readonly bypassGovernance?: boolean },
  now: number,
): void {
  if (current === undefined) return;
  if (current.headers[LEGAL_HOLD] === 'ON') throw objectLocked();
  const mode = current.headers[MODE];
  const until = Date.parse(current.headers[RETAIN_UNTIL] ?? '');
  if (mode === undefined || Number.isNaN(until) || until <= now) return;
  if (mode === 'GOVERNANCE' && override.bypassGovernance === true) return;
  throw objectLocked();
}

/**
 * The lock headers a new object is stored with: its own, checked against the bucket, or the
 * bucket's default retention counted from `now`.
 */
export function lockHeadersFor(
  settings: BucketSettings,
  given: Readonly<Record<string, string>>,
  now: number,
): Record<string, string> {
  const mode = given[MODE];
  const until = given[RETAIN_UNTIL];
  const hold = given[LEGAL_HOLD];
  if (mode !== undefined || until !== undefined || hold !== undefined) {
    if (settings.objectLock === undefined) throw missingLockConfiguration();
    if ((mode === undefined) !== (until === undefined)) {
      throw invalidRequest(
        'x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied',
      );
    }
    if (mode !== undefined && mode !== 'COMPLIANCE' && mode !== 'GOVERNANCE')
      throw invalidRequest('Unknown wormMode directive.');
    if (until !== undefined && !(Date.parse(until) > now))
      throw invalidRequest('The retain until date must be in the future!');
    if (hold !== undefined && hold !== 'ON' && hold !== 'OFF')
      throw invalidRequest('Unknown legal hold status.');
    return {};
  }
  const retention = settings.objectLock?.defaultRetention;
  if (retention === undefined) return {};
  return { [MODE]: retention.mode, [RETAIN_UNTIL]: new Date(now + retention.days * DAY_MS).toISOString() };
}

async function requireLockedBucket(call: Call): Promise<BucketSettings> {
  const settings = await call.store.settings(call.bucket);
  if (settings.objectLock === undefined) throw missingLockConfiguration();
  return settings;
}

function isoDate(text: string): string {
  const time = Date.parse(text);
  return Number.isNaN(time) ? text : new Date(time).toISOString();
}

export async function getObjectRetention(call: Call, key: string) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['retention', 'versionId']);
  const versionId = parseVersionId(query);
  await requireLockedBucket(call);
  const meta = await store.version(bucket, key, versionId);
  requireObject(meta, versionId);
  const mode = meta.headers[MODE];
  const until = meta.headers[RETAIN_UNTIL];
  if (mode === undefined || until === undefined) throw noObjectLockConfiguration();
  sendXml(
    res,
    200,
    `<Retention xmlns="${XMLNS}">${element('Mode', mode)}${element('RetainUntilDate', isoDate(until))}</Retention>`,
  );
}

/** Sets or extends retention; shortening or loosening COMPLIANCE is refused, GOVERNANCE needs the bypass. */
export async function putObjectRetention(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['retention', 'versionId']);
  const versionId = parseVersionId(query);
  await requireLockedBucket(call);
  const body = await readSmallBody(req);
  const mode = /<Mode>([^<]*)<\/Mode>/.exec(body)?.[1];
  const untilText = /<RetainUntilDate>([^<]*)<\/RetainUntilDate>/.exec(body)?.[1];
  if (!/<Retention[\s>/]/.test(body)) throw malformedXml();
  if (mode !== undefined && mode !== 'COMPLIANCE' && mode !== 'GOVERNANCE') throw malformedXml();
  const until = untilText === undefined ? Number.NaN : Date.parse(untilText);
  if (untilText !== undefined && Number.isNaN(until)) throw malformedXml();
  const now = store.clock().getTime();
  if (!Number.isNaN(until) && until <= now)
    throw invalidRequest('The retain until date must be in the future!');
  const bypass = bypassesGovernance(req);
  await store.changeHeaders(bucket, key, versionId, (meta) => {
    const currentMode = meta.headers[MODE];
    const currentUntil = Date.parse(meta.headers[RETAIN_UNTIL] ?? '');
    const active = currentMode !== undefined && !Number.isNaN(currentUntil) && currentUntil > now;
    const loosens = mode !== currentMode || Number.isNaN(until) || until < currentUntil;
    if (active && loosens && (currentMode === 'COMPLIANCE' || !bypass)) throw objectLocked();
    const { [MODE]: _mode, [RETAIN_UNTIL]: _until, ...rest } = meta.headers;
    return mode === undefined || untilText === undefined
      ? rest
      : { ...rest, [MODE]: mode, [RETAIN_UNTIL]: new Date(until).toISOString() };
  });
  sendEmpty(res, 200);
}

export async function getObjectLegalHold(call: Call, key: string) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['legal-hold', 'versionId']);
  const versionId = parseVersionId(query);
  await requireLockedBucket(call);
  const meta = await store.version(bucket, key, versionId);
  requireObject(meta, versionId);
  const status = meta.headers[LEGAL_HOLD];
  if (status === undefined) throw noObjectLockConfiguration();
  sendXml(res, 200, `<LegalHold xmlns="${XMLNS}">${element('Status', status)}</LegalHold>`);
}

export async function putObjectLegalHold(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['legal-hold', 'versionId']);
  const versionId = parseVersionId(query);
  await requireLockedBucket(call);
  const status = /<Status>([^<]*)<\/Status>/.exec(await readSmallBody(req))?.[1];
  if (status !== 'ON' && status !== 'OFF') throw malformedXml();
  await store.changeHeaders(bucket, key, versionId, (meta) => ({ ...meta.headers, [LEGAL_HOLD]: status }));
  sendEmpty(res, 200);
}

export async function getObjectLockConfiguration(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['object-lock']);
  const lock = (await store.settings(bucket)).objectLock;
  if (lock === undefined) {
    throw new S3Failure(
      404,
      'ObjectLockConfigurationNotFoundError',
      'Object Lock configuration does not exist for this bucket',
    );
  }
  const retention = lock.defaultRetention;
  const rule =
    retention === undefined
      ? ''
      : `<Rule><DefaultRetention>${element('Mode', retention.mode)}${element('Days', retention.days)}</DefaultRetention></Rule>`;
  sendXml(
    res,
    200,
    `<ObjectLockConfiguration xmlns="${XMLNS}">${element('ObjectLockEnabled', 'Enabled')}${rule}</ObjectLockConfiguration>`,
  );
}

/** Turns Object Lock on (on a versioned bucket) and sets its default retention, in days. */
export async function putObjectLockConfiguration(call: Call) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['object-lock']);
  const settings = await store.settings(bucket);
  const body = await readSmallBody(req);
  if (!/<ObjectLockEnabled>Enabled<\/ObjectLockEnabled>/.test(body)) throw malformedXml();
  if (settings.objectLock === undefined && settings.versioning !== 'Enabled') {
    throw new S3Failure(
      409,
      'InvalidBucketState',
      'Versioning must be Enabled on the bucket to apply a Object Lock configuration',
    );
  }
  const mode = /<Mode>([^<]*)<\/Mode>/.exec(body)?.[1];
  const days = /<Days>([^<]*)<\/Days>/.exec(body)?.[1];
  const years = /<Years>([^<]*)<\/Years>/.exec(body)?.[1];
  let defaultRetention: { mode: 'COMPLIANCE' | 'GOVERNANCE'; days: number } | undefined;
  if (mode !== undefined) {
    if (mode !== 'COMPLIANCE' && mode !== 'GOVERNANCE') throw malformedXml();
    const count = Number(days ?? years);
    if ((days === undefined) === (years === undefined) || !Number.isInteger(count) || count <= 0)
      throw malformedXml();
    defaultRetention = { mode, days: days === undefined ? count * 365 : count };
  }
  await store.changeSettings(bucket, (current) => ({
    ...current,
    versioning: 'Enabled',
    objectLock: defaultRetention === undefined ? {} : { defaultRetention },
  }));
  sendEmpty(res, 200);
}
