/** The request headers stored with an object and returned on GET and HEAD, as S3 does. */
import type { IncomingMessage } from 'node:http';
import { header } from './bodies.ts';
import { checksumHeader } from './checksums.ts';
import { invalidArgument, notImplemented } from './errors.ts';
import { DEFAULT_CONTENT_TYPE } from './limits.ts';
import type { ObjectVersion } from './records.ts';

/** Request headers stored with the object and returned on GET and HEAD, as S3 does. */
const STORED_HEADERS = [
  'cache-control',
  'content-disposition',
  'content-language',
  'expires',
  'x-amz-server-side-encryption',
  'x-amz-server-side-encryption-aws-kms-key-id',
  'x-amz-server-side-encryption-context',
  'x-amz-server-side-encryption-bucket-key-enabled',
  'x-amz-object-lock-mode',
  'x-amz-object-lock-retain-until-date',
  'x-amz-object-lock-legal-hold',
  'x-amz-storage-class',
  'x-amz-website-redirect-location',
  'x-amz-tagging',
];
/** Returned on PUT, UploadPart and CompleteMultipartUpload too. */
export const SSE_HEADERS = [
  'x-amz-server-side-encryption',
  'x-amz-server-side-encryption-aws-kms-key-id',
  'x-amz-server-side-encryption-bucket-key-enabled',
];

export function storedHeaders(req: IncomingMessage): Record<string, string> {
  if (Object.keys(req.headers).some((name) => name.startsWith('x-amz-server-side-encryption-customer-'))) {
    throw notImplemented('Server-side encryption with customer-provided keys');
  }
  const sse = header(req, 'x-amz-server-side-encryption');
  if (sse !== undefined && !['AES256', 'aws:kms', 'aws:kms:dsse'].includes(sse)) {
    throw invalidArgument('The encryption method specified is not supported');
  }
  const stored: Record<string, string> = {
    'content-type': header(req, 'content-type') ?? DEFAULT_CONTENT_TYPE,
  };
  const encoding = (header(req, 'content-encoding') ?? '')
    .split(',')
    .map((token) => token.trim())
    .filter((token) => token !== '' && token !== 'aws-chunked');
  if (encoding.length > 0) stored['content-encoding'] = encoding.join(',');
  for (const name of Object.keys(req.headers)) {
    const value = header(req, name);
    if (value !== undefined && (STORED_HEADERS.includes(name) || name.startsWith('x-amz-meta-'))) {
      stored[name] = value;
    }
  }
  return stored;
}

export function pick(
  headers: Readonly<Record<string, string>>,
  names: readonly string[],
): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const name of names) {
    const value = headers[name];
    if (value !== undefined) picked[name] = value;
  }
  return picked;
}

export function checksumHeaders(checksum: ObjectVersion['checksum']): Record<string, string> {
  if (checksum === undefined) return {};
  return { [checksumHeader(checksum.algorithm)]: checksum.value, 'x-amz-checksum-type': checksum.type };
}
