import { StartExecutionCommand } from '@aws-sdk/client-sfn';
import type { Command } from 'commander';
import { isLive, latestExecutionName } from '#shared/executions';
import type { LedgerItem } from '#shared/ledger';
import type { RequestType } from '#shared/request';
import { sfnLookup } from '../../../lambdas/reconciler/aws.ts';
import {
  type CliIo,
  type CommandResult,
  parseReason,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { CliError, EXIT } from '../io.ts';
import { addTargetOptions, type CliContext, type TargetFlags, withTarget } from '../target.ts';
import { hasName, ledgerChange, recordOperatorAction, retryExecutionName } from './common.ts';

/** Options of `svc-dsr retry`. */
export interface RetryOptions {
  readonly requestId: string;
  /** Why the operator retries (optional; kept in the audit record). */
  readonly reason?: string;
  readonly json?: boolean;
}

/** What `retry --json` prints. */
export interface RetryResult {
  readonly request_id: string;
  readonly execution: string;
  readonly execution_arn: string | null;
  /** The status the request was reset to. */
  readonly status: 'received' | 'running';
  readonly previous_error: { code: string; message: string } | null;
  /** False when an execution of that name already existed (a retry that had already started it). */
  readonly started: boolean;
}

/**
 * Redrives a failed request, or an open one that no execution is running: resets it (error
 * cleared, attempt history kept, executions + 1) and starts the execution `<request_id>-retry-<n>`.
 * The steps are idempotent against the ledger, so the new execution resumes where the last one
 * stopped. Anything else is exit 1.
 */
export async function runRetry(
  context: Pick<CliContext, 'ledger' | 'sfn' | 's3' | 'names' | 'target' | 'operator' | 'clock'>,
  options: RetryOptions,
  io: CliIo,
): Promise<CommandResult<RetryResult>> {
  const requestId = parseRequestId(options.requestId);
  const retried = await ledgerChange(context, requestId, () =>
    context.ledger.retry(requestId, { liveExecution: (item) => liveExecution(context, item) }),
  );
  const { before: item, status, freshExport } = retried;
  const { type, regulation } = runnable(retried.after);
  const n = retried.execution;
  const name = retryExecutionName(requestId, n);

  await recordOperatorAction(context, requestId, {
    eventId: `Operator:retry-${n}`,
    action: 'request_retried',
    facts: { execution: name, previous_error: item.error?.code ?? null, fresh_export: freshExport },
    ...(options.reason === undefined ? {} : { reason: parseReason(options.reason) }),
  });

  let started = true;
  let arn: string | null = null;
  try {
    const answer = await context.sfn.send(
      new StartExecutionCommand({
        stateMachineArn: context.names.StateMachineArn,
        name,
        input: JSON.stringify({ request_id: requestId, type, regulation }),
      }),
    );
    arn = answer.executionArn ?? null;
  } catch (error) {
    if (hasName(error, 'ExecutionAlreadyExists')) started = false;
    else {
      const restored = await context.ledger.undoRetry(item, retried).then(
        (undone) => undone !== undefined,
        () => false,
      );
      // The retry record opened a new segment of the chain; failed again, the request closes it.
      if (restored) {
        await recordOperatorAction(context, requestId, {
          eventId: `Operator:retry-${n}-not-started`,
          action: 'request_failed',
          facts: { code: item.error?.code ?? 'retry_not_started', execution: name },
          final: true,
        });
      }
      const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      throw new CliError(
        restored
          ? `could not start execution ${name} (${detail}); request ${requestId} is failed again, so the retry can be repeated`
          : `could not start execution ${name} (${detail}), nor set request ${requestId} back to failed: the ledger shows ${status} with no execution; check npx svc-dsr status ${requestId}`,
        EXIT.failed,
      );
    }
  }

  const result: RetryResult = {
    request_id: requestId,
    execution: name,
    execution_arn: arn,
    status,
    previous_error: item.error ?? null,
    started,
  };
  if (options.json === true) writeJson(io, result);
  else {
    io.out(
      `retrying ${requestId}: execution ${name} ${started ? 'started' : 'was already started'} (status ${status})\n`,
    );
    if (item.error) io.err(`it had failed with ${item.error.code}: ${item.error.message}\n`);
  }
  return { exitCode: EXIT.ok, result };
}

/**
 * How long after a run is claimed (by intake, a retry or the reconciler's resume) its execution may
 * still be on its way: the claim is written first and the execution started just after, so within
 * this time a missing execution is one being started, not one that never will be.
 */
export const RUN_START_GRACE_MS = 2 * 60_000;

/**
 * Why an open request needs no retry: its latest execution is running, or its run was claimed a
 * moment ago and the execution is being started (by intake, another operator's retry or the
 * reconciler). Undefined when it ended, timed out, was aborted or was never started in time.
 */
async function liveExecution(
  context: Pick<CliContext, 'sfn' | 'names' | 'clock'>,
  item: LedgerItem,
): Promise<string | undefined> {
  if (item.status !== 'received' && item.status !== 'running') return undefined;
  const latest = latestExecutionName(item.request_id, item.executions);
  const execution = await sfnLookup(context.sfn, context.names.StateMachineArn)(latest);
  if (execution === 'MISSING') {
    const sinceClaim = context.clock().getTime() - Date.parse(item.updated_at);
    if (sinceClaim >= RUN_START_GRACE_MS) return undefined;
    return `request ${item.request_id} is ${item.status} and its execution ${latest} is being started (the run was claimed at ${item.updated_at}, by intake, another retry or the reconciler); it needs no retry: follow it with npx svc-dsr status ${item.request_id}, and retry only if it has not started ${RUN_START_GRACE_MS / 60_000} minutes after the claim`;
  }
  if (!isLive(execution)) return undefined;
  return `request ${item.request_id} is ${item.status} and its execution ${latest} is running; it needs no retry: the execution goes on by itself (follow it with npx svc-dsr status ${item.request_id}), and cancel would end the request for good, recorded as withdrawn`;
}

/** The execution input's type and regulation (CAN_RETRY has checked they are there). */
function runnable(item: LedgerItem): { type: RequestType; regulation: 'gdpr' | 'ccpa' } {
  if (item.type === undefined || item.regulation === undefined) {
    throw new CliError(`request ${item.request_id} has no type or regulation in the ledger`, EXIT.failed);
  }
  return { type: item.type, regulation: item.regulation };
}

/** Options of `svc-dsr retry --status S [--code C] [--dry-run]`. */
export interface BulkRetryOptions {
  readonly status: 'failed' | 'received' | 'running';
  /** Why the operator retries them (optional; kept in each audit record). */
  readonly reason?: string;
  /** Only requests whose error has this code. */
  readonly code?: string;
  readonly dryRun?: boolean;
  readonly json?: boolean;
}

/** What `retry --status ... --json` prints. */
export interface BulkRetryResult {
  readonly dry_run: boolean;
  /** The requests retried (or that a dry run would retry), with what became of each. */
  readonly requests: readonly {
    readonly request_id: string;
    readonly code: string | null;
    readonly execution?: string;
    readonly error?: string;
  }[];
  /** Open requests left alone because an execution is running them. */
  readonly running: number;
}

const BULK_STATUSES = ['failed', 'received', 'running'] as const;

/**
 * Retries every request with `status` (and error `code`): failed ones, or open ones no execution
 * is running. With `dryRun` it only lists them. Exit 1 when any retry could not start.
 */
export async function runBulkRetry(
  context: Pick<CliContext, 'ledger' | 'sfn' | 's3' | 'names' | 'target' | 'operator' | 'clock'>,
  options: BulkRetryOptions,
  io: CliIo,
): Promise<CommandResult<BulkRetryResult>> {
  const candidates: LedgerItem[] = [];
  let running = 0;
  for await (const entry of context.ledger.openRequests(options.status)) {
    const item = await context.ledger.get(entry.request_id);
    if (item === undefined || item.status !== options.status) continue;
    if (options.code !== undefined && item.error?.code !== options.code) continue;
    if ((await liveExecution(context, item)) !== undefined) {
      running += 1;
      continue;
    }
    candidates.push(item);
  }
  const requests: BulkRetryResult['requests'][number][] = [];
  let exitCode: number = EXIT.ok;
  for (const item of candidates) {
    const code = item.error?.code ?? null;
    if (options.dryRun === true) {
      requests.push({ request_id: item.request_id, code });
      if (options.json !== true)
        io.out(`would retry ${item.request_id}${code === null ? '' : ` (${code})`}\n`);
      continue;
    }
    try {
      const { result } = await runRetry(
        context,
        {
          requestId: item.request_id,
          ...(options.reason === undefined ? {} : { reason: options.reason }),
          json: false,
        },
        quietIo(io),
      );
      requests.push({ request_id: item.request_id, code, execution: result.execution });
      if (options.json !== true) io.out(`retrying ${item.request_id}: execution ${result.execution}\n`);
    } catch (error) {
      if (!(error instanceof CliError)) throw error;
      exitCode = EXIT.failed;
      requests.push({ request_id: item.request_id, code, error: error.message });
      io.err(`could not retry ${item.request_id}: ${error.message}\n`);
    }
  }
  const result: BulkRetryResult = { dry_run: options.dryRun === true, requests, running };
  if (options.json === true) writeJson(io, result);
  else {
    const filter = `${options.status}${options.code === undefined ? '' : ` with code ${options.code}`}`;
    io.out(
      `${options.dryRun === true ? 'would retry' : 'retried'} ${requests.length} request(s) ${filter}${running > 0 ? `; ${running} left alone: an execution is running them` : ''}\n`,
    );
  }
  return { exitCode, result };
}

/** The io of one retry inside a bulk one: its own lines are replaced by the bulk summary. */
function quietIo(io: CliIo): CliIo {
  return { ...io, out: () => {}, err: () => {} };
}

interface RetryFlags extends TargetFlags {
  readonly reason?: string;
  readonly json?: boolean;
  readonly status?: string;
  readonly code?: string;
  readonly dryRun?: boolean;
}

/** Registers `svc-dsr retry`. */
export function registerRetryCommand(program: Command): void {
  const command = program
    .command('retry')
    .description(
      'redrive a failed request, or an open one no execution is running: reset it and start a new execution that resumes where it stopped',
    )
    .argument('[request_id]', 'the request id (or use --status for many)')
    .option('--status <status>', `retry every request with this status: ${BULK_STATUSES.join(', ')}`)
    .option('--code <code>', 'with --status: only requests whose error has this code, e.g. export_failed')
    .option('--dry-run', 'with --status: print what would be retried and change nothing')
    .option('--reason <reason>', 'why (kept in the audit record with who retried)')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
The new execution is named <request_id>-retry-<n>. Every step is idempotent against the ledger, so
an export already under way, a copy already made or a deletion already done is not repeated.

Exit codes: 0 started (or a dry run), 1 no such request, not retryable, or an execution could not
start, 2 invalid flags.

Examples:
  $ npx svc-dsr retry 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f
  $ npx svc-dsr retry --status failed --code export_failed --dry-run
  $ npx svc-dsr retry --status running     # open requests left without a running execution`,
    )
    .action(async (requestId: string | undefined, flags: RetryFlags) => {
      const bulk = bulkOptions(requestId, flags);
      const reason = flags.reason === undefined ? {} : { reason: parseReason(flags.reason) };
      const { exitCode } = await withTarget(
        flags,
        (context): Promise<CommandResult<RetryResult | BulkRetryResult>> =>
          bulk === undefined
            ? runRetry(
                context,
                { requestId: parseRequestId(requestId), ...reason, json: flags.json === true },
                processIo,
              )
            : runBulkRetry(context, { ...bulk, ...reason }, processIo),
      );
      process.exitCode = exitCode;
    });
}

/** The bulk options, or undefined for a single retry; refuses a mix of the two. */
function bulkOptions(requestId: string | undefined, flags: RetryFlags): BulkRetryOptions | undefined {
  if (flags.status === undefined) {
    if (flags.code !== undefined || flags.dryRun === true) {
      throw new CliError(
        '--code and --dry-run go with --status, e.g. --status failed --code export_failed',
        EXIT.usage,
      );
    }
    if (requestId === undefined) {
      throw new CliError('give a <request_id>, or --status to retry many (e.g. --status failed)', EXIT.usage);
    }
    return undefined;
  }
  if (requestId !== undefined) {
    throw new CliError('give either a <request_id> or --status, not both', EXIT.usage);
  }
  const status = BULK_STATUSES.find((known) => known === flags.status);
  if (status === undefined) {
    throw new CliError(
      `--status: expected one of ${BULK_STATUSES.join(', ')} (received "${flags.status}")`,
      EXIT.usage,
    );
  }
  return {
    status,
    ...(flags.code === undefined ? {} : { code: flags.code }),
    dryRun: flags.dryRun === true,
    json: flags.json === true,
  };
}
