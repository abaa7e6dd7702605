/**
 * Operators acting on one request at the same moment, on a serving local mode: two retries, a retry
 * against a denial, a retry against a cancellation, ROUNDS times each. Counted from the emulator's
 * own call log and export list and from the state machine: never two executions started by one
 * race, never two DELETE calls for one subject, never a platform export without its audit record.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { DescribeExecutionCommand } from '@aws-sdk/client-sfn';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { runCancel } from '../../../bin/cli/commands/cancel.ts';
import { runDeny } from '../../../bin/cli/commands/deny.ts';
import { runRetry } from '../../../bin/cli/commands/retry.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { readLocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { type CliContext, openContext, resolveTarget } from '../../../bin/cli/target.ts';
import { AuditTrail } from '../../../lambdas/shared/audit.ts';
import { retryExecutionName } from '../../../lambdas/shared/executions.ts';
import type { LedgerItem } from '../../../lambdas/shared/ledger/index.ts';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

const ROUNDS = 20;
const KINDS = ['retry+retry', 'retry+deny', 'retry+cancel'] as const;
type RaceKind = (typeof KINDS)[number];

let workdir: string;
let dataDir: string;
let server: ServingLocal;
let platformUrl: string;
/** Two operators, each with clients of their own. */
let operators: [CliContext, CliContext];

const races: { kind: RaceKind; requestId: string; primaryKey: string }[] = KINDS.flatMap((kind, k) =>
  Array.from({ length: ROUNDS }, (_, round) => ({
    kind,
    requestId: randomUUID(),
    primaryKey: `race-${k}-${round}`,
  })),
);

async function platform(method: string, path: string, body?: unknown): Promise<unknown> {
  const response = await fetch(`${platformUrl}${path}`, {
    method,
    ...(body === undefined
      ? {}
      : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });
  expect(response.status, `${method} ${path}`).toBe(200);
  return response.json();
}

async function item(requestId: string): Promise<LedgerItem | undefined> {
  return operators[0].ledger.get(requestId);
}

/** Waits until every request's status is in `statuses`. */
async function until(requestIds: readonly string[], statuses: readonly string[]): Promise<void> {
  for (let attempt = 0; ; attempt += 1) {
    const current = await Promise.all(requestIds.map(async (id) => (await item(id))?.status));
    if (current.every((status) => status !== undefined && statuses.includes(status))) return;
    if (attempt > 600) throw new Error(`requests did not reach ${statuses.join('/')}: ${server.stderr()}`);
    await delay(500);
  }
}

const quiet = () => collectingIo();

/**
 * The two operator actions of a race: the second starts `offsetMs` after the first, so the rounds
 * cover both at the same instant and the second landing between the first's ledger write and its
 * StartExecution.
 */
async function act(
  kind: RaceKind,
  requestId: string,
  offsetMs: number,
): Promise<PromiseSettledResult<unknown>[]> {
  const [first, second] = operators;
  const retry = (context: CliContext) => runRetry(context, { requestId, json: true }, quiet());
  const firstAction = retry(first);
  await delay(offsetMs);
  const other =
    kind === 'retry+retry'
      ? retry(second)
      : kind === 'retry+deny'
        ? runDeny(
            second,
            { requestId, reasonCode: 'identity_not_verified', reason: 'the identity check was not passed' },
            quiet(),
          )
        : runCancel(second, { requestId, reason: 'withdrawn by the consumer' }, quiet());
  return Promise.allSettled([firstAction, other]);
}

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-races-'));
  dataDir = join(workdir, 'data');
  const faults = join(workdir, 'faults.json');
  // Every export fails until the races begin, so each request ends `failed` and can be retried.
  await writeFile(faults, JSON.stringify({ export_failure_rate: 1 }));
  server = await serveLocal(dataDir, ['--faults', faults]);
  const endpoints = await readLocalEndpoints(dataDir);
  platformUrl = endpoints.platform.url;
  const target = await resolveTarget({ target: 'local', dataDir });
  operators = [openContext(target), openContext(target)];
  await platform('POST', '/_emulator/state', {
    spot_id: endpoints.platform.spot_id,
    users: races.map(({ primaryKey }) => ({ primary_key: primaryKey })),
  });
}, 120_000);

afterAll(async () => {
  for (const context of operators ?? []) context.close();
  if (server) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

describe('operators racing on one request, on a serving local mode', () => {
  it(`starts one run per race, sends one DELETE per subject and records every export (${ROUNDS} x ${KINDS.length})`, async () => {
    // Prepare: every request failed with its exports failed; exports succeed from now on.
    const receivedAt = new Date(Date.now() - 3600 * 1000).toISOString();
    const file = join(workdir, 'races.jsonl');
    await writeFile(
      file,
      `${races
        .map(({ requestId, primaryKey }) =>
          JSON.stringify({
            request_id: requestId,
            type: 'erasure',
            regulation: 'gdpr',
            primary_key: primaryKey,
            received_at: receivedAt,
            verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: receivedAt },
          }),
        )
        .join('\n')}\n`,
    );
    const submitted = await runCli(['submit', '--file', file, '--target', 'local', '--data-dir', dataDir]);
    expect(submitted.code, submitted.stderr).toBe(0);
    const ids = races.map((race) => race.requestId);
    await until(ids, ['failed']);
    const runsBefore = new Map(
      await Promise.all(ids.map(async (id) => [id, (await item(id))?.executions ?? 0] as const)),
    );
    await platform('PUT', '/_emulator/faults', { export_failure_rate: 0 });
    await platform('DELETE', '/_emulator/calls');

    // Act: the races, ten at a time.
    const outcomes = new Map<string, PromiseSettledResult<unknown>[]>();
    for (let start = 0; start < races.length; start += 10) {
      await Promise.all(
        races.slice(start, start + 10).map(async ({ kind, requestId }, index) => {
          outcomes.set(requestId, await act(kind, requestId, (index % 5) * 15));
        }),
      );
    }
    await until(ids, ['completed', 'denied', 'cancelled', 'failed']);

    // Assess
    const counts = { bothWon: 0, oneWon: 0, runsStarted: 0 };
    for (const { kind, requestId } of races) {
      const settled = outcomes.get(requestId) ?? [];
      const won = settled.filter((outcome) => outcome.status === 'fulfilled').length;
      const after = await item(requestId);
      const newRuns = (after?.executions ?? 0) - (runsBefore.get(requestId) ?? 0);
      counts.runsStarted += newRuns;
      if (won === 2) counts.bothWon += 1;
      if (won === 1) counts.oneWon += 1;
      // One claimed run per race at most, and no execution under a second new name.
      expect({ kind, requestId, newRuns }).toEqual({ kind, requestId, newRuns: newRuns > 0 ? 1 : 0 });
      const beyond = retryExecutionName(requestId, (runsBefore.get(requestId) ?? 0) + 2);
      const described = await operators[0].sfn
        .send(
          new DescribeExecutionCommand({
            executionArn: `${operators[0].names.StateMachineArn.replace(':stateMachine:', ':execution:')}:${beyond}`,
          }),
        )
        .then(
          () => 'exists',
          (error: Error) => error.name,
        );
      expect({ requestId, described }).toEqual({ requestId, described: 'ExecutionDoesNotExist' });
      // Two retries: exactly one wins, the other is refused with a message.
      if (kind === 'retry+retry') {
        expect({ requestId, won }).toEqual({ requestId, won: 1 });
        const refused = settled.find((outcome) => outcome.status === 'rejected');
        expect(refused?.status === 'rejected' && String(refused.reason)).toMatch(
          /being started|is running|a retry or resume started run|changed while/,
        );
      }
    }

    const calls = z
      .object({ calls: z.array(z.object({ method: z.string(), path: z.string() })) })
      .parse(await platform('GET', '/_emulator/calls'));
    const deletes = new Map<string, number>();
    for (const call of calls.calls.filter((entry) => entry.method === 'DELETE')) {
      deletes.set(call.path, (deletes.get(call.path) ?? 0) + 1);
    }
    expect([...deletes.values()].filter((n) => n > 1)).toEqual([]);

    const exports = z
      .object({ exports: z.array(z.object({ id: z.string(), primary_key: z.string() })) })
      .parse(await platform('GET', '/_emulator/exports'));
    const trail = new AuditTrail(
      { s3: operators[0].s3, bucket: operators[0].names.AuditBucketName },
      { hmacKey: async () => 'unused-key-unused-key-unused-key!', heads: operators[0].ledger },
    );
    let unrecorded = 0;
    for (const { requestId, primaryKey } of races) {
      const records = [...(await trail.list(requestId)), ...(await trail.list(`${requestId}.effects`))];
      const recorded = records.filter(
        (record) => record.action === 'export_started' || record.action === 'export_start_uncertain',
      ).length;
      const made = exports.exports.filter((entry) => entry.primary_key === primaryKey).length;
      if (made > recorded) unrecorded += made - recorded;
    }
    expect(unrecorded).toBe(0);
    console.info(
      `operator races: ${races.length} races, ${counts.oneWon} with one winner, ${counts.bothWon} with both applied in turn, ${counts.runsStarted} runs started, ${[...deletes.values()].reduce((a, b) => a + b, 0)} DELETE calls for ${deletes.size} subjects, ${exports.exports.length} platform exports, ${unrecorded} unrecorded`,
    );
  }, 900_000);
});
