// The `svc-dsr extend` command: extends an open request's deadline once, with a reason and the notice given.
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

export interface ExtendFlags extends TargetFlags {
  readonly reason?: string;
  readonly noticeChannel?: string;
  readonly noticeAt?: string;
  readonly noticeReference?: string;
  readonly json?: boolean;
}

/** `svc-dsr extend` run with its parsed arguments and flags (registered in ../register/extend.ts). */
export async function extendAction(requestId: string, flags: ExtendFlags): Promise<void> {
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
}
