/**
 * `svc-dsr list` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/list.ts, and what that uses, only when `list` runs.
 */
import type { Command } from 'commander';
import { REQUEST_TYPES, STATUSES } from '#shared/vocabulary';
import type { ListFlags } from '../commands/list.ts';
import { addTargetOptions } from '../target-flags.ts';

/** Registers `svc-dsr list`. */
export function registerListCommand(program: Command): void {
  const command = program
    .command('list')
    .description(
      'list requests by status, earliest due date first (default: every one still owed an answer: received, running and failed)',
    )
    .option('--status <statuses>', `comma-separated: ${STATUSES.join(', ')}`)
    .option('--due-within <days>', 'only requests due within this many days (overdue ones included)')
    .option('--overdue', 'only requests past their due date')
    .option('--receipt-due', 'only CCPA requests whose receipt confirmation is not recorded yet')
    .option('--receipt-overdue', 'only CCPA requests past their receipt confirm-by date with none recorded')
    .option(
      '--notice-overdue',
      'only requests owed a receipt, response or denial notice past its due date (every status but rejected, unless --status)',
    )
    .option('--type <types>', `only these request types, comma-separated: ${REQUEST_TYPES.join(', ')}`)
    .option('--json', 'print JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
The RECEIPT column follows each CCPA request's receipt confirmation (section 7021, due within 10
business days, by its confirm-by date): confirmed, due, or overdue until svc-dsr notice --kind
receipt records it. The NOTICE column follows the response (completed) or denial (denied) notice:
given, due, or overdue until svc-dsr notice --kind response or --kind denial records it. A GDPR
denial is due one month after receipt, even after an extension (Art. 12(4)).

Exit codes: 0 listed (even when nothing matched), 2 invalid flags.

Examples:
  $ npx svc-dsr list
  $ npx svc-dsr list --overdue
  $ npx svc-dsr list --receipt-overdue
  $ npx svc-dsr list --notice-overdue
  $ npx svc-dsr list --status failed,cancelled --json
  $ npx svc-dsr list --type correction
  $ npx svc-dsr list --due-within 7 --target aws --stack-outputs outputs.json`,
    )
    .action(async (flags: ListFlags) => {
      const { listAction } = await import('../commands/list.ts');
      await listAction(flags);
    });
}
