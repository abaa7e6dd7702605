// The `svc-dsr retry` command: redrives a failed or stalled request (or many) through the operator function.
import type { LedgerItem } from '#shared/ledger';
import {
  type CliIo,
  type CommandResult,
  parseReason,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { CliError, EXIT } from '../io.ts';
import { OperatorRefusedError } from '../operator-client.ts';
import { BULK_STATUSES } from '../register/retry.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';

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
 * Redrives a failed request, or an open one that no execution is running, through the operator
 * function: it resets the request (error cleared, attempt history kept, executions + 1), records
 * who retried, and starts the execution `<request_id>-retry-<n>`. The steps are idempotent against
 * the ledger, so the new execution resumes where the last one stopped. Anything else is exit 1.
 */
export async function runRetry(
  context: Pick<CliContext, 'operatorFunction'>,
  options: RetryOptions,
  io: CliIo,
): Promise<CommandResult<RetryResult>> {
  const requestId = parseRequestId(options.requestId);
  const result: RetryResult = await context.operatorFunction({
    command: 'retry',
    request_id: requestId,
    ...(options.reason === undefined ? {} : { reason: parseReason(options.reason) }),
  });
  if (options.json === true) writeJson(io, result);
  else {
    io.out(
      `retrying ${requestId}: execution ${result.execution} ${result.started ? 'started' : 'was already started'} (status ${result.status})\n`,
    );
    if (result.previous_error)
      io.err(`it had failed with ${result.previous_error.code}: ${result.previous_error.message}\n`);
  }
  return { exitCode: EXIT.ok, result };
}

export { RUN_START_GRACE_MS } from '../../../lambdas/operator/operator.ts';

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

/**
 * Retries every request with `status` (and error `code`): failed ones, or open ones no execution
 * is running (the operator function refuses those, and they are counted apart). With `dryRun` it
 * only lists them, running or not. Exit 1 when any retry could not start.
 */
export async function runBulkRetry(
  context: Pick<CliContext, 'ledger' | 'operatorFunction'>,
  options: BulkRetryOptions,
  io: CliIo,
): Promise<CommandResult<BulkRetryResult>> {
  const candidates: LedgerItem[] = [];
  let running = 0;
  // One scan of the open index, earliest due first.
  const open = await context.ledger.allOpenRequests([options.status]);
  open.sort(
    (a, b) => (a.due_at ?? '').localeCompare(b.due_at ?? '') || a.request_id.localeCompare(b.request_id),
  );
  for (const entry of open) {
    const item = await context.ledger.get(entry.request_id);
    if (item === undefined || item.status !== options.status) continue;
    if (options.code !== undefined && item.error?.code !== options.code) continue;
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
      // The function found an execution running it: left alone, not a failure.
      if (error instanceof OperatorRefusedError && error.code === 'running') {
        running += 1;
        continue;
      }
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

export interface RetryFlags extends TargetFlags {
  readonly reason?: string;
  readonly json?: boolean;
  readonly status?: string;
  readonly code?: string;
  readonly dryRun?: boolean;
}

/** `svc-dsr retry` run with its parsed arguments and flags (registered in ../register/retry.ts). */
export async function retryAction(requestId: string | undefined, flags: RetryFlags): Promise<void> {
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
