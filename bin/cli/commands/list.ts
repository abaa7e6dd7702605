// The `svc-dsr list` command: requests by status from the ledger's open index, by due date.
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { z } from 'zod';
import {
  type AnswerNoticeState,
  answerNoticeState,
  isOwed,
  type LedgerItem,
  ledgerItemSchema,
  type OpenRequest,
  OWED_STATUSES,
  receiptState,
  STATUSES,
  type Status,
} from '#shared/ledger';
import { REQUEST_TYPES, type RequestType } from '#shared/request';
import { type CliIo, type CommandResult, describeDue, formatTable, processIo, writeJson } from '../format.ts';
import { CliError, EXIT, parseOption } from '../io.ts';
import { withLedger } from '../ledger-context.ts';
import type { CliContext } from '../target.ts';
import type { TargetFlags } from '../target-flags.ts';

/** Options of `svc-dsr list`. */
export interface ListOptions {
  /** Comma-separated statuses. @default received,running,failed (every request still owed an answer) */
  readonly status?: string;
  /** Only requests due within this many days from now (overdue ones included). */
  readonly dueWithin?: string | number;
  /** Only requests whose due date has passed. */
  readonly overdue?: boolean;
  /** Only CCPA requests whose receipt confirmation is not recorded yet (overdue ones included). */
  readonly receiptDue?: boolean;
  /** Only CCPA requests whose receipt confirmation is past its confirm-by date and not recorded. */
  readonly receiptOverdue?: boolean;
  /**
   * Only requests owed a notice past its due date: a receipt confirmation, a response (completed)
   * or a denial (denied). Without `status`, every status that can owe one is listed.
   */
  readonly noticeOverdue?: boolean;
  /** Comma-separated request types (access, erasure, correction). @default every type */
  readonly type?: string;
  readonly json?: boolean;
}

/**
 * Where a request's CCPA receipt confirmation (section 7021) stands: recorded (`given`), owed by
 * `confirm_by` (`due`), or owed and past it (`overdue`); null when none is owed (GDPR, rejected).
 */
export type ReceiptState = 'given' | 'due' | 'overdue';

/** One listed request: no subject identifiers. */
export interface ListedRequest {
  readonly request_id: string;
  readonly status: Status;
  readonly step: string | null;
  readonly outcome: string | null;
  readonly type: string | null;
  readonly regulation: string | null;
  readonly reference: string | null;
  readonly received_at: string | null;
  readonly due_at: string | null;
  readonly extended: boolean;
  /** "in 3 days", "2 days overdue". */
  readonly due: string;
  /** CCPA: the date the receipt confirmation is due by; null otherwise. */
  readonly confirm_by: string | null;
  readonly receipt: ReceiptState | null;
  /** The response (completed) or denial (denied) notice: its due date, and given, due or overdue. */
  readonly notice: AnswerNoticeState | null;
}

/** What `list --json` prints. */
export interface ListResult {
  readonly statuses: Status[];
  /** Only requests due before this instant were listed; null for all. */
  readonly due_before: string | null;
  readonly count: number;
  readonly requests: ListedRequest[];
}

const DAY_MS = 24 * 3600 * 1000;
/** Every status a request may owe the subject a notice in: all but an intake error's. */
const NOTICE_OWING_STATUSES = STATUSES.filter((status) => status !== 'rejected');

const statusListSchema = z
  .string()
  .transform((value) => value.split(',').map((status) => status.trim()))
  .pipe(
    z
      .array(z.enum(STATUSES, { message: `each status must be one of ${STATUSES.join(', ')}` }))
      .min(1, 'name at least one status'),
  );
const typeListSchema = z
  .string()
  .transform((value) => value.split(',').map((type) => type.trim()))
  .pipe(
    z
      .array(z.enum(REQUEST_TYPES, { message: `each type must be one of ${REQUEST_TYPES.join(', ')}` }))
      .min(1, 'name at least one type'),
  );
const daysSchema = z.coerce
  .number({ message: 'must be a number of days' })
  .nonnegative('must be 0 or more days')
  .max(3650, 'must be at most 3650 days');

/** Validated list options, so the command line is checked before any connection is made. */
export function parseListOptions(options: ListOptions): {
  statuses: Status[];
  dueBefore?: (now: Date) => string;
  types?: readonly RequestType[];
} {
  const types =
    options.type === undefined ? {} : { types: parseOption('--type', typeListSchema, options.type) };
  return { ...parseStatusAndDue(options), ...types };
}

function parseStatusAndDue(options: ListOptions): { statuses: Status[]; dueBefore?: (now: Date) => string } {
  const statuses = [
    ...new Set(
      options.status === undefined
        ? options.noticeOverdue === true
          ? [...NOTICE_OWING_STATUSES]
          : [...OWED_STATUSES]
        : parseOption('--status', statusListSchema, options.status),
    ),
  ];
  if (options.overdue === true && options.dueWithin !== undefined) {
    throw new CliError('--overdue and --due-within both set a due date limit; pass one of them');
  }
  if (options.overdue === true) return { statuses, dueBefore: (now) => now.toISOString() };
  if (options.dueWithin !== undefined) {
    const days = parseOption('--due-within', daysSchema, options.dueWithin);
    return { statuses, dueBefore: (now) => new Date(now.getTime() + days * DAY_MS).toISOString() };
  }
  return { statuses };
}

/**
 * Lists requests by status, earliest due first. Open statuses (received, running, failed) come from
 * one paged scan of the ledger's open index, which holds open requests only. Completed, cancelled and rejected requests are not in
 * that index: they are found with one filtered scan of the ledger (docs/deploy.md says why).
 */
export async function runList(
  context: Pick<CliContext, 'ledger' | 'dynamo' | 'names' | 'clock'>,
  options: ListOptions,
  io: CliIo,
): Promise<CommandResult<ListResult>> {
  const { statuses, dueBefore, types } = parseListOptions(options);
  const now = context.clock();
  const before = dueBefore?.(now);
  const items: ListableRequest[] = await context.ledger.allOpenRequests(
    statuses.filter(isOwed),
    before === undefined ? {} : { dueBefore: before },
  );
  const ended = statuses.filter((status) => !isOwed(status));
  if (ended.length > 0) items.push(...(await scanEnded(context, ended, before)));
  items.sort(byDueDate);
  const receiptFilter = receiptFilterOf(options);
  const noticeFilter = (request: ListedRequest) =>
    options.noticeOverdue !== true || request.receipt === 'overdue' || request.notice?.state === 'overdue';
  const timeZone = context.names.TimeZone;
  const requests = (await withReceipts(context, items))
    .filter((item) => types === undefined || (item.type !== undefined && types.includes(item.type)))
    .map((item) => listed(item, now, timeZone))
    .filter((request) => receiptFilter(request.receipt) && noticeFilter(request));
  const result: ListResult = { statuses, due_before: before ?? null, count: requests.length, requests };
  if (options.json === true) writeJson(io, result);
  else if (requests.length === 0) {
    io.err(`no ${statuses.join(' or ')} requests${before === undefined ? '' : ` due before ${before}`}\n`);
  } else {
    io.out(
      formatTable(
        ['REQUEST ID', 'STATUS', 'STEP', 'TYPE', 'REG', 'DUE', '', 'RECEIPT', 'NOTICE', 'REFERENCE'],
        requests.map((request) => [
          request.request_id,
          request.status,
          request.step ?? request.outcome ?? '',
          request.type ?? '',
          request.regulation ?? '',
          `${request.due_at ?? ''}${request.extended ? ' (extended)' : ''}`,
          isOwed(request.status) ? request.due : '',
          describeReceipt(request, now),
          describeNotice(request, now),
          request.reference ?? '',
        ]),
      ),
    );
  }
  return { exitCode: EXIT.ok, result };
}

/**
 * Requests with one of these ended statuses, by a filtered scan: with `before`, only those due
 * before it (rejected requests have no due date, so they are left out then).
 */
async function scanEnded(
  context: Pick<CliContext, 'dynamo' | 'names'>,
  statuses: readonly Status[],
  before: string | undefined,
): Promise<LedgerItem[]> {
  const values: Record<string, string> = {};
  statuses.forEach((status, index) => {
    values[`:status${index}`] = status;
  });
  let filter = `#status IN (${Object.keys(values).join(', ')})`;
  if (before !== undefined) {
    filter += ' AND #due_at < :before';
    values[':before'] = before;
  }
  const items: LedgerItem[] = [];
  let cursor: Record<string, unknown> | undefined;
  do {
    const page = await context.dynamo.send(
      new ScanCommand({
        TableName: context.names.LedgerTableName,
        FilterExpression: filter,
        ExpressionAttributeNames: {
          '#status': 'status',
          ...(before === undefined ? {} : { '#due_at': 'due_at' }),
        },
        ExpressionAttributeValues: values,
        ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
      }),
    );
    for (const raw of page.Items ?? []) {
      const parsed = ledgerItemSchema.safeParse(raw);
      // A site's part of a request in parts is listed with its request (status), not on its own.
      if (parsed.success && parsed.data.parent_request_id === undefined) items.push(parsed.data);
    }
    cursor = page.LastEvaluatedKey;
  } while (cursor !== undefined);
  return items;
}

/**
 * What a listing shows of a request: what the open index holds, the creation time of an ended one,
 * and its receipt confirmation's date and notice.
 */
type ListableRequest = OpenRequest &
  Partial<
    Pick<
      LedgerItem,
      'created_at' | 'confirm_by' | 'notice_receipt' | 'notice_response' | 'notice_denial' | 'original_due_at'
    >
  >;

/** Full items read at once for the receipt column. */
const RECEIPT_READS_AT_ONCE = 8;

/**
 * The listed requests with their receipt facts: the open index carries neither `confirm_by` nor the
 * notices, so each open CCPA request is read in full (ended ones were scanned in full already).
 */
async function withReceipts(
  context: Pick<CliContext, 'ledger'>,
  items: readonly ListableRequest[],
): Promise<ListableRequest[]> {
  const complete = [...items];
  const missing = complete
    .map((item, index) => ({ item, index }))
    .filter(({ item }) => item.regulation === 'ccpa' && item.confirm_by === undefined);
  for (let start = 0; start < missing.length; start += RECEIPT_READS_AT_ONCE) {
    await Promise.all(
      missing.slice(start, start + RECEIPT_READS_AT_ONCE).map(async ({ item, index }) => {
        const full = await context.ledger.get(item.request_id);
        if (full !== undefined) {
          complete[index] = { ...item, confirm_by: full.confirm_by, notice_receipt: full.notice_receipt };
        }
      }),
    );
  }
  return complete;
}

/** The --receipt-due / --receipt-overdue filter. */
function receiptFilterOf(options: ListOptions): (receipt: ReceiptState | null) => boolean {
  if (options.receiptOverdue === true) return (receipt) => receipt === 'overdue';
  if (options.receiptDue === true) return (receipt) => receipt === 'due' || receipt === 'overdue';
  return () => true;
}

/** The RECEIPT column: "confirmed", "due in 3 days", "2 days overdue", or empty. */
function describeReceipt(request: ListedRequest, now: Date): string {
  if (request.receipt === 'given') return 'confirmed';
  if (request.receipt === null || request.confirm_by === null) return '';
  const due = describeDue(request.confirm_by, now);
  return request.receipt === 'overdue' ? due : `due ${due}`;
}

/** The NOTICE column: "response given", "denial due in 3 days", "response 2 days overdue", or empty. */
function describeNotice(request: ListedRequest, now: Date): string {
  const notice = request.notice;
  if (notice === null) return '';
  if (notice.state === 'given') return `${notice.kind} given`;
  if (notice.due_by === null) return `${notice.kind} due`;
  const due = describeDue(notice.due_by, now);
  return notice.state === 'overdue' ? `${notice.kind} ${due}` : `${notice.kind} due ${due}`;
}

function byDueDate(a: ListableRequest, b: ListableRequest): number {
  const left = a.due_at ?? a.created_at ?? '';
  const right = b.due_at ?? b.created_at ?? '';
  return left < right ? -1 : left > right ? 1 : a.request_id < b.request_id ? -1 : 1;
}

function listed(item: ListableRequest, now: Date, timeZone: string | undefined): ListedRequest {
  return {
    request_id: item.request_id,
    status: item.status,
    step: item.step ?? null,
    outcome: item.outcome ?? null,
    type: item.type ?? null,
    regulation: item.regulation ?? null,
    reference: item.reference ?? null,
    received_at: item.received_at ?? null,
    due_at: item.due_at ?? null,
    extended: item.extended,
    due: describeDue(item.due_at, now),
    confirm_by: item.confirm_by ?? null,
    receipt: receiptState(item, now) ?? null,
    notice: answerNoticeState(item, now, timeZone) ?? null,
  };
}

export interface ListFlags extends TargetFlags {
  readonly status?: string;
  readonly dueWithin?: string;
  readonly overdue?: boolean;
  readonly receiptDue?: boolean;
  readonly receiptOverdue?: boolean;
  readonly noticeOverdue?: boolean;
  readonly type?: string;
  readonly json?: boolean;
}

/** `svc-dsr list` run with its parsed arguments and flags (registered in ../register/list.ts). */
export async function listAction(flags: ListFlags): Promise<void> {
  const options: ListOptions = {
    ...(flags.status === undefined ? {} : { status: flags.status }),
    ...(flags.dueWithin === undefined ? {} : { dueWithin: flags.dueWithin }),
    ...(flags.type === undefined ? {} : { type: flags.type }),
    overdue: flags.overdue === true,
    receiptDue: flags.receiptDue === true,
    receiptOverdue: flags.receiptOverdue === true,
    noticeOverdue: flags.noticeOverdue === true,
    json: flags.json === true,
  };
  parseListOptions(options);
  const { exitCode } = await withLedger(flags, (context) => runList(context, options, processIo));
  process.exitCode = exitCode;
}
