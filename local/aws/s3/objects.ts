/** Object operations: PUT (with If-None-Match), GET and HEAD (with ranges), DELETE, each by version as S3 has them. */
import { rm } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { header, parseLength, receiveBody } from './bodies.ts';
import { invalidArgument, notImplemented, preconditionFailed, S3Failure } from './errors.ts';
import { checksumHeaders, pick, SSE_HEADERS, storedHeaders } from './headers.ts';
import { etagListMatches } from './keys.ts';
import { BUFFERED_BODY_BYTES, NULL_VERSION, VERSION_ID, XMLNS } from './limits.ts';
import { bypassesGovernance, lockHeadersFor } from './object-lock.ts';
import { allowQuery, type Call, element, sendEmpty, sendXml } from './protocol.ts';
import type { BucketSettings, ObjectVersion } from './records.ts';
import { checkWriteCondition, type NewVersion, requireObject, type WriteCondition } from './store.ts';

export function writeCondition(req: IncomingMessage): WriteCondition {
  const ifNoneMatch = header(req, 'if-none-match')?.trim();
  const ifMatch = header(req, 'if-match')?.trim();
  if (ifNoneMatch !== undefined && ifNoneMatch !== '*')
    throw notImplemented('If-None-Match other than * on a write');
  return {
    ...(ifNoneMatch === undefined ? {} : { ifNoneMatch }),
    ...(ifMatch === undefined ? {} : { ifMatch }),
  };
}

export async function putObject(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, []);
  await store.requireBucket(bucket);
  const condition = { ...writeCondition(req), bypassGovernance: bypassesGovernance(req) };
  const given = storedHeaders(req);
  const settings = await store.settings(bucket);
  // Retention counts from the version's creation, by the stand-in's clock.
  const headers = { ...given, ...lockHeadersFor(settings, given, store.clock().getTime()) };
  // Answer a lost race before a large body is read; the commit checks again in case of a tie.
  const small =
    (parseLength(header(req, 'content-length')) ?? Number.POSITIVE_INFINITY) <= BUFFERED_BODY_BYTES;
  if (!small && (condition.ifNoneMatch !== undefined || condition.ifMatch !== undefined)) {
    checkWriteCondition(await store.current(bucket, key), condition);
  }
  const received = await receiveBody(req, store.tempPath(), undefined, store.syncWrites);
  const checksum =
    received.sent === undefined ? undefined : { ...received.sent, type: 'FULL_OBJECT' as const };
  const fields: NewVersion = {
    etag: `"${received.md5.toString('hex')}"`,
    size: received.size,
    headers,
    ...(checksum === undefined ? {} : { checksum }),
  };
  let version: ObjectVersion;
  try {
    version = await store.commit(bucket, key, received.path, fields, condition);
  } catch (error) {
    await rm(received.path, { force: true });
    throw error;
  }
  sendEmpty(res, 200, {
    etag: version.etag,
    ...versionHeader(settings, version.versionId),
    ...checksumHeaders(checksum),
    ...pick(headers, SSE_HEADERS),
  });
}

/**
 * `x-amz-version-id` as S3 sends it: in a bucket whose versioning was ever set ("null" for a
 * version written while it was suspended), never in one that never had it.
 */
export function versionHeader(settings: BucketSettings, versionId: string): Record<string, string> {
  return settings.versioning === undefined ? {} : { 'x-amz-version-id': versionId };
}

/** The byte range a Range header asks for, or undefined to send the whole object. */
function parseRange(value: string | undefined, size: number): { start: number; end: number } | undefined {
  const match = value === undefined ? null : /^bytes=(\d*)-(\d*)$/.exec(value.trim());
  // Like S3, a Range it cannot parse (several ranges, other units) is ignored.
  if (match === null) return undefined;
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return undefined;
  const unsatisfiable = new S3Failure(416, 'InvalidRange', 'The requested range is not satisfiable', {
    'content-range': `bytes */${size}`,
  });
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0 || size === 0) throw unsatisfiable;
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  if (last !== '' && Number(last) < start) return undefined;
  if (start >= size) throw unsatisfiable;
  return { start, end };
}

const RESPONSE_OVERRIDES = [
  'response-content-type',
  'response-content-language',
  'response-expires',
  'response-cache-control',
  'response-content-disposition',
  'response-content-encoding',
];

/** The `versionId` a request names: undefined without one, "null", or an id this store gives. */
export function parseVersionId(query: URLSearchParams): string | undefined {
  const versionId = query.get('versionId');
  if (versionId === null) return undefined;
  if (versionId !== NULL_VERSION && !VERSION_ID.test(versionId))
    throw invalidArgument('Invalid version id specified');
  return versionId;
}

export async function getObject(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, [...RESPONSE_OVERRIDES, 'versionId']);
  const versionId = parseVersionId(query);
  await store.requireBucket(bucket);
  const settings = await store.settings(bucket);
  const opened = await store.open(bucket, key, versionId);
  const meta = opened?.version;
  requireObject(meta, versionId);
  const handle = opened?.handle;
  if (handle === undefined) throw new Error('an object version opened without its bytes');
  let streaming = false;
  try {
    const ifMatch = header(req, 'if-match');
    const ifNoneMatch = header(req, 'if-none-match');
    if (ifMatch !== undefined && !etagListMatches(ifMatch, meta.etag)) throw preconditionFailed();
    const lastModified = new Date(meta.lastModified).toUTCString();
    if (ifNoneMatch !== undefined && etagListMatches(ifNoneMatch, meta.etag)) {
      res.writeHead(304, { etag: meta.etag, 'last-modified': lastModified });
      res.end();
      return;
    }
    const range = parseRange(header(req, 'range'), meta.size);
    const headers: Record<string, string | number> = {
      ...meta.headers,
      etag: meta.etag,
      'last-modified': lastModified,
      ...versionHeader(settings, meta.versionId),
      'accept-ranges': 'bytes',
      'content-length': range === undefined ? meta.size : range.end - range.start + 1,
      ...(meta.parts === undefined ? {} : { 'x-amz-mp-parts-count': String(meta.parts) }),
      // Like S3, a checksum comes only when asked for, and only for the whole object.
      ...(range === undefined && header(req, 'x-amz-checksum-mode')?.toUpperCase() === 'ENABLED'
        ? checksumHeaders(meta.checksum)
        : {}),
      ...(range === undefined ? {} : { 'content-range': `bytes ${range.start}-${range.end}/${meta.size}` }),
    };
    for (const name of RESPONSE_OVERRIDES) {
      const value = query.get(name);
      if (value !== null) headers[name.slice('response-'.length)] = value;
    }
    res.writeHead(range === undefined ? 200 : 206, headers);
    if (req.method === 'HEAD' || meta.size === 0) {
      res.end();
      return;
    }
    streaming = true;
    await pipeline(
      handle.createReadStream({
        start: range?.start ?? 0,
        end: range?.end ?? meta.size - 1,
        autoClose: true,
      }),
      res,
    );
  } finally {
    if (!streaming) await handle.close();
  }
}

/**
 * DeleteObject, by version as S3 has it (see DiskStore.remove): a locked version is refused
 * (AccessDenied) only when named by its id.
 */
export async function deleteObject(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['versionId']);
  const versionId = parseVersionId(query);
  const removed = await store.remove(bucket, key, versionId, { bypassGovernance: bypassesGovernance(req) });
  sendEmpty(res, 204, {
    ...(removed.versionId === undefined ? {} : { 'x-amz-version-id': removed.versionId }),
    ...(removed.deleteMarker === true ? { 'x-amz-delete-marker': 'true' } : {}),
  });
}

/** The tags the version was written with (`x-amz-tagging`, a URL query string), as a TagSet. */
export async function getObjectTagging(call: Call, key: string) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['tagging', 'versionId']);
  const versionId = parseVersionId(query);
  await store.requireBucket(bucket);
  const meta = await store.version(bucket, key, versionId);
  requireObject(meta, versionId);
  const tags = [...new URLSearchParams(meta.headers['x-amz-tagging'] ?? '')]
    .map(([name, value]) => `<Tag>${element('Key', name)}${element('Value', value)}</Tag>`)
    .join('');
  sendXml(
    res,
    200,
    `<Tagging xmlns="${XMLNS}"><TagSet>${tags}</TagSet></Tagging>`,
    versionHeader(await store.settings(bucket), meta.versionId),
  );
}
