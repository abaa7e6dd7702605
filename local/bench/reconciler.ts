import { randomUUID } from 'node:crypto';
import { BatchWriteItemCommand, type DynamoDBClient, type WriteRequest } from '@aws-sdk/client-dynamodb';
import { memoryCursor } from '../../lambdas/reconciler/cursor.ts';
import { PASS_MARGIN_MS } from '../../lambdas/reconciler/handler.ts';
import {
  type ReconcileMetrics,
  type ReconcileSummary,
  reconcile,
} from '../../lambdas/reconciler/reconciler.ts';
import { type ExecutionStatus, isLive, latestExecutionName } from '../../lambdas/shared/executions.ts';
import { Ledger, OPEN_SHARD_ATTRIBUTE, openShardKey } from '../../lambdas/shared/ledger/index.ts';
import { createGateTable, createLedgerTable } from '../../lambdas/shared/ledger/table.ts';
import { PlatformGate } from '../../lambdas/shared/platform-gate.ts';
import { startDynamo } from '../test/helpers/dynamo.ts';

const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };

/**
 * The reconciler bench: BENCH_RECONCILE_REQUESTS (default 50,000) open requests, written with
 * BatchWriteItem into a ledger on dynalite (in this process), reconciled by the reconciler's code
 * with the Lambda's time budget (its 5-minute timeout less PASS_MARGIN_MS, or
 * BENCH_RECONCILE_BUDGET_S) pass after pass until a pass reaches the end of the open index.
 * DescribeExecution is a stand-in that answers from a map (name -> status) after
 * BENCH_DESCRIBE_MS (default 20 ms, about what the real call takes from a Lambda): 1 request in
 * 50 has an ended execution and is resumed (StartExecution is a stand-in that records the name).
 * Baseline, measured in the same run: the loop as it was (one request at a time: read the item,
 * then DescribeExecution) over the first BENCH_RECONCILE_BASELINE (default 2,000) open requests,
 * scaled to the whole count.
 */
export async function reconcilerBench(): Promise<void> {
  const count = Number(process.env.BENCH_RECONCILE_REQUESTS ?? 50_000);
  const baselineCount = Math.min(count, Number(process.env.BENCH_RECONCILE_BASELINE ?? 2_000));
  const describeMs = Number(process.env.BENCH_DESCRIBE_MS ?? 20);
  const budgetMs = Number(process.env.BENCH_RECONCILE_BUDGET_S ?? (300_000 - PASS_MARGIN_MS) / 1000) * 1000;
  const dynamo = await startDynamo({ maxAttempts: 10 });
  const { client } = dynamo;
  try {
    await createLedgerTable(client, 'ledger');
    await createGateTable(client, 'gate');
    const written = Date.now();
    const ids = await writeOpenRequests(client, 'ledger', count);
    console.log(
      `\nReconciler: ${count.toLocaleString('en')} open requests written with BatchWriteItem in ${((Date.now() - written) / 1000).toFixed(1)} s`,
    );
    const executions = new Map<string, ExecutionStatus>(
      ids.map((id, index) => [latestExecutionName(id, 1), index % 50 === 0 ? 'FAILED' : 'RUNNING']),
    );
    const describe = async (name: string): Promise<ExecutionStatus> => {
      await new Promise((resolve) => setTimeout(resolve, describeMs));
      return executions.get(name) ?? 'MISSING';
    };
    const ledger = new Ledger(client, 'ledger', () => new Date());

    // Baseline: the loop as it was, one request at a time, over the first requests.
    const baseStart = process.hrtime.bigint();
    const baseCpu = process.cpuUsage();
    let looked = 0;
    outer: for (const status of ['received', 'running'] as const) {
      for await (const entry of ledger.openRequests(status)) {
        const item = await ledger.get(entry.request_id);
        if (item === undefined) continue;
        isLive(await describe(latestExecutionName(item.request_id, item.executions)));
        looked += 1;
        if (looked >= baselineCount) break outer;
      }
    }
    const baseSeconds = Number(process.hrtime.bigint() - baseStart) / 1e9;
    const baseCpuSeconds = cpuSecondsSince(baseCpu);
    const scale = count / looked;

    // The reconciler, pass after pass, each within the Lambda's budget.
    const gate = new PlatformGate(client, 'gate', {
      requestsPerSecond: 10,
      burst: 10,
      maxOpenExports: 25,
      outageHorizonSeconds: 3600,
    });
    const cursor = memoryCursor();
    const started: string[] = [];
    const passes: {
      summary: ReconcileSummary;
      seconds: number;
      cpuSeconds: number;
      publishedAt: number[];
    }[] = [];
    for (let pass = 0; pass < 20; pass++) {
      const publishedAt: number[] = [];
      const begin = Date.now();
      const cpu = process.cpuUsage();
      const summary = await reconcile(
        {
          ledger,
          audit: { append: async () => Promise.reject(new Error('no request is stranded in this bench')) },
          describe,
          start: async (name) => {
            started.push(name);
            return 'started';
          },
          clock: () => new Date(),
          logger: silent,
          gate,
          publish: (_metrics: ReconcileMetrics) => publishedAt.push(Date.now() - begin),
          cursor,
        },
        { maxResumes: 3, graceSeconds: 0, timeLeftMs: () => budgetMs - (Date.now() - begin) },
      );
      passes.push({
        summary,
        seconds: (Date.now() - begin) / 1000,
        cpuSeconds: cpuSecondsSince(cpu),
        publishedAt,
      });
      if (summary.complete) break;
    }
    const seconds = passes.reduce((sum, pass) => sum + pass.seconds, 0);
    const cpuSeconds = passes.reduce((sum, pass) => sum + pass.cpuSeconds, 0);
    const checked = passes.reduce((sum, pass) => sum + pass.summary.checked, 0);
    const first = passes[0];
    const duringFirst =
      first === undefined ? 0 : first.publishedAt.filter((at) => at < first.seconds * 1000 - 1).length;
    const rows = [
      [
        'reconciler (pages of 100, 16 at once, cursor)',
        `${checked.toLocaleString('en')}`,
        `${seconds.toFixed(1)} s`,
        `${cpuSeconds.toFixed(1)} s`,
        `${passes.length} (budget ${(budgetMs / 1000).toFixed(0)} s each; last complete: ${passes.at(-1)?.summary.complete === true})`,
        `${passes.reduce((sum, pass) => sum + pass.publishedAt.length, 0)} publishes; first ${((first?.publishedAt[0] ?? 0) / 1000).toFixed(1)} s into the first pass, ${duringFirst} before it ended`,
      ],
      [
        `baseline: the sequential loop, ${looked.toLocaleString('en')} requests x ${scale.toFixed(1)}`,
        `${count.toLocaleString('en')} (scaled)`,
        `${(baseSeconds * scale).toFixed(1)} s`,
        `${(baseCpuSeconds * scale).toFixed(1)} s`,
        baseSeconds * scale > budgetMs / 1000
          ? 'none completes: each times out and the next starts over (no cursor)'
          : '1',
        'none before the loop ends',
      ],
    ];
    printRows(
      `Reconciler pass over ${count.toLocaleString('en')} open requests on dynalite (in process: its CPU is counted), DescribeExecution stand-in answering from a map after ${describeMs} ms`,
      ['pass', 'requests', 'time', 'CPU', 'passes', 'metrics'],
      rows,
    );
    console.log(`Resumed (1 in 50 had an ended execution): ${started.length.toLocaleString('en')}`);
  } finally {
    await dynamo.close();
  }
}

function cpuSecondsSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1e6;
}

/**
 * Writes `count` running requests (one execution each, last changed an hour ago) with
 * BatchWriteItem, 25 items a batch, a few batches at once; answers their ids.
 */
async function writeOpenRequests(client: DynamoDBClient, table: string, count: number): Promise<string[]> {
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
