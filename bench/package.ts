/**
 * The subject package of a heavy user: how large its page is, how long it takes to build, and how
 * long headless Chromium (JavaScript off) takes to open it, beside a light user's package measured
 * in the same run.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { gzipSync } from 'node:zlib';
import { parseExportFiles } from '../lambdas/build-package/export-files.ts';
import { type ActivityContext, normalisePackage } from '../lambdas/build-package/normalise.ts';
import { buildPackageZip, describePlatformFiles } from '../lambdas/build-package/package-zip.ts';
import { renderIndexHtml } from '../lambdas/build-package/render.ts';
import { PACKAGE_PLACEHOLDERS } from '../lambdas/build-package/settings.ts';
import { withPage } from '../test/helpers/chromium.ts';
import { normaliseInput } from '../test/unit/lambdas/build-package/fixtures.ts';

const WORDS =
  'the council budget library pool derby match referee goal season city park bus tram rent school teacher vote mayor river bridge festival music weather storm train station'.split(
    ' ',
  );

/** A deterministic export of `comments` comments over `comments / 25` conversations, a fifth of them replies. */
export function heavyExport(comments: number): {
  raw: Record<'dislikes.json' | 'likes.json' | 'messages.json' | 'profile.json', Buffer>;
  activity: ActivityContext;
} {
  let seed = 42;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const conversations = Math.max(1, Math.floor(comments / 25));
  const messages = Array.from({ length: comments }, (_, index) => {
    const conversation = `conv-${index % conversations}`;
    const words = 8 + Math.floor(random() * 90);
    const text = Array.from({ length: words }, () => WORDS[Math.floor(random() * WORDS.length)]).join(' ');
    const reply = index >= conversations && random() < 0.2;
    return {
      manually_resolved: false,
      author_id: 'u-heavy',
      moderator_id: null,
      spot_id: 'sp_bench',
      state: 'approved',
      parent_comment_id: reply ? `m-${index - conversations}` : null,
      conversation_id: conversation,
      published: true,
      conv_message_id: `${conversation}_m-${index}`,
      written_at: 1_704_103_200 + index * 1_800,
      content: [{ id: `c-${index}`, text, type: 'text' }],
      stars: 0,
      metadata: {},
      tags: [],
      tags_metadata: {},
      type: reply ? 'reply' : 'comment',
      never_hard_delete: false,
      additional_data: { labels: {} },
      anonymous_user_id: null,
      anonymous_user_name: null,
      anonymous_image_id: null,
      ip: `192.0.2.${(index % 250) + 1}`,
      edited: random() < 0.05,
      token: `token-${index}`,
      id: `m-${index}`,
    };
  });
  const json = (value: unknown) => Buffer.from(JSON.stringify(value, null, 2));
  const likes = Array.from({ length: Math.floor(comments / 5) }, (_, index) => `other-${index}`);
  return {
    raw: {
      'dislikes.json': json(likes.slice(0, Math.floor(likes.length / 4))),
      'likes.json': json(likes),
      'messages.json': json(messages),
      'profile.json': json({
        user_id: 'u-heavy',
        registered: true,
        social_ids: [],
        sso: { primary_key: 'heavy' },
        roles: [{ role: 'registered', stage: 'system' }],
        basic: { user_name: 'heavy_user', display_name: 'Heavy User', email: 'heavy@example.test' },
      }),
    },
    activity: {
      details: { status: 'complete', reason: null, pages: Math.ceil(comments / 100) },
      conversations: new Map(
        Array.from({ length: conversations }, (_, index) => [
          `conv-${index}`,
          {
            title: `Article number ${index}: what happened in the city`,
            url: `https://news.example.test/a/${index}`,
          },
        ]),
      ),
      messages: new Map(),
    },
  };
}

interface PackageFigures {
  readonly comments: number;
  readonly htmlBytes: number;
  readonly htmlGzipBytes: number;
  readonly zipBytes: number;
  readonly buildMs: number;
  readonly loadMs: number;
  readonly styleLayoutMs: number;
  readonly nodes: number;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

async function measure(
  comments: number,
  rounds: number,
  dir: string,
  options: { everySection?: boolean } = {},
): Promise<PackageFigures> {
  const { raw, activity } = heavyExport(comments);
  const builds: number[] = [];
  let zip: Buffer = Buffer.alloc(0);
  let html = '';
  for (let round = 0; round < rounds; round++) {
    const started = performance.now();
    const data = normalisePackage(
      normaliseInput([], {
        files: parseExportFiles(raw),
        platformFiles: describePlatformFiles(raw),
        activity,
        information: PACKAGE_PLACEHOLDERS.information,
      }),
    );
    zip = await buildPackageZip(data, raw);
    builds.push(performance.now() - started);
    html = renderIndexHtml(data);
  }
  // The page lays out only the conversations on screen (content-visibility); printing lays out all.
  if (options.everySection === true) html = html.replace('content-visibility:auto;', '');
  const page = join(dir, `index-${comments}${options.everySection === true ? '-all' : ''}.html`);
  await writeFile(page, html);
  const loads: number[] = [];
  const layouts: number[] = [];
  let nodes = 0;
  for (let round = 0; round < rounds; round++) {
    await withPage(pathToFileURL(page).href, { width: 1280, height: 900 }, async (opened) => {
      const metrics = await opened.metrics();
      loads.push(opened.loadMs);
      layouts.push(((metrics.LayoutDuration ?? 0) + (metrics.RecalcStyleDuration ?? 0)) * 1000);
      nodes = metrics.Nodes ?? 0;
    });
  }
  return {
    comments,
    htmlBytes: Buffer.byteLength(html),
    htmlGzipBytes: gzipSync(html).length,
    zipBytes: zip.length,
    buildMs: median(builds),
    loadMs: median(loads),
    styleLayoutMs: median(layouts),
    nodes,
  };
}

/** Rows for the bench table: a light user (10 comments) and the heavy one (`comments`). */
export async function packageBench(comments: number, rounds: number): Promise<string[][]> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-package-'));
  try {
    // A first browser start reads Chromium from disk; it is not part of any figure.
    await measure(10, 1, dir);
    const rows: string[][] = [];
    for (const [count, everySection] of [
      [10, false],
      [comments, false],
      [comments, true],
    ] as const) {
      const figures = await measure(count, rounds, dir, { everySection });
      rows.push([
        `${figures.comments}${everySection ? ' (every section laid out, as printing does)' : ''}`,
        `${(figures.htmlBytes / 1024).toFixed(0)} KiB (${(figures.htmlGzipBytes / 1024).toFixed(0)} KiB gzip)`,
        `${(figures.zipBytes / 1024).toFixed(0)} KiB`,
        figures.buildMs.toFixed(0),
        figures.loadMs.toFixed(0),
        figures.styleLayoutMs.toFixed(0),
        String(figures.nodes),
      ]);
    }
    return rows;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
