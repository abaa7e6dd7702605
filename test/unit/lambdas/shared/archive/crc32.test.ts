import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { crc32Append, crc32Combine, crc32Unappend } from '#shared/archive/crc32';
import { pseudoRandomBytes } from './fixtures.ts';

describe('crc32Combine', () => {
  it("equals zlib's CRC-32 of the two pieces joined, for every cut of a buffer", () => {
    // Prepare: lengths from empty to past 64 KiB, so every bit of the length is exercised
    const data = pseudoRandomBytes(70_001);
    for (const cut of [0, 1, 2, 3, 7, 255, 256, 4096, 65_535, 65_536, 69_999, 70_000, 70_001]) {
      const head = data.subarray(0, cut);
      const tail = data.subarray(cut);
      // Act
      const combined = crc32Combine(crc32(head), crc32(tail), tail.length);
      // Assess
      expect(combined, `cut at ${cut}`).toBe(crc32(data));
    }
  });

  it('is associative for lengths past 4 GiB, where the length no longer fits 32 bits', () => {
    // Prepare: three CRCs of pieces whose lengths are only declared (the CRCs are arbitrary)
    const [a, b, c] = [0x12345678, 0x9abcdef0, 0x0fedcba9];
    const lengthB = 5 * 1024 ** 3 + 3;
    const lengthC = 2 ** 32 + 17;
    // Act
    const left = crc32Combine(crc32Combine(a, b, lengthB), c, lengthC);
    const right = crc32Combine(a, crc32Combine(b, c, lengthC), lengthB + lengthC);
    // Assess
    expect(left).toBe(right);
    expect(crc32Combine(a, 0, 0)).toBe(a);
  });
});

describe('crc32Unappend', () => {
  it('gives back the CRC-32 of the head from that of the whole and of the tail, for every cut', () => {
    // Prepare
    const data = pseudoRandomBytes(70_001);
    for (const cut of [0, 1, 3, 64, 65_536, 69_998, 70_001]) {
      const tail = data.subarray(cut);
      // Act
      const head = crc32Unappend(crc32(data), crc32(tail), tail.length);
      // Assess
      expect(head, `cut at ${cut}`).toBe(crc32(data.subarray(0, cut)));
    }
  });
});

describe('crc32Append', () => {
  it('gives the CRC-32 of everything added, whether a chunk came with its CRC or not', () => {
    // Prepare
    const data = pseudoRandomBytes(300_000);
    let running = 0;
    // Act: chunks of uneven size, every other one with its CRC computed beforehand
    let offset = 0;
    for (let index = 0; offset < data.length; index += 1) {
      const chunk = data.subarray(offset, offset + 1000 + index * 997);
      running = crc32Append(running, chunk, index % 2 === 0 ? crc32(chunk) : undefined);
      offset += chunk.length;
    }
    // Assess
    expect(running).toBe(crc32(data));
  });
});
