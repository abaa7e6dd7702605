/**
 * The operator changes (cancel, deny, notice, extend, retry, minimise), each written once: the refusal
 * an operator reads, and the same rule as the DynamoDB condition its write carries.
 */
import { subjectHash } from '../audit-chains.ts';
import { computeDeadlines, DEFAULT_TIME_ZONE, decideExtension } from '../deadlines.ts';
import {
  type LedgerItem,
  type LedgerPatch,
  type Notice,
  type NoticeKind,
  OWED_STATUSES,
  type Status,
} from './schema.ts';

/** A DynamoDB condition with the attribute names and values it uses. */
export interface LedgerCondition {
  readonly expression: string;
  readonly names: Readonly<Record<string, string>>;
  readonly values: Readonly<Record<string, unknown>>;
}

/**
 * A rule an operator's change must meet, written once: `refusal` judges the item as read and says
 * why not in words an operator can act on; `condition` is the same rule for DynamoDB to check
 * atomically with the write, so a change racing another writer (a step, a second operator) is
 * refused instead of applied to a request that moved on.
 */
export interface LedgerRule<Input> {
  /** What the change is, for messages: "cancelled" in "changed while it was being cancelled". */
  readonly doing: string;
  refusal(item: LedgerItem, input: Input): string | undefined;
  condition(item: LedgerItem, input: Input): LedgerCondition;
}

/** A ruled change: the item as read, and as written. */
export interface RuledChange {
  readonly before: LedgerItem;
  readonly after: LedgerItem;
}

/** What a retry resets a request to. */
export interface RetryPlan {
  /** The status it resumes in: `running` once its subject is resolved (every later step needs it). */
  readonly status: 'received' | 'running';
  /** Its new `executions` count: the retry's execution number. */
  readonly execution: number;
  /** True when the export is started anew (it failed, timed out or its link expired, with no archive). */
  readonly freshExport: boolean;
}

export type RetryChange = RuledChange & RetryPlan;

/** Error codes after which a retry starts a new export rather than resuming the one under way. */
const FRESH_EXPORT_CODES = [
  'export_failed',
  'export_start_unconfirmed',
  'export_timed_out',
  'download_link_expired',
];

export function retryPlanOf(item: LedgerItem): RetryPlan {
  return {
    status: item.svc_user_id === undefined ? 'received' : 'running',
    execution: item.executions + 1,
    freshExport:
      item.status === 'failed' &&
      item.archive === undefined &&
      FRESH_EXPORT_CODES.includes(item.error?.code ?? ''),
  };
}

/** Statuses a request can be cancelled in (before its erasure has started). */
export const CANCELLABLE_STATUSES = ['received', 'running'] as const satisfies readonly Status[];
/** Statuses a request's deadline can be extended in: every status still owed an answer, `failed` too. */
export const EXTENDABLE_STATUSES = OWED_STATUSES;
/** Statuses a request can be retried in (an open one only when no execution runs it). */
export const RETRYABLE_STATUSES = ['failed', 'received', 'running'] as const satisfies readonly Status[];

/** True once an erasure request has reached the platform's delete (or later). */
export function erasureStarted(item: LedgerItem): boolean {
  return (
    item.step === 'erasing' ||
    item.step === 'verifying' ||
    item.erasure !== undefined ||
    item.erasure_verification !== undefined
  );
}

/** `erasureStarted` as a condition: the item has not reached the platform's delete. */
const ERASURE_NOT_STARTED: LedgerCondition = {
  expression:
    '(attribute_not_exists(#step) OR NOT (#step IN (:if_erasing, :if_verifying)))' +
    ' AND attribute_not_exists(#erasure) AND attribute_not_exists(#erasure_verification)',
  names: { '#step': 'step', '#erasure': 'erasure', '#erasure_verification': 'erasure_verification' },
  values: { ':if_erasing': 'erasing', ':if_verifying': 'verifying' },
};

export function statusIn(statuses: readonly Status[]): LedgerCondition {
  return {
    expression: `#status IN (${statuses.map((status) => `:if_${status}`).join(', ')})`,
    names: { '#status': 'status' },
    values: Object.fromEntries(statuses.map((status) => [`:if_${status}`, status])),
  };
}

export function executionsAre(executions: number): LedgerCondition {
  return {
    expression: '(attribute_not_exists(#executions) OR #executions = :if_executions)',
    names: { '#executions': 'executions' },
    values: { ':if_executions': executions },
  };
}

/**
 * The execution of run `run` is still the request's current run: no retry or resume has claimed a
 * later one (intake counts its own execution just after starting it, so the count may lag by one).
 */
export function runIsCurrent(run: number): LedgerCondition {
  return {
    expression: '(attribute_not_exists(#executions) OR #executions <= :if_run)',
    names: { '#executions': 'executions' },
    values: { ':if_run': run },
  };
}

export function allOf(...conditions: LedgerCondition[]): LedgerCondition {
  return {
    expression: conditions.map((condition) => condition.expression).join(' AND '),
    names: Object.assign({}, ...conditions.map((condition) => condition.names)),
    values: Object.assign({}, ...conditions.map((condition) => condition.values)),
  };
}

function statusRefusal(item: LedgerItem, allowed: readonly Status[], what: string): string | undefined {
  if ((allowed as readonly string[]).includes(item.status)) return undefined;
  return `request ${item.request_id} is ${item.status}; only ${orList(allowed)} requests can be ${what}`;
}

/** "a", "a or b", "a, b or c". */
function orList(words: readonly string[]): string {
  return words.length <= 2 ? words.join(' or ') : `${words.slice(0, -1).join(', ')} or ${words.at(-1)}`;
}

function erasureRefusal(item: LedgerItem, what: string): string | undefined {
  if (!erasureStarted(item)) return undefined;
  return `request ${item.request_id} cannot be ${what}: its erasure has started (step ${item.step ?? 'erasing'}); let it finish and check it with npx svc-dsr status ${item.request_id}`;
}

/** Can cancel: received or running, and the erasure has not started. */
export const CAN_CANCEL: LedgerRule<void> = {
  doing: 'cancelled',
  refusal(item) {
    return statusRefusal(item, CANCELLABLE_STATUSES, 'cancelled') ?? erasureRefusal(item, 'cancelled');
  },
  // Pinned to the run it read: a retry or resume that claims a new run meanwhile wins, and the
  // cancel is refused with a message rather than applied to a run nobody looked at.
  condition: (item) =>
    allOf(statusIn(CANCELLABLE_STATUSES), ERASURE_NOT_STARTED, executionsAre(item.executions)),
};

/** Statuses a request can be denied in: still owed an answer (and its erasure not started). */
export const DENIABLE_STATUSES = OWED_STATUSES;

/** Can deny: still owed an answer (received, running, failed), and the erasure has not started. */
export const CAN_DENY: LedgerRule<void> = {
  doing: 'denied',
  refusal(item) {
    return statusRefusal(item, DENIABLE_STATUSES, 'denied') ?? erasureRefusal(item, 'denied');
  },
  condition: (item) =>
    allOf(statusIn(DENIABLE_STATUSES), ERASURE_NOT_STARTED, executionsAre(item.executions)),
};

/** The statuses a notice of each kind may be recorded in. */
export const NOTICE_STATUSES: Readonly<Record<NoticeKind, readonly Status[]>> = {
  receipt: ['received', 'running', 'failed', 'completed', 'cancelled', 'denied'],
  extension: OWED_STATUSES,
  response: ['completed'],
  denial: ['denied'],
};

/**
 * Can record a notice: the request's status calls for that kind (a response once completed, a
 * denial once denied, an extension once extended), and it was not given in the future.
 */
export const CAN_NOTICE: LedgerRule<{ readonly kind: NoticeKind; readonly at: string; readonly now: Date }> =
  {
    doing: 'given a notice',
    refusal(item, input) {
      const allowed = NOTICE_STATUSES[input.kind];
      if (!(allowed as readonly string[]).includes(item.status)) {
        return `request ${item.request_id} is ${item.status}; ${/^[aeiou]/.test(input.kind) ? 'an' : 'a'} ${input.kind} notice is recorded only for ${orList(allowed)} requests`;
      }
      if (input.kind === 'extension' && !item.extended) {
        return `request ${item.request_id} has not been extended; svc-dsr extend records the extension notice with the extension`;
      }
      return noticeTimeRefusal(item, input.at, input.now);
    },
    condition: (_item, input) =>
      allOf(
        statusIn(NOTICE_STATUSES[input.kind]),
        input.kind === 'extension'
          ? {
              expression: '#extended = :if_true',
              names: { '#extended': 'extended' },
              values: { ':if_true': true },
            }
          : { expression: 'attribute_exists(request_id)', names: {}, values: {} },
      ),
  };

/** A notice the subject is owed and has not been given, with the date it is due by. */
export interface NoticeDue {
  readonly kind: NoticeKind;
  /** When it must be given by (null when the law sets no date of its own). */
  readonly due_by: string | null;
  readonly overdue: boolean;
}

/**
 * Where the CCPA receipt confirmation of a request stands: `given`, owed by `confirm_by` (`due`), or
 * owed and past it (`overdue`); undefined when none is owed (GDPR, or a rejected request). Reads
 * only what a listing has of the request.
 */
export function receiptState(
  item: Pick<LedgerItem, 'status' | 'confirm_by' | 'notice_receipt'>,
  now: Date,
): 'given' | 'due' | 'overdue' | undefined {
  if (item.status === 'rejected' || item.confirm_by === null || item.confirm_by === undefined)
    return undefined;
  if (item.notice_receipt !== undefined) return 'given';
  return Date.parse(item.confirm_by) < now.getTime() ? 'overdue' : 'due';
}

/** Where the notice that answers a request stands: its kind, its due date, and given, due or overdue. */
export interface AnswerNoticeState {
  readonly kind: 'response' | 'denial';
  readonly due_by: string | null;
  readonly state: 'given' | 'due' | 'overdue';
}

/**
 * Where the response (a completed request) or denial (a denied one) notice stands; undefined for
 * a request no such notice answers yet (open, failed) or ever (cancelled, rejected).
 */
export function answerNoticeState(
  item: Pick<LedgerItem, 'status' | 'regulation' | 'due_at' | 'extended' | 'received_at'> &
    Partial<Pick<LedgerItem, 'confirm_by' | 'original_due_at' | 'notice_response' | 'notice_denial'>>,
  now: Date,
  timeZone?: string,
): AnswerNoticeState | undefined {
  const kind = answerNoticeKind(item.status);
  if (kind === undefined) return undefined;
  const dueBy = noticeDueBy({ ...item, confirm_by: item.confirm_by ?? null }, kind, timeZone);
  const state =
    item[`notice_${kind}`] !== undefined
      ? 'given'
      : dueBy !== null && Date.parse(dueBy) < now.getTime()
        ? 'overdue'
        : 'due';
  return { kind, due_by: dueBy, state };
}

/** The notices the request calls for and that are not recorded yet. */
export function noticesDue(item: LedgerItem, now: Date, timeZone?: string): NoticeDue[] {
  const due: NoticeDue[] = [];
  const add = (kind: NoticeKind) => {
    if (item[`notice_${kind}`] !== undefined) return;
    const by = noticeDueBy(item, kind, timeZone);
    due.push({ kind, due_by: by, overdue: by !== null && Date.parse(by) < now.getTime() });
  };
  if (item.status === 'rejected') return due;
  if (item.confirm_by !== null && item.confirm_by !== undefined) add('receipt');
  if (item.extended) add('extension');
  if (item.status === 'completed') add('response');
  if (item.status === 'denied') add('denial');
  return due;
}

/**
 * When the notice of `kind` is due, whether or not it was given; null when the law sets no date of
 * its own (an extension notice is recorded with the extension itself).
 * - receipt: the CCPA confirm-by date (section 7021, 10 business days).
 * - response: the due date, extended or not.
 * - denial: under GDPR one month after receipt, extension or not (Art. 12(4): a controller that
 *   does not take action says so, with its reasons, within one month of receipt; the extension of
 *   Art. 12(3) covers taking action, not refusing it). Under CCPA the due date, extended or not
 *   (section 7021: the response, a denial included, within 45 days, extendable once by 45).
 * `timeZone` counts the GDPR month of a request extended before `original_due_at` was kept.
 */
export function noticeDueBy(
  item: Pick<
    LedgerItem,
    'regulation' | 'confirm_by' | 'due_at' | 'extended' | 'original_due_at' | 'received_at'
  >,
  kind: NoticeKind,
  timeZone: string = DEFAULT_TIME_ZONE,
): string | null {
  if (kind === 'receipt') return item.confirm_by ?? null;
  if (kind === 'extension') return null;
  if (kind === 'denial' && item.regulation === 'gdpr' && item.extended) {
    if (item.original_due_at !== undefined) return item.original_due_at;
    const received = item.received_at === undefined ? Number.NaN : Date.parse(item.received_at);
    return Number.isNaN(received) ? null : computeDeadlines('gdpr', new Date(received), timeZone).due_at;
  }
  return item.due_at ?? null;
}

/** The notice that answers a request in `status`: the response once completed, the denial once denied. */
export function answerNoticeKind(status: Status): 'response' | 'denial' | undefined {
  return status === 'completed' ? 'response' : status === 'denied' ? 'denial' : undefined;
}

/**
 * The time a notice counts as given: the later of the time it claims (`at`, the operator's word)
 * and the time it was recorded (`recorded_at`, fixed by the ledger's clock and locked by its audit
 * record). A notice recorded after its due date with an earlier time claimed cannot be shown to
 * have been given in time, so it counts as given when it was recorded (docs/audit.md, "Notices").
 */
export function noticeCountsAt(notice: Pick<Notice, 'at' | 'recorded_at'>): string {
  return Date.parse(notice.recorded_at) > Date.parse(notice.at) ? notice.recorded_at : notice.at;
}

/** The new due date of an extension, or why there is none (no deadlines, or `decideExtension` refuses). */
export function extensionOf(
  item: LedgerItem,
  input: { readonly reason: string; readonly now: Date },
): { due_at: string; refusal?: undefined } | { due_at?: undefined; refusal: string } {
  if (item.due_at === undefined || item.extension_limit_at === undefined) {
    return {
      refusal: `request ${item.request_id} has no deadlines in the ledger, so there is nothing to extend`,
    };
  }
  const decision = decideExtension(
    { due_at: item.due_at, extension_limit_at: item.extension_limit_at, extended: item.extended },
    input.reason,
    input.now,
  );
  return decision.ok
    ? { due_at: decision.due_at }
    : { refusal: `cannot extend request ${item.request_id}: ${decision.reason}` };
}

/**
 * Why a notice cannot have been given at `at`: in the future (beyond 5 minutes of clock skew), or
 * before the request was received (a mistyped year would mark a statutory notice as given).
 */
function noticeTimeRefusal(item: LedgerItem, at: string, now: Date): string | undefined {
  if (Date.parse(at) > now.getTime() + 5 * 60_000) {
    return `the notice time ${at} is in the future; give the time the subject was told`;
  }
  if (item.received_at !== undefined && Date.parse(at) < Date.parse(item.received_at)) {
    return `the notice time ${at} is before the request was received (${item.received_at}); give the time the subject was told`;
  }
  return undefined;
}

/**
 * Can extend: an extendable status, deadlines recorded, not extended yet, a reason, and the
 * original deadline not passed (`decideExtension`); the write holds the due date it read.
 */
export const CAN_EXTEND: LedgerRule<{
  readonly reason: string;
  readonly now: Date;
  /** When the subject was told of the extension. */
  readonly noticeAt?: string;
}> = {
  doing: 'extended',
  refusal: (item, input) =>
    statusRefusal(item, EXTENDABLE_STATUSES, 'extended') ??
    extensionOf(item, input).refusal ??
    (input.noticeAt === undefined ? undefined : noticeTimeRefusal(item, input.noticeAt, input.now)),
  condition: (item) =>
    allOf(statusIn(EXTENDABLE_STATUSES), executionsAre(item.executions), {
      expression: '#due_at = :if_due_at AND (attribute_not_exists(#extended) OR #extended = :if_false)',
      names: { '#due_at': 'due_at', '#extended': 'extended' },
      values: { ':if_due_at': item.due_at ?? '', ':if_false': false },
    }),
};

/**
 * Can retry: failed, or open (received, running) with no execution running it (the caller's
 * check); with a type and regulation to run it with. The write holds the status and the executions
 * count it read.
 */
export const CAN_RETRY: LedgerRule<void> = {
  doing: 'retried',
  refusal(item) {
    if (!(RETRYABLE_STATUSES as readonly string[]).includes(item.status)) {
      return `request ${item.request_id} is ${item.status}; only failed requests, or open ones with no running execution, can be retried`;
    }
    if (item.type === undefined || item.regulation === undefined) {
      return `request ${item.request_id} has no type or regulation in the ledger, so it cannot be run`;
    }
    if (item.minimised_at !== undefined) {
      return `request ${item.request_id} was minimised at ${item.minimised_at} (its retention had passed), so the ledger no longer holds whom it is about; submit it again as a new request`;
    }
    return undefined;
  },
  condition: (item) =>
    allOf(statusIn(RETRYABLE_STATUSES), statusIn([item.status]), executionsAre(item.executions), {
      expression: 'attribute_not_exists(#minimised_at)',
      names: { '#minimised_at': 'minimised_at' },
      values: {},
    }),
};

export const DAY_MS = 24 * 3600 * 1000;

/**
 * Statuses whose requests are minimised once their retention has passed: every status a request
 * ends in, failed included. A failed request is still owed an answer, but left failed for the
 * whole retention it has no need of the identifiers any more: once minimised it can no longer be
 * retried (a new request is), and is still denied or cancelled as any other.
 */
export const MINIMISABLE_STATUSES = [
  'completed',
  'cancelled',
  'rejected',
  'denied',
  'failed',
] as const satisfies readonly Status[];

/**
 * The fields a minimised request holds only as keyed hashes: the subject's identifiers, the
 * people who verified and submitted the request, and the fingerprint (an unkeyed hash of the
 * whole request, identifiers included). Every other field is a §7101 fact or names no one.
 */
export const MINIMISED_FIELDS = [
  'primary_key',
  'svc_user_id',
  'verification.verified_by',
  'submitted_by',
  'fingerprint',
] as const;

/**
 * When a request's retention ends: `afterDays` after it ended, or after it failed (a failure
 * recorded before `failed_at` existed counts from the item's last change); undefined while it has
 * not ended.
 */
export function retentionEndsAt(item: LedgerItem, afterDays: number): Date | undefined {
  const ended = retentionStart(item)?.value;
  if (ended === undefined) return undefined;
  return new Date(Date.parse(ended) + afterDays * DAY_MS);
}

/** The field the retention of `item` counts from, and its value. */
function retentionStart(
  item: LedgerItem,
): { readonly field: 'completed_at' | 'failed_at' | 'updated_at'; readonly value: string } | undefined {
  if (item.status === 'failed') {
    return item.failed_at === undefined
      ? { field: 'updated_at', value: item.updated_at }
      : { field: 'failed_at', value: item.failed_at };
  }
  return item.completed_at === undefined ? undefined : { field: 'completed_at', value: item.completed_at };
}

/** The patch that minimises `item` with `hmacKey` at `now`. */
export function minimisedPatch(item: LedgerItem, hmacKey: string, now: Date): LedgerPatch {
  const hashed = (kind: Parameters<typeof subjectHash>[1], value: string | undefined) =>
    value === undefined ? undefined : subjectHash(hmacKey, kind, value);
  return {
    primary_key: hashed('primary_key', item.primary_key),
    svc_user_id: hashed('svc_user_id', item.svc_user_id),
    submitted_by: hashed('submitted_by', item.submitted_by),
    fingerprint: subjectHash(hmacKey, 'fingerprint', item.fingerprint),
    verification:
      item.verification === undefined
        ? undefined
        : {
            ...item.verification,
            verified_by: subjectHash(hmacKey, 'verified_by', item.verification.verified_by),
          },
    minimised_at: now.toISOString(),
  };
}

/**
 * Can minimise: an ended request owed nothing more (MINIMISABLE_STATUSES), not minimised yet,
 * whose retention (`afterDays` after it ended) has passed. The write holds the status and end
 * time it read, so a request retried or given a new end meanwhile is left alone.
 */
export const CAN_MINIMISE: LedgerRule<{ readonly now: Date; readonly afterDays: number }> = {
  doing: 'minimised',
  refusal(item, input) {
    if (item.minimised_at !== undefined) {
      return `request ${item.request_id} was minimised at ${item.minimised_at}`;
    }
    const statusProblem = statusRefusal(item, MINIMISABLE_STATUSES, 'minimised');
    if (statusProblem !== undefined) return statusProblem;
    const ends = retentionEndsAt(item, input.afterDays);
    if (ends === undefined) return `request ${item.request_id} has no end time in the ledger`;
    if (ends.getTime() > input.now.getTime()) {
      return `request ${item.request_id} is kept until ${ends.toISOString()} (${input.afterDays} days after it ended)`;
    }
    return undefined;
  },
  condition: (item) => {
    const start = retentionStart(item) ?? { field: 'completed_at', value: '' };
    return allOf(statusIn(MINIMISABLE_STATUSES), statusIn([item.status]), {
      expression: 'attribute_not_exists(#minimised_at) AND #retention_start = :if_retention_start',
      names: { '#minimised_at': 'minimised_at', '#retention_start': start.field },
      values: { ':if_retention_start': start.value },
    });
  },
};
