/**
 * Seeded pseudo-random streams: the same seed and stream name always give the same sequence, so fault
 * injection and generated data repeat run after run.
 */
import { createCipheriv, createHash } from 'node:crypto';

/** A seeded pseudo-random source: the same seed and stream name always give the same sequence. */
export interface Random {
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [0, bound). */
  below(bound: number): number;
  /** A string of lowercase letters and digits. */
  suffix(length: number): string;
  /** Where the stream stands; createRandom(seed, stream, position) continues from here. */
  position(): number;
}

const SUFFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/**
 * Each concern (faults, names, exports, downloads) draws from its own stream, so that turning one
 * feature on does not shift the random choices of another between two runs with the same seed.
 * A `position` from an earlier stream's position() resumes it (a restarted emulator continues).
 */
export function createRandom(seed: number, stream: string, position?: number): Random {
  const digest = createHash('sha256').update(`svc-emulator:${seed}:${stream}`).digest();
  let state = position ?? digest.readUInt32LE(0);
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
  return { next, below, suffix, position: () => state };
}

/** Padding repeats one keystream block per seed: the server then spends no CPU and no memory per byte. */
const PADDING_BLOCK_BYTES = 1024 * 1024;
/** A few seeds are kept, so an emulator run with many seeds does not grow without bound. */
const PADDING_BLOCKS_KEPT = 4;
const paddingBlocks = new Map<number, Buffer>();

function paddingBlock(seed: number): Buffer {
  let block = paddingBlocks.get(seed);
  if (block === undefined) {
    const key = createHash('sha256').update(`svc-emulator-padding:${seed}`).digest();
    const cipher = createCipheriv('aes-256-ctr', key, Buffer.alloc(16));
    block = Buffer.concat([cipher.update(Buffer.alloc(PADDING_BLOCK_BYTES)), cipher.final()]);
    paddingBlocks.set(seed, block);
    const oldest = paddingBlocks.keys().next();
    if (paddingBlocks.size > PADDING_BLOCKS_KEPT && !oldest.done) paddingBlocks.delete(oldest.value);
  }
  return block;
}

/**
 * Deterministic pseudo-random bytes for the padding entry: a 1 MiB AES-CTR keystream block for the
 * seed, repeated. Incompressible enough for a transfer, and a 1 GiB download is limited by the
 * client, not by the emulator generating it. The chunks share one buffer: read them, never write.
 */
export function* pseudoRandomBytes(seed: number, total: number, chunkSize = 256 * 1024): Generator<Buffer> {
  const block = paddingBlock(seed);
  let position = 0;
  let remaining = total;
  while (remaining > 0) {
    const length = Math.min(chunkSize, remaining, block.length - position);
    yield block.subarray(position, position + length);
    position = (position + length) % block.length;
    remaining -= length;
  }
}
