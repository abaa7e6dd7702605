import { crc32, deflateRawSync, inflateRawSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { pseudoRandomBytes } from '#local/emulator/prng';
import { deflateEntry, deflatePieces, entryMatches, exactSize, planZip } from '#local/emulator/zip';
import { unzip } from './helpers.ts';

function collect(chunks: Iterable<Buffer>): Buffer {
  return Buffer.concat([...chunks]);
}

describe('planZip', () => {
  it('announces exactly the size it produces and writes entries any unzip reads with correct CRCs', async () => {
    // Prepare
    const plan = planZip(
      [
        { name: 'a.json', data: Buffer.from('{"a":1}') },
        { name: 'ünïcode.json', data: Buffer.from('[]') },
      ],
      [{ name: 'padding.bin', size: 70_001, chunks: () => pseudoRandomBytes(1, 70_001, 4096) }],
    );

    // Act
    const bytes = collect(plan.chunks());
    const entries = await unzip(bytes);

    // Assess
    expect(bytes.length).toBe(plan.size);
    expect(entries.get('a.json')?.data.toString()).toBe('{"a":1}');
    expect(entries.get('ünïcode.json')?.data.toString()).toBe('[]');
    const padding = entries.get('padding.bin');
    expect(padding?.data.length).toBe(70_001);
    expect(padding?.crc32).toBe(crc32(padding?.data ?? Buffer.alloc(0)));
    expect(entries.get('a.json')?.compressionMethod).toBe(8);
  });

  it('produces identical bytes on every run, independent of the clock and time zone', () => {
    // Prepare
    const make = () =>
      planZip(
        [{ name: 'x.json', data: Buffer.from('x') }],
        [{ name: 'p', size: 10, chunks: () => pseudoRandomBytes(5, 10) }],
      );

    // Act
    const first = collect(make().chunks());
    const second = collect(make().chunks());

    // Assess
    expect(first.equals(second)).toBe(true);
    expect(first.readUInt16LE(10)).toBe(0);
    expect(first.readUInt16LE(12)).toBe(((2020 - 1980) << 9) | (1 << 5) | 1);
  });

  it('produces a large archive lazily, chunk by chunk, without holding it in memory', () => {
    // Prepare
    const size = 2 * 1024 * 1024 * 1024;
    const plan = planZip([], [{ name: 'padding.bin', size, chunks: () => pseudoRandomBytes(1, size) }]);
    const before = process.memoryUsage().arrayBuffers;

    // Act
    const iterator = plan.chunks();
    let produced = 0;
    for (let index = 0; index < 40; index += 1) produced += iterator.next().value?.length ?? 0;
    iterator.return(undefined);

    // Assess
    expect(plan.size).toBe(size + 30 + 11 + 16 + 46 + 11 + 22);
    expect(produced).toBeGreaterThan(9 * 1024 * 1024);
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(256 * 1024 * 1024);
  });

  it('refuses a streamed entry that would need ZIP64', () => {
    // Act
    const plan = () => planZip([], [{ name: 'big', size: 5 * 1024 ** 3, chunks: () => [] }]);

    // Assess
    expect(plan).toThrow(RangeError);
  });
});

describe('deflateEntry', () => {
  it('keeps a small entry in a buffer of its own size, not in zlib’s 16 KiB output chunk', () => {
    // Act
    const entry = deflateEntry({
      name: 'profile.json',
      data: Buffer.from(JSON.stringify({ a: 'b'.repeat(50) })),
    });

    // Assert
    expect(entry.deflated.buffer.byteLength).toBe(entry.deflated.length);
    expect(entryMatches(entry)).toBe(true);
  });
});

describe('deflatePieces', () => {
  it('deflates an entry made of pieces into one stream that inflates to their concatenation', () => {
    // Prepare: three megabytes of JSON-like text in pieces of about 100 KB, and an empty piece.
    const pieces = Array.from({ length: 30 }, (_, index) =>
      Array.from(
        { length: 1000 },
        (_, line) => `{"id":"m-${index}-${line}","text":"comment ${line * index}"},\n`,
      ).join(''),
    );
    pieces.splice(7, 0, '');
    const whole = Buffer.from(pieces.join(''));

    // Act
    const entry = deflatePieces('messages.json', pieces);

    // Assert
    expect(inflateRawSync(entry.deflated).equals(whole)).toBe(true);
    expect(entry.size).toBe(whole.length);
    expect(entryMatches(entry)).toBe(true);
    expect(entry.deflated.buffer.byteLength).toBe(entry.deflated.length);
    // Deflating the pieces apart costs little next to one stream over the whole.
    expect(entry.deflated.length).toBeLessThan(deflateRawSync(whole, { level: 6 }).length * 1.05 + 64);
  });

  it('deflates no pieces into an empty entry', () => {
    const entry = deflatePieces('likes.json', []);
    expect(inflateRawSync(entry.deflated).length).toBe(0);
    expect(entryMatches(entry)).toBe(true);
  });
});

describe('exactSize', () => {
  it('copies a view of a larger buffer into one of its own size, and keeps an exact one as it is', () => {
    // Prepare
    const pooled = Buffer.from('c2hvcnQ=', 'base64');
    const exact = Buffer.alloc(5, 1);

    // Act
    const copied = exactSize(pooled);

    // Assert
    expect(pooled.buffer.byteLength).toBeGreaterThan(pooled.length);
    expect(copied.buffer.byteLength).toBe(copied.length);
    expect(copied.toString()).toBe('short');
    expect(exactSize(exact)).toBe(exact);
  });
});
