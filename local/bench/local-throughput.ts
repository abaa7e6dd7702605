/**
 * Local-mode throughput: N requests (mixed access and erasure, exports ready after 2 polls, waits
 * compressed) end to end through local mode — intake queue, ledger, state machine, platform
 * emulator, archive and audit stores — in this one process. Reports requests per second and CPU
 * milliseconds per request (everything local mode runs, emulator and stand-ins included).
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AwsFaults } from '#local/aws/aws-faults';
import type { RateLimit } from '#local/emulator/faults';
import { type PlatformStats, platformStatsSchema } from '#local/emulator/limits';
import type { EmulatorState } from '#local/emulator/state';
import { startLocalMode } from '#local/local-mode';
import { type CallSink, setCallSink } from '../../lambdas/shared/call-recorder.ts';

export interface ThroughputResult {
  readonly requests: number;
  readonly completed: number;
  readonly failed: number;
  /** Still received or running once nothing runs any more: requests nothing will finish. */
  readonly stuck: number;
  readonly seconds: number;
  readonly cpuMs: number;
  /** What the platform emulator saw: peak request rate, peak open exports, 429s. */
  readonly platform: PlatformStats;
}

function platformState(users: number): EmulatorState {
  return {
    spot_id: 'sp_bench',
    conversations: [{ id: 'conv-1', url: 'https://example.com/a', title: 'A' }],
    users: Array.from({ length: users }, (_, index) => ({
      primary_key: `bench-${index}`,
      user_name: `bench_${index}`,
    })),
    comments: Array.from({ length: users }, (_, index) => ({
      id: `c-${index}`,
      primary_key: `bench-${index}`,
      conversation_id: 'conv-1',
      text: `comment ${index}`,
      written_at: 1_700_000_000 + index,
      parent_id: null,
    })),
    votes: [],
  };
}

/** `count` requests as queue lines for the users `bench-<from>` on: alternately access and erasure, every third CCPA. */
function requestLines(from: number, count: number): string[] {
  const received = new Date().toISOString();
  return Array.from({ length: count }, (_, offset) => {
    const index = from + offset;
    return JSON.stringify({
      request_id: randomUUID(),
      type: index % 2 === 0 ? 'access' : 'erasure',
      regulation: index % 3 === 0 ? 'ccpa' : 'gdpr',
      primary_key: `bench-${index}`,
      received_at: received,
      verification: { method: 'email_link', verified_by: 'bench', verified_at: received },
    });
  });
}

export interface ThroughputOptions {
  readonly awsFaults?: AwsFaults | undefined;
  /** The emulator's limits (rate_limit), set before the start. */
  readonly rateLimit?: RateLimit;
  /** An outage of the platform this many seconds after the requests are dropped. */
  readonly outage?: { readonly afterSeconds: number; readonly durationSeconds: number };
}

export async function localThroughput(
  requests: number,
  options: ThroughputOptions = {},
): Promise<ThroughputResult> {
  const dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-local-'));
  const startedAt = performance.now();
  const mode = await startLocalMode({
    dataDir,
    logSink: () => {},
    platformState: platformState(requests),
    faults: {
      export_ready_after_polls: 2,
      ...(options.rateLimit ? { rate_limit: options.rateLimit } : {}),
    },
    waitMs: 0,
    ...(options.awsFaults ? { awsFaults: options.awsFaults } : {}),
  });
  try {
    if (options.outage) {
      // The outage window counts from the emulator's start, a little after `startedAt`.
      const since = Math.floor((performance.now() - startedAt) / 1000);
      const faults = await fetch(`${mode.emulator.url}/_emulator/faults`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          export_ready_after_polls: 2,
          ...(options.rateLimit ? { rate_limit: options.rateLimit } : {}),
          outage: {
            after_seconds: since + options.outage.afterSeconds,
            duration_seconds: options.outage.durationSeconds,
          },
        }),
      });
      if (!faults.ok) throw new Error(`the emulator refused the outage: ${await faults.text()}`);
    }
    const lines = requestLines(0, requests);
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    await mode.submit(lines);
    await mode.idle();
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    let completed = 0;
    let failed = 0;
    let stuck = 0;
    // Every request sent, by its id: a message delivered twice reports its second delivery as a
    // duplicate, and is still one request.
    for (const line of lines) {
      const { request_id: requestId } = JSON.parse(line) as { request_id: string };
      const item = await mode.workflow.ledger.require(requestId);
      if (item.status === 'completed') completed += 1;
      else if (item.status === 'failed') failed += 1;
      else if (item.status === 'received' || item.status === 'running') stuck += 1;
    }
    // The emulator runs on local mode's services thread: its control API is the way in.
    const stats = await fetch(`${mode.emulator.url}/_emulator/stats`);
    const platform = platformStatsSchema.parse(await stats.json());
    return {
      requests,
      completed,
      failed,
      stuck,
      seconds,
      cpuMs: (cpu.user + cpu.system) / 1000,
      platform,
    };
  } finally {
    await mode.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}

export interface MemoryResult {
  readonly requests: number;
  readonly completed: number;
  readonly seconds: number;
  /** Resident set size after the warm-up and after the measured requests, MiB. */
  readonly rssBeforeMiB: number;
  readonly rssAfterMiB: number;
  /** Heap in use on both threads (the steps' and the services'), after the same collections, MiB. */
  readonly heapBeforeMiB: number;
  readonly heapAfterMiB: number;
  /** CPU of the main thread alone (the steps: runner, handlers, SDK clients), ms. */
  readonly mainThreadMs: number;
  /** The main thread's event loop busy time (ELU active), ms: wall time, so it also counts the time
   * the thread waited for a core while the services thread had it. */
  readonly mainThreadBusyMs: number;
  /** CPU of the whole process (every thread), ms. */
  readonly processCpuMs: number;
  /** AWS SDK calls the measured requests made, by operation (UpdateItem, PutObject, ...). */
  readonly awsCalls: ReadonlyMap<string, number>;
  /** Main-thread CPU of one ledger read (an SDK GetItem and its parse), measured after the run, ms. */
  readonly ledgerReadMs: number;
}

/** Counts SDK calls from the call recorder, which records each as the IAM authorisations it needs. */
function countAwsCalls(counts: Map<string, number>): CallSink {
  return ({ operation }, nth) => {
    if (nth === 0) counts.set(operation, (counts.get(operation) ?? 0) + 1);
  };
}

/** Main-thread CPU per ledger read, over `reads` reads one after another, ms. */
async function ledgerReadMs(read: () => Promise<unknown>, reads = 1000): Promise<number> {
  const before = mainThreadCpuMs();
  for (let done = 0; done < reads; done += 1) await read();
  return (mainThreadCpuMs() - before) / reads;
}

/**
 * CPU the main thread alone has used, ms: Linux's per-thread utime and stime (the main thread's
 * task id is the process id), in clock ticks of 10 ms. `process.cpuUsage()` counts every thread.
 */
function mainThreadCpuMs(): number {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 of stat(5) (utime, stime); the slice starts at field 3.
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * How long an idle keep-alive connection to a local service stays open: the stand-ins' servers close
 * one after Node's default `keepAliveTimeout` of 5 s. Each costs about 0.4 MiB of RSS across the two
 * threads, and a batch of requests leaves up to about 200 of them open (measured: RSS fell from
 * 383 to 301 MiB as they closed), a pool whose size follows the batch's concurrency, not its length.
 */
const IDLE_CONNECTIONS_CLOSE_MS = 6_000;

/**
 * Local mode's memory and main-thread CPU per request: `warmUp` requests first (every module
 * loaded, every cache and pool at its working size), then `requests` more; RSS is read after each
 * batch, once local mode is idle, its idle connections have closed, and both its threads (the
 * steps' and the services') have collected their garbage: what is left is what local mode keeps,
 * not what a collector or a keep-alive timer has yet to free.
 */
export async function localMemory(requests: number, warmUp = 200): Promise<MemoryResult> {
  const dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-memory-'));
  const mode = await startLocalMode({
    dataDir,
    logSink: () => {},
    platformState: platformState(warmUp + requests),
    faults: { export_ready_after_polls: 2 },
    waitMs: 0,
  });
  try {
    const settle = async () => {
      await mode.idle();
      await new Promise((resolve) => setTimeout(resolve, IDLE_CONNECTIONS_CLOSE_MS));
      return await mode.collectGarbage();
    };
    await mode.submit(requestLines(0, warmUp));
    const heapBefore = await settle();
    const rssBefore = process.memoryUsage().rss;
    const measured = requestLines(warmUp, requests);
    const awsCalls = new Map<string, number>();
    const previousSink = setCallSink(countAwsCalls(awsCalls));
    const elu = performance.eventLoopUtilization();
    const cpu = process.cpuUsage();
    const mainCpu = mainThreadCpuMs();
    const started = performance.now();
    await mode.submit(measured);
    await mode.idle();
    setCallSink(previousSink);
    const seconds = (performance.now() - started) / 1000;
    const busy = performance.eventLoopUtilization(elu);
    const spent = process.cpuUsage(cpu);
    const mainThreadMs = mainThreadCpuMs() - mainCpu;
    const heapAfter = await settle();
    const rssAfter = process.memoryUsage().rss;
    const [first] = measured;
    const firstId = (JSON.parse(first ?? '{}') as { request_id: string }).request_id;
    const readMs = await ledgerReadMs(() => mode.workflow.ledger.get(firstId));
    let completed = 0;
    for (const line of measured) {
      const { request_id: requestId } = JSON.parse(line) as { request_id: string };
      if ((await mode.workflow.ledger.require(requestId)).status === 'completed') completed += 1;
    }
    return {
      requests,
      completed,
      seconds,
      rssBeforeMiB: rssBefore / 2 ** 20,
      rssAfterMiB: rssAfter / 2 ** 20,
      heapBeforeMiB: heapBefore / 2 ** 20,
      heapAfterMiB: heapAfter / 2 ** 20,
      mainThreadMs,
      mainThreadBusyMs: busy.active,
      processCpuMs: (spent.user + spent.system) / 1000,
      awsCalls,
      ledgerReadMs: readMs,
    };
  } finally {
    await mode.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}
