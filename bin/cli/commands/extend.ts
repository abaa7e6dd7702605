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
import { type NoticeFlags, parseNoticeFlags } from './notice.ts';

/** Options of `svc-dsr extend`. */
export interface ExtendOptions {
  readonly requestId: string;
  readonly reason: string;
  /** How the subject was told of the extension and its reason: recorded with it, required. */
  readonly notice: NoticeFlags;
  readonly json?: boolean;
}

/** What `extend --json` prints. */
export interface ExtendResult {
  readonly request_id: string;
  readonly regulation: string | null;
  readonly previous_due_at: string;
  readonly due_at: string;
  readonly reason: string;
  readonly notice: { channel: string; at: string; reference: string | null };
}

/**
 * Extends an open request's deadline once, with a reason, before the original deadline
 * (docs/design.md, "Statuses"; the ledger's CAN_EXTEND), through the operator function. Refusals are exit 1 with the rule that applied.
 */
export async function runExtend(
  context: Pick<CliContext, 'operatorFunction' | 'clock'>,
  options: ExtendOptions,
  io: CliIo,
): Promise<CommandResult<ExtendResult>> {
  const requestId = parseRequestId(options.requestId);
  const reason = parseReason(options.reason);
  const notice = parseNoticeFlags(options.notice, '--notice-', context.clock());
  const result: ExtendResult = await context.operatorFunction({
    command: 'extend',
    request_id: requestId,
    reason,
    notice,
  });
  if (options.json === true) writeJson(io, result);
  else {
    io.out(`extended ${requestId}: due ${result.previous_due_at} -> ${result.due_at}\n`);
    io.err(`recorded the extension notice to the subject (${notice.channel}, ${notice.at})\n`);
  }
  return { exitCode: EXIT.ok, result };
}

interface ExtendFlags extends TargetFlags {
  readonly reason?: string;
  readonly noticeChannel?: string;
  readonly noticeAt?: string;
  readonly noticeReference?: string;
  readonly json?: boolean;
}

/** Registers `svc-dsr extend`. */
export function registerExtendCommand(program: Command): void {
  const command = program
    .command('extend')
    .description("extend an open request's deadline once (GDPR +2 months, CCPA +45 days), with a reason")
    .argument('<request_id>', 'the request id')
    .requiredOption(
      '--reason <reason>',
      'why the extension is needed (kept in the ledger and the audit record)',
    )
    .requiredOption('--notice-channel <channel>', 'how the subject was told of the extension and its reason')
    .option('--notice-at <time>', 'when the subject was told (RFC 3339; default now)')
    .option('--notice-reference <reference>', "the team's reference of that message")
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
An extension is allowed once, with a reason, and only before the original deadline; the new due date
is the statutory limit (GDPR: three months from receipt; CCPA: 90 days). It is valid only if the
subject is told, with the reason, before the original deadline: the extension is refused without
that notice, which is recorded in the same ledger write and audit record.

Exit codes: 0 extended, 1 no such request or not extendable (the message gives the rule), 2 invalid flags.

Example:
  $ npx svc-dsr extend 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --reason "complex request: several accounts" --notice-channel email`,
    )
    .action(async (requestId: string, flags: ExtendFlags) => {
      const notice: NoticeFlags = {
        ...(flags.noticeChannel === undefined ? {} : { channel: flags.noticeChannel }),
        ...(flags.noticeAt === undefined ? {} : { at: flags.noticeAt }),
        ...(flags.noticeReference === undefined ? {} : { reference: flags.noticeReference }),
      };
      parseNoticeFlags(notice, '--notice-', new Date());
      const options = {
        requestId: parseRequestId(requestId),
        reason: parseReason(flags.reason),
        notice,
        json: flags.json === true,
      };
      const { exitCode } = await withTarget(flags, (context) => runExtend(context, options, processIo));
      process.exitCode = exitCode;
    });
}
