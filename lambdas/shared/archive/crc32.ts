/**
 * CRC-32 (zlib's, the one zip and S3's CRC32 checksum use) without a second pass over the bytes.
 * The copy computes each chunk's CRC once; the part it goes into and the stored zip entry it
 * belongs to both take that value and combine it into their own, as zlib's crc32_combine does.
 */
import { crc32 } from 'node:zlib';

/** The CRC-32 polynomial, reflected. */
const POLY = 0xedb88320;

/** a(x) * b(x) modulo the CRC polynomial, both reflected. */
function multiplyModP(a: number, b: number): number {
  let product = 0;
  let factor = b;
  for (let bit = 0x80000000; bit !== 0; bit >>>= 1) {
    if ((a & bit) !== 0) {
      product ^= factor;
      if ((a & (bit - 1)) === 0) break;
    }
    factor = (factor & 1) !== 0 ? (factor >>> 1) ^ POLY : factor >>> 1;
  }
  return product >>> 0;
}

/** x^(2^k) modulo the polynomial, for k = 0..31. */
const X_POW_2K: readonly number[] = (() => {
  const table = [0x40000000];
  for (let k = 1; k < 32; k += 1) {
    const previous = table[k - 1] as number;
    table.push(multiplyModP(previous, previous));
  }
  return table;
})();

/** The multiplicative order of x modulo the polynomial: x^ORDER = 1. */
const ORDER = 0xffffffff;

/** x^(2^first * n) modulo the polynomial. */
function xPower(n: number, first: number): number {
  let power = 0x80000000;
  let k = first;
  for (let rest = n; rest > 0; rest = Math.floor(rest / 2), k += 1) {
    if (rest % 2 === 1) power = multiplyModP(X_POW_2K[k % 32] as number, power);
  }
  return power;
}

/** The CRC-32 of A followed by B, from A's CRC, B's CRC and B's length. */
export function crc32Combine(crcA: number, crcB: number, lengthB: number): number {
  // Appending B multiplies A's CRC by x^(8 * lengthB), then adds B's.
  return (multiplyModP(xPower(lengthB, 3), crcA >>> 0) ^ crcB) >>> 0;
}

/** The CRC-32 of A, from the CRC-32 of A followed by B, B's CRC and B's length: crc32Combine undone. */
export function crc32Unappend(crcAB: number, crcB: number, lengthB: number): number {
  let inverse = INVERSE_SHIFTS.get(lengthB);
  if (inverse === undefined) {
    inverse = xPower(ORDER - ((lengthB * 8) % ORDER), 0);
    // The copy undoes a few short tails, always of the same lengths.
    if (lengthB <= 64) INVERSE_SHIFTS.set(lengthB, inverse);
  }
  return multiplyModP(inverse, (crcAB ^ crcB) >>> 0);
}

/** x^(-8 * length) for the short lengths crc32Unappend has seen. */
const INVERSE_SHIFTS = new Map<number, number>();

/**
 * The CRC-32 of what `crc` covers followed by `bytes`. `crcOfBytes`, when given, is the CRC-32 of
 * `bytes` computed already, and saves the pass over them.
 */
export function crc32Append(crc: number, bytes: Uint8Array, crcOfBytes?: number): number {
  return crcOfBytes === undefined ? crc32(bytes, crc) : crc32Combine(crc, crcOfBytes, bytes.length);
}

/** A CRC32 as S3 writes it: the four big-endian bytes in base64. */
export function crc32Base64(crc: number): string {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(crc >>> 0);
  return bytes.toString('base64');
}

/** S3's COMPOSITE CRC32 of a multipart object: the CRC32 of the parts' CRC32s, then `-<parts>`. */
export function compositeCrc32(partCrcs: readonly number[]): string {
  const joined = Buffer.alloc(partCrcs.length * 4);
  for (const [index, crc] of partCrcs.entries()) joined.writeUInt32BE(crc >>> 0, index * 4);
  return `${crc32Base64(crc32(joined))}-${partCrcs.length}`;
}
