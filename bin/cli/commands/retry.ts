import { StartExecutionCommand } from '@aws-sdk/client-sfn';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { Command } from 'commander';
import { isLive, latestExecutionName } from '#shared/executions';
import { type LedgerItem, OPEN_SHARD_ATTRIBUTE, openShardKey } from '#shared/ledger';
import { sfnLookup } from '../../../lambdas/reconciler/aws.ts';
import { type CliIo, type CommandResult, parseRequestId, processIo, writeJson } from '../format.ts';
import { CliError, EXIT } from '../io.ts';
import { addTargetOptions, type CliContext, type TargetFlags, withTarget } from '../target.ts';
import {
  hasName,
  isConditionalFailure,
  loadRequest,
  recordOperatorAction,
  retryExecutionName,
} from './common.ts';

/** Options of `svc-dsr retry`. */
export interface RetryOptions {
  readonly requestId: string;
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
  context: Pick<CliContext, 'ledger' | 'dynamo' | 'sfn' | 's3' | 'names' | 'target' | 'clock'>,
  options: RetryOptions,
  io: CliIo,
): Promise<CommandResult<RetryResult>> {
  const requestId = parseRequestId(options.requestId);
  const item = await loadRequest(context, requestId);
  const { type, regulation } = await retryable(context, item);
  const n = item.executions + 1;
  const name = retryExecutionName(requestId, n);
  // ResolveSubject moves `received` to `running`, but skips a subject it already resolved; every
  // later step needs `running`, so a request that got that far resumes as `running`.
  const status = item.svc_user_id === undefined ? 'received' : 'running';
  const freshExport =
    item.status === 'failed' &&
    item.archive === undefined &&
    ['export_failed', 'export_timed_out', 'download_link_expired'].includes(item.error?.code ?? '');

  try {
    await context.dynamo.send(
      new UpdateCommand({
        TableName: context.names.LedgerTableName,
        Key: { request_id: requestId },
        // A retry gets a fresh export budget and wait budget; the attempts already spent stay on
        // record. An export that failed, timed out or whose link expired is started anew.
        UpdateExpression:
          'SET #status = :status, #open_shard = :open_shard, #executions = :n, #updated_at = :now, #base = #attempts, #waited = :zero' +
          (freshExport ? ', #export_status = :failed' : '') +
          ' REMOVE #error',
        // The executions count doubles as a lock: two operators retrying at once start one execution.
        ConditionExpression:
          'attribute_exists(request_id) AND #status = :previous' +
          ' AND (attribute_not_exists(#executions) OR #executions = :executions)',
        ExpressionAttributeNames: {
          '#status': 'status',
          '#executions': 'executions',
          '#updated_at': 'updated_at',
          '#error': 'error',
          '#base': 'export_attempts_base',
          '#attempts': 'export_attempts',
          '#waited': 'export_waited_seconds',
          '#open_shard': OPEN_SHARD_ATTRIBUTE,
          ...(freshExport ? { '#export_status': 'export_status' } : {}),
        },
        ExpressionAttributeValues: {
          ':status': status,
          ':open_shard': openShardKey(requestId, status),
          ':n': n,
          ':now': context.clock().toISOString(),
          ':zero': 0,
          ':previous': item.status,
          ':executions': item.executions,
          ...(freshExport ? { ':failed': 'failed' } : {}),
        },
      }),
    );
  } catch (error) {
    if (!isConditionalFailure(error)) throw error;
    await retryable(context, await loadRequest(context, requestId));
    throw new CliError(
      `request ${requestId} changed while it was being retried; run the command again`,
      EXIT.failed,
    );
  }

  await recordOperatorAction(context, requestId, {
    eventId: `Operator:retry-${n}`,
    action: 'request_retried',
    facts: { execution: name, previous_error: item.error?.code ?? null, fresh_export: freshExport },
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
      const restored = await restoreFailed(context, item, status, n).then(
        () => true,
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
          : `could not start execution ${name} (${detail}), nor set request ${requestId} back to failed: the ledger shows ${status} with no execution; check svc-dsr status`,
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
 * Whether the request can be retried: failed, or open (received, running) with no execution
 * running it (its latest ended, timed out, was aborted or never started).
 */
async function retryable(
  context: Pick<CliContext, 'sfn' | 'names'>,
  item: LedgerItem,
): Promise<{ type: 'access' | 'erasure'; regulation: 'gdpr' | 'ccpa' }> {
  if (item.status === 'received' || item.status === 'running') {
    const latest = latestExecutionName(item.request_id, item.executions);
    const execution = await sfnLookup(context.sfn, context.names.StateMachineArn)(latest);
    if (isLive(execution)) {
      throw new CliError(
        `request ${item.request_id} is ${item.status} and its execution ${latest} is running; it needs no retry (cancel it first to stop it)`,
        EXIT.failed,
      );
    }
  } else if (item.status !== 'failed') {
    throw new CliError(
      `request ${item.request_id} is ${item.status}; only failed requests, or open ones with no running execution, can be retried`,
      EXIT.failed,
    );
  }
  if (item.type === undefined || item.regulation === undefined) {
    throw new CliError(
      `request ${item.request_id} has no type or regulation in the ledger, so it cannot be run`,
      EXIT.failed,
    );
  }
  return { type: item.type, regulation: item.regulation };
}

/** Puts the request back as it was when StartExecution failed, so the ledger never shows a run that is not happening. */
async function restoreFailed(
  context: Pick<CliContext, 'dynamo' | 'names' | 'clock'>,
  item: LedgerItem,
  status: string,
  n: number,
): Promise<void> {
  const error = item.error ?? {
    code: 'retry_not_started',
    message: 'the retry could not start an execution',
  };
  await context.dynamo.send(
    new UpdateCommand({
      TableName: context.names.LedgerTableName,
      Key: { request_id: item.request_id },
      UpdateExpression:
        'SET #status = :failed, #open_shard = :open_shard, #executions = :executions, #error = :error, #updated_at = :now',
      ConditionExpression: '#status = :status AND #executions = :n',
      ExpressionAttributeNames: {
        '#status': 'status',
        '#open_shard': OPEN_SHARD_ATTRIBUTE,
        '#executions': 'executions',
        '#error': 'error',
        '#updated_at': 'updated_at',
      },
      ExpressionAttributeValues: {
        ':failed': 'failed',
        ':open_shard': openShardKey(item.request_id, 'failed'),
        ':executions': item.executions,
        ':error': error,
        ':now': context.clock().toISOString(),
        ':status': status,
        ':n': n,
      },
    }),
  );
}

/** Options of `svc-dsr retry --status S [--code C] [--dry-run]`. */
export interface BulkRetryOptions {
  readonly status: 'failed' | 'received' | 'running';
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
  context: Pick<CliContext, 'ledger' | 'dynamo' | 'sfn' | 's3' | 'names' | 'target' | 'clock'>,
  options: BulkRetryOptions,
  io: CliIo,
): Promise<CommandResult<BulkRetryResult>> {
  const candidates: LedgerItem[] = [];
  let running = 0;
  for await (const entry of context.ledger.openRequests(options.status)) {
    const item = await context.ledger.get(entry.request_id);
    if (item === undefined || item.status !== options.status) continue;
    if (options.code !== undefined && item.error?.code !== options.code) continue;
    if (options.status !== 'failed') {
      const latest = latestExecutionName(item.request_id, item.executions);
      if (isLive(await sfnLookup(context.sfn, context.names.StateMachineArn)(latest))) {
        running += 1;
        continue;
      }
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
      const { result } = await runRetry(context, { requestId: item.request_id, json: false }, quietIo(io));
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
      const { exitCode } = await withTarget(
        flags,
        (context): Promise<CommandResult<RetryResult | BulkRetryResult>> =>
          bulk === undefined
            ? runRetry(
                context,
                { requestId: parseRequestId(requestId), json: flags.json === true },
                processIo,
              )
            : runBulkRetry(context, bulk, processIo),
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
