/**
 * `svc-dsr cancel` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/cancel.ts, and what that uses, only when `cancel` runs.
 */
import type { Command } from 'commander';
import type { CancelFlags } from '../commands/cancel.ts';
import { addTargetOptions } from '../target-flags.ts';

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
      const { cancelAction } = await import('../commands/cancel.ts');
      await cancelAction(requestId, flags);
    });
}
