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
import { parseExportFiles } from '../../lambdas/build-package/export-files.ts';
import { normalisePackage } from '../../lambdas/build-package/normalise.ts';
import { buildPackageZip, describePlatformFiles } from '../../lambdas/build-package/package-zip.ts';
import { renderIndexHtml } from '../../lambdas/build-package/render.ts';
import { PACKAGE_PLACEHOLDERS } from '../../lambdas/build-package/settings.ts';
import { withPage } from '../../test/helpers/chromium.ts';
import { normaliseInput } from '../../test/unit/lambdas/build-package/fixtures.ts';
import { heavyExport } from './heavy-user.ts';

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
        information: { gdpr: PACKAGE_PLACEHOLDERS.information.gdpr },
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
