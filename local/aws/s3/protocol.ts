/** The HTTP side: routing a request to its operation, and the XML and headers of the answers. */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { header } from './bodies.ts';
import {
  createBucket,
  getBucketLocation,
  getBucketVersioning,
  headBucket,
  listBuckets,
  listObjects,
  listObjectsV2,
  listObjectVersions,
  putBucketVersioning,
} from './buckets.ts';
import { notImplemented, S3Failure } from './errors.ts';
import { checkBucketName, checkKey, errorCode } from './keys.ts';
import {
  abortMultipartUpload,
  completeMultipartUpload,
  createMultipartUpload,
  listParts,
  uploadPart,
} from './multipart.ts';
import {
  getObjectLegalHold,
  getObjectLockConfiguration,
  getObjectRetention,
  putObjectLegalHold,
  putObjectLockConfiguration,
  putObjectRetention,
} from './object-lock.ts';
import { deleteObject, getObject, getObjectTagging, putObject } from './objects.ts';
import type { DiskStore } from './store.ts';

interface Target {
  readonly method: string;
  readonly bucket: string | undefined;
  readonly key: string | undefined;
  readonly query: URLSearchParams;
  readonly resource: string;
}

/** One request to an operation, once its bucket name is known to be valid. */
export interface Call {
  readonly store: DiskStore;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly bucket: string;
  readonly query: URLSearchParams;
}

/**
 * Path-style only. The raw path is split by hand: WHATWG URL parsing would resolve `..` segments
 * (even percent-encoded ones) and quietly turn a traversal key into some other key.
 */
function parseTarget(req: IncomingMessage): Target {
  const url = req.url ?? '/';
  const queryAt = url.indexOf('?');
  const rawPath = queryAt === -1 ? url : url.slice(0, queryAt);
  const query = new URLSearchParams(queryAt === -1 ? '' : url.slice(queryAt + 1));
  if (!rawPath.startsWith('/')) throw new S3Failure(400, 'InvalidURI', "Couldn't parse the specified URI.");
  const slash = rawPath.indexOf('/', 1);
  const rawBucket = slash === -1 ? rawPath.slice(1) : rawPath.slice(1, slash);
  const rawKey = slash === -1 ? '' : rawPath.slice(slash + 1);
  let bucket: string;
  let key: string;
  try {
    bucket = decodeURIComponent(rawBucket);
    key = decodeURIComponent(rawKey);
  } catch {
    throw new S3Failure(400, 'InvalidURI', "Couldn't parse the specified URI.");
  }
  return {
    method: req.method ?? 'GET',
    bucket: bucket === '' ? undefined : bucket,
    key: key === '' ? undefined : key,
    query,
    resource: rawPath,
  };
}

/** What ListObjects (version 1) takes: a GET on a bucket with nothing else is that listing. */
const LIST_V1_QUERY = new Set(['prefix', 'delimiter', 'max-keys', 'marker', 'encoding-type', 'x-id']);

/** Query parameters that add nothing to an operation: the SDK's operation tag. */
const NEUTRAL_QUERY = new Set(['x-id']);
/** A presigned URL's signature parameters (signatures are not checked; expiry is). */
const PRESIGN_QUERY = /^x-amz-/i;

/** Refuses a query parameter the operation does not understand rather than ignoring what it asks for. */
export function allowQuery(query: URLSearchParams, allowed: readonly string[]): void {
  for (const name of query.keys()) {
    if (!NEUTRAL_QUERY.has(name) && !PRESIGN_QUERY.test(name) && !allowed.includes(name)) {
      throw notImplemented(`The ${name} parameter`);
    }
  }
}

/** A presigned URL past its X-Amz-Date + X-Amz-Expires is refused, as S3 refuses it. */
function refuseExpiredPresign(query: URLSearchParams, now = Date.now()): void {
  const date = query.get('X-Amz-Date');
  const expires = query.get('X-Amz-Expires');
  if (date === null || expires === null) return;
  const match = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(date);
  if (match === null)
    throw new S3Failure(400, 'AuthorizationQueryParametersError', 'X-Amz-Date must be yyyyMMddTHHmmssZ.');
  const [, year, month, day, hour, minute, second] = match.map(Number);
  const signedAt = Date.UTC(year ?? 0, (month ?? 1) - 1, day ?? 1, hour ?? 0, minute ?? 0, second ?? 0);
  if (now > signedAt + Number(expires) * 1000)
    throw new S3Failure(403, 'AccessDenied', 'Request has expired');
}

const XML_ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
  '\r': '&#x0D;',
  '\n': '&#x0A;',
  '\t': '&#x09;',
};

function xmlEscape(text: string): string {
  return text.replace(/[&<>"'\r\n\t]/g, (char) => XML_ESCAPES[char] ?? char);
}

export function xmlUnescape(text: string): string {
  return text.replace(/&(?:#(\d+)|#x([0-9a-fA-F]+)|(amp|lt|gt|quot|apos));/g, (_match, dec, hex, name) => {
    if (typeof dec === 'string') return String.fromCodePoint(Number(dec));
    if (typeof hex === 'string') return String.fromCodePoint(Number.parseInt(hex, 16));
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[String(name)] ?? '';
  });
}

export function element(name: string, value: string | number | boolean | undefined): string {
  return value === undefined ? '' : `<${name}>${xmlEscape(String(value))}</${name}>`;
}

export function sendXml(
  res: ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {},
) {
  const bytes = Buffer.from(`<?xml version="1.0" encoding="UTF-8"?>\n${body}`, 'utf8');
  res.writeHead(status, { ...headers, 'content-type': 'application/xml', 'content-length': bytes.length });
  res.end(bytes);
}

export function sendEmpty(res: ServerResponse, status: number, headers: Record<string, string> = {}) {
  res.writeHead(status, { ...headers, 'content-length': 0 });
  res.end();
}

function sendError(req: IncomingMessage, res: ServerResponse, failure: S3Failure, resource: string) {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  // Whatever of the body was not read is drained, so the client sees the answer, not a reset.
  req.resume();
  if (req.method === 'HEAD') {
    sendEmpty(res, failure.status, failure.headers);
    return;
  }
  sendXml(
    res,
    failure.status,
    `<Error>${element('Code', failure.code)}${element('Message', failure.message)}${element('Resource', resource)}${element('RequestId', String(res.getHeader('x-amz-request-id') ?? ''))}</Error>`,
    failure.headers,
  );
}

export async function handle(store: DiskStore, req: IncomingMessage, res: ServerResponse): Promise<void> {
  res.setHeader('x-amz-request-id', randomBytes(8).toString('hex').toUpperCase());
  let resource = req.url ?? '/';
  try {
    const target = parseTarget(req);
    resource = target.resource;
    refuseExpiredPresign(target.query);
    await dispatch(store, req, res, target);
  } catch (error) {
    const failure =
      error instanceof S3Failure
        ? error
        : new S3Failure(
            500,
            'InternalError',
            `We encountered an internal error${errorCode(error) === undefined ? '' : ` (${errorCode(error)})`}. Please try again.`,
          );
    sendError(req, res, failure, resource);
  }
}

async function dispatch(store: DiskStore, req: IncomingMessage, res: ServerResponse, target: Target) {
  const { bucket, key, method, query } = target;
  if (bucket === undefined) {
    if (method === 'GET') return listBuckets({ store, req, res, query });
    throw new S3Failure(
      405,
      'MethodNotAllowed',
      'The specified method is not allowed against this resource.',
    );
  }
  checkBucketName(bucket);
  const call: Call = { store, req, res, bucket, query };
  if (key === undefined) {
    if (method === 'PUT' && query.has('versioning')) return putBucketVersioning(call);
    if (method === 'GET' && query.has('versioning')) return getBucketVersioning(call);
    if (method === 'PUT' && query.has('object-lock')) return putObjectLockConfiguration(call);
    if (method === 'GET' && query.has('object-lock')) return getObjectLockConfiguration(call);
    if (method === 'GET' && query.has('location')) return getBucketLocation(call);
    if (method === 'GET' && query.get('list-type') === '2') return listObjectsV2(call);
    if (method === 'GET' && query.has('versions')) return listObjectVersions(call);
    if (method === 'GET' && [...query.keys()].every((name) => LIST_V1_QUERY.has(name)))
      return listObjects(call);
    if (method === 'PUT') return createBucket(call);
    if (method === 'HEAD') return headBucket(call);
    throw notImplemented(
      `${method} on a bucket${query.size > 0 ? ` with ${[...query.keys()].join(', ')}` : ''}`,
    );
  }
  checkKey(key);
  switch (method) {
    case 'PUT':
      if (query.has('retention')) return putObjectRetention(call, key);
      if (query.has('legal-hold')) return putObjectLegalHold(call, key);
      if (header(req, 'x-amz-copy-source') !== undefined) throw notImplemented('CopyObject');
      if (query.has('uploadId') || query.has('partNumber')) return uploadPart(call, key);
      return putObject(call, key);
    case 'GET':
      if (query.has('retention')) return getObjectRetention(call, key);
      if (query.has('legal-hold')) return getObjectLegalHold(call, key);
      if (query.has('tagging')) return getObjectTagging(call, key);
      if (query.has('uploadId')) return listParts(call, key);
      return getObject(call, key);
    case 'HEAD':
      return getObject(call, key);
    case 'DELETE':
      if (query.has('uploadId')) return abortMultipartUpload(call, key);
      return deleteObject(call, key);
    case 'POST':
      if (query.has('uploads')) return createMultipartUpload(call, key);
      if (query.has('uploadId')) return completeMultipartUpload(call, key);
      throw notImplemented(
        `POST on an object${query.size > 0 ? ` with ${[...query.keys()].join(', ')}` : ''}`,
      );
    default:
      throw new S3Failure(
        405,
        'MethodNotAllowed',
        'The specified method is not allowed against this resource.',
      );
  }
}
