import { describe, expect, it } from 'vitest';
import { hashStoredObject, REQUIRED_ENTRIES, verifyStoredZip } from '#shared/archive';
import { ArchiveTooLargeError, InvalidArchiveError } from '#shared/errors';
import {
  buildZip,
  centralDirectoryHeaders,
  commandNames,
  copyServed,
  exportEntries,
  failure,
  MESSAGES_MARKER,
  MiB,
  patchCentralDirectory,
  pseudoRandomBytes,
  sha256,
  store,
  target,
  useArchiveStandIns,
} from './fixtures.ts';

useArchiveStandIns();

describe('verifyStoredZip', () => {
  it('lists every entry of an intact export, checks the SHA-256, and reads a small one in one ranged GET after a HEAD where the store refuses suffix ranges', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const { stored, bytes, sha256: copiedSha } = await copyServed(zip);
    store.commands.length = 0;
    // Act
    const verified = await verifyStoredZip(stored, { bytes, sha256: copiedSha });
    // Assess
    expect(verified.entries.map((entry) => entry.name).sort()).toEqual([...REQUIRED_ENTRIES]);
    const messages = verified.entries.find((entry) => entry.name === 'messages.json');
    expect(messages?.uncompressedSize).toBeGreaterThan(MESSAGES_MARKER.length);
    const gets = store.commands.filter((command) => command.name === 'GetObjectCommand');
    const [rangedGets, wholeGets] = [
      gets.filter((command) => 'Range' in command.input),
      gets.filter((command) => !('Range' in command.input)),
    ];
    // This stand-in refuses the suffix range that would have brought size and tail in one GET, so
    // a HEAD finds the size; an export this small is then read in one ranged GET, whatever order
    // yauzl asks for its parts in.
    expect(bytes).toBeLessThan(256 * 1024);
    expect(commandNames().filter((name) => name === 'HeadObjectCommand')).toHaveLength(1);
    expect(rangedGets.map((command) => (command.input as { Range?: string }).Range)).toEqual([
      `bytes=-${256 * 1024}`,
      `bytes=0-${bytes - 1}`,
    ]);
    // That read, pinned to the ETag HEAD saw, also serves the SHA-256 pass: nothing is read twice.
    expect(wholeGets).toHaveLength(0);
    // Every read after the first is pinned to the ETag the first answer (here the HEAD) gave.
    for (const get of gets.slice(1)) expect(get.input).toHaveProperty('IfMatch');
  });

  it('verifies a large stored entry by streaming it through ranged reads', async () => {
    // Prepare
    const big = pseudoRandomBytes(6 * MiB, 7);
    const zip = await buildZip(
      exportEntries({
        omit: 'messages.json',
        extra: [{ name: 'messages.json', data: big, compress: false }],
      }),
    );
    const { stored, bytes } = await copyServed(zip);
    store.commands.length = 0;
    // Act
    const verified = await verifyStoredZip(stored, { bytes });
    // Assess
    expect(verified.entries.find((entry) => entry.name === 'messages.json')?.uncompressedSize).toBe(
      big.length,
    );
    const bigRange = store.commands.find(
      (command) =>
        command.name === 'GetObjectCommand' &&
        'Range' in command.input &&
        String(command.input.Range).length > 0,
    );
    expect(bigRange).toBeDefined();
  });

  it('detects an entry whose stored bytes were corrupted (CRC-32 mismatch) and names it', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const corrupted = Buffer.from(zip);
    const at = corrupted.indexOf(MESSAGES_MARKER);
    corrupted[at] = (corrupted[at] ?? 0) ^ 0x20;
    const { stored, bytes } = await copyServed(corrupted);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('messages.json');
    expect(error.message).toContain('CRC-32');
  });

  it('detects a corrupted deflated entry and names it', async () => {
    // Prepare
    const profile = JSON.stringify({
      bio: 'x'.repeat(2000),
      pseudo: pseudoRandomBytes(3000).toString('base64'),
    });
    const zip = await buildZip(
      exportEntries({ omit: 'profile.json', extra: [{ name: 'profile.json', data: profile }] }),
    );
    const header = centralDirectoryHeaders(zip).find((candidate) => candidate.name === 'profile.json');
    if (header === undefined) throw new Error('profile.json missing from the test zip');
    const localHeader = zip.readUInt32LE(header.offset + 42);
    const dataStart =
      localHeader + 30 + zip.readUInt16LE(localHeader + 26) + zip.readUInt16LE(localHeader + 28);
    const corrupted = Buffer.from(zip);
    const middle = dataStart + Math.floor(zip.readUInt32LE(header.offset + 20) / 2);
    corrupted[middle] = (corrupted[middle] ?? 0) ^ 0xff;
    const { stored, bytes } = await copyServed(corrupted);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('profile.json');
  });

  it('rejects an archive without profile.json', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(await buildZip(exportEntries({ omit: 'profile.json' })));
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('the archive lacks profile.json');
  });

  it('rejects a body that is not a zip', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(
      Buffer.from('<html><body>Your download has expired</body></html>'),
    );
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('not a readable zip');
  });

  it('rejects a stored object whose size differs from the copy', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(await buildZip(exportEntries()));
    store.commands.length = 0;
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes: bytes + 1 }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe(`the stored archive is ${bytes} bytes, but ${bytes + 1} were copied`);
    expect(commandNames()).toEqual(['GetObjectCommand', 'HeadObjectCommand']);
  });

  it('re-reads a zip larger than one read for its SHA-256, and catches a mismatch there', async () => {
    // Prepare
    const zip = await buildZip(
      exportEntries({
        omit: 'messages.json',
        extra: [{ name: 'messages.json', data: pseudoRandomBytes(MiB, 9), compress: false }],
      }),
    );
    const { stored, bytes, sha256: copiedSha } = await copyServed(zip);
    store.commands.length = 0;
    // Act
    await verifyStoredZip(stored, { bytes, sha256: copiedSha });
    const wrong = await failure(verifyStoredZip(stored, { bytes, sha256: sha256(Buffer.from('other')) }));
    // Assess
    const wholeGets = store.commands.filter(
      (command) => command.name === 'GetObjectCommand' && !('Range' in command.input),
    );
    expect(wholeGets).toHaveLength(2);
    expect(wrong).toBeInstanceOf(InvalidArchiveError);
    expect(wrong.message).toContain('SHA-256');
  });

  it('rejects a stored object whose SHA-256 differs from the copy', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(await buildZip(exportEntries()));
    // Act
    const error = await failure(
      verifyStoredZip(stored, { bytes, sha256: sha256(Buffer.from('something else')) }),
    );
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('SHA-256');
  });

  it('rejects a missing object', async () => {
    // Act
    const error = await failure(verifyStoredZip(target(), { bytes: 100 }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('missing');
  });

  it('rejects an entry that expands beyond the ratio limit before inflating it', async () => {
    // Prepare
    const bomb = Buffer.alloc(8 * MiB);
    const zip = await buildZip(exportEntries({ extra: [{ name: 'padding.bin', data: bomb }] }));
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toMatch(
      /^an entry whose name is not one of the four documented files expands \d+:1, above the 200:1 limit$/,
    );
  });

  it('rejects an archive whose entries together exceed the uncompressed limit with ArchiveTooLargeError naming both', async () => {
    // Prepare
    const zip = await buildZip(
      exportEntries({ extra: [{ name: 'media.bin', data: pseudoRandomBytes(2 * MiB), compress: false }] }),
    );
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }, { maxUncompressedBytes: MiB }));
    // Assess
    expect(error).toBeInstanceOf(ArchiveTooLargeError);
    const expanded = 2 * MiB + exportEntries().reduce((sum, entry) => sum + Buffer.byteLength(entry.data), 0);
    expect(error.message).toContain(`expand to ${expanded} bytes, past the limit of ${MiB}`);
    expect(error.message).toContain('raise the setting');
  });

  it('rejects an encrypted entry and names it', async () => {
    // Prepare
    // General purpose flag bit 0 marks an entry as encrypted.
    const encrypted = patchCentralDirectory(await buildZip(exportEntries()), 'likes.json', (copy, offset) => {
      copy.writeUInt16LE(copy.readUInt16LE(offset + 8) | 0x1, offset + 8);
    });
    const { stored, bytes } = await copyServed(encrypted);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('entry likes.json is encrypted');
  });

  it('rejects an archive that lists the same entry twice', async () => {
    // Prepare
    const zip = await buildZip(exportEntries({ extra: [{ name: 'likes.json', data: '[]' }] }));
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('entry likes.json appears twice');
  });

  it('rejects an entry with a compression method it cannot check', async () => {
    // Prepare
    // Method 12 is bzip2, which the verifier cannot decode and so cannot check.
    const zip = patchCentralDirectory(await buildZip(exportEntries()), 'dislikes.json', (copy, offset) => {
      copy.writeUInt16LE(12, offset + 10);
    });
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('entry dislikes.json uses compression method 12');
  });

  it('never quotes an undocumented entry name, which may hold an e-mail, a link or terminal escapes', async () => {
    // Prepare
    const hostileName = 'jane.doe@example.com https://evil.example/x \u001b[2J.json';
    const zip = patchCentralDirectory(
      await buildZip(exportEntries({ extra: [{ name: hostileName, data: '[]' }] })),
      hostileName,
      (copy, offset) => {
        copy.writeUInt16LE(copy.readUInt16LE(offset + 8) | 0x1, offset + 8);
      },
    );
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('an entry whose name is not one of the four documented files is encrypted');
  });

  it("drops the entry name from the zip reader's own complaint about it", async () => {
    // Prepare: an entry name that climbs out of the folder, with an e-mail address in it.
    const built = await buildZip(exportEntries({ extra: [{ name: 'zz/jane.doe@example.com', data: '[]' }] }));
    const zip = Buffer.from(built.toString('latin1').replaceAll('zz/jane', '../jane'), 'latin1');
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('invalid relative path in an entry name');
    expect(error.message).not.toContain('@');
  });
});

describe('hashStoredObject', () => {
  it('recomputes the SHA-256 and size of the stored object', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const { stored } = await copyServed(zip);
    // Act
    const hashed = await hashStoredObject(stored);
    // Assess
    expect(hashed).toEqual({ bytes: zip.length, sha256: sha256(zip) });
  });
});
