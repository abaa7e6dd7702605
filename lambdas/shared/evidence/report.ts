// The CCPA section 7101 records and section 7102 metrics, each request checked against its audit records before a figure of it is given: `svc-dsr report` and the API's report.
import { setTimeout as delay } from 'node:timers/promises';
import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { type DynamoDBDocumentClient, GetCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { z } from 'zod';
import { type AuditRecord, auditRecordKey, checkStoredRecord, parseChainId } from '#shared/audit';
import { DEFAULT_TIME_ZONE } from '#shared/deadlines';
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
import { siteSummary } from '#shared/site-outcomes';
import { bucketChains, checkAgainstRecords, type VerifyAllCheck, verifierTrail } from './chains.ts';
import { EvidenceUnreadableError } from './errors.ts';
import { lastRecordOf } from './ledger-facts.ts';

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
  /**
   * A request over several sites: what each came to, in a line ("exported on 1 (news); no data
   * on 1 (forum)"); null for a request of one site. The request is still one row and one count.
   */
  readonly sites: string | null;
  /** The same by site id: the site's outcome once its part completed, else its status. */
  readonly site_outcomes: Readonly<Record<string, string>> | null;
}

/**
 * One site's share of the requests in the report, for the breakdown by site: the requests that
 * covered it and what its part came to. A request over three sites is in three rows here and
 * once in the metrics.
 */
export interface ReportSiteRow {
  readonly site: string;
  readonly requests: number;
  readonly exported: number;
  readonly erased: number;
  readonly corrected: number;
  readonly no_data: number;
  readonly failed: number;
  /** Not ended yet, or ended by the request as a whole (cancelled, denied) before the site's part did. */
  readonly other: number;
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

/**
 * A request left out of the report because its audit records do not back what the ledger says
 * (docs/audit.md, "Which record locks each ledger field"): every finding, as `verify` names it.
 */
export interface RefusedRequest {
  readonly request_id: string;
  readonly findings: readonly { readonly check: VerifyAllCheck; readonly detail: string }[];
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
  /** The breakdown by site of the requests over several sites (`--table sites`); empty with one site. */
  readonly sites: ReportSiteRow[];
  /**
   * Messages rejected as invalid at intake in the range: not consumer requests, so in no metric.
   * They carry no valid regulation, so `--regulation` does not narrow this count.
   */
  readonly intake_errors: number;
  /** Ledger items that did not match the ledger schema and were left out. */
  readonly skipped: number;
  /**
   * Requests checked against their audit records: every one the ledger puts in the range, and any
   * the records put there (received in the range by its intake record, whatever the ledger says).
   */
  readonly checked: number;
  /**
   * Requests left out of the records and the metrics because their records contradict the ledger,
   * or do not back it (no chain, a broken one, no ledger item for a chain received in the range).
   */
  readonly refused: RefusedRequest[];
}

const DAY_MS = 24 * 3600 * 1000;
/**
 * Requests whose chains are read at once. Each reads two chains (its own and its notices), every
 * record of a chain at once: 8 stays under the SDK's 50 sockets at the chain lengths the workflow
 * writes (docs/audit.md, "What report reads").
 */
const CHECK_CONCURRENCY = 8;
/**
 * The pauses before each new look at a request the records did not back: a step writes its
 * record and its ledger fields moments apart, so a request caught between them agrees on the next
 * look, and an edit never does.
 */
export const RECHECK_AFTER_MS: readonly number[] = [500, 2000];
/** Progress on stderr every this many requests checked. */
const PROGRESS_EVERY = 1000;
/** Checks that say nothing against a figure: a writer that died between a record and its ledger head. */
const NOT_AGAINST_A_FIGURE: ReadonlySet<VerifyAllCheck> = new Set(['head_behind']);
/** The key of a ledger item, read even from one the ledger schema refuses. */
const namedItemSchema = z.looseObject({ request_id: z.string() });

/** Which requests a report covers, and how. */
export interface ReportRange {
  /** Requests received at or after this instant. */
  readonly fromMs?: number;
  /** Requests received at or before this instant. */
  readonly toMs?: number;
  /** Only requests under this regulation. */
  readonly regulation?: 'gdpr' | 'ccpa';
  /** The IANA time zone days are counted in. */
  readonly timeZone: string;
  /**
   * How long to wait before each new look at a request its records did not back, reading its ledger
   * item and its chains again: a request whose workflow was writing at that moment (its record
   * written, its ledger not yet) is then backed. @default RECHECK_AFTER_MS
   */
  readonly recheckAfterMs?: readonly number[];
  /** Told how far the report has come, on a long one. */
  readonly progress?: ((text: string) => void) | undefined;
  /** Ends the report with the signal's reason between two reads, once aborted (a caller out of time). */
  readonly signal?: AbortSignal;
}

/** What a report reads: the ledger and the audit bucket. */
export interface ReportContext {
  readonly dynamo: DynamoDBDocumentClient;
  readonly s3: S3Client;
  readonly names: { readonly AuditBucketName: string; readonly LedgerTableName: string };
  readonly clock: () => Date;
}

/**
 * Reads every ledger item (Scan, paginated), checks each request received in [from, to] against its
 * audit records (its own chain and its notices chain), and gives the CCPA section 7101 records and
 * section 7102 metrics of those the records back. A request the records contradict is left out and
 * named in `refused`; an item the ledger schema refuses is counted in `skipped`.
 */
export async function buildReport(context: ReportContext, range: ReportRange): Promise<ReportResult> {
  const { fromMs, toMs, regulation, timeZone } = range;
  const now = context.clock();
  const items: LedgerItem[] = [];
  // Every request id the ledger holds, readable or not: a chain without one is a deleted item.
  const known = new Set<string>();
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
      const named = namedItemSchema.safeParse(raw);
      if (named.success) known.add(named.data.request_id);
      const item = ledgerItemSchema.safeParse(raw);
      // §7102 counts requests, not systems: a site's part is counted with its request. Its chain
      // is known all the same.
      if (item.success) {
        if (item.data.parent_request_id === undefined) items.push(item.data);
      } else skipped += 1;
    }
    cursor = page.LastEvaluatedKey;
    pages += 1;
    range.signal?.throwIfAborted();
    if (range.progress !== undefined && cursor !== undefined && pages % 5 === 0)
      range.progress(`report: read ${items.length + skipped} ledger items\n`);
  } while (cursor !== undefined);

  const inRangeAt = (at: string | undefined) => {
    const ms = at === undefined ? Number.NaN : (rfc3339Instant(at)?.getTime() ?? Number.NaN);
    return (fromMs === undefined || ms >= fromMs) && (toMs === undefined || ms <= toMs);
  };
  const evidence = await checkEvidence(context, items, known, {
    inRange: inRangeAt,
    recheckAfterMs: range.recheckAfterMs ?? RECHECK_AFTER_MS,
    ...(regulation === undefined ? {} : { regulation }),
    progress: range.progress,
    ...(range.signal === undefined ? {} : { signal: range.signal }),
  });
  const records = evidence.backed.map(({ item, receivedAt }) =>
    toRecord(item, now, item.denial?.code, timeZone, receivedAt),
  );

  const inRange = records
    .filter((record) => inRangeAt(record.received_at))
    .sort((a, b) =>
      a.received_at !== b.received_at
        ? a.received_at < b.received_at
          ? -1
          : 1
        : a.request_id < b.request_id
          ? -1
          : a.request_id > b.request_id
            ? 1
            : 0,
    );
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
    sites: computeSiteRows(selected),
    intake_errors: intakeErrors,
    skipped,
    checked: evidence.checked,
    refused: evidence.refused,
  };
  return result;
}

/** A ledger item its records back, and when it was received as they lock it. */
interface BackedItem {
  readonly item: LedgerItem;
  /** The intake record's `received_at`; for a message rejected at intake, that record's own time. */
  readonly receivedAt: string | undefined;
}

/**
 * Sorts the ledger's requests into those the report may print and those it refuses, reading the
 * audit bucket: every request the ledger puts in the range is checked against its own chain and
 * its notices chain (checkAgainstRecords, as `verify` does, without the manifests); every other
 * request, and every chain in the bucket without a ledger item, has its first record read, so a
 * request the records put in the range is checked too, and a ledger edit cannot move one out of
 * the report, nor a deleted ledger item drop one.
 */
async function checkEvidence(
  context: ReportContext,
  items: readonly LedgerItem[],
  known: ReadonlySet<string>,
  options: {
    readonly inRange: (at: string | undefined) => boolean;
    /** `--regulation`: a request neither its ledger nor its records put under it is no concern of the report. */
    readonly regulation?: string;
    readonly recheckAfterMs: readonly number[];
    readonly progress: ((text: string) => void) | undefined;
    readonly signal?: AbortSignal;
  },
): Promise<{ backed: BackedItem[]; refused: RefusedRequest[]; checked: number }> {
  const bucket = context.names.AuditBucketName;
  const reading = async <T>(work: () => Promise<T>): Promise<T> =>
    work().catch((error: unknown) => {
      throw new EvidenceUnreadableError(
        `cannot read the audit records in bucket ${bucket} (${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}): the report checks every request against them`,
      );
    });
  const trail = verifierTrail(context);
  const refused: RefusedRequest[] = [];
  const candidates = items.filter((item) => options.inRange(item.received_at ?? item.created_at));
  const chosen = new Set(candidates.map((item) => item.request_id));
  const byId = new Map(items.map((item) => [item.request_id, item]));
  const orphans = (await reading(() => bucketChains(context.s3, bucket))).filter(
    (chainId) => parseChainId(chainId).side === undefined && !known.has(chainId),
  );
  const others = items.filter((item) => !chosen.has(item.request_id)).map((item) => item.request_id);
  await eachAtMost(options.signal, CHECK_CONCURRENCY, [...others, ...orphans], async (requestId) => {
    const first = await reading(() => firstRecord(context, requestId));
    const item = byId.get(requestId);
    if (first.kind === 'missing') return;
    if (first.kind === 'broken') {
      refused.push({
        request_id: requestId,
        findings: [
          {
            check: item === undefined ? 'ledger_missing' : 'chain_broken',
            detail: `record 0 ${first.problem}, so the records cannot say when the request was received${item === undefined ? ', and the ledger has no such request' : ''}`,
          },
        ],
      });
      return;
    }
    const receivedAt = lockedReceipt([first.record]);
    if (!options.inRange(receivedAt)) return;
    if (item !== undefined) candidates.push(item);
    else if (!concerns(options.regulation, undefined, [first.record])) return;
    else {
      refused.push({
        request_id: requestId,
        findings: [
          {
            check: 'ledger_missing',
            detail: `the bucket holds the chain audit/${requestId}/ of a request received at ${receivedAt}, but the ledger has no such request`,
          },
        ],
      });
    }
  });
  const backed: BackedItem[] = [];
  const check = async (item: LedgerItem) => {
    const { findings, own } = await reading(() => checkAgainstRecords(trail, item, { sides: ['notices'] }));
    const against = findings.filter((finding) => !NOT_AGAINST_A_FIGURE.has(finding.check));
    return { concerned: concerns(options.regulation, item, own), against, own };
  };
  let checked = 0;
  let unbacked: { item: LedgerItem; refusal: RefusedRequest }[] = [];
  await eachAtMost(options.signal, CHECK_CONCURRENCY, candidates, async (item) => {
    const { concerned, against, own } = await check(item);
    if (!concerned) return;
    if (against.length > 0)
      unbacked.push({ item, refusal: { request_id: item.request_id, findings: against } });
    else backed.push({ item, receivedAt: lockedReceipt(own) });
    checked += 1;
    if (options.progress !== undefined && checked % PROGRESS_EVERY === 0 && checked < candidates.length)
      options.progress(
        `report: checked ${checked} of ${candidates.length} requests against their audit records\n`,
      );
  });
  // Another look, with the ledger item read again, at each request the records did not back.
  for (const pause of options.recheckAfterMs) {
    if (unbacked.length === 0) break;
    await delay(pause);
    const still: typeof unbacked = [];
    await eachAtMost(options.signal, CHECK_CONCURRENCY, unbacked, async (entry) => {
      const again = await readItem(context, entry.item.request_id);
      if (again === undefined) {
        still.push(entry);
        return;
      }
      const { concerned, against, own } = await check(again);
      if (!concerned) return;
      if (against.length > 0)
        still.push({ item: again, refusal: { request_id: again.request_id, findings: against } });
      else backed.push({ item: again, receivedAt: lockedReceipt(own) });
    });
    unbacked = still;
  }
  refused.push(...unbacked.map((entry) => entry.refusal));
  refused.sort((a, b) => (a.request_id < b.request_id ? -1 : a.request_id > b.request_id ? 1 : 0));
  return { backed, refused, checked };
}

/**
 * Whether a request is the report's concern under `--regulation`: always without one; else when its
 * ledger item or its intake record puts it under that regulation, or it is an intake error (no
 * regulation, counted apart whatever the flag). A request whose ledger and records both name
 * another regulation prints no figure here, checked or not.
 */
function concerns(
  regulation: string | undefined,
  item: LedgerItem | undefined,
  chain: readonly AuditRecord[],
): boolean {
  if (regulation === undefined) return true;
  const locked = lastRecordOf(chain, 'request_received')?.facts.regulation;
  if (item === undefined) return locked === regulation || chain[0]?.action === 'request_rejected';
  return item.regulation === undefined || item.regulation === regulation || locked === regulation;
}

/**
 * When the records say the request was received: the intake record's `received_at`, or for a
 * message rejected at intake (no such record) the time its first record was written.
 */
function lockedReceipt(chain: readonly AuditRecord[]): string | undefined {
  const receivedAt = lastRecordOf(chain, 'request_received')?.facts.received_at;
  return typeof receivedAt === 'string' ? receivedAt : chain[0]?.at;
}

/** The ledger item as it is now (a consistent read), or undefined when it is gone or unreadable. */
async function readItem(context: ReportContext, requestId: string): Promise<LedgerItem | undefined> {
  const answer = await context.dynamo.send(
    new GetCommand({
      TableName: context.names.LedgerTableName,
      Key: { request_id: requestId },
      ConsistentRead: true,
    }),
  );
  const item = ledgerItemSchema.safeParse(answer.Item);
  return item.success ? item.data : undefined;
}

/** The first record of a request's chain, checked against its key and its own hash. */
async function firstRecord(
  context: ReportContext,
  requestId: string,
): Promise<
  { kind: 'missing' } | { kind: 'broken'; problem: string } | { kind: 'record'; record: AuditRecord }
> {
  const key = auditRecordKey(requestId, 0);
  try {
    const answer = await context.s3.send(
      new GetObjectCommand({ Bucket: context.names.AuditBucketName, Key: key }),
    );
    const checked = checkStoredRecord(key, (await answer.Body?.transformToString('utf-8')) ?? '');
    return checked.ok
      ? { kind: 'record', record: checked.record }
      : { kind: 'broken', problem: checked.problem };
  } catch (error) {
    if (error instanceof Error && error.name === 'NoSuchKey') return { kind: 'missing' };
    throw error;
  }
}

/**
 * Runs `work` on every item, at most `limit` at once; the first failure is thrown once all have run.
 * Once `signal` aborts, no item is begun and its reason is thrown when those under way end.
 */
async function eachAtMost<T>(
  signal: AbortSignal | undefined,
  limit: number,
  items: readonly T[],
  work: (item: T) => Promise<void>,
) {
  let next = 0;
  const failures: unknown[] = [];
  const worker = async () => {
    while (next < items.length && signal?.aborted !== true) {
      const item = items[next] as T;
      next += 1;
      await work(item).catch((error: unknown) => failures.push(error));
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  signal?.throwIfAborted();
  if (failures.length > 0) throw failures[0];
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
 * `lockedReceivedAt` dates a message rejected at intake, which has no `received_at`: its record's time.
 */
export function toRecord(
  item: LedgerItem,
  now: Date,
  denialCode?: string,
  timeZone: string = DEFAULT_TIME_ZONE,
  lockedReceivedAt?: string,
): ReportRecord {
  const category = categoryOf(item.status);
  // A message rejected at intake has no receipt of its own: the time its record locked, else the item's creation.
  const receivedAt = item.received_at ?? lockedReceivedAt ?? item.created_at;
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
    // Dates that cannot both be true prove nothing about the deadline: never on time, nor late.
    on_time: date_problem === null ? onTime(category, responseDate, dueMs, now) : null,
    notice_recorded_late:
      notice === undefined || Number.isNaN(dueMs)
        ? null
        : Date.parse(notice.at) <= dueMs && Date.parse(notice.recorded_at) > dueMs,
    date_problem,
    reference: item.reference ?? null,
    ...siteColumns(item),
  };
}

/** The sites' columns of a request's record: what each site came to, none for one site. */
function siteColumns(item: LedgerItem): Pick<ReportRecord, 'sites' | 'site_outcomes'> {
  if (item.sites === undefined) return { sites: null, site_outcomes: null };
  const results = item.site_results ?? {};
  return {
    sites: siteSummary(item.sites, results),
    site_outcomes: Object.fromEntries(
      item.sites.map((site) => {
        const result = results[site];
        return [
          site,
          result === undefined
            ? 'open'
            : result.status === 'completed'
              ? (result.outcome ?? 'completed')
              : result.status,
        ];
      }),
    ),
  };
}

/** The breakdown by site: each site's requests and what its part came to, sites in the order first met. */
export function computeSiteRows(records: readonly ReportRecord[]): ReportSiteRow[] {
  const rows = new Map<string, { -readonly [K in keyof ReportSiteRow]: ReportSiteRow[K] }>();
  for (const record of records) {
    for (const [site, outcome] of Object.entries(record.site_outcomes ?? {})) {
      let row = rows.get(site);
      if (row === undefined) {
        row = { site, requests: 0, exported: 0, erased: 0, corrected: 0, no_data: 0, failed: 0, other: 0 };
        rows.set(site, row);
      }
      row.requests += 1;
      if (outcome === 'exported' || outcome === 'erased' || outcome === 'no_data' || outcome === 'failed') {
        row[outcome] += 1;
      } else if (outcome === 'corrected' || outcome === 'corrected_with_changes') row.corrected += 1;
      else row.other += 1;
    }
  }
  return [...rows.values()];
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
