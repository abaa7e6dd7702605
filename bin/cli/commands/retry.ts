import { StartExecutionCommand } from '@aws-sdk/client-sfn';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { Command } from 'commander';
import { type LedgerItem, OPEN_SHARD_ATTRIBUTE, openShardKey } from '#shared/ledger';
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
 * Redrives a failed request: resets it (error cleared, attempt history kept, executions + 1) and
 * starts the execution `<request_id>-retry-<n>`. The steps are idempotent against the ledger, so
 * the new execution resumes where the failed one stopped. Anything but `failed` is exit 1.
 */
export async function runRetry(
  context: Pick<CliContext, 'ledger' | 'dynamo' | 'sfn' | 's3' | 'names' | 'target' | 'clock'>,
  options: RetryOptions,
  io: CliIo,
): Promise<CommandResult<RetryResult>> {
  const requestId = parseRequestId(options.requestId);
  const item = await loadRequest(context, requestId);
  const { type, regulation } = retryable(item);
  const n = item.executions + 1;
  const name = retryExecutionName(requestId, n);
  // ResolveSubject moves `received` to `running`, but skips a subject it already resolved; every
  // later step needs `running`, so a request that got that far resumes as `running`.
  const status = item.svc_user_id === undefined ? 'received' : 'running';
  const freshExport =
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
          'attribute_exists(request_id) AND #status = :failed' +
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
          ':failed': 'failed',
          ':executions': item.executions,
        },
      }),
    );
  } catch (error) {
    if (!isConditionalFailure(error)) throw error;
    retryable(await loadRequest(context, requestId));
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

function retryable(item: LedgerItem): { type: 'access' | 'erasure'; regulation: 'gdpr' | 'ccpa' } {
  if (item.status !== 'failed') {
    throw new CliError(
      `request ${item.request_id} is ${item.status}; only failed requests can be retried`,
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

interface RetryFlags extends TargetFlags {
  readonly json?: boolean;
}

/** Registers `svc-dsr retry`. */
export function registerRetryCommand(program: Command): void {
  const command = program
    .command('retry')
    .description('redrive a failed request: reset it and start a new execution that resumes where it failed')
    .argument('<request_id>', 'the request id')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
The new execution is named <request_id>-retry-<n>. Every step is idempotent against the ledger, so
an export already under way, a copy already made or a deletion already done is not repeated.

Exit codes: 0 started, 1 no such request, not failed, or the execution could not start, 2 invalid flags.

Example:
  $ npx svc-dsr retry 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f`,
    )
    .action(async (requestId: string, flags: RetryFlags) => {
      const options = { requestId: parseRequestId(requestId), json: flags.json === true };
      const { exitCode } = await withTarget(flags, (context) => runRetry(context, options, processIo));
      process.exitCode = exitCode;
    });
}
