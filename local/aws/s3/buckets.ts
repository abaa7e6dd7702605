/** Bucket operations: create, head, delete, list objects, and the settings S3 accepts. */
import { readSmallBody } from './bodies.ts';
import { invalidArgument, malformedXml, notImplemented } from './errors.ts';
import { MAX_LIST_KEYS, XMLNS } from './limits.ts';
import { allowQuery, type Call, element, sendEmpty, sendXml } from './protocol.ts';
import type { ObjectMeta } from './records.ts';

export async function createBucket(call: Call) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, []);
  await readSmallBody(req);
  await store.createBucket(bucket);
  sendEmpty(res, 200, { location: `/${bucket}` });
}

export async function headBucket(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, []);
  await store.requireBucket(bucket);
  sendEmpty(res, 200, { 'x-amz-bucket-region': 'us-east-1' });
}

/** Accepted so local setup runs unchanged; objects keep no versions (see the module comment). */
export async function putBucketVersioning(call: Call) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['versioning']);
  await store.requireBucket(bucket);
  const body = await readSmallBody(req);
  const status = /<Status>([^<]*)<\/Status>/.exec(body)?.[1];
  if (
    !/<VersioningConfiguration[\s>/]/.test(body) ||
    (status !== undefined && !['Enabled', 'Suspended'].includes(status))
  ) {
    throw malformedXml();
  }
  sendEmpty(res, 200);
}

export async function getBucketVersioning(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versioning']);
  await store.requireBucket(bucket);
  sendXml(res, 200, `<VersioningConfiguration xmlns="${XMLNS}"/>`);
}

export async function listObjectsV2(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, [
    'list-type',
    'prefix',
    'delimiter',
    'max-keys',
    'continuation-token',
    'start-after',
    'fetch-owner',
    'encoding-type',
  ]);
  await store.requireBucket(bucket);
  if (query.has('encoding-type')) throw notImplemented('The encoding-type parameter');
  const prefix = query.get('prefix') ?? '';
  const delimiter = query.get('delimiter') || undefined;
  const maxKeys = parseMaxKeys(query);
  const token = query.get('continuation-token') ?? undefined;
  const startAfter = query.get('start-after') ?? undefined;
  const after = token === undefined ? startAfter || undefined : decodeToken(token);

  const skip: { prefix?: string } = {};
  // A token that is a rolled-up prefix resumes after everything under that prefix.
  if (
    after !== undefined &&
    delimiter !== undefined &&
    after.startsWith(prefix) &&
    after.slice(prefix.length).includes(delimiter)
  ) {
    skip.prefix = after;
  }
  const contents: { key: string; meta: ObjectMeta }[] = [];
  const commonPrefixes: string[] = [];
  let last: string | undefined;
  let truncated = false;
  for await (const key of store.keys(bucket, prefix, after, skip)) {
    const rest = key.slice(prefix.length);
    const cut = delimiter === undefined ? -1 : rest.indexOf(delimiter);
    if (contents.length + commonPrefixes.length >= maxKeys) {
      truncated = maxKeys > 0;
      break;
    }
    if (delimiter !== undefined && cut !== -1) {
      const rolled = prefix + rest.slice(0, cut + delimiter.length);
      commonPrefixes.push(rolled);
      skip.prefix = rolled;
      last = rolled;
      continue;
    }
    const meta = await store.describe(bucket, key);
    if (meta === undefined) continue;
    contents.push({ key, meta });
    last = key;
  }

  const items = contents
    .map(
      ({ key, meta }) =>
        `<Contents>${element('Key', key)}${element('LastModified', meta.lastModified)}${element('ETag', meta.etag)}${element('ChecksumAlgorithm', meta.checksum?.algorithm)}${element('ChecksumType', meta.checksum?.type)}${element('Size', meta.size)}${element('StorageClass', 'STANDARD')}</Contents>`,
    )
    .join('');
  const prefixes = commonPrefixes
    .map((rolled) => `<CommonPrefixes>${element('Prefix', rolled)}</CommonPrefixes>`)
    .join('');
  sendXml(
    res,
    200,
    `<ListBucketResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', prefix)}${element('Delimiter', delimiter)}${element('MaxKeys', maxKeys)}${element('KeyCount', contents.length + commonPrefixes.length)}${element('IsTruncated', truncated)}${element('ContinuationToken', token)}${element('NextContinuationToken', truncated && last !== undefined ? encodeToken(last) : undefined)}${element('StartAfter', startAfter)}${items}${prefixes}</ListBucketResult>`,
  );
}

/**
 * ListObjectVersions for a store that keeps no versions: each object under the prefix is its one
 * version, "null", and is the latest, and there are no delete markers. Pages as S3 does: keys in
 * UTF-8 byte order, at most max-keys versions a page, resuming after key-marker (with or without
 * version-id-marker, since a key's one version is also its last).
 */
export async function listObjectVersions(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versions', 'prefix', 'max-keys', 'key-marker', 'version-id-marker', 'encoding-type']);
  await store.requireBucket(bucket);
  if (query.has('encoding-type')) throw notImplemented('The encoding-type parameter');
  const prefix = query.get('prefix') ?? '';
  const maxKeys = parseMaxKeys(query);
  const keyMarker = query.get('key-marker') || undefined;
  const versionIdMarker = query.get('version-id-marker') || undefined;
  if (versionIdMarker !== undefined && keyMarker === undefined)
    throw invalidArgument('A version-id marker cannot be specified without a key marker.');
  // "null" is the only version id this store ever gives, so any other marker names no version.
  if (versionIdMarker !== undefined && versionIdMarker !== NULL_VERSION)
    throw invalidArgument('Invalid version id specified');

  const versions: { key: string; meta: ObjectMeta }[] = [];
  let truncated = false;
  for await (const key of store.keys(bucket, prefix, keyMarker, {})) {
    const meta = await store.describe(bucket, key);
    if (meta === undefined) continue;
    if (versions.length >= maxKeys) {
      truncated = maxKeys > 0;
      break;
    }
    versions.push({ key, meta });
  }
  const last = truncated ? versions.at(-1) : undefined;

  const items = versions
    .map(
      ({ key, meta }) =>
        `<Version>${element('Key', key)}${element('VersionId', NULL_VERSION)}${element('IsLatest', true)}${element('LastModified', meta.lastModified)}${element('ETag', meta.etag)}${element('Size', meta.size)}${element('StorageClass', 'STANDARD')}</Version>`,
    )
    .join('');
  sendXml(
    res,
    200,
    `<ListVersionsResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', prefix)}${element('KeyMarker', keyMarker ?? '')}${element('VersionIdMarker', versionIdMarker ?? '')}${element('NextKeyMarker', last?.key)}${element('NextVersionIdMarker', last === undefined ? undefined : NULL_VERSION)}${element('MaxKeys', maxKeys)}${element('IsTruncated', truncated)}${items}</ListVersionsResult>`,
  );
}

/** The version id S3 gives an object written while versioning is off: the only one this store has. */
const NULL_VERSION = 'null';

/** max-keys as S3 reads it: a whole number, 1000 when absent, and never more than 1000. */
function parseMaxKeys(query: URLSearchParams): number {
  const text = query.get('max-keys');
  if (text !== null && !/^\d{1,9}$/.test(text))
    throw invalidArgument('Provided max-keys not an integer or within integer range');
  return Math.min(text === null ? MAX_LIST_KEYS : Number(text), MAX_LIST_KEYS);
}

function encodeToken(after: string): string {
  return Buffer.from(after, 'utf8').toString('base64url');
}

function decodeToken(token: string): string {
  const after = Buffer.from(token, 'base64url').toString('utf8');
  if (after === '' || encodeToken(after) !== token) {
    throw invalidArgument('The continuation token provided is incorrect');
  }
  return after;
}
