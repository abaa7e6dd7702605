import { createCipheriv, createHash } from 'node:crypto';

/** A seeded pseudo-random source: the same seed and stream name always give the same sequence. */
export interface Random {
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [0, bound). */
  below(bound: number): number;
  /** A string of lowercase letters and digits. */
  suffix(length: number): string;
}

const SUFFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/**
 * Each concern (faults, names, exports, downloads) draws from its own stream, so that turning one
 * feature on does not shift the random choices of another between two runs with the same seed.
 */
export function createRandom(seed: number, stream: string): Random {
  const digest = createHash('sha256').update(`svc-emulator:${seed}:${stream}`).digest();
  let state = digest.readUInt32LE(0);
  // mulberry32: small, fast and good enough for fault injection and name suffixes.
  const next = (): number => {
    state = (state + 0x6d2b79f5) | 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const below = (bound: number): number => Math.floor(next() * bound);
  const suffix = (length: number): string => {
    let out = '';
    for (let index = 0; index < length; index += 1) {
      out += SUFFIX_ALPHABET[below(SUFFIX_ALPHABET.length)];
    }
    return out;
  };
  return { next, below, suffix };
}

/**
 * Deterministic pseudo-random bytes for the padding entry. AES-CTR over zeros runs at several
 * GB/s, so a 1 GiB download is limited by the client, not by the emulator.
 */
export function* pseudoRandomBytes(seed: number, total: number, chunkSize = 256 * 1024): Generator<Buffer> {
  const key = createHash('sha256').update(`svc-emulator-padding:${seed}`).digest();
  const cipher = createCipheriv('aes-256-ctr', key, Buffer.alloc(16));
  const zeros = Buffer.alloc(chunkSize);
  let remaining = total;
  while (remaining > 0) {
    const length = Math.min(chunkSize, remaining);
    yield cipher.update(length === chunkSize ? zeros : zeros.subarray(0, length));
    remaining -= length;
  }
}
