import { writeFile } from 'node:fs/promises';
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import type { Command } from 'commander';
import { z } from 'zod';
import { type LedgerItem, ledgerItemSchema } from '#shared/ledger';
import { rfc3339Instant } from '#shared/request';
import { type CliIo, type CommandResult, csvRow, processIo } from '../format.ts';
import { CliError, EXIT, parseOption } from '../io.ts';
import { addTargetOptions, type CliContext, type TargetFlags, withTarget } from '../target.ts';

/** Options of `svc-dsr report`. */
export interface ReportOptions {
  /** `csv` (default) or `json`. */
  readonly format?: string;
  /** Same as format `json`. */
  readonly json?: boolean;
  /** Requests received on or after this date (YYYY-MM-DD, UTC) or instant (RFC 3339). */
  readonly from?: string;
  /** Requests received on or before this date (the whole day) or instant. */
  readonly to?: string;
  /** Write here instead of stdout. */
  readonly out?: string;
  /** CSV only: `records`, `metrics` or `both` (two tables separated by a blank line). @default both */
  readonly table?: string;
}

/** Whether the business complied, denied, or has not answered yet (the CCPA section 7102 buckets). */
export type ResponseCategory = 'complied' | 'denied' | 'pending';

/** One request as CCPA regulations section 7101 asks a business to record it. No subject identifiers. */
export interface ReportRecord {
  readonly request_id: string;
  readonly regulation: string | null;
  /** Nature of the request. */
  readonly type: string | null;
  /** Date of the request: when the subject asked (for a rejected request, when it reached intake). */
  readonly received_at: string;
  /** Manner in which the request was made: the identity verification method recorded with it. */
  readonly verification_method: string | null;
  readonly status: string;
  /** Nature of the response: exported, erased, no_data, rejected, failed, cancelled or pending. */
  readonly response: string;
  readonly response_category: ResponseCategory;
  /** Date of the response: completed_at; for failed and cancelled requests, when that was recorded. */
  readonly response_date: string | null;
  /** Basis for the denial: the field errors, the failure, or the cancel reason. */
  readonly denial_basis: string | null;
  readonly due_at: string | null;
  readonly extended: boolean;
  /** Answered by the due date; null while pending. */
  readonly on_time: boolean | null;
  readonly reference: string | null;
}

/** CCPA section 7102 metrics for one regulation and request type. */
export interface ReportMetric {
  readonly regulation: string;
  readonly type: string;
  readonly received: number;
  /** Complied with in whole or in part: completed (exported, erased, or no data held). */
  readonly complied: number;
  /** Denied: rejected as invalid, failed and not retried, or cancelled. */
  readonly denied: number;
  readonly pending: number;
  /** Median of completed_at - received_at over the completed requests, in days (one decimal). */
  readonly median_days_to_respond: number | null;
}

/** What `report --format json` prints. */
export interface ReportResult {
  readonly generated_at: string;
  readonly from: string | null;
  readonly to: string | null;
  readonly records: ReportRecord[];
  readonly metrics: ReportMetric[];
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

const RECORD_COLUMNS = [
  'request_id',
  'regulation',
  'type',
  'received_at',
  'verification_method',
  'status',
  'response',
  'response_category',
  'response_date',
  'denial_basis',
  'due_at',
  'extended',
  'on_time',
  'reference',
] as const satisfies readonly (keyof ReportRecord)[];
const METRIC_COLUMNS = [
  'regulation',
  'type',
  'received',
  'complied',
  'denied',
  'pending',
  'median_days_to_respond',
] as const satisfies readonly (keyof ReportMetric)[];

/** Validated report options, checked before any connection is made. */
export function parseReportOptions(options: ReportOptions): {
  format: 'csv' | 'json';
  table: 'records' | 'metrics' | 'both';
  fromMs?: number;
  toMs?: number;
} {
  const format =
    options.json === true ? 'json' : parseOption('--format', formatSchema, options.format ?? 'csv');
  if (options.json === true && options.format !== undefined && options.format !== 'json') {
    throw new CliError('--json and --format csv contradict each other; pass one of them');
  }
  const table = parseOption('--table', tableSchema, options.table ?? 'both');
  if (format === 'json' && options.table !== undefined)
    throw new CliError('--table applies to CSV; JSON holds both');
  const fromMs =
    options.from === undefined ? undefined : Date.parse(parseOption('--from', dateOrInstant, options.from));
  // A bare date means the whole day: up to the start of the next one.
  const toMs =
    options.to === undefined
      ? undefined
      : /^\d{4}-\d{2}-\d{2}$/.test(options.to)
        ? Date.parse(parseOption('--to', dateOrInstant, options.to)) + DAY_MS - 1
        : Date.parse(parseOption('--to', dateOrInstant, options.to));
  if (fromMs !== undefined && toMs !== undefined && fromMs > toMs) throw new CliError('--from is after --to');
  return {
    format,
    table,
    ...(fromMs === undefined ? {} : { fromMs }),
    ...(toMs === undefined ? {} : { toMs }),
  };
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
  const { format, table, fromMs, toMs } = parseReportOptions(options);
  const quiet = format === 'json';
  const items: LedgerItem[] = [];
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
      const parsed = ledgerItemSchema.safeParse(raw);
      if (parsed.success) items.push(parsed.data);
      else skipped += 1;
    }
    cursor = page.LastEvaluatedKey;
    pages += 1;
    if (!quiet && cursor !== undefined && pages % 5 === 0)
      io.err(`report: read ${items.length + skipped} ledger items\n`);
  } while (cursor !== undefined);

  const records = items
    .map(toRecord)
    .filter((record) => {
      const at = rfc3339Instant(record.received_at)?.getTime() ?? Number.NaN;
      return (fromMs === undefined || at >= fromMs) && (toMs === undefined || at <= toMs);
    })
    .sort((a, b) => (a.received_at < b.received_at ? -1 : a.received_at > b.received_at ? 1 : 0));
  const metrics = computeMetrics(records);
  const result: ReportResult = {
    generated_at: context.clock().toISOString(),
    from: fromMs === undefined ? null : new Date(fromMs).toISOString(),
    to: toMs === undefined ? null : new Date(toMs).toISOString(),
    records,
    metrics,
    skipped,
  };

  const text = format === 'json' ? `${JSON.stringify(result, null, 2)}\n` : toCsv(result, table);
  if (options.out === undefined) io.out(text);
  else {
    await writeFile(options.out, text);
    if (!quiet)
      io.err(`wrote ${options.out}: ${records.length} request(s), ${metrics.length} metric row(s)\n`);
  }
  if (skipped > 0 && !quiet) {
    io.err(`warning: ${skipped} ledger item(s) did not match the ledger schema and are not in the report\n`);
  }
  return { exitCode: EXIT.ok, result };
}

/** The 7101 record of one ledger item. */
export function toRecord(item: LedgerItem): ReportRecord {
  const { response, category } = responseOf(item);
  const responseDate =
    item.completed_at ?? (item.status === 'failed' || item.status === 'cancelled' ? item.updated_at : null);
  return {
    request_id: item.request_id,
    regulation: item.regulation ?? null,
    type: item.type ?? null,
    received_at: item.received_at ?? item.created_at,
    verification_method: item.verification?.method ?? null,
    status: item.status,
    response,
    response_category: category,
    response_date: responseDate,
    denial_basis: denialBasis(item),
    due_at: item.due_at ?? null,
    extended: item.extended,
    on_time:
      category === 'pending' || responseDate === null || item.due_at === undefined
        ? null
        : responseDate <= item.due_at,
    reference: item.reference ?? null,
  };
}

function responseOf(item: LedgerItem): { response: string; category: ResponseCategory } {
  switch (item.status) {
    case 'completed':
      return { response: item.outcome ?? 'completed', category: 'complied' };
    case 'received':
    case 'running':
      return { response: 'pending', category: 'pending' };
    default:
      return { response: item.status, category: 'denied' };
  }
}

function denialBasis(item: LedgerItem): string | null {
  switch (item.status) {
    case 'rejected':
      return `invalid request: ${(item.rejection_errors ?? []).join('; ')}`;
    case 'failed':
      return item.error ? `not fulfilled: ${item.error.code}: ${item.error.message}` : 'not fulfilled';
    case 'cancelled':
      return `cancelled: ${item.cancel_reason ?? 'no reason recorded'}`;
    case 'denied':
      return `denied: ${item.denial?.code ?? 'no code recorded'}`;
    default:
      return null;
  }
}

/** Section 7102 metrics per regulation and type, plus an `all`/`all` row. */
export function computeMetrics(records: readonly ReportRecord[]): ReportMetric[] {
  const groups = new Map<string, ReportRecord[]>();
  for (const record of records) {
    const key = `${record.regulation ?? 'unknown'}\u0000${record.type ?? 'unknown'}`;
    groups.set(key, [...(groups.get(key) ?? []), record]);
  }
  const rows = [...groups.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, group]) => {
      const [regulation = 'unknown', type = 'unknown'] = key.split('\u0000');
      return metric(regulation, type, group);
    });
  if (records.length > 0) rows.push(metric('all', 'all', records));
  return rows;
}

function metric(regulation: string, type: string, records: readonly ReportRecord[]): ReportMetric {
  const days: number[] = [];
  for (const record of records) {
    if (record.response_category !== 'complied' || record.response_date === null) continue;
    const receivedAt = rfc3339Instant(record.received_at)?.getTime() ?? Number.NaN;
    days.push((Date.parse(record.response_date) - receivedAt) / DAY_MS);
  }
  return {
    regulation,
    type,
    received: records.length,
    complied: records.filter((record) => record.response_category === 'complied').length,
    denied: records.filter((record) => record.response_category === 'denied').length,
    pending: records.filter((record) => record.response_category === 'pending').length,
    median_days_to_respond: median(days),
  };
}

function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  const value =
    sorted.length % 2 === 1 ? (sorted[middle] ?? 0) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
  return Math.round(value * 10) / 10;
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

interface ReportFlags extends TargetFlags {
  readonly format?: string;
  readonly json?: boolean;
  readonly from?: string;
  readonly to?: string;
  readonly out?: string;
  readonly table?: string;
}

/** Registers `svc-dsr report`. */
export function registerReportCommand(program: Command): void {
  const command = program
    .command('report')
    .description('CCPA record keeping: the section 7101 record of every request and the section 7102 metrics')
    .option('--format <format>', 'csv or json', 'csv')
    .option('--json', 'same as --format json')
    .option('--from <date>', 'requests received on or after this date (YYYY-MM-DD, UTC) or instant')
    .option('--to <date>', 'requests received on or before this date (the whole day) or instant')
    .option('--table <table>', 'CSV only: records, metrics or both (two tables, a blank line between)')
    .option('--out <file>', 'write the report to this file instead of stdout');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
Records (7101): date of request (received_at), nature (type), manner (verification_method), date and
nature of the response (response_date, response), basis for a denial (denial_basis). No subject
identifiers appear. Metrics (7102) per regulation and type: received, complied (completed: exported,
erased or no data held), denied (rejected + failed + cancelled: a failed request counts as denied
until it is retried and completes), pending, and the median days from receipt to completion.

Exit codes: 0 written, 1 the ledger could not be read, 2 invalid flags.

Examples:
  $ npx svc-dsr report --from 2026-01-01 --to 2026-12-31 --out ccpa-2026.csv
  $ npx svc-dsr report --json --target aws --stack-outputs outputs.json
  $ npx svc-dsr report --table metrics`,
    )
    .action(async (flags: ReportFlags, cmd: Command) => {
      const formatGiven = cmd.getOptionValueSource('format') === 'cli';
      const options: ReportOptions = {
        ...(formatGiven && flags.format !== undefined ? { format: flags.format } : {}),
        json: flags.json === true,
        ...(flags.from === undefined ? {} : { from: flags.from }),
        ...(flags.to === undefined ? {} : { to: flags.to }),
        ...(flags.out === undefined ? {} : { out: flags.out }),
        ...(flags.table === undefined ? {} : { table: flags.table }),
      };
      parseReportOptions(options);
      const { exitCode } = await withTarget(flags, (context) => runReport(context, options, processIo));
      process.exitCode = exitCode;
    });
}
