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
  const maxKeysText = query.get('max-keys');
  if (maxKeysText !== null && !/^\d{1,9}$/.test(maxKeysText))
    throw invalidArgument('Provided max-keys not an integer or within integer range');
  const maxKeys = Math.min(maxKeysText === null ? MAX_LIST_KEYS : Number(maxKeysText), MAX_LIST_KEYS);
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
 * ListObjectVersions, as far as objects without versions go: each object under the prefix is its
 * one version, "null", and is the latest. Enough for code that deletes every version of a key.
 */
export async function listObjectVersions(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versions', 'prefix', 'max-keys', 'encoding-type']);
  await store.requireBucket(bucket);
  if (query.has('encoding-type')) throw notImplemented('The encoding-type parameter');
  const prefix = query.get('prefix') ?? '';
  const versions: string[] = [];
  for await (const key of store.keys(bucket, prefix, undefined, {})) {
    if (versions.length >= MAX_LIST_KEYS) throw notImplemented('More than 1000 versions in one listing');
    const meta = await store.describe(bucket, key);
    if (meta === undefined) continue;
    versions.push(
      `<Version>${element('Key', key)}${element('VersionId', 'null')}${element('IsLatest', true)}${element('LastModified', meta.lastModified)}${element('ETag', meta.etag)}${element('Size', meta.size)}${element('StorageClass', 'STANDARD')}</Version>`,
    );
  }
  sendXml(
    res,
    200,
    `<ListVersionsResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', prefix)}${element('MaxKeys', MAX_LIST_KEYS)}${element('IsTruncated', false)}${versions.join('')}</ListVersionsResult>`,
  );
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
