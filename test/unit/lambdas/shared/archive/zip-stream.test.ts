import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import yazl from 'yazl';
import { ZipStreamCheck } from '#shared/archive/zip-stream';
import { ArchiveTooLargeError, InvalidArchiveError } from '#shared/errors';

const LIMITS = { maxUncompressedBytes: 64 * 1024 * 1024, maxRatio: 200, maxEntries: 100 };
const JSON_FILES = {
  'profile.json': JSON.stringify({ user_name: 'alice', bio: 'hello '.repeat(500) }),
  'likes.json': JSON.stringify([{ message_id: 'm1' }]),
  'dislikes.json': '[]',
  'messages.json': JSON.stringify([{ id: 'm1', text: 'first comment '.repeat(200) }]),
};

/** A yazl zip of the four files; `streamed` writes them with data descriptors (sizes after the data). */
async function yazlZip(
  options: { streamed?: boolean; compress?: boolean; zip64?: boolean } = {},
): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  for (const [name, data] of Object.entries(JSON_FILES)) {
    const fixed = {
      compress: options.compress ?? true,
      mtime: new Date('2020-01-01T00:00:00Z'),
      forceZip64Format: options.zip64 ?? false,
    };
    if (options.streamed) zip.addReadStream(Readable.from([Buffer.from(data)]), name, fixed);
    else zip.addBuffer(Buffer.from(data), name, fixed);
  }
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/**
 * The platform's layout: deflated JSON files, then a stored entry whose sizes follow its data (a
 * data descriptor), as a streamed entry of unknown size is written.
 */
async function paddedZip(padding: Buffer): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  const mtime = new Date('2020-01-01T00:00:00Z');
  for (const [name, data] of Object.entries(JSON_FILES)) zip.addBuffer(Buffer.from(data), name, { mtime });
  zip.addReadStream(Readable.from([padding]), 'padding.bin', { compress: false, mtime });
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/** Feeds `zip` in chunks of `chunkSize` and judges it. */
async function check(zip: Buffer, chunkSize: number, limits = LIMITS) {
  const checker = new ZipStreamCheck(limits);
  for (let offset = 0; offset < zip.length; offset += chunkSize) {
    await checker.write(zip.subarray(offset, offset + chunkSize));
  }
  return checker.finish(zip.length);
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof Error) return error;
  }
  throw new Error('expected a failure');
}

/** The offset of the first byte of `name`'s data in a zip whose local headers have no extra field. */
function dataOffset(zip: Buffer, name: string): number {
  for (let at = zip.indexOf('PK\x03\x04'); at !== -1; at = zip.indexOf('PK\x03\x04', at + 4)) {
    const nameLength = zip.readUInt16LE(at + 26);
    const extraLength = zip.readUInt16LE(at + 28);
    if (zip.subarray(at + 30, at + 30 + nameLength).toString() === name)
      return at + 30 + nameLength + extraLength;
  }
  throw new Error(`no entry ${name}`);
}

describe('ZipStreamCheck', () => {
  it.each([1, 7, 4096, 1 << 20])(
    'verifies every entry of a deflated zip fed in %i-byte chunks',
    async (size) => {
      // Prepare
      const zip = await yazlZip();
      // Act
      const verified = await check(zip, size);
      // Assess
      expect(verified?.entries.map((entry) => entry.name).sort()).toEqual(Object.keys(JSON_FILES).sort());
      const profile = verified?.entries.find((entry) => entry.name === 'profile.json');
      expect(profile?.uncompressedSize).toBe(JSON_FILES['profile.json'].length);
    },
  );

  it('finds where deflated entries with data descriptors end, with no sizes in their headers', async () => {
    // Prepare
    const zip = await yazlZip({ streamed: true });
    // Act
    const verified = await check(zip, 333);
    // Assess
    expect(verified?.entries).toHaveLength(4);
  });

  it.each([
    { streamed: false, compress: true },
    { streamed: true, compress: true },
    { streamed: true, compress: false },
  ])('follows ZIP64 headers and data descriptors (%o)', async (layout) => {
    // Prepare
    const zip = await yazlZip({ ...layout, zip64: true });
    // Act
    const verified = await check(zip, 500);
    // Assess
    expect(verified?.entries).toHaveLength(4);
  });

  it('finds the end of a stored entry of unknown size even when its data holds a descriptor signature', async () => {
    // Prepare: the signature, and a whole fake descriptor, inside the stored data
    const padding = Buffer.alloc(300_000, 0x61);
    Buffer.from('PK\x07\x08').copy(padding, 1000);
    Buffer.from('PK\x07\x08\x00\x00\x00\x00\xe8\x03\x00\x00\xe8\x03\x00\x00', 'latin1').copy(padding, 5000);
    const zip = await paddedZip(padding);
    // Act
    const verified = await check(zip, 65_536);
    // Assess
    expect(verified?.entries.find((entry) => entry.name === 'padding.bin')).toMatchObject({
      compressedSize: padding.length,
      uncompressedSize: padding.length,
    });
  });

  it('names the entry whose stored bytes do not match their CRC-32', async () => {
    // Prepare
    const zip = await yazlZip({ compress: false });
    const corrupt = Buffer.from(zip);
    const at = dataOffset(corrupt, 'messages.json') + 10;
    corrupt[at] = (corrupt[at] ?? 0) ^ 0xff;
    // Act
    const error = await failure(check(corrupt, 1000));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toMatch(/entry messages\.json: the data's CRC-32 [0-9a-f]{8} does not match/);
  });

  it('names the entry whose deflated data does not match the CRC-32 the directory records', async () => {
    // Prepare: the directory's CRC for profile.json is changed
    const zip = await yazlZip();
    const corrupt = Buffer.from(zip);
    const directory = corrupt.lastIndexOf(
      'PK\x01\x02',
      corrupt.indexOf('profile.json', corrupt.indexOf('PK\x01\x02')),
    );
    corrupt.writeUInt32LE((corrupt.readUInt32LE(directory + 16) ^ 1) >>> 0, directory + 16);
    // Act
    const error = await failure(check(corrupt, 4096));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('entry profile.json: the data');
  });

  it('rejects a zip cut off before its central directory as truncated', async () => {
    // Prepare
    const zip = await paddedZip(Buffer.alloc(100_000, 1));
    // Act
    const error = await failure(check(zip.subarray(0, 60_000), 8192));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('truncated');
  });

  it('rejects a zip cut off inside a deflated entry', async () => {
    // Prepare
    const zip = await yazlZip();
    const cut = dataOffset(zip, 'profile.json') + 20;
    // Act
    const error = await failure(check(zip.subarray(0, cut), 4096));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
  });

  it('stops with ArchiveTooLargeError while the data streams, naming the limit', async () => {
    // Prepare: a stored entry of unknown size, larger than the limit
    const zip = await paddedZip(Buffer.alloc(3 * 1024 * 1024, 7));
    const checker = new ZipStreamCheck({ ...LIMITS, maxUncompressedBytes: 1024 * 1024 });
    let written = 0;
    // Act
    const error = await failure(
      (async () => {
        for (let offset = 0; offset < zip.length; offset += 65_536) {
          await checker.write(zip.subarray(offset, offset + 65_536));
          written = offset + 65_536;
        }
      })(),
    );
    // Assess: it stopped within a chunk of the limit, not at the end
    expect(error).toBeInstanceOf(ArchiveTooLargeError);
    expect(error.message).toContain('past the limit of 1048576');
    expect(error.message).toContain('archiveMaxExpandedBytes');
    expect(written).toBeLessThan(2 * 1024 * 1024);
  });

  it('refuses an entry whose header announces more than the limit before reading its data', async () => {
    // Prepare
    const zip = await yazlZip({ compress: false });
    // Act
    const error = await failure(check(zip, 1 << 20, { ...LIMITS, maxUncompressedBytes: 100 }));
    // Assess
    expect(error).toBeInstanceOf(ArchiveTooLargeError);
    expect((error as ArchiveTooLargeError).limitBytes).toBe(100);
  });

  it('stops at the first entry past the entry limit, before the directory', async () => {
    // Prepare
    const zip = await yazlZip();
    // Act
    const error = await failure(check(zip, 4096, { ...LIMITS, maxEntries: 3 }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('the archive has more than 3 entries, above the limit');
  });

  it('leaves a zip with bytes before its first entry undecided, for a reader of the stored copy', async () => {
    // Prepare
    const zip = Buffer.concat([Buffer.from('#!/bin/sh\n'), await yazlZip()]);
    // Act
    const verified = await check(zip, 4096);
    // Assess
    expect(verified).toBeUndefined();
  });

  it('rejects a zip without one of the documented files', async () => {
    // Prepare
    const zip = new yazl.ZipFile();
    zip.addBuffer(Buffer.from('{}'), 'profile.json');
    zip.end();
    const chunks: Buffer[] = [];
    for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
    // Act
    const error = await failure(check(Buffer.concat(chunks), 4096));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('lacks dislikes.json, likes.json, messages.json');
  });
});
