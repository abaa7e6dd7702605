/**
 * The API's first page of open requests over a large ledger, in local mode, as the console asks for
 * it: `GET /requests?limit=50` through HTTP with a signed-in person's token, beside opening one
 * request (`GET /requests/{id}`) in the same run, interleaved.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLocalMode } from '#local/local-mode';
import { LOCAL_SIGN_IN_PATH } from '#local/runtime/api-endpoint';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { writeOpenRequests } from './reconciler.ts';

/** The page the console's Requests page asks for first. */
const PAGE = 50;
/** The most the first page may take (issue: shown within a second in local mode). */
const FIRST_PAGE_TARGET_MS = 1000;

interface Timed {
  readonly wallMs: number;
  readonly cpuMs: number;
}

async function timed(work: () => Promise<void>): Promise<Timed> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  await work();
  const used = process.cpuUsage(cpu);
  return { wallMs: performance.now() - start, cpuMs: (used.user + used.system) / 1000 };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

/** BENCH_API_REQUESTS (default 50,000) open requests; BENCH_ROUNDS rounds of each call, interleaved. */
export async function apiPageBench(): Promise<void> {
  const requests = Number(process.env.BENCH_API_REQUESTS ?? 50_000);
  const rounds = Number(process.env.BENCH_API_ROUNDS ?? 9);
  const dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-api-'));
  const mode = await startLocalMode({ dataDir, logSink: () => {} });
  try {
    const ids = await writeOpenRequests(mode.workflow.dynamo, LOCAL_NAMES.table, requests);
    const signIn = await fetch(`${mode.api.url}${LOCAL_SIGN_IN_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ code: mode.api.signInCode('privacy-team'), username: 'bench' }),
    });
    const { token } = (await signIn.json()) as { token: string };
    const get = async (path: string, check: (body: Record<string, unknown>) => boolean) => {
      const answer = await fetch(`${mode.api.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
      const body = (await answer.json()) as Record<string, unknown>;
      if (answer.status !== 200 || !check(body))
        throw new Error(`GET ${path} answered ${answer.status}: ${JSON.stringify(body).slice(0, 300)}`);
    };
    const firstPage = () =>
      get(`/requests?limit=${PAGE}`, (body) => Array.isArray(body.requests) && body.requests.length === PAGE);
    const opened = () => get(`/requests/${ids[0]}`, (body) => typeof body.request === 'object');
    const dueTo = new Date(Date.now() + 10 * 24 * 3600 * 1000).toISOString();
    const counted = () =>
      get(`/requests/counts?due_to=${encodeURIComponent(dueTo)}`, (body) => {
        const byStatus = body.by_status as Record<string, number>;
        return (byStatus?.received ?? 0) + (byStatus?.running ?? 0) + (byStatus?.failed ?? 0) === requests;
      });
    // One of each first: the local API's first call warms its modules.
    await firstPage();
    await opened();
    await counted();
    const pages: Timed[] = [];
    const opens: Timed[] = [];
    const counts: Timed[] = [];
    for (let round = 0; round < rounds; round++) {
      pages.push(await timed(firstPage));
      opens.push(await timed(opened));
      counts.push(await timed(counted));
    }
    const pageWall = median(pages.map((each) => each.wallMs));
    const openWall = median(opens.map((each) => each.wallMs));
    const pageCpu = median(pages.map((each) => each.cpuMs));
    const openCpu = median(opens.map((each) => each.cpuMs));
    const worst = Math.max(...pages.map((each) => each.wallMs));
    console.log(
      `\nThe API's first page (${PAGE} requests, earliest due first) over ${requests.toLocaleString('en')} open requests in local mode, through HTTP with a signed-in token; ${rounds} rounds, interleaved with opening one request`,
    );
    console.log(
      `  first page        median ${pageWall.toFixed(0)} ms wall, ${pageCpu.toFixed(0)} ms CPU; slowest ${worst.toFixed(0)} ms`,
    );
    console.log(
      `  counts (Today)    median ${median(counts.map((each) => each.wallMs)).toFixed(0)} ms wall, ${median(counts.map((each) => each.cpuMs)).toFixed(0)} ms CPU; slowest ${Math.max(...counts.map((each) => each.wallMs)).toFixed(0)} ms (GET /requests/counts: by status and due within 10 days, counted by the index)`,
    );
    console.log(
      `  one request       median ${openWall.toFixed(0)} ms wall, ${openCpu.toFixed(0)} ms CPU (baseline)`,
    );
    console.log(
      `  ratio             ${(pageWall / openWall).toFixed(1)}x the baseline's wall, ${(pageCpu / Math.max(openCpu, 0.001)).toFixed(1)}x its CPU`,
    );
    const within = worst <= FIRST_PAGE_TARGET_MS;
    console.log(`  within ${FIRST_PAGE_TARGET_MS} ms     ${within ? 'yes' : 'NO'} (slowest round)`);
    if (!within) process.exitCode = 1;
  } finally {
    await mode.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}
