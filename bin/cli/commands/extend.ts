import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { Command } from 'commander';
import { decideExtension } from '#shared/deadlines';
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
import { addTargetOptions, type CliContext, type TargetFlags, withTarget } from '../target.ts';
import { isConditionalFailure, loadRequest, recordOperatorAction } from './common.ts';

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
 * (DESIGN.md section 6, `decideExtension`). Refusals are exit 1 with the rule that applied.
 */
export async function runExtend(
  context: Pick<CliContext, 'ledger' | 'dynamo' | 's3' | 'names' | 'target' | 'clock'>,
  options: ExtendOptions,
  io: CliIo,
): Promise<CommandResult<ExtendResult>> {
  const requestId = parseRequestId(options.requestId);
  const reason = parseReason(options.reason);
  const item = await loadRequest(context, requestId);
  const { dueAt, newDueAt } = decide(item, reason, context.clock());

  try {
    await context.dynamo.send(
      new UpdateCommand({
        TableName: context.names.LedgerTableName,
        Key: { request_id: requestId },
        UpdateExpression:
          'SET #due_at = :new_due, #extended = :true, #extension_reason = :reason, #updated_at = :now',
        // Checked again atomically: two operators extending at once get one extension, not two.
        ConditionExpression:
          'attribute_exists(request_id) AND #status IN (:received, :running) AND #due_at = :old_due' +
          ' AND (attribute_not_exists(#extended) OR #extended = :false)',
        ExpressionAttributeNames: {
          '#status': 'status',
          '#due_at': 'due_at',
          '#extended': 'extended',
          '#extension_reason': 'extension_reason',
          '#updated_at': 'updated_at',
        },
        ExpressionAttributeValues: {
          ':new_due': newDueAt,
          ':old_due': dueAt,
          ':true': true,
          ':false': false,
          ':reason': reason,
          ':now': context.clock().toISOString(),
          ':received': 'received',
          ':running': 'running',
        },
      }),
    );
  } catch (error) {
    if (!isConditionalFailure(error)) throw error;
    decide(await loadRequest(context, requestId), reason, context.clock());
    throw new CliError(
      `request ${requestId} changed while it was being extended; run the command again`,
      EXIT.failed,
    );
  }

  await recordOperatorAction(context, requestId, {
    eventId: 'Operator:extend',
    action: 'deadline_extended',
    facts: { previous_due_at: dueAt, due_at: newDueAt },
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

function decide(item: LedgerItem, reason: string, now: Date): { dueAt: string; newDueAt: string } {
  if (item.status !== 'received' && item.status !== 'running') {
    throw new CliError(
      `request ${item.request_id} is ${item.status}; only received or running requests can be extended`,
      EXIT.failed,
    );
  }
  if (item.due_at === undefined || item.extension_limit_at === undefined) {
    throw new CliError(
      `request ${item.request_id} has no deadlines in the ledger, so there is nothing to extend`,
      EXIT.failed,
    );
  }
  const decision = decideExtension(
    { due_at: item.due_at, extension_limit_at: item.extension_limit_at, extended: item.extended },
    reason,
    now,
  );
  if (!decision.ok)
    throw new CliError(`cannot extend request ${item.request_id}: ${decision.reason}`, EXIT.failed);
  return { dueAt: item.due_at, newDueAt: decision.due_at };
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
