// Status change events: the detail built from a ledger change, with no identifiers, and published in batches.
import { z } from 'zod';
import { DsrError, type ErrorHandling } from '#shared/errors';
import { isOwed, ledgerItemSchema, STATUSES } from '#shared/ledger';
import { REQUEST_TYPES } from '#shared/request';

/**
 * EventBridge refused some status events (this function's own error: it runs off the ledger's stream,
 * outside the workflow). The stream batch that carried them is delivered again,
 * so the events are late rather than lost (consumers de-duplicate by the detail's `event_id`).
 */
export class StatusEventsNotPublishedError extends DsrError {
  override readonly name = 'StatusEventsNotPublishedError';
  static override readonly handling: ErrorHandling = 'redeliver';
  readonly code = 'status_events_not_published';
}

/** The `source` of every svc-dsr event. */
export const EVENT_SOURCE = 'svc-dsr';
/** The detail-type of a status change (docs/events.md). */
export const STATUS_CHANGED = 'svc-dsr Request Status Changed';
/** Raised when the detail changes in a way a consumer must know about. */
export const STATUS_EVENT_VERSION = 1;

/** Notices the subject is owed, as far as the ledger shows. */
export const NOTICE_KINDS = ['receipt', 'response', 'denial'] as const;

/**
 * The detail of a `svc-dsr Request Status Changed` event: what a ticketing system or a notifier
 * needs to follow a request without reading the ledger. Strict, and built only from the fields
 * below: no subject identifier (primary_key, svc_user_id), name, reason text, link or token can
 * reach it.
 */
export const statusChangedDetailSchema = z.strictObject({
  event_version: z.literal(STATUS_EVENT_VERSION),
  /** `<request_id>:<status>:<changed_at>`: the same change delivered twice has the same id. */
  event_id: z.string(),
  request_id: z.string(),
  /** A site's part of a request in parts: its site, and the request it is part of; null for a request. */
  site: z.string().nullable(),
  part_of: z.string().nullable(),
  type: z.enum(REQUEST_TYPES).nullable(),
  regulation: z.enum(['gdpr', 'ccpa']).nullable(),
  status: z.enum(STATUSES),
  /** The status before this change; null for a new request. */
  previous_status: z.enum(STATUSES).nullable(),
  outcome: z.string().nullable(),
  /** The failure's code (never its message, which may quote the platform). */
  error_code: z.string().nullable(),
  due_at: z.string().nullable(),
  extension_limit_at: z.string().nullable(),
  confirm_by: z.string().nullable(),
  extended: z.boolean(),
  /** True while the request is owed an answer and its due date has passed. */
  overdue: z.boolean(),
  notices_due: z.array(z.enum(NOTICE_KINDS)),
  /** When the ledger recorded the change. */
  changed_at: z.string(),
});
export type StatusChangedDetail = z.infer<typeof statusChangedDetailSchema>;

/** The ledger fields an event is built from: nothing else of an item is read. */
const eventFieldsSchema = ledgerItemSchema.pick({
  request_id: true,
  site: true,
  parent_request_id: true,
  status: true,
  type: true,
  regulation: true,
  outcome: true,
  error: true,
  due_at: true,
  extension_limit_at: true,
  confirm_by: true,
  extended: true,
  updated_at: true,
});
const previousSchema = z.object({ status: z.enum(STATUSES) });

/** One change of a ledger item, as a DynamoDB stream record carries it (images unmarshalled). */
export interface LedgerChange {
  readonly oldImage?: Record<string, unknown>;
  readonly newImage?: Record<string, unknown>;
}

/**
 * The status-changed detail of a ledger change, or undefined when the status did not change (a
 * poll counted, a step moved on) or the item was deleted.
 */
export function statusChangeOf(change: LedgerChange): StatusChangedDetail | undefined {
  if (change.newImage === undefined) return undefined;
  const current = eventFieldsSchema.parse(change.newImage);
  const previous = change.oldImage === undefined ? undefined : previousSchema.parse(change.oldImage);
  if (previous?.status === current.status) return undefined;
  const changedAt = current.updated_at;
  const owed = isOwed(current.status);
  return statusChangedDetailSchema.parse({
    event_version: STATUS_EVENT_VERSION,
    event_id: `${current.request_id}:${current.status}:${changedAt}`,
    request_id: current.request_id,
    site: current.site ?? null,
    part_of: current.parent_request_id ?? null,
    type: current.type ?? null,
    regulation: current.regulation ?? null,
    status: current.status,
    previous_status: previous?.status ?? null,
    outcome: current.outcome ?? null,
    error_code: current.error?.code ?? null,
    due_at: current.due_at ?? null,
    extension_limit_at: current.extension_limit_at ?? null,
    confirm_by: current.confirm_by ?? null,
    extended: current.extended,
    overdue: owed && current.due_at !== undefined && current.due_at < changedAt,
    notices_due: noticesDue(current.status, current.regulation, current.confirm_by),
    changed_at: changedAt,
  });
}

/**
 * What the subject is owed on this status, as far as the ledger knows: a CCPA receipt confirmation
 * while the request is open, the response once it completed, a denial notice once denied. A
 * withdrawn request or an intake error is owed nothing.
 */
function noticesDue(
  status: StatusChangedDetail['status'],
  regulation: StatusChangedDetail['regulation'] | undefined,
  confirmBy: string | null | undefined,
): StatusChangedDetail['notices_due'] {
  if (isOwed(status)) return regulation === 'ccpa' && confirmBy ? ['receipt'] : [];
  if (status === 'completed') return ['response'];
  if (status === 'cancelled' || status === 'rejected') return [];
  // Every other terminal status (`denied`) is a refusal the subject must be told of.
  return ['denial'];
}

/** One PutEvents entry. */
export interface StatusEventEntry {
  readonly Source: string;
  readonly DetailType: string;
  readonly Detail: string;
  readonly EventBusName: string;
  readonly Time: Date;
}

/** Sends up to 10 entries in one PutEvents; answers how many EventBridge refused. */
export type PutEntries = (entries: readonly StatusEventEntry[]) => Promise<number>;

/** EventBridge takes at most 10 entries per PutEvents. */
const ENTRIES_PER_CALL = 10;

/**
 * Publishes the status changes among `changes` on `bus`, in order, 10 per call. Throws
 * StatusEventsNotPublishedError when EventBridge refused any, so the stream delivers the batch again.
 */
export async function publishStatusChanges(
  changes: readonly LedgerChange[],
  deps: { readonly bus: string; readonly put: PutEntries },
): Promise<StatusChangedDetail[]> {
  const details = changes.flatMap((change) => statusChangeOf(change) ?? []);
  const entries = details.map((detail) => ({
    Source: EVENT_SOURCE,
    DetailType: STATUS_CHANGED,
    Detail: JSON.stringify(detail),
    EventBusName: deps.bus,
    Time: new Date(detail.changed_at),
  }));
  for (let start = 0; start < entries.length; start += ENTRIES_PER_CALL) {
    const refused = await deps.put(entries.slice(start, start + ENTRIES_PER_CALL));
    if (refused > 0) {
      throw new StatusEventsNotPublishedError(
        `EventBridge refused ${refused} of ${Math.min(ENTRIES_PER_CALL, entries.length - start)} status event(s); the batch is delivered again`,
      );
    }
  }
  return details;
}
