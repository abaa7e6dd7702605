// The `svc-dsr report` command: the CCPA section 7101 records and section 7102 metrics, as CSV or JSON.
import { writeFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { z } from 'zod';
import { timeZoneSchema } from '#shared/config';
import {
  type CivilDate,
  compareDates,
  DEFAULT_TIME_ZONE,
  endOfLocalDay,
  isTimeZone,
  startOfLocalDay,
} from '#shared/deadlines';
import { EvidenceUnreadableError } from '#shared/evidence/errors';
import { RECORD_COLUMNS, SITES_RECORD_COLUMNS } from '#shared/evidence/record-columns';
import {
  buildReport,
  type ReportMetric,
  type ReportResult,
  type ReportSiteRow,
} from '#shared/evidence/report';
import { type CliIo, type CommandResult, csvRow, jsonText, processIo } from '../format.ts';
import { CliError, checkOutPath, EXIT, parseOption } from '../io.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';

/** Options of `svc-dsr report`. */
export interface ReportOptions {
  /** `csv` (default) or `json`. */
  readonly format?: string;
  /** Same as format `json`. */
  readonly json?: boolean;
  /** Requests received on or after this local date (YYYY-MM-DD, in the time zone) or instant (RFC 3339). */
  readonly from?: string;
  /** Requests received on or before this local date (the whole day) or instant. */
  readonly to?: string;
  /** Only requests under this regulation: `gdpr` or `ccpa`. */
  readonly regulation?: string;
  /** The IANA time zone dates are cut in. @default the stack's `TimeZone` output, else UTC */
  readonly timeZone?: string;
  /** Write here instead of stdout. */
  readonly out?: string;
  /** CSV only: `records`, `metrics` or `both` (two tables separated by a blank line). @default both */
  readonly table?: string;
  /**
   * How long to wait before each new look at a request its records did not back, reading its ledger
   * item and its chains again: a request whose workflow was writing at that moment (its record
   * written, its ledger not yet) is then backed. Not a command-line flag. @default RECHECK_AFTER_MS
   */
  readonly recheckAfterMs?: readonly number[];
}

const dateOrInstant = z.union([z.iso.date(), z.iso.datetime({ offset: true })], {
  message: 'must be a date (2026-01-31) or an RFC 3339 instant (2026-01-31T12:00:00Z)',
});
const formatSchema = z.enum(['csv', 'json'], { message: 'must be "csv" or "json"' });
const tableSchema = z.enum(['records', 'metrics', 'both', 'sites'], {
  message: 'must be "records", "metrics", "both" or "sites"',
});
const regulationSchema = z.enum(['gdpr', 'ccpa'], { message: 'must be "gdpr" or "ccpa"' });

const SITE_COLUMNS = [
  'site',
  'requests',
  'exported',
  'erased',
  'corrected',
  'no_data',
  'failed',
  'other',
] as const satisfies readonly (keyof ReportSiteRow)[];
const METRIC_COLUMNS = [
  'regulation',
  'type',
  'received',
  'complied',
  'denied',
  'denied_unverifiable',
  'denied_other',
  'withdrawn',
  'open',
  'failed',
  'late',
  'notice_missing',
  'median_days_to_respond',
  'mean_days_to_respond',
  'date_problems',
] as const satisfies readonly (keyof ReportMetric)[];

/** A bound of the range as given: a local date (cut in the time zone later) or an instant. */
type RangeBound = { readonly date: CivilDate } | { readonly instantMs: number };

/** Validated report options, checked before any connection is made. */
export function parseReportOptions(options: ReportOptions): {
  format: 'csv' | 'json';
  table: 'records' | 'metrics' | 'both' | 'sites';
  regulation?: 'gdpr' | 'ccpa';
  timeZone?: string;
  from?: RangeBound;
  to?: RangeBound;
} {
  const format =
    options.json === true ? 'json' : parseOption('--format', formatSchema, options.format ?? 'csv');
  if (options.json === true && options.format !== undefined && options.format !== 'json') {
    throw new CliError('--json and --format csv contradict each other; pass one of them');
  }
  const table = parseOption('--table', tableSchema, options.table ?? 'both');
  if (format === 'json' && options.table !== undefined)
    throw new CliError('--table applies to CSV; JSON holds both');
  const from = options.from === undefined ? undefined : rangeBound('--from', options.from);
  const to = options.to === undefined ? undefined : rangeBound('--to', options.to);
  // Compared here only when both are of one kind; a date against an instant needs the time zone.
  if (from !== undefined && to !== undefined) {
    const reversed =
      'date' in from && 'date' in to
        ? compareDates(from.date, to.date) > 0
        : 'instantMs' in from && 'instantMs' in to && from.instantMs > to.instantMs;
    if (reversed) throw new CliError('--from is after --to');
  }
  return {
    format,
    table,
    ...(options.regulation === undefined
      ? {}
      : { regulation: parseOption('--regulation', regulationSchema, options.regulation) }),
    ...(options.timeZone === undefined
      ? {}
      : { timeZone: parseOption('--time-zone', timeZoneSchema, options.timeZone) }),
    ...(from === undefined ? {} : { from }),
    ...(to === undefined ? {} : { to }),
  };
}

function rangeBound(flag: string, value: string): RangeBound {
  const text = parseOption(flag, dateOrInstant, value);
  if (/^\d{4}-\d{2}-\d{2}$/.test(text)) {
    const [year = 0, month = 0, day = 0] = text.split('-').map(Number);
    return { date: { year, month, day } };
  }
  return { instantMs: Date.parse(text) };
}

/** The instants of the range: a bare date means the whole local day in `timeZone`. */
function rangeInstants(
  from: RangeBound | undefined,
  to: RangeBound | undefined,
  timeZone: string,
): { fromMs?: number; toMs?: number } {
  const fromMs =
    from === undefined
      ? undefined
      : 'date' in from
        ? startOfLocalDay(from.date, timeZone).getTime()
        : from.instantMs;
  const toMs =
    to === undefined ? undefined : 'date' in to ? endOfLocalDay(to.date, timeZone).getTime() : to.instantMs;
  if (fromMs !== undefined && toMs !== undefined && fromMs > toMs) throw new CliError('--from is after --to');
  return { ...(fromMs === undefined ? {} : { fromMs }), ...(toMs === undefined ? {} : { toMs }) };
}

/**
 * Reads every ledger item, checks each request received in [from, to] against its audit records
 * (lambdas/shared/evidence/report.ts), and writes the CCPA section 7101 records and section 7102
 * metrics of those the records back, as CSV or JSON. A request the records contradict is left out,
 * named on stderr and in `refused`, and the command exits 1.
 */
export async function runReport(
  context: Pick<CliContext, 'dynamo' | 's3' | 'names' | 'clock'>,
  options: ReportOptions,
  io: CliIo,
): Promise<CommandResult<ReportResult>> {
  const { format, table, regulation, ...parsed } = parseReportOptions(options);
  const timeZone = parsed.timeZone ?? context.names.TimeZone ?? DEFAULT_TIME_ZONE;
  if (!isTimeZone(timeZone)) {
    throw new CliError(
      `the stack's TimeZone output "${timeZone}" is not an IANA time zone this Node knows; pass --time-zone`,
    );
  }
  const { fromMs, toMs } = rangeInstants(parsed.from, parsed.to, timeZone);
  // `--out -` is standard output, as `--file -` is standard input. A report is regenerated, so an
  // existing file is replaced; a folder, or a missing one, is refused before the ledger is read.
  const out = options.out === '-' ? undefined : options.out;
  if (out !== undefined) await checkOutPath(out, true, `report.${format}`);
  const quiet = format === 'json';
  const result = await buildReport(context, {
    timeZone,
    ...(fromMs === undefined ? {} : { fromMs }),
    ...(toMs === undefined ? {} : { toMs }),
    ...(regulation === undefined ? {} : { regulation }),
    ...(options.recheckAfterMs === undefined ? {} : { recheckAfterMs: options.recheckAfterMs }),
    progress: quiet ? undefined : (text) => io.err(text),
  }).catch((error: unknown) => {
    if (error instanceof EvidenceUnreadableError) throw new CliError(error.message, EXIT.failed);
    throw error;
  });
  const { intake_errors: intakeErrors, skipped, refused } = result;
  const text = format === 'json' ? jsonText(result) : toCsv(result, table);
  if (out === undefined) io.out(text);
  else {
    await writeFile(out, text).catch((error: unknown) => {
      throw new CliError(
        `--out: cannot write ${out} (${error instanceof Error ? error.message : String(error)})`,
        EXIT.failed,
      );
    });
    if (!quiet)
      io.err(`wrote ${out}: ${result.records.length} request(s), ${result.metrics.length} metric row(s)\n`);
  }
  if (!quiet && intakeErrors > 0) {
    io.err(
      `${intakeErrors} message(s) were rejected at intake in the range: intake errors, not in the metrics\n`,
    );
  }
  // A report short of some requests must not pass for a whole one in a script: it is written, and
  // the command fails.
  if (skipped > 0) {
    io.err(
      `svc-dsr: ${skipped} ledger item(s) did not match the ledger schema and are not in the report (svc-dsr verify --all names them)\n`,
    );
  }
  // A figure the records contradict is never printed: the request is named, and the command fails.
  if (refused.length > 0) {
    const lines = refused.flatMap(({ request_id, findings }) =>
      findings.map(({ check, detail }) => `  ${request_id} ${check}: ${detail}\n`),
    );
    io.err(
      `svc-dsr: ${refused.length} request(s) are not in the report: their audit records do not back what the ledger says (svc-dsr verify <request_id> shows each in full)\n${lines.join('')}`,
    );
  }
  const failed = skipped > 0 || refused.length > 0;
  return { exitCode: failed ? EXIT.failed : EXIT.ok, result };
}

function toCsv(result: ReportResult, table: 'records' | 'metrics' | 'both' | 'sites'): string {
  if (table === 'sites') {
    return (
      csvRow(SITE_COLUMNS) +
      result.sites.map((row) => csvRow(SITE_COLUMNS.map((column) => row[column]))).join('')
    );
  }
  const parts: string[] = [];
  if (table !== 'metrics') {
    const columns = result.records.some((record) => record.sites !== null)
      ? SITES_RECORD_COLUMNS
      : RECORD_COLUMNS;
    parts.push(
      csvRow(columns) +
        result.records.map((record) => csvRow(columns.map((column) => record[column]))).join(''),
    );
  }
  if (table !== 'records') {
    parts.push(
      csvRow(METRIC_COLUMNS) +
        result.metrics.map((row) => csvRow(METRIC_COLUMNS.map((column) => row[column]))).join(''),
    );
  }
  return parts.join('\r\n');
}

export interface ReportFlags extends TargetFlags {
  readonly format?: string;
  readonly json?: boolean;
  readonly from?: string;
  readonly to?: string;
  readonly regulation?: string;
  readonly timeZone?: string;
  readonly out?: string;
  readonly table?: string;
}

/** `svc-dsr report` run with its parsed arguments and flags (registered in ../register/report.ts). */
export async function reportAction(flags: ReportFlags, cmd: Command): Promise<void> {
  const formatGiven = cmd.getOptionValueSource('format') === 'cli';
  const options: ReportOptions = {
    ...(formatGiven && flags.format !== undefined ? { format: flags.format } : {}),
    json: flags.json === true,
    ...(flags.from === undefined ? {} : { from: flags.from }),
    ...(flags.to === undefined ? {} : { to: flags.to }),
    ...(flags.regulation === undefined ? {} : { regulation: flags.regulation }),
    ...(flags.timeZone === undefined ? {} : { timeZone: flags.timeZone }),
    ...(flags.out === undefined ? {} : { out: flags.out }),
    ...(flags.table === undefined ? {} : { table: flags.table }),
  };
  parseReportOptions(options);
  const { exitCode } = await withTarget(flags, (context) => runReport(context, options, processIo));
  process.exitCode = exitCode;
}
