/**
 * `svc-dsr report` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/report.ts, and what that uses, only when `report` runs.
 */
import type { Command } from 'commander';
import type { ReportFlags } from '../commands/report.ts';
import { addTargetOptions } from '../target-flags.ts';

/** Registers `svc-dsr report`. */
export function registerReportCommand(program: Command): void {
  const command = program
    .command('report')
    .description(
      'CCPA record keeping: the section 7101 record of every request and the section 7102 metrics, each checked against its audit records',
    )
    .option('--format <format>', 'csv or json', 'csv')
    .option('--json', 'same as --format json')
    .option(
      '--from <date>',
      'requests received on or after this local date (YYYY-MM-DD, in the time zone) or instant',
    )
    .option('--to <date>', 'requests received on or before this local date (the whole day) or instant')
    .option('--regulation <regulation>', 'only gdpr or only ccpa requests')
    .option(
      '--time-zone <zone>',
      "the IANA time zone dates are cut in (default: the stack's TimeZone output, else UTC)",
    )
    .option(
      '--table <table>',
      'CSV only: records, metrics or both (two tables, a blank line between), or sites (the breakdown by site)',
    )
    .option(
      '--out <file>',
      'write the report to this file (replaced if it exists) instead of stdout; - is stdout',
    );
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
Records (7101): date of request (received_at), nature (type), manner (channel), date and
nature of the response (response_date, response), basis for a denial (denial_basis). No subject
identifiers appear. The date of a response or denial is its notice's (npx svc-dsr notice): the later
of the time it claims (notice_given_at) and the time it was recorded (notice_recorded_at), null
until one is recorded; on_time compares it with notice_due_at, and notice_recorded_late marks a
notice claimed in time but recorded after its due date. ended_at is when the workflow ended.

Metrics (7102), one row per regulation and type and one per regulation (type "all"); GDPR and CCPA
never share a row:
  received   consumer requests received (every category below)
  complied   complied with in whole or in part: completed (exported, erased, corrected, or no data held)
  denied     denied by the controller, split by basis: unverifiable (identity not verified), other
  withdrawn  cancelled at the subject's request
  open       not answered yet
  failed     failed on our side and still owed (npx svc-dsr retry): neither complied with nor denied
  late       complied with or denied, and not answered by the notice's due date
  notice_missing  complied with or denied, with no response or denial notice recorded yet
  median_days_to_respond, mean_days_to_respond: days from receipt to the response notice, complied
             and denied requests that have one
Messages rejected at intake as invalid are intake errors, not consumer requests: they are counted
apart (intake_errors) and in no metric. A request whose dates contradict each other (received after
the report, or answered before it was received) is flagged in date_problem and left out of the days.

Every request is checked against its audit records (its own chain and its notices chain, as
npx svc-dsr verify <request_id> checks them): one whose ledger says what no record locked, or the
opposite of what one locked (a due date, an outcome, a verification method, a denial code or a
notice edited after the fact; a ledger item with no records), is left out of both tables, named
on stderr with what disagrees, and listed in "refused" (JSON). So is a request the records put in
the range whatever the ledger says, and a chain in the range whose ledger item is gone.

Exit codes: 0 written, every request backed by its records; 1 some request is left out (refused
by its records, or its ledger item unreadable: skipped; the rest is written), or the ledger or the
audit bucket could not be read (nothing is written); 2 invalid flags.

Examples:
  $ npx svc-dsr report --from 2026-01-01 --to 2026-12-31 --regulation ccpa --out ccpa-2026.csv
  $ npx svc-dsr report --json --target aws --stack-outputs outputs.json
  $ npx svc-dsr report --table metrics --time-zone America/Los_Angeles`,
    )
    .action(async (flags: ReportFlags, cmd: Command) => {
      const { reportAction } = await import('../commands/report.ts');
      await reportAction(flags, cmd);
    });
}
