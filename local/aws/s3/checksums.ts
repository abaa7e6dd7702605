/** The checksums S3 verifies on a PUT or a part (CRC32, SHA-256) and returns with an object. */
import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { invalidRequest, notImplemented } from './errors.ts';

export const CHECKSUM_ALGORITHMS = ['CRC32', 'SHA256'] as const;
export type ChecksumAlgorithm = (typeof CHECKSUM_ALGORITHMS)[number];
const DIGEST_BYTES: Readonly<Record<ChecksumAlgorithm, number>> = { CRC32: 4, SHA256: 32 };
const KNOWN_UNSUPPORTED_ALGORITHMS = new Set(['CRC32C', 'CRC64NVME', 'SHA1']);
/** `x-amz-checksum-*` headers that carry settings rather than a checksum value. */
export const CHECKSUM_SETTING_HEADERS = new Set([
  'x-amz-checksum-algorithm',
  'x-amz-checksum-type',
  'x-amz-checksum-mode',
]);

interface Digester {
  update(chunk: Buffer): void;
  digest(): Buffer;
}

export function digester(algorithm: ChecksumAlgorithm): Digester {
  if (algorithm === 'CRC32') {
    let value = 0;
    return {
      update: (chunk) => {
        value = crc32(chunk, value);
      },
      digest: () => {
        const out = Buffer.alloc(4);
        out.writeUInt32BE(value >>> 0);
        return out;
      },
    };
  }
  const hash = createHash('sha256');
  return { update: (chunk) => hash.update(chunk), digest: () => hash.digest() };
}

export function checksumHeader(algorithm: ChecksumAlgorithm): string {
  return `x-amz-checksum-${algorithm.toLowerCase()}`;
}

/** The algorithm named by a header value or an `x-amz-checksum-<name>` suffix. */
export function parseAlgorithm(name: string): ChecksumAlgorithm {
  const upper = name.toUpperCase();
  const known = CHECKSUM_ALGORITHMS.find((algorithm) => algorithm === upper);
  if (known !== undefined) return known;
  if (KNOWN_UNSUPPORTED_ALGORITHMS.has(upper)) {
    throw notImplemented(`The ${upper} checksum (use SHA256 or CRC32)`);
  }
  throw invalidRequest(`Checksum algorithm ${name} is not valid.`);
}

/** A base64 checksum value of the right length for its algorithm, or a 400. */
export function checkChecksumValue(algorithm: ChecksumAlgorithm, value: string): string {
  const trimmed = value.trim();
  const bytes = Buffer.from(trimmed, 'base64');
  if (bytes.length !== DIGEST_BYTES[algorithm] || bytes.toString('base64') !== trimmed) {
    throw invalidRequest(`Value for ${checksumHeader(algorithm)} header is invalid.`);
  }
  return trimmed;
}
