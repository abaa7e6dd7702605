// The `svc-dsr deny` command: denies a request still owed an answer, with a reason code.
import { z } from 'zod';
import { DENIAL_CODES, type DenialCode } from '#shared/ledger';
import {
  type CliIo,
  type CommandResult,
  parseReason,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { EXIT, parseOption } from '../io.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';
import { type EndedRuns, printEnded } from './common.ts';

/** Options of `svc-dsr deny`. */
export interface DenyOptions {
  readonly requestId: string;
  readonly reasonCode: string;
  readonly reason: string;
  readonly json?: boolean;
}

/** What `deny --json` prints. */
export interface DenyResult extends EndedRuns {
  readonly request_id: string;
  readonly status: 'denied';
  readonly previous_status: string;
  readonly reason_code: DenialCode;
  readonly reason: string;
  /** The subject is owed a notice of the denial, with its reason. */
  readonly notice_due: 'denial';
}

const reasonCodeSchema = z.enum(DENIAL_CODES, { message: `must be one of ${DENIAL_CODES.join(', ')}` });

/** The --reason-code, or exit 2 naming the codes. */
export function parseReasonCode(value: unknown): DenialCode {
  return parseOption('--reason-code', reasonCodeSchema, value);
}

/**
 * Denies a request still owed an answer (received, running or failed) before its erasure has
 * started, through the operator function: the ledger's conditional deny (CAN_DENY), a final audit record, then the archive
 * copies are deleted and its executions stopped. Refusals are exit 1.
 */
export async function runDeny(
  context: Pick<CliContext, 'operatorFunction'>,
  options: DenyOptions,
  io: CliIo,
): Promise<CommandResult<DenyResult>> {
  const requestId = parseRequestId(options.requestId);
  const code = parseReasonCode(options.reasonCode);
  const reason = parseReason(options.reason);
  const result: DenyResult = await context.operatorFunction({
    command: 'deny',
    request_id: requestId,
    reason_code: code,
    reason,
  });
  const ended: EndedRuns = result;
  if (options.json === true) writeJson(io, result);
  else {
    io.out(`denied ${requestId} (${code}; was ${result.previous_status})\n`);
    io.err(
      `remember: the subject is owed a notice of the denial and its reason: record it with npx svc-dsr notice ${requestId} --kind denial --channel email\n`,
    );
  }
  printEnded(io, ended, 'denied', options.json === true);
  return { exitCode: EXIT.ok, result };
}

export interface DenyFlags extends TargetFlags {
  readonly reasonCode?: string;
  readonly reason?: string;
  readonly json?: boolean;
}

/** `svc-dsr deny` run with its parsed arguments and flags (registered in ../register/deny.ts). */
export async function denyAction(requestId: string, flags: DenyFlags): Promise<void> {
  const options = {
    requestId: parseRequestId(requestId),
    reasonCode: parseReasonCode(flags.reasonCode),
    reason: parseReason(flags.reason),
    json: flags.json === true,
  };
  const { exitCode } = await withTarget(flags, (context) => runDeny(context, options, processIo));
  process.exitCode = exitCode;
}
