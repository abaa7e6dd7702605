/**
 * `svc-dsr submit` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/submit.ts, and what that uses, only when `submit` runs.
 */
import type { Command } from 'commander';
import { CORRECTABLE_FIELDS, REQUEST_CHANNELS } from '#shared/vocabulary';
import type { SubmitFlags } from '../commands/submit.ts';
import { addTargetOptions } from '../target-flags.ts';

/** How long submit waits for intake's verdict by default, in seconds. */
export const DEFAULT_WAIT_SECONDS = 30;

/** Registers `svc-dsr submit`. */
export function registerSubmitCommand(program: Command): void {
  const command = program
    .command('submit')
    .description('submit one request (flags) or a CSV/JSONL file of requests to the intake queue')
    .option(
      '--file <file>',
      'CSV (header row of field names), JSONL (one request per line) or JSON (an object or an array); - reads standard input',
    )
    .option(
      '--format <format>',
      'csv, jsonl or json (default: from the file extension; for -, from its content)',
    )
    .option('--dry-run', 'validate every line and report the bad ones; send nothing')
    .option('--json', 'print a machine-readable summary')
    .option(
      '--wait <seconds>',
      `after sending, wait up to this long for intake to record the requests, to report a conflict with another submission (0: do not wait; default ${DEFAULT_WAIT_SECONDS})`,
    )
    .option('--request-id <uuid>', 'the idempotency key (default: a random UUID)')
    .option('--type <type>', 'access, erasure or correction')
    .option('--regulation <regulation>', 'gdpr or ccpa')
    .option('--primary-key <id>', "the subject's user id on the site")
    .option('--received-at <time>', 'when the subject asked (RFC 3339): the statutory clock starts here')
    .option('--verification-method <method>', "how the subject's identity was verified")
    .option('--verified-by <who>', 'who verified it')
    .option('--verified-at <time>', 'when it was verified (RFC 3339)')
    .option('--reference <ticket>', "the team's ticket id")
    .option('--submitted-by <who>', 'who submits the request')
    .option('--channel <channel>', `how the request was made: ${REQUEST_CHANNELS.join(', ')}`)
    .option(
      '--sites <ids>',
      'the sites the request covers, comma-separated (default: every site of the stack)',
    )
    .option(
      '--correct <field=value>',
      `with --type correction: a profile field and its new value, once per field (${CORRECTABLE_FIELDS.join(', ')}; image_url= removes the image); the values are never printed`,
      (pair: string, earlier: string[] | undefined) => [...(earlier ?? []), pair],
    );
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
A file's lines are all validated first. Bad lines are reported with their line number and field
errors and never sent; the valid ones are sent in batches of 10. In a CSV file the columns are the
request's field names, the verification fields written verification.method, verification.verified_by,
verification.verified_at (or verification_method, verified_by, verified_at); an empty cell is an
absent field. Every line of a file needs its own request_id (the idempotency key), so submitting a
file twice is safe. A JSONL line longer than 256 KiB (the queue's message size limit) is refused
unread, as a bad line. The request ids sent are printed on stdout, one per line.

A correction (--type correction) names each profile field to change with --correct field=value;
in a file, a "corrections" object (JSONL, JSON) or corrections.<field> columns (CSV). Each value is
checked against the platform's rule for its field before sending, and never printed.
A correction is not accepted with email_link by default (the link proves control of the very
address a correction may replace): verify it with account_login, id_document or authorized_agent.

The verification method is judged at intake against the deployed stack's list of methods (stack
config "verification"), which the CLI does not read: a method not on it is rejected there, one not
accepted for the request type or verified more than the maximum age before receipt is denied. Before
sending (and in a dry run), a method with an invisible or look-alike character, which no list can
name, is reported as a bad line.

Before sending, each request is looked up in the ledger: one already there with the same content is
reported and sent again (a duplicate changes nothing); one there with other content under the same
request_id is a conflict, reported and not sent.

Once sent, submit waits (up to --wait seconds) until intake has recorded each request: a request
another submission sent a moment earlier under the same request_id with other content is then
reported, since intake quarantines the later one as a conflict.

Exit codes: 0 everything valid was sent, 2 a flag or line was invalid or in conflict with the
ledger (the other valid lines were still sent), 1 a valid line could not be sent, or intake
quarantined a line sent as a conflict with another submission.

Examples:
  $ npx svc-dsr submit --type erasure --regulation gdpr --primary-key u-alice \\
      --received-at 2026-11-20T09:00:00Z --verification-method email_link \\
      --verified-by privacy-team --verified-at 2026-11-20T09:05:00Z --reference DSR-1042
  $ npx svc-dsr submit --type correction --regulation gdpr --primary-key u-alice \\
      --received-at 2026-11-20T09:00:00Z --verification-method account_login \\
      --verified-by privacy-team --verified-at 2026-11-20T09:05:00Z \\
      --correct display_name='Alice Q. Walker' --correct location=Lisbon
  $ npx svc-dsr submit --file requests.jsonl --dry-run
  $ npx svc-dsr submit --file requests.csv --target aws --stack-outputs outputs.json --json`,
    )
    .action(async (flags: SubmitFlags) => {
      const { submitAction } = await import('../commands/submit.ts');
      await submitAction(flags);
    });
}
