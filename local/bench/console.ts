/**
 * The privacy console's size and speed: console.js as built (minified, and gzipped as CloudFront
 * serves it) beside preact's own build, against the 150 KB budget; and in Debian's Chromium, the
 * Requests page's first page over BENCH_CONSOLE_REQUESTS (default 50,000) open requests in local
 * mode, from navigation to its 50 rows shown, interleaved with the sign-in page (no API call) as
 * the baseline.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { startLocalMode } from '#local/local-mode';
import { LOCAL_SIGN_IN_PATH } from '#local/runtime/api-endpoint';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { launchChromium } from '../../test/helpers/browser.ts';
import { writeOpenRequests } from './reconciler.ts';

/** The most console.js may weigh gzipped. */
const BUNDLE_BUDGET_BYTES = 150 * 1024;
/** The most the first page may take to show. */
const FIRST_PAGE_TARGET_MS = 1000;
const PAGE = 50;

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;

export async function consoleBench(): Promise<void> {
  const requests = Number(process.env.BENCH_CONSOLE_REQUESTS ?? 50_000);
  const rounds = Number(process.env.BENCH_CONSOLE_ROUNDS ?? 7);
  const dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-console-'));
  const mode = await startLocalMode({ dataDir, logSink: () => {} });
  const browser = await launchChromium();
  try {
    // Size: the console as local mode built it for this run, beside preact's own minified build.
    const script = await readFile(join(dataDir, 'console', 'console.js'));
    const preact = await readFile(
      join(dirname(createRequire(import.meta.url).resolve('preact/package.json')), 'dist', 'preact.mjs'),
    );
    const gzipped = gzipSync(script, { level: 9 }).length;
    console.log(
      '\nThe privacy console: console.js as built (every page, preact included), and in Chromium the first page of open requests',
    );
    console.log(
      `  console.js        ${kb(script.length)} minified, ${kb(gzipped)} gzipped (budget ${kb(BUNDLE_BUDGET_BYTES)}): ${gzipped <= BUNDLE_BUDGET_BYTES ? 'within' : 'OVER'}`,
    );
    console.log(
      `  preact alone      ${kb(preact.length)} minified, ${kb(gzipSync(preact, { level: 9 }).length)} gzipped (baseline)`,
    );

    await writeOpenRequests(mode.workflow.dynamo, LOCAL_NAMES.table, requests);
    const signIn = await fetch(`${mode.api.url}${LOCAL_SIGN_IN_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ code: mode.api.signInCode('privacy-team'), username: 'bench' }),
    });
    const { token } = (await signIn.json()) as { token: string };
    const consoleUrl = mode.api.consoleUrl ?? '';
    const signedIn = await browser.newContext();
    await signedIn.addInitScript(`sessionStorage.setItem('svc-dsr-token', ${JSON.stringify(token)})`);
    const signedOut = await browser.newContext();
    const listPage = await signedIn.newPage();
    const blankPage = await signedOut.newPage();
    // Each round loads the whole page anew (from about:blank): the script, its settings, then the API's page.
    const showList = async () => {
      await listPage.goto('about:blank');
      const started = performance.now();
      await listPage.goto(`${consoleUrl}#/requests`);
      await listPage
        .locator('tbody tr')
        .nth(PAGE - 1)
        .waitFor();
      return performance.now() - started;
    };
    const showSignIn = async () => {
      await blankPage.goto('about:blank');
      const started = performance.now();
      await blankPage.goto(consoleUrl);
      await blankPage.getByRole('heading', { name: 'Sign in' }).waitFor();
      return performance.now() - started;
    };
    // One of each first: the browser's caches and the API's modules warm.
    await showList();
    await showSignIn();
    const lists: number[] = [];
    const signIns: number[] = [];
    for (let round = 0; round < rounds; round++) {
      lists.push(await showList());
      signIns.push(await showSignIn());
    }
    const worst = Math.max(...lists);
    console.log(
      `  first page        ${PAGE} rows over ${requests.toLocaleString('en')} open requests, a fresh page load to the rows shown: median ${median(lists).toFixed(0)} ms, slowest ${worst.toFixed(0)} ms (${rounds} rounds)`,
    );
    console.log(
      `  sign-in page      median ${median(signIns).toFixed(0)} ms (baseline: the same page load, no API call)`,
    );
    console.log(`  ratio             ${(median(lists) / median(signIns)).toFixed(1)}x the baseline`);
    const within = worst <= FIRST_PAGE_TARGET_MS && gzipped <= BUNDLE_BUDGET_BYTES;
    console.log(
      `  within targets    ${within ? 'yes' : 'NO'} (first page under ${FIRST_PAGE_TARGET_MS} ms in the slowest round; bundle within budget)`,
    );
    if (!within) process.exitCode = 1;
  } finally {
    await browser.close();
    await mode.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}
