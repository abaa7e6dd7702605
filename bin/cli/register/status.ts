/**
 * `svc-dsr status` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/status.ts, and what that uses, only when `status` runs.
 */
import type { Command } from 'commander';
import type { StatusFlags } from '../commands/status.ts';
import { addTargetOptions } from '../target-flags.ts';

/** Registers `svc-dsr status`. */
export function registerStatusCommand(program: Command): void {
  const command = program
    .command('status')
    .description("show a request's ledger record: status, step, deadlines, export, archive, erasure, errors")
    .argument('<request_id>', 'the request id')
    .option('--json', 'print the ledger item as JSON, with the notices still due (notices_due)')
    .option('--show-subject', "also show the subject's primary_key and svc_user_id");
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
Exit codes: 0 shown, 1 no such request, 2 invalid request id or flags.

Examples:
  $ npx svc-dsr status 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f
  $ npx svc-dsr status 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --json --target aws --stack-outputs outputs.json`,
    )
    .action(async (requestId: string, flags: StatusFlags) => {
      const { statusAction } = await import('../commands/status.ts');
      await statusAction(requestId, flags);
    });
}
