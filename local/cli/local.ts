/** The `local` command: local mode from CLI flags, its progress, its summary and its serving loop. */

import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { requestLines } from '../../bin/cli/commands/submit.ts';
import { CliError, EXIT, parseOption, readRequestsText, shellWord } from '../../bin/cli/io.ts';
import type { LocalFlags } from '../../bin/cli/local-package.ts';
import { formatSeconds, startProgress } from '../../bin/cli/progress.ts';
import { localStackConfig } from '../../bin/cli/stack-config.ts';
import { API_ROLES } from '../../lambdas/api/identity.ts';
import { CALLERS, setDefaultCaller } from '../../lambdas/shared/call-recorder.ts';
import { timeZoneSchema } from '../../lambdas/shared/config.ts';
import type { LedgerItem } from '../../lambdas/shared/ledger/index.ts';
import { siteSummary } from '../../lambdas/shared/site-outcomes.ts';
import {
  type StatusChangedDetail,
  statusChangedDetailSchema,
} from '../../lambdas/status-events/status-events.ts';
import { loadAwsFaultsFile } from '../aws/aws-faults.ts';
import type { LocalEvent } from '../aws/events-standin.ts';
import { DataDirInUseError } from '../data-dir-lock.ts';
import { loadFaultsFile } from '../emulator/faults.ts';
import { loadStateFile } from '../emulator/state.ts';
import { type LineOutcome, type LocalMode, retriedThroughFaults } from '../local-mode.ts';
import { type ApiEndpoint, LOCAL_SIGN_IN_PATH } from '../runtime/api-endpoint.ts';
import { untilStopped } from './emulator.ts';
import { stopServing } from './serve-stop.ts';

/** The `--json` summary of a run (the contract scripts rely on). */
export interface LocalSummary {
  requests: {
    request_id: string;
    status: string;
    outcome: string | null;
    error: { code: string; message: string } | null;
    archive: { key: string; path: string; bytes: number; sha256: string } | null;
    /** A request over several sites: what each site came to ("exported on 1 (news); no data on 1 (forum)"). */
    sites?: string;
  }[];
  quarantined: { line: number; reason: string }[];
  duplicates: { request_id: string; line: number }[];
  conflicts: { request_id: string; line: number }[];
  counts: { completed: number; failed: number; rejected: number; cancelled: number; denied: number };
}

const TERMINAL = new Set(['completed', 'failed', 'rejected', 'cancelled', 'denied']);

/** Builds the summary from the line outcomes and the ledger. */
export async function summarize(mode: LocalMode, outcomes: readonly LineOutcome[]): Promise<LocalSummary> {
  const summary: LocalSummary = {
    requests: [],
    quarantined: [],
    duplicates: [],
    conflicts: [],
    counts: { completed: 0, failed: 0, rejected: 0, cancelled: 0, denied: 0 },
  };
  const listed = new Set<string>();
  for (const outcome of outcomes) {
    if (outcome.kind === 'quarantined')
      summary.quarantined.push({ line: outcome.line, reason: outcome.reason });
    else if (outcome.kind === 'duplicate')
      summary.duplicates.push({ request_id: outcome.requestId, line: outcome.line });
    else if (outcome.kind === 'conflict')
      summary.conflicts.push({ request_id: outcome.requestId, line: outcome.line });
    else if (outcome.kind === 'rejected')
      summary.quarantined.push({ line: outcome.line, reason: outcome.reason ?? 'invalid request' });
    if (outcome.kind === 'quarantined' || outcome.kind === 'conflict' || listed.has(outcome.requestId))
      continue;
    listed.add(outcome.requestId);
    const item = await retriedThroughFaults(() => mode.workflow.ledger.require(outcome.requestId));
    summary.requests.push(requestSummary(mode, item));
    const { status } = item;
    if (
      status === 'completed' ||
      status === 'failed' ||
      status === 'rejected' ||
      status === 'cancelled' ||
      status === 'denied'
    ) {
      summary.counts[status] += 1;
    }
  }
  return summary;
}

function requestSummary(mode: LocalMode, item: LedgerItem): LocalSummary['requests'][number] {
  const error =
    item.error ??
    (item.status === 'rejected'
      ? { code: 'rejected', message: (item.rejection_errors ?? []).join('; ') }
      : null);
  return {
    request_id: item.request_id,
    status: item.status,
    outcome: item.outcome ?? null,
    error,
    archive: item.archive
      ? {
          key: item.archive.key,
          path: mode.pathOf('svc-dsr-archive', item.archive.key),
          bytes: item.archive.bytes,
          sha256: item.archive.sha256,
        }
      : null,
    ...(item.sites === undefined ? {} : { sites: siteSummary(item.sites, item.site_results ?? {}) }),
  };
}

/** Prints the summary as a table a person reads, with where things are on disk. */
export function printSummary(mode: LocalMode, summary: LocalSummary, write: (text: string) => void): void {
  const bySite = summary.requests.some((request) => request.sites !== undefined);
  const rows = summary.requests.map((request) => [
    request.request_id,
    request.status,
    request.outcome ?? request.error?.code ?? '',
    ...(bySite ? [request.sites ?? ''] : [request.archive ? `${request.archive.bytes} B` : '']),
  ]);
  const header = ['request', 'status', 'outcome', bySite ? 'sites' : 'archive'];
  const widths = header.map((cell, index) =>
    Math.max(cell.length, ...rows.map((row) => (row[index] ?? '').length)),
  );
  const line = (cells: string[]) => cells.map((cell, index) => cell.padEnd(widths[index] ?? 0)).join('  ');
  write(`\n${line(header)}\n${line(widths.map((width) => '-'.repeat(width)))}\n`);
  for (const row of rows) write(`${line(row)}\n`);
  for (const quarantined of summary.quarantined)
    write(`line ${quarantined.line}: quarantined (${quarantined.reason})\n`);
  for (const duplicate of summary.duplicates)
    write(`line ${duplicate.line}: duplicate of ${duplicate.request_id}\n`);
  for (const conflict of summary.conflicts)
    write(`line ${conflict.line}: conflicts with ${conflict.request_id}; the original is kept\n`);
  const counts = summary.counts;
  write(
    `\n${counts.completed} completed, ${counts.failed} failed, ${counts.rejected} rejected, ${counts.cancelled} cancelled${counts.denied > 0 ? `, ${counts.denied} denied` : ''}\n` +
      `archives:            ${mode.pathOf('svc-dsr-archive', 'exports')}\n` +
      `audit records:       ${mode.pathOf('svc-dsr-audit', 'audit')}\n` +
      `execution histories: ${mode.dataDir}/executions\n` +
      `ledger:              ${mode.dataDir}/ledger\n` +
      `look at it:          npx svc-dsr local --serve --data-dir ${shellWord(mode.dataDir)}\n` +
      `  then in another shell: npx svc-dsr list --status completed,failed,rejected --data-dir ${shellWord(mode.dataDir)}\n`,
  );
}

const waitMsSchema = z.coerce
  .number({ message: 'must be a number' })
  .int('must be a whole number')
  .min(0)
  .max(60_000);

/** Runs local mode for the flags; returns the exit code. */
export async function runLocal(
  flags: LocalFlags,
  write = (text: string) => process.stdout.write(text),
): Promise<number> {
  const waitMs = parseOption('--wait-ms', waitMsSchema, flags.waitMs);
  const timeZone =
    flags.timeZone === undefined ? undefined : parseOption('--time-zone', timeZoneSchema, flags.timeZone);
  const platformState =
    flags.platformState === undefined
      ? undefined
      : await loadInput(() => loadStateFile(flags.platformState ?? ''));
  const faults =
    flags.faults === undefined ? undefined : await loadInput(() => loadFaultsFile(flags.faults ?? ''));
  const awsFaults =
    flags.awsFaults === undefined
      ? undefined
      : await loadInput(() => loadAwsFaultsFile(flags.awsFaults ?? ''));
  const lines =
    flags.requests === undefined
      ? undefined
      : requestLines(await readRequestsText('--requests', flags.requests), flags.requests);
  // People read stderr; stdout is the summary (and, with --serve --json, the events) for scripts.
  const people = (text: string) => process.stderr.write(text);
  const progress = flags.json ? () => {} : people;
  const startedAt = Date.now();
  people(
    `svc-dsr local: starting in ${resolve(flags.dataDir)}: the platform emulator, the AWS stand-ins and the state machine...\n`,
  );
  // The submitted requests that have ended, as their status events say, for the progress line.
  const watched = new Set(lines === undefined ? [] : requestIdsOf(lines));
  const ended = new Set<string>();
  // Without requests to follow, the changes of executions a restart resumed are shown once serving.
  const changes = heldUntilReady(people, lines === undefined);
  const onEvent = (event: LocalEvent) => {
    const change = statusChangedDetailSchema.safeParse(event.detail);
    if (!change.success) return;
    const { request_id: requestId, status } = change.data;
    if (watched.has(requestId) && TERMINAL.has(status)) ended.add(requestId);
    if (!flags.serve) return;
    // Every status event as the bus receives it (all are in <data-dir>/events/): JSON for scripts,
    // otherwise one line per change for people, without the request id (`list` shows those).
    if (flags.json) process.stdout.write(`event ${JSON.stringify(event)}\n`);
    else changes.line(`svc-dsr local: ${stateChangeLine(change.data)}\n`);
  };
  // Loaded on use: it synthesizes the stack, which every other command can do without.
  const { startLocalMode } = await import('../local-mode.ts');
  const stack = await localStackConfig(flags.config);
  // Which settings ran is part of what a run shows, --json or not (stdout stays the summary).
  people(
    `svc-dsr local: stack configuration ${stack.config === undefined ? (existsSync(join(resolve(flags.dataDir), 'stack-config.json')) ? `kept in the data dir (${join(resolve(flags.dataDir), 'stack-config.json')})` : 'defaults (no cdk.json context "svc-dsr")') : `from ${stack.source}`}\n`,
  );
  // Calls outside a function's scope are local mode's own set-up, which CloudFormation does in AWS.
  setDefaultCaller(CALLERS.localRuntime);
  const mode = await ownDataDir(() =>
    startLocalMode({
      dataDir: flags.dataDir,
      command: commandLine(),
      waitMs,
      ...(timeZone === undefined ? {} : { env: { TIME_ZONE: timeZone } }),
      onEvent,
      ...(platformState ? { platformState } : {}),
      ...(faults ? { faults } : {}),
      ...(awsFaults ? { awsFaults } : {}),
      ...(stack.config === undefined ? {} : { stackConfig: stack.config }),
    }),
  );
  let closing: Promise<void> | undefined;
  const closeOnce = (options?: { graceMs: number }) => {
    closing ??= mode.close(options);
    return closing;
  };
  try {
    progress(`svc-dsr local: data in ${mode.dataDir}; platform emulator at ${mode.emulator.url}\n`);
    let exitCode: number = EXIT.ok;
    if (lines !== undefined) {
      const total = lines.filter((line) => line.trim() !== '').length;
      let settledAtIntake = 0;
      const shown = flags.json
        ? undefined
        : startProgress({
            stream: process.stderr,
            label: 'requests settled',
            total,
            done: () => ended.size + settledAtIntake,
          });
      const outcomes = await mode.submit(lines);
      settledAtIntake = outcomes.filter((outcome) => !hasExecution(outcome)).length;
      shown?.note(`submitted ${total} line(s); waiting for every request to finish`);
      await mode.idle();
      const summary = await summarize(mode, outcomes);
      shown?.finish(settledLines(outcomes, summary));
      if (flags.json) write(`${JSON.stringify(summary, null, 2)}\n`);
      else printSummary(mode, summary, write);
      if (!summary.requests.every((request) => TERMINAL.has(request.status))) exitCode = EXIT.failed;
    }
    if (flags.serve) {
      const stopPolling = mode.pollContinuously((error) =>
        process.stderr.write(
          `svc-dsr local: polling the intake queue failed: ${error instanceof Error ? error.message : String(error)}\n`,
        ),
      );
      people(
        `serving: other commands reach it with --target local --data-dir ${mode.dataDir} (ready in ${formatSeconds((Date.now() - startedAt) / 1000)}; Ctrl-C stops it)\n`,
      );
      people(signInLines(mode.api));
      changes.ready();
      const signal = await untilStopped();
      return await stopServing(signal, exitCode, async (graceMs) => {
        // A poll or a scheduled pass in flight gets the grace: a message it received and did not
        // delete is received again on the next start.
        await Promise.race([stopPolling(), delay(graceMs)]);
        await closeOnce({ graceMs });
      });
    }
    return exitCode;
  } finally {
    await closeOnce();
  }
}

/**
 * Where the API is served and how a person signs in to it: a one-time code per role, traded once
 * for an hour's token at the sign-in path, as the user pool's sign-in gives one in AWS.
 */
export function signInLines(api: Pick<ApiEndpoint, 'url' | 'consoleUrl' | 'signInCode'>): string {
  const codes = API_ROLES.map((role) => `  ${role}: ${api.signInCode(role)}`).join('\n');
  return (
    (api.consoleUrl === undefined
      ? ''
      : `svc-dsr local: the privacy console at ${api.consoleUrl} (sign in there with a code below)\n`) +
    `svc-dsr local: the API at ${api.url} (docs/console-api.md); one-time sign-in codes, each good for 15 minutes:\n${codes}\n` +
    `  trade one for a token: curl -s -X POST ${api.url}${LOCAL_SIGN_IN_PATH} -d '{"code":"<code>","username":"<you>"}'\n`
  );
}

const requestIdLine = z.looseObject({ request_id: z.string() });

/** The request ids of the lines that have one (lower case, as intake keeps them). */
function requestIdsOf(lines: readonly string[]): string[] {
  return lines.flatMap((line) => {
    try {
      const parsed = requestIdLine.safeParse(JSON.parse(line));
      return parsed.success ? [parsed.data.request_id.toLowerCase()] : [];
    } catch {
      return [];
    }
  });
}

/** True for a line intake accepted as a request of its own, which then runs to an end. */
function hasExecution(outcome: LineOutcome): boolean {
  return outcome.kind !== 'quarantined' && outcome.kind !== 'duplicate' && outcome.kind !== 'conflict';
}

/** The lines that are settled: every line intake turned away, and every request that has ended. */
function settledLines(outcomes: readonly LineOutcome[], summary: LocalSummary): number {
  const statuses = new Map(summary.requests.map((request) => [request.request_id, request.status]));
  return outcomes.filter(
    (outcome) =>
      !hasExecution(outcome) ||
      (outcome.kind !== 'quarantined' && TERMINAL.has(statuses.get(outcome.requestId) ?? '')),
  ).length;
}

/**
 * Lines for people that must come after the "serving:" line: held until `ready`, then written in
 * order, and written at once from then on. `keepEarly` false drops the early ones instead (a run
 * with requests shows its progress and summary for those).
 */
export function heldUntilReady(
  write: (text: string) => void,
  keepEarly: boolean,
): { line(text: string): void; ready(): void } {
  let held: string[] | undefined = [];
  return {
    line(text) {
      if (held === undefined) write(text);
      else if (keepEarly) held.push(text);
    },
    ready() {
      const early = held ?? [];
      held = undefined;
      for (const text of early) write(text);
    },
  };
}

/** One status change as a person reads it, with no identifier: "12:00:01 access/gdpr request: running -> completed (exported)". */
export function stateChangeLine(change: StatusChangedDetail): string {
  const time = change.changed_at.slice(11, 19);
  const what = `${change.type ?? 'unknown'}/${change.regulation ?? 'unknown'} request`;
  const detail = change.outcome ?? change.error_code;
  return `${time} ${what}: ${change.previous_status ?? 'new'} -> ${change.status}${detail ? ` (${detail})` : ''}`;
}

/** Runs `open`, which takes a data dir's lock; a dir held by another process is exit 2, naming it. */
export async function ownDataDir<T>(open: () => Promise<T>): Promise<T> {
  try {
    return await open();
  } catch (error) {
    if (error instanceof DataDirInUseError) throw new CliError(error.message, EXIT.usage);
    throw error;
  }
}

/** This command as typed, for the data dir's lock: `svc-dsr local --serve --data-dir …`. */
export function commandLine(): string {
  return ['svc-dsr', ...process.argv.slice(2)].join(' ');
}

async function loadInput<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    throw new CliError(error instanceof Error ? error.message : String(error));
  }
}
