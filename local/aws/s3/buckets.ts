/** Bucket operations: create, head, delete, list objects, and the settings S3 accepts. */
import { header, readSmallBody } from './bodies.ts';
import { invalidArgument, malformedXml, S3Failure } from './errors.ts';
import { MAX_LIST_KEYS, NULL_VERSION, VERSION_ID, XMLNS } from './limits.ts';
import { allowQuery, type Call, element, sendEmpty, sendXml } from './protocol.ts';
import type { ObjectVersion, Version } from './records.ts';

/** Creates the bucket; with `x-amz-bucket-object-lock-enabled: true`, versioned and lockable, as S3 makes it. */
export async function createBucket(call: Call) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, []);
  await readSmallBody(req);
  const lockable = header(req, 'x-amz-bucket-object-lock-enabled')?.toLowerCase() === 'true';
  await store.createBucket(bucket, lockable ? { versioning: 'Enabled', objectLock: {} } : {});
  sendEmpty(res, 200, { location: `/${bucket}` });
}

/** The owner every bucket here has: one local account. */
const OWNER = `<Owner>${element('ID', '000000000000')}${element('DisplayName', 'local')}</Owner>`;

export async function listBuckets(call: Omit<Call, 'bucket'>) {
  const { store, res, query } = call;
  allowQuery(query, ['max-buckets', 'continuation-token', 'prefix', 'bucket-region']);
  const prefix = query.get('prefix') ?? '';
  const buckets = (await store.listBuckets())
    .filter(({ name }) => name.startsWith(prefix))
    .map(
      ({ name, created }) => `<Bucket>${element('Name', name)}${element('CreationDate', created)}</Bucket>`,
    )
    .join('');
  sendXml(
    res,
    200,
    `<ListAllMyBucketsResult xmlns="${XMLNS}">${OWNER}<Buckets>${buckets}</Buckets></ListAllMyBucketsResult>`,
  );
}

/** Local mode's region is us-east-1, which S3 answers with an empty LocationConstraint. */
export async function getBucketLocation(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['location']);
  await store.requireBucket(bucket);
  sendXml(res, 200, `<LocationConstraint xmlns="${XMLNS}"/>`);
}

export async function headBucket(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, []);
  await store.requireBucket(bucket);
  sendEmpty(res, 200, { 'x-amz-bucket-region': 'us-east-1' });
}

/** Kept as the bucket's state; objects still keep one version each (see listObjectVersions). */
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
  const settings = await store.settings(bucket);
  if (status === 'Suspended' && settings.objectLock !== undefined) {
    throw new S3Failure(
      409,
      'InvalidBucketState',
      'An Object Lock configuration is present on this bucket, so the versioning state cannot be changed.',
    );
  }
  if (status === 'Enabled' || status === 'Suspended')
    await store.changeSettings(bucket, (current) => ({ ...current, versioning: status }));
  sendEmpty(res, 200);
}

export async function getBucketVersioning(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versioning']);
  const { versioning } = await store.settings(bucket);
  sendXml(
    res,
    200,
    `<VersioningConfiguration xmlns="${XMLNS}">${element('Status', versioning)}</VersioningConfiguration>`,
  );
}

/** `encoding-type=url`: keys and prefixes percent-encoded in the answer (the CLI always asks for it). */
function encoderFor(query: URLSearchParams): (text: string) => string {
  const type = query.get('encoding-type');
  if (type === null) return (text) => text;
  if (type !== 'url') throw invalidArgument('Invalid Encoding Method specified in Request');
  return (text) => encodeURIComponent(text).replaceAll('%2F', '/');
}

/** One page of a listing: keys in UTF-8 byte order after `after`, rolled up at the delimiter. */
async function collectListing(
  call: Call,
  prefix: string,
  delimiter: string | undefined,
  after: string | undefined,
  maxKeys: number,
): Promise<{
  contents: { key: string; meta: ObjectVersion }[];
  commonPrefixes: string[];
  truncated: boolean;
  last: string | undefined;
}> {
  const { store, bucket } = call;
  const skip: { prefix?: string } = {};
  // A marker that is a rolled-up prefix resumes after everything under that prefix.
  if (
    after !== undefined &&
    delimiter !== undefined &&
    after.startsWith(prefix) &&
    after.slice(prefix.length).includes(delimiter)
  ) {
    skip.prefix = after;
  }
  const contents: { key: string; meta: ObjectVersion }[] = [];
  const commonPrefixes: string[] = [];
  let last: string | undefined;
  let truncated = false;
  for await (const key of store.keys(bucket, prefix, after, skip)) {
    // A key whose current version is a delete marker is not listed, and rolls up no prefix.
    const meta = await store.current(bucket, key);
    if (meta === undefined) continue;
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
    contents.push({ key, meta });
    last = key;
  }
  return { contents, commonPrefixes, truncated, last };
}

function listingItems(
  listing: Awaited<ReturnType<typeof collectListing>>,
  encode: (text: string) => string,
  owner: boolean,
): string {
  const items = listing.contents
    .map(
      ({ key, meta }) =>
        `<Contents>${element('Key', encode(key))}${element('LastModified', meta.lastModified)}${element('ETag', meta.etag)}${element('ChecksumAlgorithm', meta.checksum?.algorithm)}${element('ChecksumType', meta.checksum?.type)}${element('Size', meta.size)}${owner ? OWNER : ''}${element('StorageClass', 'STANDARD')}</Contents>`,
    )
    .join('');
  const prefixes = listing.commonPrefixes
    .map((rolled) => `<CommonPrefixes>${element('Prefix', encode(rolled))}</CommonPrefixes>`)
    .join('');
  return items + prefixes;
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
  const encode = encoderFor(query);
  const prefix = query.get('prefix') ?? '';
  const delimiter = query.get('delimiter') || undefined;
  const maxKeys = parseMaxKeys(query);
  const token = query.get('continuation-token') ?? undefined;
  const startAfter = query.get('start-after') ?? undefined;
  const after = token === undefined ? startAfter || undefined : decodeToken(token);
  const listing = await collectListing(call, prefix, delimiter, after, maxKeys);
  const { contents, commonPrefixes, truncated, last } = listing;
  const encoded = (text: string | undefined) => (text === undefined ? undefined : encode(text));
  sendXml(
    res,
    200,
    `<ListBucketResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', encode(prefix))}${element('Delimiter', encoded(delimiter))}${element('MaxKeys', maxKeys)}${element('EncodingType', query.get('encoding-type') ?? undefined)}${element('KeyCount', contents.length + commonPrefixes.length)}${element('IsTruncated', truncated)}${element('ContinuationToken', token)}${element('NextContinuationToken', truncated && last !== undefined ? encodeToken(last) : undefined)}${element('StartAfter', encoded(startAfter))}${listingItems(listing, encode, query.get('fetch-owner') === 'true')}</ListBucketResult>`,
  );
}

/** ListObjects (version 1), which `aws s3api list-objects` calls: pages by marker. */
export async function listObjects(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['prefix', 'delimiter', 'max-keys', 'marker', 'encoding-type']);
  await store.requireBucket(bucket);
  const encode = encoderFor(query);
  const prefix = query.get('prefix') ?? '';
  const delimiter = query.get('delimiter') || undefined;
  const maxKeys = parseMaxKeys(query);
  const marker = query.get('marker') ?? '';
  const listing = await collectListing(call, prefix, delimiter, marker || undefined, maxKeys);
  const { truncated, last } = listing;
  // S3 gives NextMarker only with a delimiter; without one the client resumes after the last key.
  const nextMarker = truncated && delimiter !== undefined && last !== undefined ? encode(last) : undefined;
  sendXml(
    res,
    200,
    `<ListBucketResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', encode(prefix))}${element('Marker', encode(marker))}${element('NextMarker', nextMarker)}${element('MaxKeys', maxKeys)}${element('Delimiter', delimiter === undefined ? undefined : encode(delimiter))}${element('EncodingType', query.get('encoding-type') ?? undefined)}${element('IsTruncated', truncated)}${listingItems(listing, encode, true)}</ListBucketResult>`,
  );
}

/**
 * ListObjectVersions: every version and delete marker under the prefix, keys in UTF-8 byte order
 * and each key's newest first, at most max-keys a page. A page resumes after key-marker (all its
 * versions) or, with version-id-marker, after that version of it; a marker version deleted since
 * (as removeAllVersions does between pages) still has its place, since this store's ids sort by age.
 */
export async function listObjectVersions(call: Call) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['versions', 'prefix', 'max-keys', 'key-marker', 'version-id-marker', 'encoding-type']);
  await store.requireBucket(bucket);
  const encode = encoderFor(query);
  const prefix = query.get('prefix') ?? '';
  const maxKeys = parseMaxKeys(query);
  const keyMarker = query.get('key-marker') || undefined;
  const versionIdMarker = query.get('version-id-marker') || undefined;
  if (versionIdMarker !== undefined && keyMarker === undefined)
    throw invalidArgument('A version-id marker cannot be specified without a key marker.');
  if (versionIdMarker !== undefined && versionIdMarker !== NULL_VERSION && !VERSION_ID.test(versionIdMarker))
    throw invalidArgument('Invalid version id specified');

  const listed: { key: string; version: Version; latest: boolean }[] = [];
  let truncated = false;
  /** Adds the key's versions from `from` on; false once the page is full and more remain. */
  const take = (key: string, versions: readonly Version[], from: number): boolean => {
    for (let index = from; index < versions.length; index += 1) {
      const version = versions[index];
      if (version === undefined) continue;
      if (listed.length >= maxKeys) {
        truncated = maxKeys > 0;
        return false;
      }
      listed.push({ key, version, latest: index === 0 });
    }
    return true;
  };
  let open = true;
  if (keyMarker !== undefined && versionIdMarker !== undefined && keyMarker.startsWith(prefix)) {
    const versions = await store.versions(bucket, keyMarker);
    open = take(keyMarker, versions, resumeAfter(versions, versionIdMarker));
  }
  if (open) {
    for await (const key of store.keys(bucket, prefix, keyMarker, {})) {
      if (!take(key, await store.versions(bucket, key), 0)) break;
    }
  }
  const last = truncated ? listed.at(-1) : undefined;

  const items = listed
    .map(({ key, version, latest }) => {
      const common = `${element('Key', encode(key))}${element('VersionId', version.versionId)}${element('IsLatest', latest)}${element('LastModified', version.lastModified)}`;
      return version.kind === 'marker'
        ? `<DeleteMarker>${common}${OWNER}</DeleteMarker>`
        : `<Version>${common}${element('ETag', version.etag)}${element('Size', version.size)}${element('StorageClass', 'STANDARD')}${OWNER}</Version>`;
    })
    .join('');
  sendXml(
    res,
    200,
    `<ListVersionsResult xmlns="${XMLNS}">${element('Name', bucket)}${element('Prefix', encode(prefix))}${element('KeyMarker', encode(keyMarker ?? ''))}${element('VersionIdMarker', versionIdMarker ?? '')}${element('NextKeyMarker', last === undefined ? undefined : encode(last.key))}${element('NextVersionIdMarker', last?.version.versionId)}${element('MaxKeys', maxKeys)}${element('EncodingType', query.get('encoding-type') ?? undefined)}${element('IsTruncated', truncated)}${items}</ListVersionsResult>`,
  );
}

/**
 * Where a page resumes within the marker key: after the marker version, or, if it is gone, after
 * the versions newer than it (ids sort by age; "null" has no age, so nothing of the key is left).
 */
function resumeAfter(versions: readonly Version[], versionIdMarker: string): number {
  const at = versions.findIndex((version) => version.versionId === versionIdMarker);
  if (at !== -1) return at + 1;
  if (versionIdMarker === NULL_VERSION) return versions.length;
  const newer = versions.findIndex(
    (version) => version.versionId === NULL_VERSION || version.versionId < versionIdMarker,
  );
  return newer === -1 ? versions.length : newer;
}

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
