/**
 * `npm run bench`: figures, each beside a baseline measured in the same run.
 * 1. Archive copy: ArchiveExport's copy and verification of a large export into S3, beside the
 *    same download streamed to nowhere by plain fetch and uploaded by lib-storage's `Upload` with
 *    the SDK's defaults; throughput, CPU, connections and peak RSS of the copying process.
 * 2. State transitions per request, and the Step Functions cost per 1,000 requests.
 * 3. Local-mode throughput: BENCH_LOCAL_REQUESTS (default 1,000) mixed requests end to end.
 * 4. A mass drop against a rate-limited platform with an outage (BENCH_ONLY=burst).
 * 5. Local mode's memory and main-thread CPU per request at BENCH_MEMORY_REQUESTS (default
 *    1,000 and 5,000; BENCH_ONLY=memory).
 * 6. `package`: the subject package of a user with BENCH_PACKAGE_COMMENTS (default 10,000)
 *    comments beside one with 10: page size, build time, and how long headless Chromium
 *    (JavaScript off) takes to open it. Needs Debian's chromium.
 * 7. `package-memory`: BuildPackage's peak RSS and time at BENCH_PACKAGE_SIZES comments (default
 *    10,000, 100,000 and 1,000,000), each build in a process of its own, beside the build as it
 *    was (everything in memory) up to BENCH_PACKAGE_BASELINE_MAX comments (default 100,000; the
 *    old build of a million comments needs about 10 GB). The exports are written to disk as
 *    streams first.
 * 8. `local-package`: local mode's peak RSS for one access request, a light subject's (10
 *    comments) beside a heavy one's (BENCH_HEAVY_COMMENTS, default 150,000) on the same platform
 *    state, each in a process of its own.
 * 9. `reconciler`: reconciler passes over BENCH_RECONCILE_REQUESTS (default 50,000) open requests
 *    on dynalite against a Step Functions stand-in that throttles as AWS does (a token bucket per
 *    action, the documented sizes and refills): calls made and throttled, coverage, calls per open
 *    request and failed passes, beside the previous pass (a DescribeExecution per open request)
 *    on the same stand-in (local/bench/reconciler.ts).
 * 10. `gate-simulation`: GATE_SIM_REQUESTS (default 50,000) requests dropped at once through the
 *    export path, the product's step handlers on dynalite in GATE_SIM_CONCURRENCY Lambda
 *    environments, in virtual time, in two regimes (exports ready in 1-30 min, and in 1-4 h;
 *    GATE_SIM_REGIMES=1 or 2 runs one; a section each, gate-simulation-regime-1 and -2): calls above the rate, exports above the cap, unmetered
 *    calls, the share exported before the deadline margin and alarmed at it, the drain against
 *    the margin, slot attempts, transitions and the longest history, backward clock steps, gate
 *    write conflicts and the concurrency used (local/bench/gate-simulation.ts).
 * 11. `cli`: the operator CLI's CPU per run, `svc-dsr --version` and `--help` beside `node -e 0`,
 *    `svc-dsr status` and `list` on a served local mode beside `aws dynamodb get-item`
 *    (local/bench/cli.ts).
 * 12. `api-page`: the API's first page of 50 open requests over BENCH_API_REQUESTS (default
 *    50,000) in local mode, through HTTP with a signed-in token, beside opening one request,
 *    interleaved; fails above a second (local/bench/api-page.ts).
 * 13. `console`: the privacy console's console.js minified and gzipped beside preact's own, and in
 *    Chromium its Requests page's first 50 rows over BENCH_CONSOLE_REQUESTS (default 50,000) open
 *    requests, beside the sign-in page, interleaved; fails above a second or 150 KB
 *    (local/bench/console.ts).
 *
 * Each section's printed table also goes into local/bench/RESULTS.md (BENCH_RESULTS names another file),
 * under the date and the machine it ran on; a run replaces the sections it ran (local/bench/results.ts).
 *
 * BENCH_AWS_FAULTS=FILE throttles a seeded share of the local AWS calls in 2 and 3, as
 * `svc-dsr local --aws-faults FILE` does (format: docs/emulator.md, "AWS faults in local mode").
 *
 * The measured processes run plain node on a bundle built at start, not TypeScript through tsx:
 * a Lambda runs a bundle too, and tsx would add its own memory to both figures. The S3 sink runs
 * in a process of its own, so the emulator serving the download does not share an event loop with
 * it. The three copies take turns, BENCH_ROUNDS times (default 3): the table shows the median
 * throughput and CPU, and the highest peak RSS.
 */
import './quiet.ts';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { build } from 'esbuild';
import { z } from 'zod';
import { type AwsFaults, loadAwsFaultsFile } from '#local/aws/aws-faults';
import { startAwsStandIns } from '#local/aws/aws-standins';
import type { PlatformStats } from '#local/emulator/limits';
import { emulatorControl, startEmulator } from '#local/emulator/server';
import { SqsPoller } from '#local/runtime/event-source';
import { startLocalWorkflow } from '#local/runtime/workflow';
import { synthesizeTemplate } from '../../lib/template.ts';
import { apiPageBench } from './api-page.ts';
import { cliBench } from './cli.ts';
import { consoleBench } from './console.ts';
import { gateSimulationBench, gateSimulationRegimes } from './gate-simulation.ts';
import { localMemory, localThroughput } from './local-throughput.ts';
import { limitedTo } from './memory-limit.ts';
import { packageBench } from './package.ts';
import { writeHeavyArchive } from './package-archive.ts';
import { reconcilerBench } from './reconciler.ts';
import { section } from './results.ts';

const run = promisify(execFile);
/** BuildPackage's memory in the stack (lib/dsr-stack.ts: 1,024 MB for the functions that build packages). */
const PACKAGE_FUNCTION_MIB = 1024;
const MiB = 1024 * 1024;
const TRANSITION_PRICE_PER_1000 = 0.025;
const workerResult = z.object({
  bytes: z.number(),
  seconds: z.number(),
  cpuSeconds: z.number(),
  peakRssBytes: z.number(),
  connections: z.number(),
});
type WorkerResult = z.infer<typeof workerResult>;

/** One measured download, with the CPU the platform (this process) and the S3 stand-in spent on it. */
interface Measured extends WorkerResult {
  readonly platformCpuSeconds: number;
  readonly sinkCpuSeconds: number;
}

const sizes = (process.env.BENCH_SIZES_MIB ?? '100,1024').split(',').map(Number);
/** Each figure is measured this many times, baseline and copy taking turns; the table shows the median. */
const rounds = z.coerce
  .number()
  .int()
  .min(1)
  .parse(process.env.BENCH_ROUNDS ?? '3');

interface Bundles {
  readonly worker: string;
  readonly sink: string;
  readonly packageWorker: string;
  dispose(): Promise<void>;
}

/** Bundles the measured processes into a temporary folder. */
async function bundle(): Promise<Bundles> {
  const outdir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-'));
  await build({
    entryPoints: {
      'copy-worker': fileURLToPath(new URL('./copy-worker.ts', import.meta.url)),
      's3-sink': fileURLToPath(new URL('./s3-sink-process.ts', import.meta.url)),
      'package-worker': fileURLToPath(new URL('./package-worker.ts', import.meta.url)),
    },
    outdir,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'warning',
    // The SDK is CommonJS and requires Node built-ins, which an ES module bundle must provide.
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
  });
  return {
    worker: join(outdir, 'copy-worker.mjs'),
    sink: join(outdir, 's3-sink.mjs'),
    packageWorker: join(outdir, 'package-worker.mjs'),
    dispose: () => rm(outdir, { recursive: true, force: true }),
  };
}

async function worker(bundles: Bundles, args: Record<string, string>): Promise<WorkerResult> {
  const { stdout } = await run(process.execPath, [bundles.worker, JSON.stringify(args)], {
    maxBuffer: 1024 * 1024,
    env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  });
  return workerResult.parse(JSON.parse(stdout.trim().split('\n').pop() ?? '{}'));
}

interface SinkProcess {
  readonly endpoint: string;
  /** The size stored at `/<bucket>/<key>`, once its upload completed. */
  stored(path: string): Promise<number | undefined>;
  /** CPU seconds the sink process has spent so far. */
  cpuSeconds(): Promise<number>;
  close(): Promise<void>;
}

async function startSinkProcess(bundles: Bundles): Promise<SinkProcess> {
  // The sink exits when its stdin closes, so it never outlives this process.
  const child: ChildProcess = spawn(process.execPath, [bundles.sink], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  if (child.stdout === null) throw new Error('the S3 sink has no stdout');
  const [line] = await Promise.race([
    once(createInterface({ input: child.stdout }), 'line'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the S3 sink exited with code ${code} before it started`);
    }),
  ]);
  const { endpoint } = z.object({ endpoint: z.string() }).parse(JSON.parse(String(line)));
  return {
    endpoint,
    async stored(path) {
      const response = await fetch(`${endpoint}${path}`, { method: 'HEAD' });
      return response.status === 200 ? Number(response.headers.get('content-length')) : undefined;
    },
    async cpuSeconds() {
      const response = await fetch(`${endpoint}/_cpu`);
      return z.object({ cpuSeconds: z.number() }).parse(await response.json()).cpuSeconds;
    },
    async close() {
      const exited = once(child, 'exit');
      child.stdin?.end();
      await exited;
    },
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((left, right) => left - right);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] ?? 0)
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

/** The CPU seconds one SHA-256 pass costs per GiB on this machine, measured in this process. */
function sha256SecondsPerGiB(): number {
  const block = Buffer.alloc(64 * MiB, 0x5a);
  const before = process.cpuUsage();
  const hash = createHash('sha256');
  for (let pass = 0; pass < 8; pass += 1) hash.update(block);
  hash.digest();
  const spent = process.cpuUsage(before);
  return (spent.user + spent.system) / 1e6 / ((8 * 64) / 1024);
}

const COPY_MODES = [
  { mode: 'baseline', label: 'plain fetch, body discarded' },
  { mode: 'upload', label: 'lib-storage Upload, SDK defaults' },
  { mode: 'archive', label: 'ours: copy + verification' },
  { mode: 'floor', label: 'floor: node:http, SHA-256, CRC32, PUT' },
] as const;
type CopyMode = (typeof COPY_MODES)[number]['mode'];

async function archiveCopy(bundles: Bundles) {
  const sink = await startSinkProcess(bundles);
  const emulator = await startEmulator({
    state: {
      spot_id: 'sp_bench',
      conversations: [],
      users: [{ primary_key: 'bench-user', user_name: 'bench_user', svc_user_id: 'svc-bench' }],
      comments: [],
      votes: [],
    },
    faults: { export_ready_after_polls: 0 },
  });
  const rows: string[][] = [];
  const ratios: string[][] = [];
  const peaks: Record<number, number> = {};
  const sha256Cost = sha256SecondsPerGiB();
  try {
    for (const mib of sizes) {
      emulatorControl(emulator).setFaults({ export_ready_after_polls: 0, export_padding_bytes: mib * MiB });
      const started = await fetch(`${emulator.url}/gdpr/export`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          access_token: emulator.exportToken,
          spot_id: emulator.spotId,
          user_id: 'svc-bench',
        }),
      });
      const { id } = z.object({ id: z.number() }).parse(await started.json());
      const status = await fetch(
        `${emulator.url}/gdpr/export/status/${id}?access_token=${emulator.exportToken}&spot_id=${emulator.spotId}`,
      );
      const { link } = z.object({ link: z.string() }).parse(await status.json());
      const results: Record<CopyMode, Measured[]> = { baseline: [], upload: [], archive: [], floor: [] };
      const measure = async (args: Record<string, string>): Promise<Measured> => {
        const [platformBefore, sinkBefore] = [process.cpuUsage(), await sink.cpuSeconds()];
        const result = await worker(bundles, args);
        const platform = process.cpuUsage(platformBefore);
        return {
          ...result,
          platformCpuSeconds: (platform.user + platform.system) / 1e6,
          sinkCpuSeconds: (await sink.cpuSeconds()) - sinkBefore,
        };
      };
      // Interleaved: each round runs every mode once, so a change in the host's load hits all alike.
      for (let round = 1; round <= rounds; round += 1) {
        for (const { mode } of COPY_MODES) {
          const key = `${mode}-${mib}-${round}`;
          const result = await measure(
            mode === 'baseline'
              ? { mode, link }
              : { mode, link, s3Endpoint: sink.endpoint, bucket: 'bench', key },
          );
          const received = mode === 'baseline' ? result.bytes : await sink.stored(`/bench/${key}`);
          if (received !== result.bytes || result.bytes < mib * MiB) {
            throw new Error(`${mode} reported ${result.bytes} bytes, S3 received ${received}`);
          }
          results[mode].push(result);
        }
      }
      const mbps = (list: Measured[]) => median(list.map((result) => result.bytes / MiB / result.seconds));
      const peakMb = (list: Measured[]) => Math.max(...list.map((result) => result.peakRssBytes / 1e6));
      const perGiB = (list: Measured[], pick: (result: Measured) => number) =>
        median(list.map((result) => (pick(result) * 1024 * MiB) / result.bytes));
      const cpu = (mode: CopyMode) => perGiB(results[mode], (result) => result.cpuSeconds);
      peaks[mib] = peakMb(results.archive);
      for (const { mode, label } of COPY_MODES) {
        const list = results[mode];
        rows.push([
          `${mib} MiB`,
          label,
          mbps(list).toFixed(1),
          cpu(mode).toFixed(2),
          perGiB(list, (result) => result.connections).toFixed(1),
          peakMb(list).toFixed(0),
          perGiB(list, (result) => result.platformCpuSeconds).toFixed(2),
          perGiB(list, (result) => result.sinkCpuSeconds).toFixed(2),
        ]);
      }
      const floor = cpu('baseline') + sha256Cost;
      ratios.push(
        [
          `${mib} MiB`,
          'ours ÷ (plain fetch + one SHA-256)',
          `${(cpu('archive') / floor).toFixed(2)}x`,
          `${cpu('archive').toFixed(2)} ÷ (${cpu('baseline').toFixed(2)} + ${sha256Cost.toFixed(2)})`,
          'at most 1.30x',
        ],
        [
          `${mib} MiB`,
          'ours ÷ lib-storage Upload',
          `${(cpu('archive') / cpu('upload')).toFixed(2)}x`,
          `${cpu('archive').toFixed(2)} ÷ ${cpu('upload').toFixed(2)}`,
          'at most 0.50x',
        ],
        [
          `${mib} MiB`,
          'ours ÷ floor (in, hash, CRC, out)',
          `${(cpu('archive') / cpu('floor')).toFixed(2)}x`,
          `${cpu('archive').toFixed(2)} ÷ ${cpu('floor').toFixed(2)}`,
          '',
        ],
        [
          `${mib} MiB`,
          'ours ÷ plain fetch, MiB/s',
          `${(mbps(results.archive) / mbps(results.baseline)).toFixed(2)}x`,
          `${mbps(results.archive).toFixed(1)} ÷ ${mbps(results.baseline).toFixed(1)}`,
          '',
        ],
      );
    }
  } finally {
    await emulator.close();
    await sink.close();
  }
  printTable(
    `Archive copy (${rounds} interleaved rounds; MiB/s and CPU: medians; peak RSS: highest)`,
    [
      'size',
      'what',
      'MiB/s',
      'CPU s/GiB',
      'connections/GiB',
      'peak RSS MB',
      'platform CPU s/GiB',
      'S3 stand-in CPU s/GiB',
    ],
    rows,
  );
  console.log(
    `CPU s/GiB: CPU seconds per GiB of the measured (copying) process; the platform emulator and the S3 stand-in are separate processes, shown beside it. connections/GiB counts every TCP connection the process opened (download and S3). One SHA-256 pass measured here: ${sha256Cost.toFixed(2)} CPU s/GiB. On ${availableParallelism()} shared cores, wall figures move with the host's load.\n`,
  );
  printTable(
    'Archive copy: ratios (CPU s/GiB of the copying process)',
    ['size', 'ratio', 'value', 'from', 'target'],
    ratios,
  );
  const small = peaks[100];
  const large = peaks[1024];
  if (small !== undefined && large !== undefined) {
    console.log(
      `ours, peak RSS: ${large.toFixed(0)} MB at 1 GiB, ${(large - small).toFixed(0)} MB above 100 MiB (targets: below 200 MB; within 30 MB)\n`,
    );
  }
}

/** BENCH_AWS_FAULTS: the AWS faults file, read once; a bad file stops the bench before it starts. */
const awsFaults =
  process.env.BENCH_AWS_FAULTS === undefined
    ? undefined
    : await loadAwsFaultsFile(process.env.BENCH_AWS_FAULTS);

async function transitions() {
  const aws = await startAwsStandIns(awsFaults ? { faults: awsFaults } : {});
  const emulator = await startEmulator({
    state: {
      spot_id: 'sp_bench',
      conversations: [],
      users: [
        { primary_key: 'bench-a', user_name: 'bench_a' },
        { primary_key: 'bench-b', user_name: 'bench_b' },
      ],
      comments: [],
      votes: [],
    },
    faults: { export_ready_after_polls: 3 },
  });
  const workflow = await startLocalWorkflow({
    aws,
    platform: emulator,
    template: synthesizeTemplate(),
    ...(awsFaults ? { awsFaults } : {}),
  });
  const poller = new SqsPoller(workflow.sqs, workflow.queueUrls.intake, workflow.intake);
  const rows: string[][] = [];
  try {
    for (const [label, type, key] of [
      ['access, export ready after 3 polls', 'access', 'bench-a'],
      ['erasure, export ready after 3 polls', 'erasure', 'bench-b'],
    ] as const) {
      const requestId = randomUUID();
      await workflow.sqs.send(
        new SendMessageCommand({
          QueueUrl: workflow.queueUrls.intake,
          MessageBody: JSON.stringify({
            request_id: requestId,
            type,
            regulation: 'gdpr',
            primary_key: key,
            received_at: new Date().toISOString(),
            verification: {
              method: 'email_link',
              verified_by: 'bench',
              verified_at: new Date().toISOString(),
            },
          }),
        }),
      );
      await poller.drain();
      const result = (await workflow.settled()).get(requestId);
      // Step Functions bills one transition per state entered, the start included.
      const entered = (result?.events ?? []).filter((event) => event.type.endsWith('StateEntered')).length;
      const billed = entered + 1;
      rows.push([
        label,
        String(result?.status),
        String(billed),
        `$${((billed * TRANSITION_PRICE_PER_1000 * 1000) / 1000).toFixed(4)}`,
      ]);
    }
  } finally {
    await workflow.close();
    await emulator.close();
    await aws.close();
  }
  printTable(
    'State transitions per request (Step Functions Standard, $0.025 per 1,000 transitions)',
    ['request', 'status', 'transitions', 'cost per 1,000 requests'],
    rows,
  );
}

function printTable(title: string, header: string[], rows: string[][]) {
  const widths = header.map((cell, index) =>
    Math.max(cell.length, ...rows.map((row) => (row[index] ?? '').length)),
  );
  const line = (cells: string[]) => cells.map((cell, index) => cell.padEnd(widths[index] ?? 0)).join(' | ');
  console.log(`\n${title}\n${line(header)}\n${widths.map((width) => '-'.repeat(width)).join('-|-')}`);
  for (const row of rows) console.log(line(row));
  console.log('');
}

/** A positive count from the environment variable `name`, or `fallback`. */
function countFromEnv(name: string, fallback: number): number {
  return z.coerce
    .number()
    .int()
    .positive()
    .parse(process.env[name] ?? String(fallback));
}

async function throughput() {
  const requests = countFromEnv('BENCH_LOCAL_REQUESTS', 1000);
  const result = await localThroughput(requests, { awsFaults });
  const throttled = awsFaults
    ? `; AWS calls throttled at ${awsFaults.throttle_rate} (${awsFaults.services.join(', ')}, seed ${awsFaults.seed})`
    : '';
  printTable(
    `Local mode, ${requests} requests (half access, half erasure; exports ready after 2 polls; waits compressed to 0 ms${throttled})`,
    ['completed', 'seconds', 'requests/s', 'CPU ms per request', 'target'],
    [
      [
        `${result.completed}/${result.requests}`,
        result.seconds.toFixed(1),
        (result.requests / result.seconds).toFixed(1),
        (result.cpuMs / result.requests).toFixed(0),
        'at least 20 requests/s',
      ],
    ],
  );
  const platform = result.platform;
  printTable(
    'What the platform emulator saw (GET /_emulator/stats)',
    ['peak requests/s', 'peak open exports', '429s sent'],
    [
      [
        String(platform.max_requests_per_second),
        String(platform.max_open_exports),
        String(platform.throttled.total),
      ],
    ],
  );
}

/**
 * A mass drop against a rate-limited platform that goes down in the middle, with AWS throttling:
 * nothing may fail that could have waited, and the platform's limits must never be passed.
 */
async function burst() {
  const requests = countFromEnv('BENCH_BURST_REQUESTS', 1000);
  const rateLimit = { requests_per_second: 50, burst: 50, max_open_exports: 100 };
  const outage = { afterSeconds: 45, durationSeconds: 30 };
  const faults: AwsFaults = awsFaults ?? {
    seed: 1,
    throttle_rate: 0.05,
    services: ['dynamodb', 's3', 'sqs', 'lambda', 'states'],
  };
  const result = await localThroughput(requests, { awsFaults: faults, rateLimit, outage });
  const { platform } = result;
  const most = (pick: (subject: PlatformStats['subjects'][number]) => number) =>
    Math.max(0, ...platform.subjects.map(pick));
  // The calls the platform served: every request but those turned away by its limits or the outage.
  const served = platform.requests - platform.throttled.total - platform.outage_answers;
  const floor = served / rateLimit.requests_per_second;
  printTable(
    `Mass drop: ${requests} requests (half access, half erasure) at once; platform rate_limit ${JSON.stringify(rateLimit)}, a ${outage.durationSeconds} s outage ${outage.afterSeconds} s in; AWS throttle_rate ${faults.throttle_rate} (${faults.services.join(', ')}, seed ${faults.seed}); waits compressed except those for the platform`,
    ['measure', 'seen', 'goal'],
    [
      [
        'completed / failed / stuck',
        `${result.completed} / ${result.failed} / ${result.stuck}`,
        `${requests} / 0 / 0`,
      ],
      ['exports started per subject (most)', String(most((subject) => subject.exports_started)), 'at most 1'],
      ['DELETEs per subject (most)', String(most((subject) => subject.deletes_succeeded)), 'at most 1'],
      [
        'highest requests in any one second',
        String(platform.max_requests_per_second),
        `at most ${rateLimit.requests_per_second}`,
      ],
      [
        'highest exports open at once',
        String(platform.max_open_exports),
        `at most ${rateLimit.max_open_exports}`,
      ],
      [
        '429s received',
        `${platform.throttled.total} (rate ${platform.throttled.rate_limit}, open exports ${platform.throttled.open_exports})`,
        '0',
      ],
      ['503s received (the outage)', String(platform.outage_answers), 'few: the circuit holds the rest'],
      ['platform calls served', String(served), ''],
      [
        'wall time vs floor (calls served / rate)',
        `${result.seconds.toFixed(0)} s vs ${floor.toFixed(0)} s = ${(result.seconds / floor).toFixed(2)}x`,
        'within 1.5x',
      ],
      [
        'wall time vs floor + outage',
        `${(result.seconds / (floor + outage.durationSeconds)).toFixed(2)}x`,
        '',
      ],
      ['CPU ms per request', (result.cpuMs / requests).toFixed(0), ''],
    ],
  );
}

/**
 * Local mode's memory and main-thread CPU per request, at each size of BENCH_MEMORY_REQUESTS
 * (default 1,000 and 5,000), each on a fresh local mode after a warm-up of 200 requests.
 */
async function memory() {
  const sizes = (process.env.BENCH_MEMORY_REQUESTS ?? '1000,5000')
    .split(',')
    .map((size) => z.coerce.number().int().positive().parse(size));
  const rows: string[][] = [];
  const calls: string[][] = [];
  for (const size of sizes) {
    const result = await localMemory(size);
    const perRequest = (count: number) => (count / size).toFixed(1);
    const total = [...result.awsCalls.values()].reduce((sum, count) => sum + count, 0);
    const top = [...result.awsCalls].sort((left, right) => right[1] - left[1]).slice(0, 3);
    const callsMs = (total / size) * result.ledgerReadMs;
    calls.push([
      String(size),
      perRequest(total),
      top.map(([operation, count]) => `${operation} ${perRequest(count)}`).join(', '),
      result.ledgerReadMs.toFixed(2),
      callsMs.toFixed(1),
      (result.mainThreadMs / size - callsMs).toFixed(1),
    ]);
    const growth = (result.rssAfterMiB - result.rssBeforeMiB) / size;
    rows.push([
      `${result.completed}/${size}`,
      (size / result.seconds).toFixed(1),
      `${result.rssBeforeMiB.toFixed(0)} -> ${result.rssAfterMiB.toFixed(0)}`,
      growth.toFixed(3),
      `${result.heapBeforeMiB.toFixed(0)} -> ${result.heapAfterMiB.toFixed(0)}`,
      (result.mainThreadMs / size).toFixed(1),
      (result.mainThreadBusyMs / size).toFixed(1),
      (result.processCpuMs / size).toFixed(1),
    ]);
  }
  printTable(
    "Local mode memory and CPU (after 200 warm-up requests; half access, half erasure; waits compressed). Targets: RSS growth at most 0.02 MiB per request, main-thread CPU at most 15 ms per request. Requests/s are wall figures and move with the host's load.",
    [
      'completed',
      'requests/s',
      'RSS MiB',
      'RSS growth MiB per request',
      'heap in use MiB (both threads)',
      'main-thread CPU ms per request',
      'main-thread busy (wall) ms per request',
      'process CPU ms per request',
    ],
    rows,
  );
  printTable(
    'Where the main thread spends it: AWS SDK calls per request, counted, times the main-thread CPU of one ledger read (SDK GetItem and its parse) measured after the run',
    [
      'requests',
      'AWS calls per request',
      'most made',
      'one ledger read, CPU ms',
      'calls x that, ms per request',
      'the rest, ms per request',
    ],
    calls,
  );
}

/** The subject package of a heavy user: its page's size and how long it takes to build and to open. */
async function subjectPackage() {
  const comments = countFromEnv('BENCH_PACKAGE_COMMENTS', 10_000);
  printTable(
    `Subject package: ${comments} comments beside 10 (median of ${rounds}); opened from disk in headless Chromium, JavaScript off, 1280x900 viewport`,
    [
      'comments',
      'index.html',
      'package zip',
      'build ms (normalise, render, zip)',
      'open ms (navigate to load event)',
      'style + layout ms',
      'DOM nodes',
    ],
    await packageBench(comments, rounds),
  );
}

const packageResult = z.object({
  seconds: z.number(),
  cpuSeconds: z.number(),
  peakRssBytes: z.number(),
  packageBytes: z.number(),
  scratchPeakBytes: z.number(),
});

/** BuildPackage's memory and time from 10,000 to 1,000,000 comments, each size in its own process. */
async function packageMemory() {
  const counts = (process.env.BENCH_PACKAGE_SIZES ?? '10000,100000,1000000').split(',').map(Number);
  const baselineMax = countFromEnv('BENCH_PACKAGE_BASELINE_MAX', 100_000);
  const bundles = await bundle();
  const sink = await startSinkProcess(bundles);
  const dir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-package-memory-'));
  const measured: { comments: number; streamed: z.infer<typeof packageResult> }[] = [];
  const limitedRuns: boolean[] = [];
  const rows: string[][] = [];
  try {
    for (const comments of counts) {
      const archive = join(dir, `export-${comments}.zip`);
      const { jsonBytes, archiveBytes } = await writeHeavyArchive(archive, comments);
      const build = async (mode: 'streamed' | 'in-memory') => {
        const args = [
          bundles.packageWorker,
          JSON.stringify({ mode, archive, comments, s3Endpoint: sink.endpoint }),
        ];
        // The streamed build with BuildPackage's memory, as Lambda gives it; the old in-memory
        // build as it was measured before (it needs about 10 GB at a million comments).
        const limited =
          mode === 'streamed' ? limitedTo(PACKAGE_FUNCTION_MIB, process.execPath, args) : undefined;
        if (mode === 'streamed') limitedRuns.push(limited !== undefined);
        try {
          const { stdout } = await run(limited?.command ?? process.execPath, limited?.args ?? args, {
            maxBuffer: 1024 * 1024,
            env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
          });
          return packageResult.parse(JSON.parse(stdout.trim().split('\n').pop() ?? '{}'));
        } finally {
          limited?.dispose();
        }
      };
      const streamed = await build('streamed');
      const baseline = comments <= baselineMax ? await build('in-memory') : undefined;
      await rm(archive, { force: true });
      measured.push({ comments, streamed });
      const mib = (bytes: number) => (bytes / MiB).toFixed(0);
      rows.push([
        comments.toLocaleString('en'),
        `${mib(jsonBytes)} MiB (zip ${mib(archiveBytes)} MiB)`,
        `${mib(streamed.packageBytes)} MiB`,
        `${mib(streamed.peakRssBytes)} MiB`,
        `${streamed.seconds.toFixed(1)} s (${((streamed.seconds / comments) * 1e6).toFixed(0)} µs per comment)`,
        `${streamed.cpuSeconds.toFixed(1)} s`,
        `${mib(streamed.scratchPeakBytes)} MiB`,
        baseline === undefined ? 'not run' : `${mib(baseline.peakRssBytes)} MiB`,
        baseline === undefined ? 'not run' : `${baseline.seconds.toFixed(1)} s`,
      ]);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
    await sink.close();
    await bundles.dispose();
  }
  printTable(
    `Subject package (BuildPackage): peak RSS and time per build, each in a process of its own${limitedRuns.every(Boolean) ? `, limited to the function's ${PACKAGE_FUNCTION_MIB} MB as Lambda limits it` : ` (NOT limited to the function's ${PACKAGE_FUNCTION_MIB} MB: no writable memory cgroup here, so Node sizes its heap from the host's memory)`}; baseline: the build as it was, everything in memory, unlimited`,
    [
      'comments',
      'export JSON',
      'package',
      'peak RSS',
      'time',
      'CPU',
      'local disk',
      'baseline peak RSS',
      'baseline time',
    ],
    rows,
  );
  const first = measured[0];
  const last = measured.at(-1);
  if (first !== undefined && last !== undefined && last !== first) {
    const allowed = 1.5 * first.streamed.peakRssBytes + 64 * MiB;
    const perComment = (entry: typeof first) => entry.streamed.seconds / entry.comments;
    console.log(
      `Peak RSS at ${last.comments.toLocaleString('en')}: ${(last.streamed.peakRssBytes / MiB).toFixed(0)} MiB; allowed (1.5 x ${first.comments.toLocaleString('en')} + 64 MiB): ${(allowed / MiB).toFixed(0)} MiB: ${last.streamed.peakRssBytes <= allowed ? 'within' : 'OVER'}`,
    );
    const cpuPerComment = (entry: typeof first) => entry.streamed.cpuSeconds / entry.comments;
    console.log(
      `Per comment at ${last.comments.toLocaleString('en')} over at ${first.comments.toLocaleString('en')}: time ${(perComment(last) / perComment(first)).toFixed(2)}x, CPU ${(cpuPerComment(last) / cpuPerComment(first)).toFixed(2)}x (1.00 is linear)`,
    );
  }
}

/**
 * Local mode's peak memory for a heavy subject's access request beside a light subject's, same
 * state, BENCH_LOCAL_PACKAGE_ROUNDS times (default 1), light and heavy taking turns. The figure
 * checked is the highest heavy peak against the lowest light one; a request that did not end
 * exported measures nothing, and fails the bench.
 */
async function localPackage() {
  const heavyComments = countFromEnv('BENCH_HEAVY_COMMENTS', 150_000);
  const rounds = countFromEnv('BENCH_LOCAL_PACKAGE_ROUNDS', 1);
  const result = z.object({
    status: z.string(),
    packageBytes: z.number(),
    seconds: z.number(),
    rssBeforeBytes: z.number(),
    peakRssBytes: z.number(),
  });
  const worker = fileURLToPath(new URL('./local-package-worker.ts', import.meta.url));
  const runs: (z.infer<typeof result> & { round: number; subject: 'light' | 'heavy' })[] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const subject of ['light', 'heavy'] as const) {
      const { stdout } = await run(
        process.execPath,
        ['--import', 'tsx', worker, JSON.stringify({ subject, heavyComments })],
        {
          maxBuffer: 1024 * 1024,
          env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
        },
      );
      runs.push({ round, subject, ...result.parse(JSON.parse(stdout.trim().split('\n').pop() ?? '{}')) });
    }
  }
  const mib = (bytes: number) => (bytes / MiB).toFixed(0);
  printTable(
    `Local mode: one access request, a light subject (10 comments) beside a heavy one (${heavyComments.toLocaleString('en')}), same platform state, each in a process of its own`,
    ['round', 'subject', 'outcome', 'package', 'time', 'RSS once started', 'peak RSS'],
    runs.map((entry) => [
      String(entry.round),
      entry.subject,
      entry.status,
      `${(entry.packageBytes / 1024).toFixed(0)} KiB`,
      `${entry.seconds.toFixed(1)} s`,
      `${mib(entry.rssBeforeBytes)} MiB`,
      `${mib(entry.peakRssBytes)} MiB`,
    ]),
  );
  const failed = runs.filter((entry) => entry.status !== 'completed exported');
  if (failed.length > 0) {
    console.log(
      `NOT MEASURED: ${failed.length} request(s) did not end exported (${failed.map((entry) => entry.status).join('; ')})`,
    );
    process.exitCode = 1;
    return;
  }
  const peaks = (subject: 'light' | 'heavy') =>
    runs.filter((entry) => entry.subject === subject).map((entry) => entry.peakRssBytes);
  const raised = Math.max(...peaks('heavy')) - Math.min(...peaks('light'));
  const within = raised <= 256 * MiB;
  console.log(
    `The heavy subject's request raises the peak by ${mib(raised)} MiB (highest heavy peak against lowest light one; at most 256 MiB): ${within ? 'within' : 'OVER'}`,
  );
  if (!within) process.exitCode = 1;
}

const only = new Set(
  (
    process.env.BENCH_ONLY ??
    'copy,transitions,local,burst,memory,package,package-memory,local-package,reconciler,gate-simulation,cli,api-page,console'
  ).split(','),
);
if (only.has('copy')) {
  await section('copy', async () => {
    const bundles = await bundle();
    try {
      await archiveCopy(bundles);
    } finally {
      await bundles.dispose();
    }
  });
}
if (only.has('transitions')) await section('transitions', transitions);
if (only.has('local')) await section('local', throughput);
if (only.has('burst')) await section('burst', burst);
if (only.has('memory')) await section('memory', memory);
if (only.has('package')) await section('package', subjectPackage);
if (only.has('package-memory')) await section('package-memory', packageMemory);
if (only.has('local-package')) await section('local-package', localPackage);
if (only.has('reconciler')) await section('reconciler', reconcilerBench);
if (only.has('gate-simulation')) {
  for (const number of gateSimulationRegimes()) {
    await section(`gate-simulation-regime-${number}`, () => gateSimulationBench(number));
  }
}
if (only.has('cli')) await section('cli', cliBench);
if (only.has('api-page')) await section('api-page', apiPageBench);
if (only.has('console')) await section('console', consoleBench);
