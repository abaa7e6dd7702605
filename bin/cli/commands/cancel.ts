import { StopExecutionCommand } from '@aws-sdk/client-sfn';
import type { Command } from 'commander';
import { removeAllVersions } from '#shared/runtime';
import {
  type CliIo,
  type CommandResult,
  parseReason,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { EXIT } from '../io.ts';
import { addTargetOptions, type CliContext, type TargetFlags, withTarget } from '../target.ts';
import { executionArn, executionNames, hasName, ledgerChange, recordOperatorAction } from './common.ts';

/** Options of `svc-dsr cancel`. */
export interface CancelOptions {
  readonly requestId: string;
  readonly reason: string;
  readonly json?: boolean;
}

/** What `cancel --json` prints. */
export interface CancelResult {
  readonly request_id: string;
  readonly status: 'cancelled';
  readonly previous_status: string;
  readonly step: string | null;
  readonly reason: string;
  /** Executions StopExecution accepted (one that had already ended keeps its outcome). */
  readonly stopped: string[];
  /** StopExecution failures other than "does not exist": the execution still ends at its next step. */
  readonly stop_errors: { execution: string; error: string }[];
  /** Archive object versions deleted: a cancelled request keeps no copy of the subject's data. */
  readonly archive_versions_removed: number;
}

/**
 * Cancels a received or running request before erasure has started: the ledger's conditional
 * cancel (CAN_CANCEL, so it cannot race past the delete), then StopExecution of its executions.
 * Refusals are exit 1.
 */
export async function runCancel(
  context: Pick<CliContext, 'ledger' | 'sfn' | 's3' | 'names' | 'target'>,
  options: CancelOptions,
  io: CliIo,
): Promise<CommandResult<CancelResult>> {
  const requestId = parseRequestId(options.requestId);
  const reason = parseReason(options.reason);
  const { before: item, after: updated } = await ledgerChange(context, requestId, () =>
    context.ledger.cancel(requestId, { reason }),
  );

  const recorded = await recordOperatorAction(
    context,
    requestId,
    {
      eventId: `Operator:cancel-${updated.executions}`,
      action: 'request_cancelled',
      facts: { previous_status: item.status, step: item.step ?? null },
    },
    { acceptClosedBy: 'request_cancelled' },
  );
  // A cancelled request keeps no copy of the subject's data: whatever a step archived goes.
  const archiveVersionsRemoved = await removeAllVersions(
    context.s3,
    context.names.ArchiveBucketName,
    `exports/${requestId}/`,
    { prefix: true },
  );

  const stopped: string[] = [];
  const stopErrors: CancelResult['stop_errors'] = [];
  for (const name of executionNames(requestId, updated.executions)) {
    try {
      await context.sfn.send(
        new StopExecutionCommand({
          executionArn: executionArn(context.names.StateMachineArn, name),
          error: 'RequestCancelled',
          cause: 'cancelled by an operator with svc-dsr cancel',
        }),
      );
      stopped.push(name);
    } catch (error) {
      if (hasName(error, 'ExecutionDoesNotExist')) continue;
      stopErrors.push({
        execution: name,
        error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
      });
    }
  }

  const result: CancelResult = {
    request_id: requestId,
    status: 'cancelled',
    previous_status: item.status,
    step: item.step ?? null,
    reason,
    stopped,
    stop_errors: stopErrors,
    archive_versions_removed: archiveVersionsRemoved,
  };
  if (options.json === true) writeJson(io, result);
  else {
    io.out(`cancelled ${requestId} (was ${item.status}${item.step ? `, step ${item.step}` : ''})\n`);
    if (stopped.length > 0) io.err(`asked Step Functions to stop: ${stopped.join(', ')}\n`);
    if (archiveVersionsRemoved > 0)
      io.err(`deleted ${archiveVersionsRemoved} archive version(s) of the request\n`);
    if (recorded === 'closed')
      io.err('the workflow had already closed the audit trail with its own record of the cancellation\n');
  }
  for (const failure of stopErrors) {
    io.err(
      `warning: could not stop execution ${failure.execution} (${failure.error}); it ends at its next step, which finds the request cancelled\n`,
    );
  }
  return { exitCode: EXIT.ok, result };
}

interface CancelFlags extends TargetFlags {
  readonly reason?: string;
  readonly json?: boolean;
}

/** Registers `svc-dsr cancel`. */
export function registerCancelCommand(program: Command): void {
  const command = program
    .command('cancel')
    .description('cancel a received or running request (refused once its erasure has started)')
    .argument('<request_id>', 'the request id')
    .requiredOption('--reason <reason>', 'why (kept in the ledger)')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
The ledger is updated first, conditionally, so a request whose erasure starts at the same moment is
refused rather than half-cancelled; then its executions are stopped.

Exit codes: 0 cancelled, 1 no such request or not cancellable (the message says why), 2 invalid flags.

Example:
  $ npx svc-dsr cancel 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --reason "subject withdrew the request"`,
    )
    .action(async (requestId: string, flags: CancelFlags) => {
      const options = {
        requestId: parseRequestId(requestId),
        reason: parseReason(flags.reason),
        json: flags.json === true,
      };
      const { exitCode } = await withTarget(flags, (context) => runCancel(context, options, processIo));
      process.exitCode = exitCode;
    });
}
