/**
 * The columns of the CCPA section 7101 records as CSV, in their order: `svc-dsr report --format csv`
 * and the console's download write the same file. Plain data, so the console's bundle takes it alone.
 */
import type { ReportRecord } from './report.ts';

/** The records' columns of a one-site report. */
export const RECORD_COLUMNS = [
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
/** The records' columns with several sites: what each site came to, last, so a one-site report keeps its columns. */
export const SITES_RECORD_COLUMNS = [
  ...RECORD_COLUMNS,
  'sites',
] as const satisfies readonly (keyof ReportRecord)[];
