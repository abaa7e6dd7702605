// The `svc-dsr report` command: the CCPA section 7101 records and section 7102 metrics, as CSV or JSON.
import { writeFile } from 'node:fs/promises';
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
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
import {
  answerNoticeKind,
  isOwed,
  type LedgerItem,
  ledgerItemSchema,
  noticeCountsAt,
  noticeDueBy,
  type Status,
} from '#shared/ledger';
import { rfc3339Instant } from '#shared/request';
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
}

/**
 * Where a request stands, in the words of CCPA regulations section 7102: complied with in whole or in
 * part, or denied; and apart from those, withdrawn by the subject (cancelled), still open, failed on
 * our side (still owed: an operator retries it), or an intake error (a malformed message, not a
 * consumer request).
 */
export const RESPONSE_CATEGORIES = [
  'complied',
  'denied',
  'withdrawn',
  'open',
  'failed',
  'intake_error',
] as const;
export type ResponseCategory = (typeof RESPONSE_CATEGORIES)[number];

/**
 * Bases of a denial, as section 7102 invites a business to break them down: the identity could not
 * be verified, or any other ground the operator recorded with its reason code.
 */
export const DENIAL_BASES = ['unverifiable', 'other'] as const;
export type DenialBasis = (typeof DENIAL_BASES)[number];

/** The reason codes that mean the subject's identity could not be verified. */
const UNVERIFIABLE_CODES = new Set(['identity_not_verified']);

/** One request as CCPA regulations section 7101 asks a business to record it. No subject identifiers. */
export interface ReportRecord {
  readonly request_id: string;
  readonly regulation: string | null;
  /** Nature of the request. */
  readonly type: string | null;
  /** Date of the request: when the subject asked (for an intake error, when it reached intake). */
  readonly received_at: string;
  /** Manner in which the request was made (§7101): web_form, email, phone...; null when not recorded. */
  readonly channel: string | null;
  /** How the subject's identity was verified. */
  readonly verification_method: string | null;
  readonly status: string;
  /** Nature of the response: exported, erased, no_data, denied, cancelled, failed, rejected or pending. */
  readonly response: string;
  readonly response_category: ResponseCategory;
  /**
   * Date of the response: for a completed or denied request, when its response or denial notice
   * counts as given (the later of the time it claims and the time it was recorded; null until one
   * is recorded); for a withdrawal, when it was cancelled; null while open or failed.
   */
  readonly response_date: string | null;
  /** The time the response or denial notice says it was given (the operator's word). */
  readonly notice_given_at: string | null;
  /** When that notice was recorded in the ledger (and its locked audit record written). */
  readonly notice_recorded_at: string | null;
  /** When the workflow or the operator ended the request: not the answer to the subject. */
  readonly ended_at: string | null;
  /** Days from receipt to the response, one decimal; null without a response or when the dates contradict. */
  readonly days_to_respond: number | null;
  /** Basis for the denial: the reason code, or the field errors of an intake error. */
  readonly denial_basis: string | null;
  readonly due_at: string | null;
  /**
   * When the response or denial notice is due: the due date, except a GDPR denial, due one month
   * after receipt even after an extension (Art. 12(4)).
   */
  readonly notice_due_at: string | null;
  readonly extended: boolean;
  /**
   * Answered by the due date: the notice by its `notice_due_at`; a completed or denied request with
   * no notice recorded is late once that date has passed. Null when nothing is owed (withdrawn, intake error) or when an open or
   * failed request is still within its deadline; false once an open or failed one is past it.
   */
  readonly on_time: boolean | null;
  /** True when the notice claims a time by its due date but was recorded after it: late, as recorded. */
  readonly notice_recorded_late: boolean | null;
  /** Set when the dates cannot both be true (a receipt after the report or after the response). */
  readonly date_problem: string | null;
  readonly reference: string | null;
}

/** CCPA section 7102 metrics for one regulation and request type (`all`: every type of that regulation). */
export interface ReportMetric {
  readonly regulation: string;
  readonly type: string;
  /** Consumer requests received: every category but intake errors. */
  readonly received: number;
  /** Complied with in whole or in part: completed (exported, erased, or no data held). */
  readonly complied: number;
  /** Denied by the controller (status `denied`), whatever the basis. */
  readonly denied: number;
  readonly denied_unverifiable: number;
  readonly denied_other: number;
  /** Withdrawn by the subject: cancelled. */
  readonly withdrawn: number;
  /** Received or running: no answer yet. */
  readonly open: number;
  /** Failed on our side and still owed: neither complied with nor denied. */
  readonly failed: number;
  /** Complied with or denied, and not answered by the notice's due date (no notice by then counts too). */
  readonly late: number;
  /** Complied with or denied with no response or denial notice recorded yet: left out of the days. */
  readonly notice_missing: number;
  /** Median days from receipt to the response notice, over the complied and denied requests (one decimal). */
  readonly median_days_to_respond: number | null;
  /** Mean of the same (one decimal). */
  readonly mean_days_to_respond: number | null;
  /** Responses left out of the days because their dates contradict each other. */
  readonly date_problems: number;
}

/** What `report --format json` prints. */
export interface ReportResult {
  readonly generated_at: string;
  /** The IANA time zone the date range was cut in. */
  readonly time_zone: string;
  readonly from: string | null;
  readonly to: string | null;
  readonly regulation: string | null;
  readonly records: ReportRecord[];
  readonly metrics: ReportMetric[];
  /**
   * Messages rejected as invalid at intake in the range: not consumer requests, so in no metric.
   * They carry no valid regulation, so `--regulation` does not narrow this count.
   */
  readonly intake_errors: number;
  /** Ledger items that did not match the ledger schema and were left out. */
  readonly skipped: number;
}

const DAY_MS = 24 * 3600 * 1000;
const dateOrInstant = z.union([z.iso.date(), z.iso.datetime({ offset: true })], {
  message: 'must be a date (2026-01-31) or an RFC 3339 instant (2026-01-31T12:00:00Z)',
});
const formatSchema = z.enum(['csv', 'json'], { message: 'must be "csv" or "json"' });
const tableSchema = z.enum(['records', 'metrics', 'both'], {
  message: 'must be "records", "metrics" or "both"',
});
const regulationSchema = z.enum(['gdpr', 'ccpa'], { message: 'must be "gdpr" or "ccpa"' });

const RECORD_COLUMNS = [
  'request_id',
  'regulation',
  'type',
  'received_at',
  'channel',
  'verification_method',
  'status',
  'response',
  'response_category',
  'response_date',
  'notice_given_at',
  'notice_recorded_at',
  'ended_at',
  'days_to_respond',
  'denial_basis',
  'due_at',
  'notice_due_at',
  'extended',
  'on_time',
  'notice_recorded_late',
  'date_problem',
  'reference',
] as const satisfies readonly (keyof ReportRecord)[];
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
  table: 'records' | 'metrics' | 'both';
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
 * Reads every ledger item (Scan, paginated) and writes the CCPA section 7101 records and section
 * 7102 metrics of the requests received in [from, to], as CSV or JSON.
 */
export async function runReport(
  context: Pick<CliContext, 'dynamo' | 'names' | 'clock'>,
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
  const now = context.clock();
  const records: ReportRecord[] = [];
  let skipped = 0;
  let cursor: Record<string, unknown> | undefined;
  let pages = 0;
  do {
    const page = await context.dynamo.send(
      new ScanCommand({
        TableName: context.names.LedgerTableName,
        ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
      }),
    );
    for (const raw of page.Items ?? []) {
      const item = ledgerItemSchema.safeParse(raw);
      if (item.success) records.push(toRecord(item.data, now, item.data.denial?.code, timeZone));
      else skipped += 1;
    }
    cursor = page.LastEvaluatedKey;
    pages += 1;
    if (!quiet && cursor !== undefined && pages % 5 === 0)
      io.err(`report: read ${records.length + skipped} ledger items\n`);
  } while (cursor !== undefined);

  const inRange = records
    .filter((record) => {
      const at = rfc3339Instant(record.received_at)?.getTime() ?? Number.NaN;
      return (fromMs === undefined || at >= fromMs) && (toMs === undefined || at <= toMs);
    })
    .sort((a, b) => (a.received_at < b.received_at ? -1 : a.received_at > b.received_at ? 1 : 0));
  const intakeErrors = inRange.filter((record) => record.response_category === 'intake_error').length;
  const selected =
    regulation === undefined ? inRange : inRange.filter((record) => record.regulation === regulation);
  const metrics = computeMetrics(selected);
  const result: ReportResult = {
    generated_at: now.toISOString(),
    time_zone: timeZone,
    from: fromMs === undefined ? null : new Date(fromMs).toISOString(),
    to: toMs === undefined ? null : new Date(toMs).toISOString(),
    regulation: regulation ?? null,
    records: selected,
    metrics,
    intake_errors: intakeErrors,
    skipped,
  };

  const text = format === 'json' ? jsonText(result) : toCsv(result, table);
  if (out === undefined) io.out(text);
  else {
    await writeFile(out, text).catch((error: unknown) => {
      throw new CliError(
        `--out: cannot write ${out} (${error instanceof Error ? error.message : String(error)})`,
        EXIT.failed,
      );
    });
    if (!quiet) io.err(`wrote ${out}: ${selected.length} request(s), ${metrics.length} metric row(s)\n`);
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
  return { exitCode: skipped > 0 ? EXIT.failed : EXIT.ok, result };
}

/** The section 7102 category of a ledger status. */
export function categoryOf(status: Status): ResponseCategory {
  if (status === 'completed') return 'complied';
  if (status === 'cancelled') return 'withdrawn';
  if (status === 'rejected') return 'intake_error';
  if (status === 'failed') return 'failed';
  if (isOwed(status)) return 'open';
  // Every other status (`denied`) is the controller's refusal of a valid request.
  return 'denied';
}

/** The basis category of a denial's reason code. */
export function denialBasisOf(code: string | undefined): DenialBasis {
  return code !== undefined && UNVERIFIABLE_CODES.has(code) ? 'unverifiable' : 'other';
}

/**
 * The 7101 record of one ledger item, as it stands at `now`. A completed or denied request is
 * answered by its response or denial notice, not by the end of its workflow: the notice's date is
 * the response date, and `timeZone` counts a GDPR denial's month when the ledger lacks it.
 */
export function toRecord(
  item: LedgerItem,
  now: Date,
  denialCode?: string,
  timeZone: string = DEFAULT_TIME_ZONE,
): ReportRecord {
  const category = categoryOf(item.status);
  const receivedAt = item.received_at ?? item.created_at;
  // Only what a record locks (docs/audit.md): the notice, or the completion time, never the item's last write.
  const answerKind = answerNoticeKind(item.status);
  const notice = answerKind === undefined ? undefined : item[`notice_${answerKind}`];
  const noticeDueAt = answerKind === undefined ? null : noticeDueBy(item, answerKind, timeZone);
  const responseDate =
    category === 'complied' || category === 'denied'
      ? notice === undefined
        ? null
        : noticeCountsAt(notice)
      : category === 'withdrawn'
        ? (item.completed_at ?? null)
        : null;
  const receivedMs = rfc3339Instant(receivedAt)?.getTime() ?? Number.NaN;
  const dueAt = noticeDueAt ?? item.due_at ?? null;
  const dueMs = dueAt === null ? Number.NaN : Date.parse(dueAt);
  const responded = category === 'complied' || category === 'denied';
  const date_problem =
    receivedMs > now.getTime()
      ? 'received after the report was made'
      : responseDate !== null && Date.parse(responseDate) < receivedMs
        ? 'response dated before receipt'
        : null;
  return {
    request_id: item.request_id,
    regulation: item.regulation ?? null,
    type: item.type ?? null,
    received_at: receivedAt,
    channel: item.channel ?? null,
    verification_method: item.verification?.method ?? null,
    status: item.status,
    response:
      category === 'complied' ? (item.outcome ?? 'completed') : category === 'open' ? 'pending' : item.status,
    response_category: category,
    response_date: responseDate,
    notice_given_at: notice?.at ?? null,
    notice_recorded_at: notice?.recorded_at ?? null,
    ended_at: isOwed(item.status) ? null : (item.completed_at ?? null),
    days_to_respond:
      responded && responseDate !== null && date_problem === null
        ? roundDays((Date.parse(responseDate) - receivedMs) / DAY_MS)
        : null,
    denial_basis:
      category === 'denied'
        ? `${denialBasisOf(denialCode)}: ${denialCode ?? 'no reason code recorded'}`
        : category === 'intake_error'
          ? `invalid request: ${(item.rejection_errors ?? []).join('; ')}`
          : null,
    due_at: item.due_at ?? null,
    notice_due_at: noticeDueAt,
    extended: item.extended,
    on_time: onTime(category, responseDate, dueMs, now),
    notice_recorded_late:
      notice === undefined || Number.isNaN(dueMs)
        ? null
        : Date.parse(notice.at) <= dueMs && Date.parse(notice.recorded_at) > dueMs,
    date_problem,
    reference: item.reference ?? null,
  };
}

function onTime(
  category: ResponseCategory,
  responseDate: string | null,
  dueMs: number,
  now: Date,
): boolean | null {
  if (Number.isNaN(dueMs)) return null;
  // Answered once the notice is recorded; until then owed, and late once its date has passed.
  if ((category === 'complied' || category === 'denied') && responseDate !== null)
    return Date.parse(responseDate) <= dueMs;
  // Still owed: late once the deadline has passed, never "on time" before an answer.
  if (category === 'complied' || category === 'denied' || category === 'open' || category === 'failed')
    return now.getTime() > dueMs ? false : null;
  return null;
}

/** Section 7102 metrics per regulation and type, then a row per regulation of all its types. Regulations never share a row. */
export function computeMetrics(records: readonly ReportRecord[]): ReportMetric[] {
  const byRegulation = groupBy(
    records.filter((record) => record.response_category !== 'intake_error'),
    (record) => record.regulation ?? 'unknown',
  );
  return byRegulation.flatMap(([regulation, ofRegulation]) => [
    ...groupBy(ofRegulation, (record) => record.type ?? 'unknown').map(([type, group]) =>
      metric(regulation, type, group),
    ),
    metric(regulation, 'all', ofRegulation),
  ]);
}

/** The records grouped by `key`, groups in key order. */
function groupBy(
  records: readonly ReportRecord[],
  key: (record: ReportRecord) => string,
): [string, ReportRecord[]][] {
  const groups = new Map<string, ReportRecord[]>();
  for (const record of records) groups.set(key(record), [...(groups.get(key(record)) ?? []), record]);
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function metric(regulation: string, type: string, records: readonly ReportRecord[]): ReportMetric {
  const count = (category: ResponseCategory) =>
    records.filter((record) => record.response_category === category).length;
  const denied = records.filter((record) => record.response_category === 'denied');
  const responses = records.filter(
    (record) => record.response_category === 'complied' || record.response_category === 'denied',
  );
  const days = responses.flatMap((record) =>
    record.days_to_respond === null ? [] : [record.days_to_respond],
  );
  return {
    regulation,
    type,
    received: records.length,
    complied: count('complied'),
    denied: denied.length,
    denied_unverifiable: denied.filter((record) => record.denial_basis?.startsWith('unverifiable:')).length,
    denied_other: denied.filter((record) => record.denial_basis?.startsWith('other:')).length,
    withdrawn: count('withdrawn'),
    open: count('open'),
    failed: count('failed'),
    late: responses.filter((record) => record.on_time === false).length,
    notice_missing: responses.filter((record) => record.response_date === null).length,
    median_days_to_respond: median(days),
    mean_days_to_respond:
      days.length === 0 ? null : roundDays(days.reduce((sum, day) => sum + day, 0) / days.length),
    date_problems: responses.filter((record) => record.date_problem !== null).length,
  };
}

function roundDays(days: number): number {
  return Math.round(days * 10) / 10;
}

function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  const value =
    sorted.length % 2 === 1 ? (sorted[middle] ?? 0) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
  return roundDays(value);
}

function toCsv(result: ReportResult, table: 'records' | 'metrics' | 'both'): string {
  const parts: string[] = [];
  if (table !== 'metrics') {
    parts.push(
      csvRow(RECORD_COLUMNS) +
        result.records.map((record) => csvRow(RECORD_COLUMNS.map((column) => record[column]))).join(''),
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
