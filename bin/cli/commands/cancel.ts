import type { Command } from 'commander';
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
import { type EndedRuns, printEnded } from './common.ts';

/** Options of `svc-dsr cancel`. */
export interface CancelOptions {
  readonly requestId: string;
  readonly reason: string;
  readonly json?: boolean;
}

/** What `cancel --json` prints. */
export interface CancelResult extends EndedRuns {
  readonly request_id: string;
  readonly status: 'cancelled';
  readonly previous_status: string;
  readonly step: string | null;
  readonly reason: string;
}

/**
 * Cancels a received or running request before erasure has started, through the operator function:
 * the ledger's conditional cancel (CAN_CANCEL, so it cannot race past the delete), the final audit
 * record naming the caller, then StopExecution of its executions. Refusals are exit 1.
 */
export async function runCancel(
  context: Pick<CliContext, 'operatorFunction'>,
  options: CancelOptions,
  io: CliIo,
): Promise<CommandResult<CancelResult>> {
  const requestId = parseRequestId(options.requestId);
  const reason = parseReason(options.reason);
  const { recorded, ...answer } = await context.operatorFunction({
    command: 'cancel',
    request_id: requestId,
    reason,
  });
  const result: CancelResult = answer;
  const ended: EndedRuns = answer;
  if (options.json === true) writeJson(io, result);
  else {
    io.out(
      `cancelled ${requestId} (was ${result.previous_status}${result.step ? `, step ${result.step}` : ''})\n`,
    );
    if (recorded === 'closed')
      io.err('the workflow had already closed the audit trail with its own record of the cancellation\n');
  }
  printEnded(io, ended, 'cancelled', options.json === true);
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
