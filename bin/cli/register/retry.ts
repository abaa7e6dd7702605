/**
 * `svc-dsr retry` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/retry.ts, and what that uses, only when `retry` runs.
 */
import type { Command } from 'commander';
import type { RetryFlags } from '../commands/retry.ts';
import { addTargetOptions } from '../target-flags.ts';

/** The statuses `retry --status` takes. */
export const BULK_STATUSES = ['failed', 'received', 'running'] as const;

/** Registers `svc-dsr retry`. */
export function registerRetryCommand(program: Command): void {
  const command = program
    .command('retry')
    .description(
      'redrive a failed request, or an open one no execution is running: reset it and start a new execution that resumes where it stopped',
    )
    .argument('[request_id]', 'the request id (or use --status for many)')
    .option('--status <status>', `retry every request with this status: ${BULK_STATUSES.join(', ')}`)
    .option('--code <code>', 'with --status: only requests whose error has this code, e.g. export_failed')
    .option('--dry-run', 'with --status: print what would be retried and change nothing')
    .option('--reason <reason>', 'why (kept in the audit record with who retried)')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
The new execution is named <request_id>-retry-<n>. Every step is idempotent against the ledger, so
an export already under way, a copy already made or a deletion already done is not repeated.

Exit codes: 0 started (or a dry run), 1 no such request, not retryable, or an execution could not
start, 2 invalid flags.

Examples:
  $ npx svc-dsr retry 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f
  $ npx svc-dsr retry --status failed --code export_failed --dry-run
  $ npx svc-dsr retry --status running     # open requests left without a running execution`,
    )
    .action(async (requestId: string | undefined, flags: RetryFlags) => {
      const { retryAction } = await import('../commands/retry.ts');
      await retryAction(requestId, flags);
    });
}
