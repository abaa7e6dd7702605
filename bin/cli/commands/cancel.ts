// The `svc-dsr cancel` command: cancels a received or running request through the operator function.
import {
  type CliIo,
  type CommandResult,
  parseReason,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { EXIT } from '../io.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';
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

export interface CancelFlags extends TargetFlags {
  readonly reason?: string;
  readonly json?: boolean;
}

/** `svc-dsr cancel` run with its parsed arguments and flags (registered in ../register/cancel.ts). */
export async function cancelAction(requestId: string, flags: CancelFlags): Promise<void> {
  const options = {
    requestId: parseRequestId(requestId),
    reason: parseReason(flags.reason),
    json: flags.json === true,
  };
  const { exitCode } = await withTarget(flags, (context) => runCancel(context, options, processIo));
  process.exitCode = exitCode;
}
