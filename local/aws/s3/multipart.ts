/** Multipart uploads: create, upload a part, list the parts (ListParts), complete with checksums, abort. */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { LOOPBACK } from '../../http.ts';
import { asBuffers, header, readSmallBody, receiveBody, settleFile } from './bodies.ts';
import {
  CHECKSUM_ALGORITHMS,
  type ChecksumAlgorithm,
  checksumHeader,
  digester,
  parseAlgorithm,
} from './checksums.ts';
import {
  invalidArgument,
  invalidPart,
  invalidRequest,
  malformedXml,
  notImplemented,
  S3Failure,
} from './errors.ts';
import { pick, SSE_HEADERS, storedHeaders } from './headers.ts';
import { normalizeEtag } from './keys.ts';
import { MAX_PART_NUMBER, MIN_PART_BYTES, XMLNS } from './limits.ts';
import { lockHeadersFor } from './object-lock.ts';
import { versionHeader, writeCondition } from './objects.ts';
import { allowQuery, type Call, element, sendEmpty, sendXml, xmlUnescape } from './protocol.ts';
import type { ObjectVersion, PartRecord } from './records.ts';
import { checkWriteCondition, type NewVersion } from './store.ts';

export async function createMultipartUpload(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['uploads']);
  await store.requireBucket(bucket);
  const algorithmName = header(req, 'x-amz-checksum-algorithm');
  const checksumAlgorithm = algorithmName === undefined ? undefined : parseAlgorithm(algorithmName);
  const checksumType = header(req, 'x-amz-checksum-type')?.toUpperCase();
  if (checksumType !== undefined && checksumType !== 'COMPOSITE') {
    throw notImplemented(`The ${checksumType} checksum type for multipart uploads`);
  }
  const headers = storedHeaders(req);
  lockHeadersFor(await store.settings(bucket), headers, store.clock().getTime());
  await readSmallBody(req);
  const uploadId = await store.createUpload({
    format: 1,
    bucket,
    key,
    headers,
    ...(checksumAlgorithm === undefined ? {} : { checksumAlgorithm }),
    initiated: new Date().toISOString(),
  });
  sendXml(
    res,
    200,
    `<InitiateMultipartUploadResult xmlns="${XMLNS}">${element('Bucket', bucket)}${element('Key', key)}${element('UploadId', uploadId)}</InitiateMultipartUploadResult>`,
    {
      ...pick(headers, SSE_HEADERS),
      ...(checksumAlgorithm === undefined
        ? {}
        : { 'x-amz-checksum-algorithm': checksumAlgorithm, 'x-amz-checksum-type': 'COMPOSITE' }),
    },
  );
}

function parsePartNumber(value: string | null): number {
  if (value === null || !/^\d{1,5}$/.test(value) || Number(value) < 1 || Number(value) > MAX_PART_NUMBER) {
    throw invalidArgument(`Part number must be an integer between 1 and ${MAX_PART_NUMBER}, inclusive`);
  }
  return Number(value);
}

export async function uploadPart(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['uploadId', 'partNumber']);
  await store.requireBucket(bucket);
  const uploadId = query.get('uploadId') ?? '';
  const partNumber = parsePartNumber(query.get('partNumber'));
  const upload = await store.readUpload(uploadId, bucket, key);
  const algorithm = upload.checksumAlgorithm;
  const received = await receiveBody(req, store.tempPath(), algorithm, store.syncWrites);
  try {
    if (algorithm !== undefined && received.sent !== undefined && received.sent.algorithm !== algorithm) {
      throw invalidRequest(
        `Checksum Type mismatch occurred, expected checksum Type: ${algorithm.toLowerCase()}, actual checksum Type: ${received.sent.algorithm.toLowerCase()}`,
      );
    }
    const checksum =
      algorithm === undefined ? undefined : received.digests.get(algorithm)?.toString('base64');
    const etag = `"${received.md5.toString('hex')}"`;
    await store.putPart(uploadId, partNumber, received.path, {
      etag,
      size: received.size,
      ...(checksum === undefined ? {} : { checksum }),
    });
    const echoed =
      algorithm === undefined
        ? received.sent
        : checksum === undefined
          ? undefined
          : { algorithm, value: checksum };
    sendEmpty(res, 200, {
      etag,
      ...(echoed === undefined ? {} : { [checksumHeader(echoed.algorithm)]: echoed.value }),
      ...pick(upload.headers, SSE_HEADERS),
    });
  } finally {
    await rm(received.path, { force: true });
  }
}

interface ListedPart {
  readonly partNumber: number;
  readonly etag: string;
  readonly checksums: ReadonlyMap<ChecksumAlgorithm, string>;
}

/** The part list of a CompleteMultipartUpload body: a fixed, flat shape, so no XML library. */
function parseCompleteBody(xml: string): ListedPart[] {
  if (!/<CompleteMultipartUpload[\s>]/.test(xml) || !/<\/CompleteMultipartUpload>\s*$/.test(xml)) {
    throw malformedXml();
  }
  const field = (part: string, name: string) => {
    const value = new RegExp(`<${name}>([^<]*)</${name}>`).exec(part)?.[1];
    return value === undefined ? undefined : xmlUnescape(value).trim();
  };
  const parts = [...xml.matchAll(/<Part>([\s\S]*?)<\/Part>/g)].map(([, inner = '']) => {
    const partNumber = field(inner, 'PartNumber');
    const etag = field(inner, 'ETag');
    if (partNumber === undefined || etag === undefined || !/^\d{1,5}$/.test(partNumber)) throw malformedXml();
    const checksums = new Map<ChecksumAlgorithm, string>();
    for (const algorithm of CHECKSUM_ALGORITHMS) {
      const value = field(inner, `Checksum${algorithm}`);
      if (value !== undefined) checksums.set(algorithm, value);
    }
    return { partNumber: Number(partNumber), etag, checksums };
  });
  if (parts.length === 0) throw malformedXml();
  return parts;
}

export async function completeMultipartUpload(call: Call, key: string) {
  const { store, req, res, bucket, query } = call;
  allowQuery(query, ['uploadId']);
  await store.requireBucket(bucket);
  const uploadId = query.get('uploadId') ?? '';
  const upload = await store.readUpload(uploadId, bucket, key);
  const condition = writeCondition(req);
  const listed = parseCompleteBody(await readSmallBody(req));
  const algorithm = upload.checksumAlgorithm;

  const parts: PartRecord[] = [];
  for (const [index, item] of listed.entries()) {
    const previous = listed[index - 1];
    if (previous !== undefined && item.partNumber <= previous.partNumber) {
      throw new S3Failure(
        400,
        'InvalidPartOrder',
        'The list of parts was not in ascending order. Parts must be ordered by part number.',
      );
    }
    const part = await store.readPart(uploadId, item.partNumber);
    if (part === undefined || normalizeEtag(item.etag) !== normalizeEtag(part.etag)) throw invalidPart();
    if (algorithm !== undefined) {
      const given = item.checksums.get(algorithm);
      if (given === undefined) {
        throw invalidRequest(
          `The upload was created using a ${algorithm.toLowerCase()} checksum. The complete request must include the checksum for each part. It was missing for part ${item.partNumber} in the request.`,
        );
      }
      if (given !== part.checksum) throw invalidPart();
    }
    parts.push(part);
  }
  for (const [index, part] of parts.entries()) {
    if (index < parts.length - 1 && part.size < MIN_PART_BYTES) {
      throw new S3Failure(
        400,
        'EntityTooSmall',
        'Your proposed upload is smaller than the minimum allowed object size.',
      );
    }
  }
  if (condition.ifNoneMatch !== undefined || condition.ifMatch !== undefined) {
    checkWriteCondition(await store.current(bucket, key), condition);
  }

  const temp = store.tempPath();
  const paths = parts.map((part) => store.partPath(uploadId, part));
  async function* concatenated(): AsyncGenerator<Buffer> {
    for (const path of paths) yield* asBuffers(createReadStream(path));
  }
  const settings = await store.settings(bucket);
  let meta: ObjectVersion;
  try {
    await pipeline(
      Readable.from(concatenated(), { objectMode: false }),
      createWriteStream(temp, { flags: 'wx' }),
    );
    const settled = await settleFile(temp, store.syncWrites);
    const md5s = Buffer.concat(parts.map((part) => Buffer.from(normalizeEtag(part.etag), 'hex')));
    let checksum: ObjectVersion['checksum'];
    if (algorithm !== undefined) {
      const composite = digester(algorithm);
      for (const part of parts) composite.update(Buffer.from(part.checksum ?? '', 'base64'));
      checksum = {
        algorithm,
        value: `${composite.digest().toString('base64')}-${parts.length}`,
        type: 'COMPOSITE',
      };
    }
    const fields: NewVersion = {
      etag: `"${createHash('md5').update(md5s).digest('hex')}-${parts.length}"`,
      size: settled.size,
      // Retention counts from the version's creation, which is now, as the bucket default's does in S3.
      headers: {
        ...upload.headers,
        ...lockHeadersFor(settings, upload.headers, store.clock().getTime()),
      },
      parts: parts.length,
      partSizes: parts.map((part) => part.size),
      ...(checksum === undefined ? {} : { checksum }),
    };
    meta = await store.commit(bucket, key, temp, fields, condition);
  } finally {
    await rm(temp, { force: true });
  }
  await store.removeUpload(uploadId);
  const host = header(req, 'host') ?? LOOPBACK;
  const location = `http://${host}/${encodeURIComponent(bucket)}/${key.split('/').map(encodeURIComponent).join('/')}`;
  const checksumElement =
    meta.checksum === undefined
      ? ''
      : `${element(`Checksum${meta.checksum.algorithm}`, meta.checksum.value)}${element('ChecksumType', meta.checksum.type)}`;
  sendXml(
    res,
    200,
    `<CompleteMultipartUploadResult xmlns="${XMLNS}">${element('Location', location)}${element('Bucket', bucket)}${element('Key', key)}${element('ETag', meta.etag)}${checksumElement}</CompleteMultipartUploadResult>`,
    { ...pick(upload.headers, SSE_HEADERS), ...versionHeader(settings, meta.versionId) },
  );
}

/** The most parts one ListParts page holds, as in S3. */
const MAX_LIST_PARTS = 1000;

/**
 * ListParts: the upload's parts above `part-number-marker`, up to `max-parts` (1,000 at most) a
 * page, each with its number, ETag, size and checksum in the upload's algorithm.
 */
export async function listParts(call: Call, key: string) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['uploadId', 'max-parts', 'part-number-marker']);
  await store.requireBucket(bucket);
  const uploadId = query.get('uploadId') ?? '';
  const upload = await store.readUpload(uploadId, bucket, key);
  const maxParts = boundedInteger(query.get('max-parts'), 'max-parts', MAX_LIST_PARTS) ?? MAX_LIST_PARTS;
  const marker = boundedInteger(query.get('part-number-marker'), 'part-number-marker', MAX_PART_NUMBER) ?? 0;
  const above = (await store.listParts(uploadId)).filter(({ partNumber }) => partNumber > marker);
  const page = above.slice(0, Math.min(maxParts, MAX_LIST_PARTS));
  const truncated = above.length > page.length;
  const algorithm = upload.checksumAlgorithm;
  const parts = page
    .map(
      ({ partNumber, part }) =>
        `<Part>${element('PartNumber', partNumber)}${element('ETag', part.etag)}${element('Size', part.size)}${
          algorithm === undefined || part.checksum === undefined
            ? ''
            : element(`Checksum${algorithm}`, part.checksum)
        }</Part>`,
    )
    .join('');
  sendXml(
    res,
    200,
    `<ListPartsResult xmlns="${XMLNS}">${element('Bucket', bucket)}${element('Key', key)}${element('UploadId', uploadId)}${element('PartNumberMarker', marker)}${element('NextPartNumberMarker', page.at(-1)?.partNumber ?? marker)}${element('MaxParts', maxParts)}${element('IsTruncated', truncated)}${algorithm === undefined ? '' : element('ChecksumAlgorithm', algorithm)}${parts}</ListPartsResult>`,
  );
}

function boundedInteger(value: string | null, name: string, max: number): number | undefined {
  if (value === null) return undefined;
  if (!/^\d{1,5}$/.test(value) || Number(value) > max) {
    throw invalidArgument(`Argument ${name} must be an integer between 0 and ${max}`);
  }
  return Number(value);
}

export async function abortMultipartUpload(call: Call, key: string) {
  const { store, res, bucket, query } = call;
  allowQuery(query, ['uploadId']);
  await store.requireBucket(bucket);
  const uploadId = query.get('uploadId') ?? '';
  await store.readUpload(uploadId, bucket, key);
  await store.removeUpload(uploadId);
  sendEmpty(res, 204);
}
