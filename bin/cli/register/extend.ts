/**
 * `svc-dsr extend` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/extend.ts, and what that uses, only when `extend` runs.
 */
import type { Command } from 'commander';
import type { ExtendFlags } from '../commands/extend.ts';
import { addTargetOptions } from '../target-flags.ts';

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
      const { extendAction } = await import('../commands/extend.ts');
      await extendAction(requestId, flags);
    });
}
