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
import { ledgerChange, recordOperatorAction } from './common.ts';

/** Options of `svc-dsr extend`. */
export interface ExtendOptions {
  readonly requestId: string;
  readonly reason: string;
  readonly json?: boolean;
}

/** What `extend --json` prints. */
export interface ExtendResult {
  readonly request_id: string;
  readonly regulation: string | null;
  readonly previous_due_at: string;
  readonly due_at: string;
  readonly reason: string;
}

/**
 * Extends an open request's deadline once, with a reason, before the original deadline
 * (DESIGN.md section 6; the ledger's CAN_EXTEND). Refusals are exit 1 with the rule that applied.
 */
export async function runExtend(
  context: Pick<CliContext, 'ledger' | 's3' | 'names' | 'target' | 'operator'>,
  options: ExtendOptions,
  io: CliIo,
): Promise<CommandResult<ExtendResult>> {
  const requestId = parseRequestId(options.requestId);
  const reason = parseReason(options.reason);
  const { before: item, after: updated } = await ledgerChange(context, requestId, () =>
    context.ledger.extend(requestId, { reason }),
  );
  const dueAt = item.due_at ?? '';
  const newDueAt = updated.due_at ?? '';

  await recordOperatorAction(context, requestId, {
    eventId: 'Operator:extend',
    action: 'deadline_extended',
    facts: { previous_due_at: dueAt, due_at: newDueAt },
    reason,
  });

  const result: ExtendResult = {
    request_id: requestId,
    regulation: item.regulation ?? null,
    previous_due_at: dueAt,
    due_at: newDueAt,
    reason,
  };
  if (options.json === true) writeJson(io, result);
  else {
    io.out(`extended ${requestId}: due ${dueAt} -> ${newDueAt}\n`);
    // Both regimes make the extension valid only if the subject hears of it, with the reason, in time.
    io.err(`remember: tell the subject about the extension and its reason before ${dueAt}\n`);
  }
  return { exitCode: EXIT.ok, result };
}

interface ExtendFlags extends TargetFlags {
  readonly reason?: string;
  readonly json?: boolean;
}

/** Registers `svc-dsr extend`. */
export function registerExtendCommand(program: Command): void {
  const command = program
    .command('extend')
    .description("extend an open request's deadline once (GDPR +2 months, CCPA +45 days), with a reason")
    .argument('<request_id>', 'the request id')
    .requiredOption('--reason <reason>', 'why the extension is needed (kept in the ledger)')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
An extension is allowed once, with a reason, and only before the original deadline; the new due date
is the statutory limit (GDPR: three months from receipt; CCPA: 90 days). Tell the subject about it,
with the reason, before the original deadline.

Exit codes: 0 extended, 1 no such request or not extendable (the message gives the rule), 2 invalid flags.

Example:
  $ npx svc-dsr extend 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --reason "complex request: several accounts"`,
    )
    .action(async (requestId: string, flags: ExtendFlags) => {
      const options = {
        requestId: parseRequestId(requestId),
        reason: parseReason(flags.reason),
        json: flags.json === true,
      };
      const { exitCode } = await withTarget(flags, (context) => runExtend(context, options, processIo));
      process.exitCode = exitCode;
    });
}
