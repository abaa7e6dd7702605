// The deadline sweep: open requests overdue or due soon, and late CCPA receipt notices, as metrics.
import { type Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { addBusinessDays, endOfLocalDay, localDateOf } from '#shared/deadlines';
import { answerNoticeState, type Ledger, noticesDue, OWED_STATUSES } from '#shared/ledger';
import { HEARTBEAT_METRICS } from '#shared/metrics';

/**
 * Statuses of requests that still owe the subject an answer: `failed` too, since a failure of
 * ours does not stop the statutory clock.
 */
export const OPEN_STATUSES = OWED_STATUSES;

const DAY_MS = 24 * 3600 * 1000;
/** How many overdue request ids a sweep reports by name; the count is always complete. */
const MAX_LISTED = 50;

/**
 * A CCPA receipt confirmation is due 10 business days after receipt, at the end of that local day:
 * never sooner than 12 days after it. A request received more recently than this (a day's margin
 * for time zones) cannot be late with its receipt yet.
 */
const RECEIPT_EARLIEST_LATE_DAYS = 11;
/**
 * Every open CCPA request received before that is due within this many days: its due date is at
 * most its extension limit, 90 days after receipt. The receipt pass reads no further.
 */
const RECEIPT_DUE_HORIZON_DAYS = 80;
/**
 * A CCPA receipt confirmation due within this many business days is counted as due soon, so its
 * alarm fires while there is still time to send it.
 */
export const RECEIPT_WARNING_BUSINESS_DAYS = 3;
/**
 * A confirmation due within the warning is for a request received at least 10 - 3 business days
 * ago, so at least 7 calendar days ago; a day less for time zones. Younger ones are not read.
 */
const RECEIPT_EARLIEST_WARNING_DAYS = 10 - RECEIPT_WARNING_BUSINESS_DAYS - 1;

/**
 * How far back the sweep reads ended requests for their response or denial notice. A notice is due
 * at most 92 days after receipt (a GDPR request extended to three months), so at most 92 days after
 * its request ended: every notice due soon, or overdue by up to four weeks, is read. One overdue
 * longer has been alarmed on for those four weeks; `svc-dsr list --notice-overdue` lists it still.
 */
export const NOTICE_LOOKBACK_DAYS = 120;
/** Ended requests read in full at once for their notice. */
const NOTICE_READS_AT_ONCE = 8;

/**
 * What the sweep reads: the ledger's open index, every shard, the full item of the few open CCPA
 * requests whose receipt confirmation may be late (the index does not carry `confirm_by` or the
 * notices), and the requests that ended within NOTICE_LOOKBACK_DAYS (the ended index), each in
 * full, for their response or denial notice.
 */
export interface DeadlineSweepDeps {
  readonly ledger: Pick<Ledger, 'openRequests' | 'get' | 'endedSince'>;
  readonly clock: () => Date;
}

export interface DeadlineSweepOptions {
  /** A request due within this many days from now counts as due soon. */
  readonly dueSoonDays: number;
  /** Items per index page of each shard. @default 100 */
  readonly pageSize?: number;
  /** The zone whose business days the receipt warning counts. @default UTC */
  readonly timeZone?: string;
}

/** The open requests by deadline, at `checked_at`. */
export interface DeadlineCounts {
  readonly checked_at: string;
  /** Open requests whose due date has passed. */
  readonly overdue: number;
  /** Open requests due from now until `due_soon_before`. */
  readonly due_soon: number;
  readonly due_soon_before: string;
  readonly by_status: Readonly<Record<(typeof OPEN_STATUSES)[number], { overdue: number; due_soon: number }>>;
  /** The earliest due date among overdue requests. */
  readonly oldest_overdue_due_at?: string;
  /** Up to 50 overdue request ids, most overdue first (request ids identify no one). */
  readonly overdue_request_ids: readonly string[];
  /**
   * Open CCPA requests whose receipt confirmation (section 7021) is not recorded and whose
   * confirm-by date has passed.
   */
  readonly receipts_overdue: number;
  /** Up to 50 of them, the longest overdue first. */
  readonly receipts_overdue_request_ids: readonly string[];
  /**
   * Open CCPA requests whose receipt confirmation is not recorded and is due by the end of the
   * RECEIPT_WARNING_BUSINESS_DAYS-th business day from now (`receipts_due_before`), not yet late.
   */
  readonly receipts_due_soon: number;
  readonly receipts_due_before: string;
  /** Up to 50 of them, the soonest due first. */
  readonly receipts_due_soon_request_ids: readonly string[];
  /**
   * Completed or denied requests whose response or denial notice is not recorded and is past its
   * due date (a GDPR denial: one month after receipt, extension or not).
   */
  readonly notices_overdue: number;
  /** Up to 50 of them, the longest overdue first. */
  readonly notices_overdue_request_ids: readonly string[];
  /** Those whose notice is not recorded and is due before `due_soon_before`, not yet late. */
  readonly notices_due_soon: number;
  /** Up to 50 of them, the soonest due first. */
  readonly notices_due_soon_request_ids: readonly string[];
}

/**
 * Counts open requests that are overdue or due soon, reading only the part of the open index that
 * is due before the horizon, page by page on every shard, so the cost grows with the requests at
 * risk rather than with the ledger. Then counts the open CCPA requests whose receipt confirmation
 * is late, from the open requests due within RECEIPT_DUE_HORIZON_DAYS (every open request, in
 * practice) and the full items of the CCPA ones received long enough ago.
 */
export async function sweepDeadlines(
  deps: DeadlineSweepDeps,
  options: DeadlineSweepOptions,
): Promise<DeadlineCounts> {
  if (!Number.isFinite(options.dueSoonDays) || options.dueSoonDays <= 0) {
    throw new RangeError('dueSoonDays must be a positive number');
  }
  const now = deps.clock();
  const horizon = new Date(now.getTime() + options.dueSoonDays * DAY_MS).toISOString();
  const byStatus = {
    received: { overdue: 0, due_soon: 0 },
    running: { overdue: 0, due_soon: 0 },
    failed: { overdue: 0, due_soon: 0 },
  };
  const overdue: { requestId: string; dueAt: number }[] = [];
  let dueSoon = 0;

  for (const status of OPEN_STATUSES) {
    const open = deps.ledger.openRequests(status, { dueBefore: horizon, pageSize: options.pageSize ?? 100 });
    for await (const item of open) {
      const dueAt = item.due_at === undefined ? Number.NaN : Date.parse(item.due_at);
      if (Number.isNaN(dueAt)) continue;
      if (dueAt < now.getTime()) {
        byStatus[status].overdue += 1;
        overdue.push({ requestId: item.request_id, dueAt });
      } else {
        byStatus[status].due_soon += 1;
        dueSoon += 1;
      }
    }
  }

  overdue.sort((a, b) => a.dueAt - b.dueAt);
  const oldest = overdue[0];
  const receipts = await receiptsAtRisk(deps, now, options.pageSize ?? 100, options.timeZone ?? 'UTC');
  const notices = await answerNoticesAtRisk(deps, now, horizon, options);
  return {
    checked_at: now.toISOString(),
    overdue: overdue.length,
    due_soon: dueSoon,
    due_soon_before: horizon,
    by_status: byStatus,
    ...(oldest === undefined ? {} : { oldest_overdue_due_at: new Date(oldest.dueAt).toISOString() }),
    overdue_request_ids: overdue.slice(0, MAX_LISTED).map((entry) => entry.requestId),
    receipts_overdue: receipts.late.length,
    receipts_overdue_request_ids: receipts.late.slice(0, MAX_LISTED).map((entry) => entry.requestId),
    receipts_due_soon: receipts.dueSoon.length,
    receipts_due_before: receipts.dueBefore,
    receipts_due_soon_request_ids: receipts.dueSoon.slice(0, MAX_LISTED).map((entry) => entry.requestId),
    notices_overdue: notices.late.length,
    notices_overdue_request_ids: notices.late.slice(0, MAX_LISTED).map((entry) => entry.requestId),
    notices_due_soon: notices.dueSoon.length,
    notices_due_soon_request_ids: notices.dueSoon.slice(0, MAX_LISTED).map((entry) => entry.requestId),
  };
}

/**
 * The completed and denied requests, ended within NOTICE_LOOKBACK_DAYS, whose response or denial
 * notice is not recorded: past its due date (the longest overdue first), or due before `horizon`
 * (the soonest first). Read from the ended index, each request in full.
 */
async function answerNoticesAtRisk(
  deps: DeadlineSweepDeps,
  now: Date,
  horizon: string,
  options: DeadlineSweepOptions,
): Promise<{ late: NoticeDue[]; dueSoon: NoticeDue[] }> {
  const since = new Date(now.getTime() - NOTICE_LOOKBACK_DAYS * DAY_MS).toISOString();
  const horizonMs = Date.parse(horizon);
  const late: NoticeDue[] = [];
  const dueSoon: NoticeDue[] = [];
  const judge = async (requestId: string) => {
    const item = await deps.ledger.get(requestId);
    const notice = item === undefined ? undefined : answerNoticeState(item, now, options.timeZone);
    if (notice === undefined || notice.state === 'given' || notice.due_by === null) return;
    const dueBy = Date.parse(notice.due_by);
    if (notice.state === 'overdue') late.push({ requestId, dueBy });
    else if (dueBy < horizonMs) dueSoon.push({ requestId, dueBy });
  };
  // The ended index carries no notices: each request is read in full, a few at once.
  let batch: string[] = [];
  for await (const { request_id } of deps.ledger.endedSince(since, { pageSize: options.pageSize ?? 100 })) {
    batch.push(request_id);
    if (batch.length < NOTICE_READS_AT_ONCE) continue;
    await Promise.all(batch.map(judge));
    batch = [];
  }
  await Promise.all(batch.map(judge));
  const byDate = (a: NoticeDue, b: NoticeDue) => a.dueBy - b.dueBy;
  return { late: late.sort(byDate), dueSoon: dueSoon.sort(byDate) };
}

interface NoticeDue {
  readonly requestId: string;
  readonly dueBy: number;
}

/**
 * The open CCPA requests whose receipt confirmation is not recorded and is past its confirm-by
 * date (the longest overdue first), or due within RECEIPT_WARNING_BUSINESS_DAYS (the soonest
 * first): only requests received long enough ago to be either are read in full.
 */
async function receiptsAtRisk(
  deps: DeadlineSweepDeps,
  now: Date,
  pageSize: number,
  timeZone: string,
): Promise<{ late: ReceiptDue[]; dueSoon: ReceiptDue[]; dueBefore: string }> {
  const receivedBefore =
    now.getTime() - Math.min(RECEIPT_EARLIEST_LATE_DAYS, RECEIPT_EARLIEST_WARNING_DAYS) * DAY_MS;
  const warnBefore = endOfLocalDay(
    addBusinessDays(localDateOf(now, timeZone), RECEIPT_WARNING_BUSINESS_DAYS),
    timeZone,
  ).getTime();
  const dueBefore = new Date(now.getTime() + RECEIPT_DUE_HORIZON_DAYS * DAY_MS).toISOString();
  const late: ReceiptDue[] = [];
  const dueSoon: ReceiptDue[] = [];
  for (const status of OPEN_STATUSES) {
    for await (const entry of deps.ledger.openRequests(status, { dueBefore, pageSize })) {
      if (entry.regulation !== 'ccpa') continue;
      // An unreadable receipt date is checked in full rather than skipped.
      if (Date.parse(entry.received_at ?? '') >= receivedBefore) continue;
      const item = await deps.ledger.get(entry.request_id);
      const receipt =
        item === undefined ? undefined : noticesDue(item, now).find((due) => due.kind === 'receipt');
      if (receipt === undefined || receipt.due_by === null) continue;
      const confirmBy = Date.parse(receipt.due_by);
      if (receipt.overdue) late.push({ requestId: entry.request_id, confirmBy });
      else if (confirmBy <= warnBefore) dueSoon.push({ requestId: entry.request_id, confirmBy });
    }
  }
  const byDate = (a: ReceiptDue, b: ReceiptDue) => a.confirmBy - b.confirmBy;
  return {
    late: late.sort(byDate),
    dueSoon: dueSoon.sort(byDate),
    dueBefore: new Date(warnBefore).toISOString(),
  };
}

interface ReceiptDue {
  readonly requestId: string;
  readonly confirmBy: number;
}

/** Metric names the sweep publishes; the stack's overdue alarm watches OverdueRequests. */
export const DEADLINE_METRICS = {
  overdue: 'OverdueRequests',
  dueSoon: 'DueSoonRequests',
  /** Open CCPA requests whose receipt confirmation is past its confirm-by date; its own alarm watches it. */
  receiptsOverdue: 'ReceiptConfirmationsOverdue',
  /** Open CCPA requests whose receipt confirmation is due within RECEIPT_WARNING_BUSINESS_DAYS: alarmed before the date. */
  receiptsDueSoon: 'ReceiptConfirmationsDueSoon',
  /** Completed or denied requests whose response or denial notice is past its date, not recorded. */
  noticesOverdue: 'ResponseNoticesOverdue',
  /** Those whose notice is due within the due-soon window: alarmed before the date. */
  noticesDueSoon: 'ResponseNoticesDueSoon',
} as const;

/**
 * Publishes the six counts and the sweep's heartbeat through Powertools Metrics, stamped with the
 * sweep's time (a pass that fails or times out publishes nothing, and the heartbeat's alarm reads
 * the silence): one
 * Embedded Metric Format line, which CloudWatch Logs turns into metrics with no SDK call and no
 * IAM permission.
 */
export function publishDeadlineMetrics(metrics: Metrics, counts: DeadlineCounts): void {
  metrics.setTimestamp(new Date(counts.checked_at));
  metrics.addMetric(DEADLINE_METRICS.overdue, MetricUnit.Count, counts.overdue);
  metrics.addMetric(DEADLINE_METRICS.dueSoon, MetricUnit.Count, counts.due_soon);
  metrics.addMetric(DEADLINE_METRICS.receiptsOverdue, MetricUnit.Count, counts.receipts_overdue);
  metrics.addMetric(DEADLINE_METRICS.receiptsDueSoon, MetricUnit.Count, counts.receipts_due_soon);
  metrics.addMetric(DEADLINE_METRICS.noticesOverdue, MetricUnit.Count, counts.notices_overdue);
  metrics.addMetric(DEADLINE_METRICS.noticesDueSoon, MetricUnit.Count, counts.notices_due_soon);
  metrics.addMetric(HEARTBEAT_METRICS.deadlineSweep, MetricUnit.Count, 1);
  metrics.publishStoredMetrics();
}
