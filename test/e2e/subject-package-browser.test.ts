/**
 * The subject package's index.html in a real browser: Debian's Chromium, headless, JavaScript off,
 * the page opened from disk as a subject would open it from the unzipped package. A missing browser
 * fails the test with the fix; it never skips.
 */
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import yauzl from 'yauzl';
import { parseExportFiles } from '../../lambdas/build-package/export-files.ts';
import { normalisePackage } from '../../lambdas/build-package/normalise.ts';
import { buildPackageZip, describePlatformFiles } from '../../lambdas/build-package/package-zip.ts';
import { CHROMIUM_MISSING, chromiumPath, visibleText, withPage } from '../helpers/chromium.ts';
import { exportedMessage, normaliseInput, rawFiles, T0 } from '../unit/lambdas/build-package/fixtures.ts';

/** Where the page and its screenshots are left for a person to look at. */
const OUTPUT_DIR = fileURLToPath(new URL('../../test-output/subject-package/', import.meta.url));
const PAGE = join(OUTPUT_DIR, 'index.html');

const COMMENT = 'The budget finally funds the library.';
const HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=1">';

async function indexHtmlOf(zip: Buffer): Promise<Buffer> {
  const archive = await yauzl.fromBufferPromise(zip, { lazyEntries: true });
  for await (const entry of archive.eachEntry()) {
    if (entry.fileName !== 'index.html') continue;
    const chunks: Buffer[] = [];
    for await (const chunk of await archive.openReadStreamPromise(entry)) chunks.push(Buffer.from(chunk));
    archive.close();
    return Buffer.concat(chunks);
  }
  throw new Error('the package holds no index.html');
}

beforeAll(async () => {
  // A subject's package as the step builds it, with a hostile comment among the ordinary ones.
  const raw = rawFiles(
    [
      exportedMessage('m1', 'conv-news-1', T0, COMMENT),
      exportedMessage('m2', 'conv-news-1', T0 + 3600, 'Agreed, and the pool too.', {
        parent_comment_id: 'm1',
        type: 'reply',
      }),
      exportedMessage('m3', 'conv-sport-7', T0 + 86_400, HOSTILE, { edited: true }),
      exportedMessage('m4', 'conv-sport-7', T0 + 90_000, 'مرحبا — שלום — 👩🏽‍💻 mixed direction text'),
    ],
    { likes: ['m1', 'x-77'], dislikes: ['x-78'] },
  );
  const data = normalisePackage({
    ...normaliseInput([]),
    files: parseExportFiles(raw),
    platformFiles: describePlatformFiles(raw),
    controller: { name: 'Example News Ltd', contact: 'privacy@example.com, 1 Fleet Street, London' },
    activity: {
      details: { status: 'complete', reason: null, pages: 1 },
      conversations: new Map([
        [
          'conv-news-1',
          { title: 'City budget approved', url: 'https://news.example.com/2024/01/city-budget' },
        ],
        ['conv-sport-7', { title: 'Derby ends in a draw', url: 'https://news.example.com/2024/02/derby' }],
      ]),
      messages: new Map([['m4', { deleted: true }]]),
    },
  });
  await rm(OUTPUT_DIR, { recursive: true, force: true });
  await mkdir(OUTPUT_DIR, { recursive: true });
  await writeFile(PAGE, await indexHtmlOf(await buildPackageZip(data, raw)));
});

describe('index.html in headless Chromium with JavaScript disabled', () => {
  it('has the browser it needs', () => {
    expect(chromiumPath(), CHROMIUM_MISSING).toBeDefined();
  });

  it('runs with scripts really off: a control page’s script runs only when JavaScript is on', async () => {
    const control = join(OUTPUT_DIR, 'control.html');
    await writeFile(
      control,
      '<!DOCTYPE html><html lang="en"><body><p id="p">static</p><script>document.getElementById("p").textContent="script ran"</script></body></html>',
    );
    const textWith = (javascript: boolean) =>
      withPage(pathToFileURL(control).href, { javascript }, async (page) => visibleText(await page.dom()));

    expect(await textWith(true)).toBe('script ran');
    expect(await textWith(false)).toBe('static');
  });

  it('shows the controller, a comment, its conversation title and a human date', async () => {
    const dom = await withPage(pathToFileURL(PAGE).href, {}, (page) => page.dom());

    const text = visibleText(dom);
    expect(text).toContain('Answered by Example News Ltd');
    expect(text).toContain(COMMENT);
    expect(text).toContain('City budget approved');
    expect(text).toContain('1 January 2024 at 10:00');
    expect(text).toContain('A reply to your comment of 1 January 2024 at 10:00.');
    // The hostile comment is text on the page, not elements in it.
    expect(text).toContain(HOSTILE);
    expect(dom).not.toMatch(/<script|<img/i);
    expect(dom).toMatch(/<title>Your data · Example News Ltd<\/title>/);
  });

  it('saves desktop and phone screenshots of the whole page under test-output/subject-package/', async () => {
    for (const [name, width] of [
      ['index.png', 1280],
      ['phone.png', 390],
    ] as const) {
      const path = join(OUTPUT_DIR, name);
      await withPage(pathToFileURL(PAGE).href, { width, height: 900 }, (page) => page.screenshot(path));
      const png = await readFile(path);
      expect(png.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
      // Width and height from the PNG header: the whole page, taller than one screen.
      expect(png.readUInt32BE(16)).toBe(width);
      expect(png.readUInt32BE(20)).toBeGreaterThan(900);
      expect((await stat(path)).size).toBeGreaterThan(20_000);
    }
  });
});
