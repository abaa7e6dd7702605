import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { InvalidArchiveError } from '#shared/errors';
import { parseExportFiles } from '../../../../lambdas/build-package/export-files.ts';
import { type ActivityContext, normalisePackage } from '../../../../lambdas/build-package/normalise.ts';
import {
  buildPackageZip,
  describePlatformFiles,
  packageZipStream,
} from '../../../../lambdas/build-package/package-zip.ts';
import {
  type StreamHighWater,
  type StreamLimits,
  streamedExport,
} from '../../../../lambdas/build-package/streamed-export.ts';
import { exportedMessage, normaliseInput, rawFiles, T0 } from './fixtures.ts';

type RawFiles = Record<'dislikes.json' | 'likes.json' | 'messages.json' | 'profile.json', Buffer>;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'streamed-export-test-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function archiveOf(raw: Partial<RawFiles>, name = 'archive.zip'): Promise<string> {
  const zip = new yazl.ZipFile();
  for (const [file, data] of Object.entries(raw)) zip.addBuffer(data, file);
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
  const path = join(dir, name);
  await writeFile(path, Buffer.concat(chunks));
  return path;
}

async function collect(stream: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

async function entriesOf(zip: Buffer): Promise<Map<string, string>> {
  const file = await yauzl.fromBufferPromise(zip, { lazyEntries: true });
  const out = new Map<string, string>();
  for await (const entry of file.eachEntry()) {
    out.set(entry.fileName, (await collect(await file.openReadStreamPromise(entry))).toString('utf8'));
  }
  file.close();
  return out;
}

/** Small runs and a small fan-in, so even a few comments go through disk and a second merge level. */
const TINY: StreamLimits = { runBytes: 600, fanIn: 3 };

async function streamedZip(
  raw: RawFiles,
  activity: ActivityContext,
  limits: StreamLimits = TINY,
  highWater?: StreamHighWater,
): Promise<Buffer> {
  const { files: _files, platformFiles: _platform, ...input } = normaliseInput([], { activity });
  const scratch = await mkdtemp(join(dir, 'scratch-'));
  const { source, close } = await streamedExport(await archiveOf(raw), scratch, input, limits, highWater);
  try {
    return await collect(packageZipStream(source));
  } finally {
    await close();
  }
}

async function inMemoryZip(raw: RawFiles, activity: ActivityContext): Promise<Buffer> {
  const data = normalisePackage({
    ...normaliseInput([], { activity }),
    files: parseExportFiles(raw),
    platformFiles: describePlatformFiles(raw),
  });
  return buildPackageZip(data, raw);
}

const ACTIVITY: ActivityContext = {
  details: { status: 'complete', reason: null, pages: 1 },
  conversations: new Map([
    ['conv-a', { title: '</h3><script>alert(1)</script>', url: 'javascript:alert(1)' }],
    ['conv-b', { title: 'Budget', url: 'https://news.example.test/b?x="><script>' }],
  ]),
  messages: new Map([['m2', { deleted: true, status: 'deleted' }]]),
};

/** Replies to own and other comments, ties in time, a reply to an own comment in another conversation, votes repeated. */
function variedExport(): RawFiles {
  const messages = [
    exportedMessage('m1', 'conv-a', T0, '<b>first</b> in a'),
    exportedMessage('m2', 'conv-b', T0 + 7200, 'only in b\n\nwith "quotes" and \u2028 a separator'),
    exportedMessage('m3', 'conv-a', T0 + 3600, 'reply to m1', { parent_comment_id: 'm1', type: 'reply' }),
    exportedMessage('m4', 'conv-a', T0 + 3600, 'same time as m3', {
      parent_comment_id: 'x-9',
      type: 'reply',
    }),
    exportedMessage('m0', 'conv-c', T0 + 3600, 'latest tie with conv-a'),
    exportedMessage('m5', 'conv-c', T0 + 60, 'reply to m1 across conversations', { parent_comment_id: 'm1' }),
    exportedMessage('m6', 'conv-d', T0 + 10, '', { content: [], ip: null, edited: true }),
    exportedMessage('m7', 'conv-a', T0 + 1800, 'nul\u0000 and lone \ud800 surrogate'),
    exportedMessage('42', 'conv-e', T0 + 5, 'a numeric id', { id: 42 }),
  ];
  return rawFiles(messages, { likes: ['m2', 'other-1', 'm2', 'm1', '42'], dislikes: ['m6', 'other-2'] });
}

describe('streamedExport', () => {
  it('gives a package byte for byte equal to the one built in memory, through runs on disk', async () => {
    const raw = variedExport();

    const streamed = await streamedZip(raw, ACTIVITY);

    const inMemory = await inMemoryZip(raw, ACTIVITY);
    const entries = await entriesOf(streamed);
    const expected = await entriesOf(inMemory);
    expect([...entries.keys()]).toEqual([...expected.keys()]);
    for (const [name, content] of expected) expect(entries.get(name), name).toBe(content);
    expect(streamed.equals(inMemory)).toBe(true);
    // The order is the package's: conversations newest first, comments oldest first.
    const data = JSON.parse(entries.get('data.json') ?? '');
    expect(data.conversations.map((c: { conversation_id: string }) => c.conversation_id)).toEqual([
      'conv-b',
      'conv-a',
      'conv-c',
      'conv-d',
      'conv-e',
    ]);
    expect(data.likes.map((v: { message_id: string }) => v.message_id)).toEqual([
      'm2',
      'other-1',
      'm1',
      '42',
    ]);
  });

  it('gives the same package when everything fits in memory (no run written)', async () => {
    const raw = variedExport();
    const streamed = await streamedZip(raw, ACTIVITY, {});
    expect(streamed.equals(await inMemoryZip(raw, ACTIVITY))).toBe(true);
  });

  it('writes an empty export as the package held in memory does', async () => {
    const raw = rawFiles([]);
    expect((await streamedZip(raw, ACTIVITY)).equals(await inMemoryZip(raw, ACTIVITY))).toBe(true);
  });

  it('escapes hostile text and drops a javascript: link in the streamed page', async () => {
    const entries = await entriesOf(await streamedZip(variedExport(), ACTIVITY));
    const html = entries.get('index.html') ?? '';
    expect(html).not.toMatch(/<script|<b>|href="javascript:/i);
    expect(html).toContain('&lt;/h3&gt;&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(html).toContain('&lt;b&gt;first&lt;/b&gt; in a');
    expect(html).toContain('nul\uFFFD and lone \uFFFD surrogate');
    expect(html).toContain('href="https://news.example.test/b?x=%22%3E%3Cscript%3E"');
  });

  it('holds at most one run of records and one item, however many comments there are', async () => {
    const limits: StreamLimits = { runBytes: 8 * 1024, runRecords: 100, fanIn: 8 };
    const held = async (comments: number) => {
      const messages = Array.from({ length: comments }, (_, index) =>
        exportedMessage(`m-${index}`, `conv-${index % 37}`, T0 + index, `comment number ${index}`, {
          ...(index % 5 === 4 ? { parent_comment_id: `m-${index - 3}` } : {}),
        }),
      );
      const likes = Array.from({ length: comments }, (_, index) => `m-${(index * 7) % comments}`);
      const highWater: StreamHighWater = { scannerBytes: 0, sortBytes: 0, sortRecords: 0 };
      await streamedZip(rawFiles(messages, { likes }), ACTIVITY, limits, highWater);
      return highWater;
    };

    const smaller = await held(500);
    const larger = await held(3_000);

    // Eight times the comments: every sort still held one run at most (a run's JSON, plus the
    // record that filled it, or its count of records)...
    expect(larger.sortBytes).toBeLessThanOrEqual(8 * 1024 + 1024);
    expect(larger.sortRecords).toBe(100);
    expect(smaller.sortRecords).toBe(100);
    // ...and the scanner one item of messages.json (about 900 bytes), never the file.
    expect(larger.scannerBytes).toBeLessThanOrEqual(1024);
    expect(larger.scannerBytes - smaller.scannerBytes).toBeLessThanOrEqual(16);
  }, 30_000);

  it('removes its runs when closed', async () => {
    const scratch = await mkdtemp(join(dir, 'runs-'));
    const { files: _f, platformFiles: _p, ...input } = normaliseInput([], { activity: ACTIVITY });
    const { source, close } = await streamedExport(await archiveOf(variedExport()), scratch, input, TINY);
    await collect(packageZipStream(source));
    expect((await readdir(scratch)).length).toBeGreaterThan(0);
    await close();
    expect(await readdir(scratch)).toEqual([]);
  });
});

describe('streamedExport with a malformed or hostile export', () => {
  const withMessages = (text: string): RawFiles => ({ ...rawFiles([]), 'messages.json': Buffer.from(text) });
  const cases: [string, RawFiles, RegExp][] = [
    [
      'a truncated messages.json',
      withMessages('[{"id":"m1","conversation_id":"c","written_at":1'),
      /messages\.json in the archive is not JSON/,
    ],
    ['a string never closed', withMessages('[{"id":"m1\\"]'), /messages\.json in the archive is not JSON/],
    [
      'more after the array',
      withMessages('[]{"id":"x"}'),
      /messages\.json in the archive holds more after the end/,
    ],
    [
      'a trailing comma',
      withMessages('[{"id":"m1","conversation_id":"c","written_at":1},]'),
      /messages\.json in the archive is not JSON/,
    ],
    [
      'an object, not an array',
      withMessages('{"id":"m1"}'),
      /messages\.json in the archive is not a JSON array/,
    ],
    [
      'two items without a comma',
      withMessages('[{"a":1} {"b":2}]'),
      /messages\.json in the archive is not JSON/,
    ],
    [
      'a nesting bomb',
      withMessages(`[${'['.repeat(10_000)}${']'.repeat(10_000)}]`),
      /nests deeper than 64 levels/,
    ],
    ['a stray closing brace', withMessages('[1}]'), /messages\.json in the archive is not JSON/],
    [
      'an item without its documented shape',
      withMessages(
        '[{"id":"secret-id","conversation_id":{"__proto__":{"x":1}},"written_at":"SECRET-VALUE"}]',
      ),
      /messages\.json at 0\.conversation_id: invalid_union; messages\.json at 0\.written_at: invalid_type/,
    ],
    [
      'a time past what a date can hold',
      withMessages('[{"id":"m1","conversation_id":"c","written_at":1e300}]'),
      /messages\.json at 0\.written_at: out_of_range/,
    ],
    [
      'an empty id in likes.json',
      { ...rawFiles([]), 'likes.json': Buffer.from('["ok", ""]') },
      /likes\.json at 1: too_small/,
    ],
    [
      'a profile that is not JSON',
      { ...rawFiles([]), 'profile.json': Buffer.from('{"user_id": ') },
      /profile\.json in the archive is not JSON/,
    ],
  ];

  for (const [label, raw, message] of cases) {
    it(`refuses ${label} with an InvalidArchiveError that quotes no value`, async () => {
      const building = streamedZip(raw, ACTIVITY);
      await expect(building).rejects.toBeInstanceOf(InvalidArchiveError);
      const error = await building.catch((caught: unknown) => caught);
      expect(String(error)).toMatch(message);
      expect(String(error)).not.toMatch(/SECRET|secret-id/);
    });
  }

  it('refuses an item larger than the limit without holding more of it', async () => {
    const raw = rawFiles([exportedMessage('m1', 'c', T0, 'x'.repeat(20_000))]);
    const highWater: StreamHighWater = { scannerBytes: 0, sortBytes: 0, sortRecords: 0 };
    await expect(streamedZip(raw, ACTIVITY, { maxItemBytes: 4096 }, highWater)).rejects.toThrow(
      /messages\.json in the archive holds an item larger than 4096 bytes/,
    );
  });

  it('refuses an archive that lacks one of the four files', async () => {
    const { 'likes.json': _likes, ...three } = rawFiles([]);
    const { files: _f, platformFiles: _p, ...input } = normaliseInput([], { activity: ACTIVITY });
    await expect(streamedExport(await archiveOf(three), dir, input)).rejects.toThrow(/lacks likes\.json/);
  });
});
