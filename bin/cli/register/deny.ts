/**
 * `svc-dsr deny` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/deny.ts, and what that uses, only when `deny` runs.
 */
import type { Command } from 'commander';
import { DENIAL_CODES } from '#shared/vocabulary';
import type { DenyFlags } from '../commands/deny.ts';
import { addTargetOptions } from '../target-flags.ts';

/** Registers `svc-dsr deny`. */
export function registerDenyCommand(program: Command): void {
  const command = program
    .command('deny')
    .description('deny a request still owed an answer, before its erasure starts, with a reason code')
    .argument('<request_id>', 'the request id')
    .requiredOption('--reason-code <code>', `why: ${DENIAL_CODES.join(', ')}`)
    .requiredOption('--reason <reason>', 'the reason in words (kept in the ledger)')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
A denied request is never exported or erased: the ledger is updated first, conditionally, so a
request whose erasure starts at the same moment is refused; then its archive copies are deleted and
its executions stopped. The subject is owed a notice of the denial.

Exit codes: 0 denied, 1 no such request or not deniable (the message says why), 2 invalid flags.

Example:
  $ npx svc-dsr deny 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --reason-code identity_not_verified --reason "ID check failed twice"`,
    )
    .action(async (requestId: string, flags: DenyFlags) => {
      const { denyAction } = await import('../commands/deny.ts');
      await denyAction(requestId, flags);
    });
}
