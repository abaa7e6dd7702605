import { randomUUID } from 'node:crypto';
import {
  BatchWriteItemCommand,
  DeleteTableCommand,
  type DynamoDBClient,
  type WriteRequest,
} from '@aws-sdk/client-dynamodb';
import { memoryCursor } from '../../lambdas/reconciler/cursor.ts';
import { PASS_MARGIN_MS } from '../../lambdas/reconciler/handler.ts';
import {
  type ActionFigures,
  ApiPacer,
  type ApiQuotas,
  DOCUMENTED_QUOTAS,
  isThrottling,
  PACED_ACTIONS,
  type PacedAction,
  type Pacer,
  QUOTA_SHARE,
  shareOf,
} from '../../lambdas/reconciler/quota.ts';
import { type ReconcileSummary, reconcile } from '../../lambdas/reconciler/reconciler.ts';
import { Ledger, OPEN_SHARD_ATTRIBUTE, openShardKey } from '../../lambdas/shared/ledger/index.ts';
import { createGateTable, createLedgerTable } from '../../lambdas/shared/ledger/table.ts';
import { PlatformGate } from '../../lambdas/shared/platform-gate.ts';
import { neighbour, ThrottledStepFunctions } from '../aws/sfn-quotas.ts';
import { startDynamo } from '../test/helpers/dynamo.ts';

const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };

/** One reconciler run against Step Functions' throttling: the account, the ledger, the pace. */
export interface QuotaRunOptions {
  /** Open requests in the ledger, each running with one execution, last changed an hour ago. */
  readonly requests: number;
  /** Of them, requests whose execution failed: the pass resumes each. */
  readonly failed: number;
  /** Of them, requests whose execution no listing names (none started, or its history expired). */
  readonly unlisted: number;
  /** Succeeded executions of requests no longer open: the history the pass does not list. @default 0 */
  readonly history?: number;
  /** The account's buckets, as the stand-in applies them. */
  readonly quotas: ApiQuotas;
  /** The share of `quotas` the reconciler's pacer allows it; `unpaced` gives it no pacer at all. */
  readonly pace: { readonly share: number } | 'unpaced' | 'previous';
  /** Each answer's latency, ms. */
  readonly latencyMs: number;
  /** Each pass's time, ms (the Lambda's timeout less PASS_MARGIN_MS). */
  readonly budgetMs: number;
  /** Another caller of the account spending this share of every action's refill. @default none */
  readonly neighbourShare?: number;
  /** Another caller empties every bucket just before the first pass. @default false */
  readonly burstBefore?: boolean;
  /** The pacer's first backoff after a throttled call, ms. @default 1000 */
  readonly firstBackoffMs?: number;
  /** @default 20 */
  readonly maxPasses?: number;
  readonly pageSize?: number;
  readonly concurrency?: number;
}

/** What the run did. */
export interface QuotaRunResult {
  readonly requests: number;
  /** Open requests looked at by the passes up to the one that reached the end of the index. */
  readonly checked: number;
  readonly passes: number;
  /** Passes that threw (the previous pass: at its first throttled call). */
  readonly failedPasses: number;
  readonly failures: readonly string[];
  /** True when a pass reached the end of the open index. */
  readonly complete: boolean;
  /** The reconciler's Step Functions calls and throttled calls, per action, as the stand-in counted them. */
  readonly calls: Readonly<Record<PacedAction, ActionFigures>>;
  /** DescribeExecution calls answered: the previous pass's coverage when it fails. */
  readonly described: number;
  /** The other caller's calls and throttled calls, when there is one. */
  readonly neighbour?: { readonly calls: number; readonly throttled: number };
  /** Requests given a new execution; `resumedAsExpected` when they are exactly the failed and unlisted ones. */
  readonly resumed: number;
  readonly resumedAsExpected: boolean;
  readonly listed: number;
  readonly seconds: number;
  readonly cpuSeconds: number;
}

/** Quotas no pass reaches: the reconciler with its backoff but without a pace. */
const UNLIMITED: ApiQuotas = {
  ListExecutions: { bucket: 1e9, refillPerSecond: 1e9 },
  DescribeExecution: { bucket: 1e9, refillPerSecond: 1e9 },
  StartExecution: { bucket: 1e9, refillPerSecond: 1e9 },
};

/**
 * The previous pass's calls: every one made at once, none listed, a throttled one thrown (after
 * the SDK's own retries it failed the pass).
 */
function directCalls(): Pacer {
  const figures: Record<PacedAction, { calls: number; throttled: number }> = {
    ListExecutions: { calls: 0, throttled: 0 },
    DescribeExecution: { calls: 0, throttled: 0 },
    StartExecution: { calls: 0, throttled: 0 },
  };
  return {
    async run(action, call) {
      figures[action].calls += 1;
      try {
        return { done: true, value: await call() };
      } catch (error) {
        if (isThrottling(error)) figures[action].throttled += 1;
        throw error;
      }
    },
    figures: () => ({
      ListExecutions: { ...figures.ListExecutions },
      DescribeExecution: { ...figures.DescribeExecution },
      StartExecution: { ...figures.StartExecution },
    }),
  };
}

/**
 * Writes `options.requests` open requests into a ledger of its own on `client`, gives the stand-in
 * their executions, and runs reconciler passes (each within `budgetMs`, one cursor between them)
 * until one reaches the end of the open index or `maxPasses` have run; a pass that throws counts
 * as failed and the next goes on from the cursor, as the next scheduled invocation would.
 */
export async function reconcileUnderQuota(
  client: DynamoDBClient,
  options: QuotaRunOptions,
): Promise<QuotaRunResult> {
  const tag = randomUUID().slice(0, 8);
  const table = `ledger-${tag}`;
  const gateTable = `gate-${tag}`;
  await createLedgerTable(client, table);
  await createGateTable(client, gateTable);
  try {
    const ids = await writeOpenRequests(client, table, options.requests);
    const stepFunctions = new ThrottledStepFunctions({
      quotas: options.quotas,
      latencyMs: options.latencyMs,
    });
    for (let done = 0; done < (options.history ?? 0); done++) stepFunctions.add(`done-${done}`, 'SUCCEEDED');
    const expected = new Set<string>();
    ids.forEach((id, index) => {
      if (index < options.failed) stepFunctions.add(id, 'FAILED');
      else if (index >= options.failed + options.unlisted) stepFunctions.add(id, 'RUNNING');
      if (index < options.failed + options.unlisted) expected.add(id);
    });
    let described = 0;
    const describe = async (name: string) => {
      const status = await stepFunctions.describe(name);
      described += 1;
      return status;
    };
    const pacer =
      options.pace === 'previous'
        ? directCalls()
        : new ApiPacer(options.pace === 'unpaced' ? UNLIMITED : shareOf(options.quotas, options.pace.share), {
            ...(options.firstBackoffMs === undefined ? {} : { firstBackoffMs: options.firstBackoffMs }),
            maxBackoffMs: Math.max(options.firstBackoffMs ?? 1000, 20_000),
          });
    const ledger = new Ledger(client, table, () => new Date());
    const gate = new PlatformGate(client, gateTable, {
      requestsPerSecond: 10,
      burst: 10,
      maxOpenExports: 25,
      outageHorizonSeconds: 3600,
    });
    const cursor = memoryCursor();
    const resumed: string[] = [];
    const failures: string[] = [];
    const summaries: ReconcileSummary[] = [];
    if (options.burstBefore === true) for (const action of PACED_ACTIONS) stepFunctions.drain(action);
    const others =
      options.neighbourShare === undefined
        ? []
        : PACED_ACTIONS.map((action) =>
            neighbour(
              stepFunctions,
              action,
              options.quotas[action].refillPerSecond * (options.neighbourShare ?? 0),
            ),
          );
    const begin = Date.now();
    const cpu = process.cpuUsage();
    let passes = 0;
    for (; passes < (options.maxPasses ?? 20); ) {
      passes += 1;
      const started = Date.now();
      try {
        const summary = await reconcile(
          {
            ledger,
            audit: { append: async () => Promise.reject(new Error('no request is stranded here')) },
            list: options.pace === 'previous' ? async () => ({ executions: [] }) : stepFunctions.list,
            describe,
            start: async (name) => {
              const answer = await stepFunctions.start(name);
              resumed.push(name.replace(/-retry-\d+$/, ''));
              return answer;
            },
            clock: () => new Date(),
            logger: silent,
            gate,
            publish: () => {},
            cursor,
            pacer,
          },
          {
            maxResumes: 3,
            graceSeconds: 0,
            timeLeftMs: () => options.budgetMs - (Date.now() - started),
            ...(options.pageSize === undefined ? {} : { pageSize: options.pageSize }),
            ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
          },
        );
        summaries.push(summary);
        if (summary.complete) break;
      } catch (error) {
        failures.push(error instanceof Error ? error.name : 'unknown');
        if (options.pace === 'previous') break;
      }
    }
    const seconds = (Date.now() - begin) / 1000;
    const used = process.cpuUsage(cpu);
    const neighbourFigures = others.map((other) => other.stop());
    // The reconciler's calls as the stand-in answered them: every call it saw, less the other caller's.
    const seen = stepFunctions.figures();
    const ofReconciler = (action: PacedAction): ActionFigures => {
      const other = neighbourFigures[PACED_ACTIONS.indexOf(action)] ?? { calls: 0, throttled: 0 };
      return {
        calls: seen[action].calls - other.calls,
        throttled: seen[action].throttled - other.throttled,
      };
    };
    const resumedSet = new Set(resumed);
    return {
      requests: options.requests,
      checked: summaries.reduce((sum, summary) => sum + summary.checked, 0),
      passes,
      failedPasses: failures.length,
      failures,
      complete: summaries.at(-1)?.complete === true,
      calls: {
        ListExecutions: ofReconciler('ListExecutions'),
        DescribeExecution: ofReconciler('DescribeExecution'),
        StartExecution: ofReconciler('StartExecution'),
      },
      described,
      ...(neighbourFigures.length === 0
        ? {}
        : {
            neighbour: {
              calls: neighbourFigures.reduce((sum, figures) => sum + figures.calls, 0),
              throttled: neighbourFigures.reduce((sum, figures) => sum + figures.throttled, 0),
            },
          }),
      resumed: resumed.length,
      resumedAsExpected:
        resumed.length === resumedSet.size &&
        resumedSet.size === expected.size &&
        [...expected].every((id) => resumedSet.has(id)),
      listed: summaries[0]?.listed ?? 0,
      seconds,
      cpuSeconds: (used.user + used.system) / 1e6,
    };
  } finally {
    await client.send(new DeleteTableCommand({ TableName: table }));
    await client.send(new DeleteTableCommand({ TableName: gateTable }));
  }
}

/** Calls of every action, and throttled ones. */
export function totals(calls: Readonly<Record<PacedAction, ActionFigures>>): ActionFigures {
  return PACED_ACTIONS.reduce(
    (sum, action) => ({
      calls: sum.calls + calls[action].calls,
      throttled: sum.throttled + calls[action].throttled,
    }),
    { calls: 0, throttled: 0 },
  );
}

/**
 * The reconciler bench: BENCH_RECONCILE_REQUESTS (default 50,000) open requests, written with
 * BatchWriteItem into a ledger on dynalite (in this process: its CPU is counted), reconciled by the
 * reconciler's code pass after pass, each with the Lambda's time budget (its 5-minute timeout less
 * PASS_MARGIN_MS, or BENCH_RECONCILE_BUDGET_S), against a Step Functions stand-in that throttles as
 * AWS does: a token bucket per API action with the documented size and refill of the largest
 * Regions (ListExecutions 200 and 5 a second, DescribeExecution 300 and 15, StartExecution 1,300
 * and 300), a ThrottlingException when it is empty, every answer after BENCH_DESCRIBE_MS (default
 * 20 ms). Three runs:
 * 1. 1 request in 50 with a failed execution (resumed), 20,000 succeeded executions of ended
 *    requests in the history, a quiet account;
 * 2. as 1, but 1 in 50 with no execution listed instead (each needs its DescribeExecution), and
 *    another caller spending the other half of every bucket's refill all along;
 * 3. the previous pass (a DescribeExecution per open request, 16 at once, unpaced; a throttled call
 *    failed it), on run 1's account.
 */
export async function reconcilerBench(): Promise<void> {
  const requests = Number(process.env.BENCH_RECONCILE_REQUESTS ?? 50_000);
  const latencyMs = Number(process.env.BENCH_DESCRIBE_MS ?? 20);
  const budgetMs = Number(process.env.BENCH_RECONCILE_BUDGET_S ?? (300_000 - PASS_MARGIN_MS) / 1000) * 1000;
  const share = QUOTA_SHARE.default;
  const stuck = Math.floor(requests / 50);
  const dynamo = await startDynamo({ maxAttempts: 10 });
  const quotas = DOCUMENTED_QUOTAS.largest;
  try {
    const base = { requests, quotas, latencyMs, budgetMs, history: 20_000 } as const;
    const runs: [string, QuotaRunResult][] = [];
    runs.push([
      `paced at ${share} of the quotas; 1 in 50 failed`,
      await reconcileUnderQuota(dynamo.client, { ...base, failed: stuck, unlisted: 0, pace: { share } }),
    ]);
    runs.push([
      `paced at ${share}; 1 in 50 unlisted (described); another caller at ${1 - share} of every refill`,
      await reconcileUnderQuota(dynamo.client, {
        ...base,
        failed: 0,
        unlisted: stuck,
        pace: { share },
        neighbourShare: 1 - share,
      }),
    ]);
    runs.push([
      'the previous pass: DescribeExecution per request, 16 at once, unpaced',
      await reconcileUnderQuota(dynamo.client, { ...base, failed: stuck, unlisted: 0, pace: 'previous' }),
    ]);
    const figure = (calls: Readonly<Record<PacedAction, ActionFigures>>, action: PacedAction) =>
      calls[action].calls.toLocaleString('en');
    printRows(
      `Reconciler over ${requests.toLocaleString('en')} open requests on dynalite (in process: its CPU is counted), against a Step Functions stand-in with the documented buckets of the largest Regions (ListExecutions 200 + 5/s, DescribeExecution 300 + 15/s, StartExecution 1,300 + 300/s), answers after ${latencyMs} ms, each pass given ${(budgetMs / 1000).toFixed(0)} s`,
      [
        'run',
        'passes',
        'failed passes',
        'coverage',
        'List / Describe / Start calls',
        'throttled',
        'calls per open request',
        'time',
        'CPU',
        'resumed',
      ],
      runs.map(([name, run]) => {
        const all = totals(run.calls);
        const covered = run.complete ? run.checked : run.described;
        return [
          name,
          `${run.passes}`,
          `${run.failedPasses}${run.failures.length > 0 ? ` (${[...new Set(run.failures)].join(', ')})` : ''}`,
          `${((100 * covered) / run.requests).toFixed(1)}% (${covered.toLocaleString('en')})`,
          `${figure(run.calls, 'ListExecutions')} / ${figure(run.calls, 'DescribeExecution')} / ${figure(run.calls, 'StartExecution')}`,
          `${all.throttled}${run.neighbour === undefined ? '' : ` (the other caller: ${run.neighbour.throttled} of ${run.neighbour.calls.toLocaleString('en')})`}`,
          (all.calls / run.requests).toFixed(4),
          `${run.seconds.toFixed(1)} s`,
          `${run.cpuSeconds.toFixed(1)} s`,
          `${run.resumed.toLocaleString('en')}${run.resumedAsExpected ? ' (each stuck one once)' : ''}`,
        ];
      }),
    );
    console.log(
      `Listed by the first pass of run 1: ${(runs[0]?.[1].listed ?? 0).toLocaleString('en')} executions (running, failed); the 20,000 succeeded ones are not listed.`,
    );
  } finally {
    await dynamo.close();
  }
}

/**
 * Writes `count` running requests (one execution each, last changed an hour ago) with
 * BatchWriteItem, 25 items a batch, a few batches at once; answers their ids.
 */
export async function writeOpenRequests(
  client: DynamoDBClient,
  table: string,
  count: number,
): Promise<string[]> {
  const changed = new Date(Date.now() - 3_600_000).toISOString();
  const ids = Array.from({ length: count }, () => randomUUID());
  const itemOf = (id: string): WriteRequest => ({
    PutRequest: {
      Item: {
        request_id: { S: id },
        status: { S: 'running' },
        step: { S: 'exporting' },
        type: { S: 'access' },
        regulation: { S: 'gdpr' },
        primary_key: { S: `u-${id.slice(0, 8)}` },
        received_at: { S: changed },
        due_at: { S: '2027-01-01T00:00:00.000Z' },
        extension_limit_at: { S: '2027-03-01T00:00:00.000Z' },
        confirm_by: { NULL: true },
        fingerprint: { S: 'fp' },
        verification: {
          M: {
            method: { S: 'email_link' },
            verified_by: { S: 'privacy' },
            verified_at: { S: changed },
          },
        },
        export_attempts: { N: '0' },
        executions: { N: '1' },
        created_at: { S: changed },
        updated_at: { S: changed },
        [OPEN_SHARD_ATTRIBUTE]: { S: openShardKey(id, 'running') ?? '' },
      },
    },
  });
  const batches: WriteRequest[][] = [];
  for (let start = 0; start < ids.length; start += 25) batches.push(ids.slice(start, start + 25).map(itemOf));
  let next = 0;
  const writer = async () => {
    while (next < batches.length) {
      let pending = batches[next] ?? [];
      next += 1;
      while (pending.length > 0) {
        const answer = await client.send(new BatchWriteItemCommand({ RequestItems: { [table]: pending } }));
        pending = answer.UnprocessedItems?.[table] ?? [];
      }
    }
  };
  await Promise.all(Array.from({ length: 4 }, writer));
  return ids;
}

function printRows(title: string, header: string[], rows: string[][]): void {
  console.log(`\n${title}`);
  const widths = header.map((cell, column) =>
    Math.max(cell.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: string[]) =>
    `| ${cells.map((cell, column) => cell.padEnd(widths[column] ?? 0)).join(' | ')} |`;
  console.log(line(header));
  console.log(`|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`);
  for (const row of rows) console.log(line(row));
}
