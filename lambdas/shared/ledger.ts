import { createHash } from 'node:crypto';
import {
  type AttributeValue,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  ScanCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import { type AuditHead, parseChainId, type SideChainKind, subjectHash } from './audit.ts';
import { type Deadlines, decideExtension } from './deadlines.ts';
import { LedgerRuleError, LedgerStateError, RequestCancelledError, RequestUnknownError } from './errors.ts';
import { type DsrRequest, normaliseRequestId } from './request.ts';

export const STATUSES = [
  'received',
  'running',
  'completed',
  'failed',
  'cancelled',
  'rejected',
  'denied',
] as const;
/**
 * Why a valid request is denied, as the CCPA §7102 denial categories word them (not verifiable,
 * not made by a consumer, exempt, other), plus GDPR Art. 12(5)'s manifestly unfounded or excessive.
 */
export const DENIAL_CODES = [
  'identity_not_verified',
  'not_a_consumer',
  'exempt',
  'manifestly_unfounded_or_excessive',
  'other',
] as const;
export type DenialCode = (typeof DENIAL_CODES)[number];
/**
 * What the subject is told, and recorded: the receipt confirmation (CCPA §7021, by `confirm_by`),
 * the extension with its reason (before the original deadline), the response, or the denial.
 */
export const NOTICE_KINDS = ['receipt', 'extension', 'response', 'denial'] as const;
export type NoticeKind = (typeof NOTICE_KINDS)[number];
export const STEPS = ['resolving', 'exporting', 'archiving', 'erasing', 'verifying'] as const;
export const OUTCOMES = ['exported', 'erased', 'no_data'] as const;
export const ERASURE_EVIDENCE = ['delete_answer', 'not_found_after_interrupted_delete'] as const;
export type ErasureEvidence = (typeof ERASURE_EVIDENCE)[number];
export const EXPORT_START_OUTCOMES = [
  'in_flight',
  'accepted',
  'refused',
  'uncertain',
  'interrupted',
] as const;
export type Status = (typeof STATUSES)[number];

/** Statuses a request is still moving through; every other status is terminal. */
const MOVING_STATUSES: readonly Status[] = ['received', 'running'];

/**
 * The terminal statuses: each ends the request's audit chain with a final record (only an
 * operator's retry of a `failed` request opens a new segment after it).
 */
export const TERMINAL_STATUSES: readonly Status[] = STATUSES.filter(
  (status) => !MOVING_STATUSES.includes(status),
);

/** True for a status that ends the request's audit chain. */
export function isTerminal(status: Status): boolean {
  return TERMINAL_STATUSES.includes(status);
}
export type Step = (typeof STEPS)[number];
export type Outcome = (typeof OUTCOMES)[number];

/**
 * Statuses of a request the subject is still owed an answer on: `failed` too, since an operator
 * retries it. Only these are in the open index.
 */
export const OWED_STATUSES = ['received', 'running', 'failed'] as const satisfies readonly Status[];
export type OwedStatus = (typeof OWED_STATUSES)[number];

/**
 * Name of the sparse index of open requests by due date. Its partition key is `open_shard`
 * (`<status>#<shard>`), set only while the request is owed an answer, so a mass of requests with
 * one status, or with one due date, spreads over OPEN_INDEX_SHARDS partitions instead of one.
 */
export const OPEN_DUE_INDEX = 'open-by-due';
/** The index the ledger lists by status and due date (the open index; the old name is kept for its users). */
export const STATUS_DUE_INDEX = OPEN_DUE_INDEX;
/** The status/due index of ledgers created before the open index: kept only during their migration (docs/deploy.md). */
export const LEGACY_STATUS_DUE_INDEX = 'by-status-due';

/** The open index's partition key attribute. */
export const OPEN_SHARD_ATTRIBUTE = 'open_shard';
/** Partitions each status is spread over. Changing it needs every open item rewritten. */
export const OPEN_INDEX_SHARDS = 16;
/** The attributes the open index carries besides its keys: what `svc-dsr list` and the deadline sweep read. */
export const OPEN_INDEX_ATTRIBUTES = [
  'status',
  'step',
  'outcome',
  'type',
  'regulation',
  'reference',
  'received_at',
  'extended',
] as const;

/** The shard of a request: a stable hash of its id, 0 to OPEN_INDEX_SHARDS - 1. */
export function openShardOf(requestId: string): number {
  return createHash('sha256').update(requestId, 'utf8').digest().readUInt32BE(0) % OPEN_INDEX_SHARDS;
}

/** The open index key of a request with this status: `<status>#<shard>`, or undefined once it is no longer owed. */
export function openShardKey(requestId: string, status: Status): string | undefined {
  return isOwed(status) ? `${status}#${openShardOf(requestId)}` : undefined;
}

/** True for a status the subject is still owed an answer on (in the open index). */
export function isOwed(status: Status): status is OwedStatus {
  return (OWED_STATUSES as readonly Status[]).includes(status);
}

/** A notice given to the subject: how, when, the team's reference, and when it was recorded. */
export const noticeSchema = z.object({
  channel: z.string(),
  at: z.string(),
  reference: z.string().optional(),
  recorded_at: z.string(),
});
export type Notice = z.infer<typeof noticeSchema>;

const archiveFacts = z.object({
  key: z.string(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string(),
  version_id: z.string().optional(),
  verified_at: z.string(),
  entries: z.number().int().nonnegative(),
});
export type ArchiveFacts = z.infer<typeof archiveFacts>;

/** The subject's own package (an access request's), built beside the archive from it. */
const subjectPackageFacts = z.object({
  key: z.string(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string(),
  version_id: z.string().optional(),
  /** The name it downloads as, e.g. your-data-2026-11-23.zip. */
  file_name: z.string(),
  built_at: z.string(),
  /** Whether the conversation details came from the activity call, and why not when they did not. */
  conversation_details: z.enum(['complete', 'partial', 'unavailable']),
  conversation_details_reason: z.string().optional(),
  /** The error name that ended the activity reading early, when one did. */
  activity_failure: z.string().optional(),
  /** Where the notification settings came from: the account (retrieve-user), the export, or nowhere. */
  settings_source: z.enum(['account', 'export', 'unavailable']).optional(),
  /** Why the account could not be read, when it could not (an error name, or SubjectNotFound). */
  account_failure: z.string().optional(),
});
export type SubjectPackageFacts = z.infer<typeof subjectPackageFacts>;

/** One request in the ledger. Identifiers live here and nowhere in workflow state. */
export const ledgerItemSchema = z.object({
  request_id: z.string(),
  fingerprint: z.string(),
  status: z.enum(STATUSES),
  step: z.enum(STEPS).optional(),
  outcome: z.enum(OUTCOMES).optional(),
  type: z.enum(['access', 'erasure']).optional(),
  regulation: z.enum(['gdpr', 'ccpa']).optional(),
  primary_key: z.string().optional(),
  received_at: z.string().optional(),
  verification: z.object({ method: z.string(), verified_by: z.string(), verified_at: z.string() }).optional(),
  reference: z.string().optional(),
  submitted_by: z.string().optional(),
  due_at: z.string().optional(),
  extension_limit_at: z.string().optional(),
  confirm_by: z.string().nullable().optional(),
  /** Set when the request was already past its due date when intake received it. */
  overdue_at_intake: z.boolean().optional(),
  extended: z.boolean().default(false),
  extension_reason: z.string().optional(),
  svc_user_id: z.string().optional(),
  export_id: z.string().optional(),
  export_attempts: z.number().int().nonnegative().default(0),
  /** Attempts spent before the last operator retry: each retry gets a fresh attempt budget. */
  export_attempts_base: z.number().int().nonnegative().default(0),
  export_status: z.enum(['starting', 'pending', 'completed', 'failed']).optional(),
  /**
   * How the last export start went, apart from the count: `in_flight` while its POST is out,
   * `accepted` with an export id, `refused` when it never reached the platform or was turned away
   * before an export began (not counted), `uncertain` when it may have started one (no answer, a
   * reset, a 5xx), `interrupted` when the process died with the POST in flight (counted: it may
   * have reached the platform).
   */
  export_start: z.enum(EXPORT_START_OUTCOMES).optional(),
  /** Export starts that did not reach the platform or were refused before any export began (not attempts). */
  export_starts_refused: z.number().int().nonnegative().optional(),
  /** Waits for platform capacity (rate, export slot, outage) since the subject was last resolved. */
  platform_waits: z.number().int().nonnegative().optional(),
  /** Of those, the waits for a free export slot: they alone set how long the next one lasts. */
  export_slot_waits: z.number().int().nonnegative().optional(),
  export_polls: z.number().int().nonnegative().default(0),
  export_waited_seconds: z.number().int().nonnegative().default(0),
  export_started_at: z.string().optional(),
  archive: archiveFacts.optional(),
  subject_package: subjectPackageFacts.optional(),
  erasure: z
    .object({
      outcome: z.enum(['deleted', 'already_absent']),
      /** The DELETE's HTTP status, or the retrieve's when an interrupted DELETE is confirmed by it. */
      platform_status: z.number(),
      /** How the outcome is known: the DELETE's own answer, or a not-found after an interrupted DELETE. */
      evidence: z.enum(ERASURE_EVIDENCE).optional(),
      at: z.string(),
    })
    .optional(),
  erasure_verification: z.object({ platform_answer: z.literal('not_found'), at: z.string() }).optional(),
  error: z.object({ code: z.string(), message: z.string() }).optional(),
  /** Failures after the first, from a redriven execution: `error` keeps the one that failed the request. */
  later_errors: z.array(z.object({ code: z.string(), message: z.string(), at: z.string() })).optional(),
  rejection_errors: z.array(z.string()).optional(),
  cancel_reason: z.string().optional(),
  /** The notices given to the subject, one field per kind (the latest; the audit trail keeps each). */
  notice_receipt: noticeSchema.optional(),
  notice_extension: noticeSchema.optional(),
  notice_response: noticeSchema.optional(),
  notice_denial: noticeSchema.optional(),
  /** Why a valid request was denied (status `denied`): the code, and the operator's words if any. */
  denial: z.object({ code: z.enum(DENIAL_CODES), reason: z.string().optional(), at: z.string() }).optional(),
  duplicates: z.number().int().nonnegative().default(0),
  conflicts: z.number().int().nonnegative().default(0),
  executions: z.number().int().nonnegative().default(0),
  /** How often the reconciler started a new execution for a request left open without one. */
  resumes: z.number().int().nonnegative().optional(),
  created_at: z.string(),
  updated_at: z.string(),
  completed_at: z.string().optional(),
  /** The hash of the last record of the request's audit chain, set with every append. */
  audit_head: z.string().optional(),
  /** How many records the request's audit chain has, set with every append. */
  audit_count: z.number().int().nonnegative().optional(),
  /** When the last audit record was written: the daily manifest locks the chains that changed on a day. */
  audit_at: z.string().optional(),
  /** The head of the request's notices chain (`audit/<request_id>.notices/`), kept as `audit_head` is. */
  notices_audit_head: z.string().optional(),
  /** How many records the notices chain has. */
  notices_audit_count: z.number().int().nonnegative().optional(),
  /** When the last notices record was written: the daily manifest locks it as it locks the request's chain. */
  notices_audit_at: z.string().optional(),
  /** The head of the request's packages chain (`audit/<request_id>.packages/`): one record per hand-out. */
  packages_audit_head: z.string().optional(),
  /** How many records the packages chain has: how many times the archive was handed out. */
  packages_audit_count: z.number().int().nonnegative().optional(),
  /** When the last hand-out was recorded. */
  packages_audit_at: z.string().optional(),
  /**
   * When the retention pass replaced the fields that name the subject or a person (MINIMISED_FIELDS)
   * with their keyed hashes; the §7101 facts stay as they were.
   */
  minimised_at: z.string().optional(),
});
export type LedgerItem = z.infer<typeof ledgerItemSchema>;

/** The times a ledger scan can select on: when a request was created, or when a chain last changed. */
export type LedgerTimeField = 'created_at' | 'audit_at' | SideChain['fields']['at'];

/**
 * A side chain of a request (`audit/<request_id>.<kind>/`) as the ledger anchors it: the fields of
 * its item that keep the chain's head, as `audit_head`, `audit_count` and `audit_at` keep the
 * request's own, and when the bucket must hold it. A side chain has no final record.
 */
export interface SideChain {
  readonly kind: SideChainKind;
  readonly fields: {
    readonly head: 'notices_audit_head' | 'packages_audit_head';
    readonly count: 'notices_audit_count' | 'packages_audit_count';
    readonly at: 'notices_audit_at' | 'packages_audit_at';
  };
  /** What its records are, for messages: "the ledger records <what>". */
  readonly what: string;
  /** Whether the ledger says the chain exists, so the bucket must hold it. */
  readonly required: (item: LedgerItem) => boolean;
}

/**
 * The side chains, each anchored as the request's own chain is: the ledger head written with every
 * append, the daily manifest, and `svc-dsr verify`.
 */
export const SIDE_CHAINS: readonly SideChain[] = [
  {
    kind: 'notices',
    fields: { head: 'notices_audit_head', count: 'notices_audit_count', at: 'notices_audit_at' },
    what: 'notices to the subject',
    // A notice is written to the ledger before its record: the notice fields require the chain too.
    required: (item) =>
      item.notices_audit_count !== undefined ||
      item.notice_receipt !== undefined ||
      item.notice_response !== undefined ||
      item.notice_denial !== undefined,
  },
  {
    kind: 'packages',
    fields: { head: 'packages_audit_head', count: 'packages_audit_count', at: 'packages_audit_at' },
    what: 'package hand-outs',
    // The hand-out record comes first and its ledger head after it: the head's count is the hand-outs.
    required: (item) => item.packages_audit_count !== undefined,
  },
];

/** The ledger fields that keep the head of a chain: the request's own, or one of its side chains. */
export function chainHeadFields(side: SideChainKind | undefined): {
  readonly head: 'audit_head' | SideChain['fields']['head'];
  readonly count: 'audit_count' | SideChain['fields']['count'];
  readonly at: 'audit_at' | SideChain['fields']['at'];
} {
  return (
    SIDE_CHAINS.find((chain) => chain.kind === side)?.fields ?? {
      head: 'audit_head',
      count: 'audit_count',
      at: 'audit_at',
    }
  );
}

/** An open request as the open index holds it: what listing and the deadline sweep need, no identifiers. */
export const openRequestSchema = ledgerItemSchema.pick({
  request_id: true,
  status: true,
  step: true,
  outcome: true,
  type: true,
  regulation: true,
  reference: true,
  received_at: true,
  due_at: true,
  extended: true,
});
export type OpenRequest = z.infer<typeof openRequestSchema>;

/** Fields a step may set; `undefined` leaves a field alone, `null` removes it. */
export type LedgerPatch = { [K in keyof LedgerItem]?: LedgerItem[K] | null };

export type CreateResult =
  | { readonly created: true; readonly item: LedgerItem }
  | { readonly created: false; readonly existing: LedgerItem };

/**
 * The request ledger on DynamoDB. Every write is conditional, so two executions, a redrive and an
 * operator command can never overwrite each other's facts.
 */
export class Ledger {
  constructor(
    private readonly db: DynamoDBClient,
    readonly tableName: string,
    private readonly clock: () => Date = () => new Date(),
  ) {}

  /** Records a valid request as `received`, unless the request_id is already known. */
  async createReceived(
    request: DsrRequest,
    fingerprint: string,
    deadlines: Deadlines & { readonly overdue_at_intake?: boolean },
  ): Promise<CreateResult> {
    return this.#create({
      ...request,
      ...deadlines,
      ...this.#fresh(request.request_id, fingerprint),
      status: 'received',
    });
  }

  /** Records an invalid request as `rejected` with every field error, unless the id is already known. */
  async createRejected(
    requestId: string,
    fingerprint: string,
    errors: readonly string[],
  ): Promise<CreateResult> {
    const fresh = this.#fresh(requestId, fingerprint);
    return this.#create({
      ...fresh,
      status: 'rejected',
      rejection_errors: [...errors],
      completed_at: fresh.created_at,
    });
  }

  /**
   * Records a valid request the controller denies at intake (its identity was not verified by an
   * accepted method) as `denied`, with its deadlines (the subject is owed a notice of the denial),
   * unless the request_id is already known.
   */
  async createDenied(
    request: DsrRequest,
    fingerprint: string,
    deadlines: Deadlines,
    denial: { readonly code: DenialCode; readonly reason?: string },
  ): Promise<CreateResult> {
    const fresh = this.#fresh(request.request_id, fingerprint);
    return this.#create({
      ...request,
      ...deadlines,
      ...fresh,
      status: 'denied',
      denial: { ...denial, at: fresh.created_at },
      completed_at: fresh.created_at,
    });
  }

  /** The fields every new item starts with. */
  #fresh(requestId: string, fingerprint: string) {
    const now = this.clock().toISOString();
    return {
      request_id: normaliseRequestId(requestId),
      fingerprint,
      extended: false,
      export_attempts: 0,
      export_attempts_base: 0,
      export_polls: 0,
      export_waited_seconds: 0,
      duplicates: 0,
      conflicts: 0,
      executions: 0,
      created_at: now,
      updated_at: now,
    };
  }

  async get(requestId: string): Promise<LedgerItem | undefined> {
    const { Item } = await this.db.send(
      new GetItemCommand({ TableName: this.tableName, Key: keyOf(requestId), ConsistentRead: true }),
    );
    return Item === undefined ? undefined : parseItem(unmarshall(Item));
  }

  /** The item, or a LedgerStateError when the ledger has never heard of the request. */
  async require(requestId: string): Promise<LedgerItem> {
    const item = await this.get(requestId);
    if (item === undefined) throw new LedgerStateError('the ledger has no record of this request');
    return item;
  }

  /**
   * Applies `patch` when the item's status is one of `allowed` and every field in `present` is set.
   * A request cancelled meanwhile raises RequestCancelledError; any other mismatch raises
   * LedgerStateError naming both statuses.
   */
  async update(
    requestId: string,
    patch: LedgerPatch,
    allowed: readonly Status[],
    present: readonly (keyof LedgerItem)[] = [],
  ): Promise<LedgerItem> {
    const names: Record<string, string> = {};
    for (const field of present) names[`#${field}`] = field;
    const condition = allOf(
      statusIn(allowed),
      ...present.map((field) => ({
        expression: `attribute_exists(#${field})`,
        names: { [`#${field}`]: field },
        values: {},
      })),
    );
    const updated = await this.#updateIf(requestId, this.#patchExpression(requestId, patch, condition));
    if (updated !== undefined) return updated;
    const current = await this.get(requestId);
    if (current === undefined) throw new LedgerStateError('the ledger has no record of this request');
    if (current.status === 'cancelled') throw new RequestCancelledError('the request was cancelled');
    throw new LedgerStateError(`the request is ${current.status}; this change needs ${allowed.join(' or ')}`);
  }

  /**
   * The update expression of `patch`, guarded by `condition` (and the item existing). A status in
   * the patch moves the open index key with it: in the index while the request is owed an answer,
   * out after.
   */
  #patchExpression(requestId: string, patch: LedgerPatch, condition: LedgerCondition) {
    const sets: string[] = ['#updated_at = :updated_at'];
    const removes: string[] = [];
    const names: Record<string, string> = { '#updated_at': 'updated_at', ...condition.names };
    const values: Record<string, unknown> = {
      ':updated_at': this.clock().toISOString(),
      ...condition.values,
    };
    for (const [field, value] of Object.entries(patch)) {
      if (value === undefined || field === 'request_id' || field === 'updated_at') continue;
      names[`#${field}`] = field;
      if (value === null) removes.push(`#${field}`);
      else {
        sets.push(`#${field} = :${field}`);
        values[`:${field}`] = value;
      }
    }
    if (patch.status !== undefined && patch.status !== null) {
      const shard = openShardKey(requestId, patch.status);
      names['#open_shard'] = OPEN_SHARD_ATTRIBUTE;
      if (shard === undefined) removes.push('#open_shard');
      else {
        sets.push('#open_shard = :open_shard');
        values[':open_shard'] = shard;
      }
    }
    return {
      update: `SET ${sets.join(', ')}${removes.length > 0 ? ` REMOVE ${removes.join(', ')}` : ''}`,
      condition: `attribute_exists(request_id) AND ${condition.expression}`,
      names,
      values,
    };
  }

  /**
   * Cancels an open request before its erasure has started (CAN_CANCEL): status `cancelled` with
   * the reason, out of the open index, and no archive kept in the ledger (the caller deletes the
   * copies). Answers the item before and after.
   */
  async cancel(requestId: string, change: { readonly reason: string }): Promise<RuledChange> {
    return this.#applyRule(requestId, CAN_CANCEL, undefined, () => ({
      status: 'cancelled',
      cancel_reason: change.reason,
      completed_at: this.clock().toISOString(),
      archive: null,
      subject_package: null,
    }));
  }

  /**
   * Extends the deadline once, with a reason, before the original one has passed (CAN_EXTEND): the
   * new due date is the statutory limit. Two operators extending at once get one extension.
   */
  async extend(
    requestId: string,
    change: { readonly reason: string; readonly notice: Omit<Notice, 'recorded_at'> },
  ): Promise<RuledChange> {
    const input = { reason: change.reason, now: this.clock() };
    return this.#applyRule(requestId, CAN_EXTEND, input, (item) => ({
      due_at: extensionOf(item, input).due_at,
      extended: true,
      extension_reason: change.reason,
      // An extension is valid only if the subject is told in time: the notice is recorded with it.
      notice_extension: { ...change.notice, recorded_at: input.now.toISOString() },
    }));
  }

  /** Records a notice given to the subject (CAN_NOTICE: a kind the request's state calls for). */
  async recordNotice(
    requestId: string,
    kind: NoticeKind,
    notice: Omit<Notice, 'recorded_at'>,
  ): Promise<RuledChange> {
    const input = { kind, at: notice.at, now: this.clock() };
    return this.#applyRule(requestId, CAN_NOTICE, input, () => ({
      [`notice_${kind}`]: { ...notice, recorded_at: input.now.toISOString() },
    }));
  }

  /**
   * Denies a request still owed an answer before its erasure has started (CAN_DENY): status
   * `denied` with the code and the reason, out of the open index, and no archive kept in the ledger
   * (the caller deletes the copies: a denied request is never exported).
   */
  async deny(
    requestId: string,
    change: { readonly code: DenialCode; readonly reason: string },
  ): Promise<RuledChange> {
    const now = this.clock().toISOString();
    return this.#applyRule(requestId, CAN_DENY, undefined, () => ({
      status: 'denied',
      denial: { code: change.code, reason: change.reason, at: now },
      completed_at: now,
      archive: null,
      subject_package: null,
    }));
  }

  /**
   * Resets a failed request, or an open one no execution is running, for a new execution
   * (CAN_RETRY): error cleared, a fresh export and wait budget (the attempts already spent stay
   * on record), `executions` one more. `liveExecution` says why an open request needs no retry
   * (its execution is running), or undefined. The executions count doubles as a lock: two
   * operators retrying at once reset it once.
   */
  async retry(
    requestId: string,
    change: { readonly liveExecution: (item: LedgerItem) => Promise<string | undefined> },
  ): Promise<RetryChange> {
    let plan: RetryPlan | undefined;
    const { before, after } = await this.#applyRule(
      requestId,
      CAN_RETRY,
      undefined,
      (item) => {
        plan = retryPlanOf(item);
        return {
          status: plan.status,
          executions: plan.execution,
          export_attempts_base: item.export_attempts,
          export_waited_seconds: 0,
          ...(plan.freshExport ? { export_status: 'failed' as const } : {}),
          error: null,
        };
      },
      change.liveExecution,
    );
    if (plan === undefined) throw new LedgerStateError('the retry was applied without a plan');
    return { before, after, ...plan };
  }

  /**
   * Puts a retried request back as it was when its execution could not start, so the ledger never
   * shows a run that is not happening; only while the retry's reset is still what the ledger holds.
   */
  async undoRetry(before: LedgerItem, retried: RetryPlan): Promise<LedgerItem | undefined> {
    const patch: LedgerPatch = {
      status: 'failed',
      executions: before.executions,
      error: before.error ?? {
        code: 'retry_not_started',
        message: 'the retry could not start an execution',
      },
    };
    const condition = allOf(statusIn([retried.status]), executionsAre(retried.execution));
    return this.#updateIf(before.request_id, this.#patchExpression(before.request_id, patch, condition));
  }

  /**
   * Reads the request, checks `rule` (and `check`), writes `patchOf(item)` on the rule's condition,
   * and answers the item before and after. A request that changed in between is read again: the
   * rule's refusal for it, or a LedgerRuleError asking to run the command again.
   */
  async #applyRule<Input>(
    requestId: string,
    rule: LedgerRule<Input>,
    input: Input,
    patchOf: (item: LedgerItem) => LedgerPatch,
    check?: (item: LedgerItem) => Promise<string | undefined>,
  ): Promise<RuledChange> {
    const judge = async (item: LedgerItem): Promise<void> => {
      const refusal = rule.refusal(item, input) ?? (await check?.(item));
      if (refusal !== undefined) throw new LedgerRuleError(refusal);
    };
    const before = await this.#known(requestId);
    await judge(before);
    const expression = this.#patchExpression(
      before.request_id,
      patchOf(before),
      rule.condition(before, input),
    );
    const after = await this.#updateIf(before.request_id, expression);
    if (after !== undefined) return { before, after };
    await judge(await this.#known(requestId));
    throw new LedgerRuleError(
      `request ${before.request_id} changed while it was being ${rule.doing}; run the command again`,
    );
  }

  /**
   * Replaces the fields that name the subject or a person (MINIMISED_FIELDS) with their keyed
   * hashes once the request's retention has passed (CAN_MINIMISE), and marks it `minimised_at`. The
   * hashes of primary_key and svc_user_id are the audit records' subject hashes (same key, same
   * form), so a minimised request still matches its audit trail, and the controller can still
   * find the requests of a subject it knows.
   */
  async minimise(
    requestId: string,
    change: { readonly hmacKey: string; readonly afterDays: number },
  ): Promise<RuledChange> {
    const now = this.clock();
    return this.#applyRule(requestId, CAN_MINIMISE, { now, afterDays: change.afterDays }, (item) =>
      minimisedPatch(item, change.hmacKey, now),
    );
  }

  /**
   * The retention pass: minimises every ended request whose retention has passed and that is not
   * minimised yet (a Scan filtered on both, so a pass with nothing due writes nothing). The key is
   * read only once there is something to minimise. A request that moved meanwhile is left for the
   * next pass. Safe to run again: a minimised request is never rewritten.
   */
  async minimiseDue(options: {
    readonly hmacKey: () => Promise<string>;
    readonly afterDays: number;
    readonly pageSize?: number;
  }): Promise<{ readonly minimised: number; readonly skipped: number }> {
    const cutoff = new Date(this.clock().getTime() - options.afterDays * DAY_MS).toISOString();
    const candidates = this.#scanPages({
      expression: `attribute_not_exists(#minimised_at) AND #completed_at < :before AND #status IN (${MINIMISABLE_STATUSES.map((status) => `:if_${status}`).join(', ')})`,
      names: { '#minimised_at': 'minimised_at', '#completed_at': 'completed_at', '#status': 'status' },
      values: {
        ':before': cutoff,
        ...Object.fromEntries(MINIMISABLE_STATUSES.map((status) => [`:if_${status}`, status])),
      },
      ...(options.pageSize === undefined ? {} : { pageSize: options.pageSize }),
    });
    let key: string | undefined;
    let minimised = 0;
    let skipped = 0;
    for await (const item of candidates) {
      key ??= await options.hmacKey();
      try {
        await this.minimise(item.request_id, { hmacKey: key, afterDays: options.afterDays });
        minimised += 1;
      } catch (error) {
        if (!(error instanceof LedgerRuleError)) throw error;
        skipped += 1;
      }
    }
    return { minimised, skipped };
  }

  /** The item, or a RequestUnknownError naming the id. */
  async #known(requestId: string): Promise<LedgerItem> {
    const item = await this.get(requestId);
    if (item === undefined) {
      throw new RequestUnknownError(`the ledger has no request ${normaliseRequestId(requestId)}`);
    }
    return item;
  }

  /**
   * Counts one wait for platform capacity on an open request and answers how many it has made
   * since its execution resolved the subject (ResolveSubject clears the counts), with how many of
   * them were for an export slot when `forExportSlot`; undefined when the request is no longer open.
   */
  async countPlatformWait(
    requestId: string,
    forExportSlot = false,
  ): Promise<{ waits: number; exportSlotWaits: number } | undefined> {
    try {
      const answer = await this.db.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: keyOf(requestId),
          UpdateExpression: `SET #waits = if_not_exists(#waits, :zero) + :one, ${
            forExportSlot ? '#slot_waits = if_not_exists(#slot_waits, :zero) + :one, ' : ''
          }#updated_at = :now`,
          ConditionExpression: 'attribute_exists(request_id) AND #status IN (:received, :running)',
          ExpressionAttributeNames: {
            '#waits': 'platform_waits',
            ...(forExportSlot ? { '#slot_waits': 'export_slot_waits' } : {}),
            '#updated_at': 'updated_at',
            '#status': 'status',
          },
          ExpressionAttributeValues: marshall({
            ':zero': 0,
            ':one': 1,
            ':now': this.clock().toISOString(),
            ':received': 'received',
            ':running': 'running',
          }),
          ReturnValues: 'UPDATED_NEW',
        }),
      );
      const waits = answer.Attributes?.platform_waits?.N;
      if (waits === undefined) return undefined;
      return { waits: Number(waits), exportSlotWaits: Number(answer.Attributes?.export_slot_waits?.N ?? 0) };
    } catch (error) {
      if (error instanceof Error && error.name === 'ConditionalCheckFailedException') return undefined;
      throw error;
    }
  }

  /**
   * Counts one status poll of the export `exportId` and the seconds waited before it, on a running
   * request whose export under way is that one and still pending; `finished` records the export's
   * end (and the step that follows) in the same write. Answers the item as it now is, or undefined
   * when the request is not in that state: the caller then reads what changed.
   */
  async countPoll(
    requestId: string,
    exportId: string,
    waitedSeconds: number,
    finished?: { export_status: 'completed' | 'failed'; step?: Step },
  ): Promise<LedgerItem | undefined> {
    const sets = [
      '#polls = if_not_exists(#polls, :zero) + :one',
      '#waited = if_not_exists(#waited, :zero) + :waited',
      '#updated_at = :now',
    ];
    const names: Record<string, string> = {
      '#status': 'status',
      '#export_id': 'export_id',
      '#export_status': 'export_status',
      '#polls': 'export_polls',
      '#waited': 'export_waited_seconds',
      '#updated_at': 'updated_at',
    };
    const values: Record<string, unknown> = {
      ':zero': 0,
      ':one': 1,
      ':waited': waitedSeconds,
      ':now': this.clock().toISOString(),
      ':running': 'running',
      ':export_id': exportId,
      ':pending': 'pending',
    };
    if (finished !== undefined) {
      sets.push('#export_status = :finished');
      values[':finished'] = finished.export_status;
      if (finished.step !== undefined) {
        sets.push('#step = :step');
        names['#step'] = 'step';
        values[':step'] = finished.step;
      }
    }
    return this.#updateIf(requestId, {
      update: `SET ${sets.join(', ')}`,
      condition: '#status = :running AND #export_id = :export_id AND #export_status = :pending',
      names,
      values,
    });
  }

  /** Applies the update when the condition holds and answers the item as it now is; undefined when it does not hold. */
  async #updateIf(
    requestId: string,
    expression: {
      update: string;
      condition: string;
      names: Record<string, string>;
      values: Record<string, unknown>;
    },
  ): Promise<LedgerItem | undefined> {
    try {
      const { Attributes } = await this.db.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: keyOf(requestId),
          UpdateExpression: expression.update,
          ConditionExpression: expression.condition,
          ExpressionAttributeNames: expression.names,
          ExpressionAttributeValues: toAttributes(expression.values),
          ReturnValues: 'ALL_NEW',
        }),
      );
      return parseItem(unmarshall(Attributes ?? {}));
    } catch (error) {
      if (isConditionalFailure(error)) return undefined;
      throw error;
    }
  }

  /**
   * Claims the next execution of an open request left without a running one: `executions` goes
   * from `from.executions` to one more and `resumes` counts it, only while the status is still
   * `from.status` and no one else claimed it (a retry, another reconciler). Answers the item, or
   * undefined when the request moved meanwhile.
   */
  async claimResume(
    requestId: string,
    from: { readonly status: Status; readonly executions: number },
  ): Promise<LedgerItem | undefined> {
    return this.#updateIf(requestId, {
      update: 'SET #executions = :next, #resumes = if_not_exists(#resumes, :zero) + :one, #updated_at = :now',
      condition: '#status = :status AND (attribute_not_exists(#executions) OR #executions = :executions)',
      names: {
        '#executions': 'executions',
        '#resumes': 'resumes',
        '#updated_at': 'updated_at',
        '#status': 'status',
      },
      values: {
        ':next': from.executions + 1,
        ':executions': from.executions,
        ':zero': 0,
        ':one': 1,
        ':now': this.clock().toISOString(),
        ':status': from.status,
      },
    });
  }

  /**
   * Moves the open index key of a request to the status it has (the state machine's own failure
   * write sets the status only). Answers true when it moved.
   */
  async reindexOpen(requestId: string, status: Status): Promise<boolean> {
    const shard = openShardKey(requestId, status);
    const updated = await this.#updateIf(requestId, {
      update: shard === undefined ? 'REMOVE #shard' : 'SET #shard = :shard',
      condition: '#status = :status',
      names: { '#shard': OPEN_SHARD_ATTRIBUTE, '#status': 'status' },
      values: { ':status': status, ...(shard === undefined ? {} : { ':shard': shard }) },
    });
    return updated !== undefined;
  }

  /**
   * Keeps the head of the request's audit chain (its last record's hash, the record count and when
   * it was written), whatever the status. A head with no more records than the one kept is
   * ignored: of two writers, the later record wins whichever reports first.
   */
  async recordAuditHead(requestId: string, head: AuditHead): Promise<void> {
    // A side chain (`<request_id>.notices`, `.packages`) keeps its head on the request's item, beside the other.
    const chain = parseChainId(requestId);
    const fields = chainHeadFields(chain.side);
    try {
      await this.db.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: keyOf(chain.requestId),
          UpdateExpression: 'SET #head = :head, #count = :count, #at = :at',
          ConditionExpression:
            'attribute_exists(request_id) AND (attribute_not_exists(#count) OR #count < :count)',
          ExpressionAttributeNames: { '#head': fields.head, '#count': fields.count, '#at': fields.at },
          ExpressionAttributeValues: toAttributes({
            ':head': head.hash,
            ':count': head.count,
            ':at': head.at,
          }),
        }),
      );
    } catch (error) {
      if (!isConditionalFailure(error)) throw error;
    }
  }

  /**
   * Every item of the ledger, page by page (a Scan: for verification and the daily manifest, not
   * for the request path), optionally only those whose `field` (or any of several fields) lies in
   * [from, to).
   */
  async *scan(
    options: {
      field?: LedgerTimeField | readonly LedgerTimeField[];
      from?: string;
      to?: string;
      pageSize?: number;
    } = {},
  ): AsyncGenerator<LedgerItem> {
    const fields: readonly LedgerTimeField[] =
      options.field === undefined
        ? ['created_at']
        : typeof options.field === 'string'
          ? [options.field]
          : options.field;
    const names: Record<string, string> = {};
    const values: Record<string, unknown> = {};
    if (options.from !== undefined) values[':from'] = options.from;
    if (options.to !== undefined) values[':to'] = options.to;
    const clauses = fields.map((field, index) => {
      names[`#field${index}`] = field;
      return [
        ...(options.from === undefined ? [] : [`#field${index} >= :from`]),
        ...(options.to === undefined ? [] : [`#field${index} < :to`]),
      ].join(' AND ');
    });
    const filtered = options.from !== undefined || options.to !== undefined;
    yield* this.#scanPages({
      ...(filtered ? { expression: clauses.map((clause) => `(${clause})`).join(' OR '), names, values } : {}),
      ...(options.pageSize === undefined ? {} : { pageSize: options.pageSize }),
    });
  }

  /** Every item that passes the filter, page by page. */
  async *#scanPages(filter: {
    expression?: string;
    names?: Record<string, string>;
    values?: Record<string, unknown>;
    pageSize?: number;
  }): AsyncGenerator<LedgerItem> {
    let cursor: Record<string, AttributeValue> | undefined;
    do {
      const page = await this.db.send(
        new ScanCommand({
          TableName: this.tableName,
          ...(filter.expression === undefined
            ? {}
            : {
                FilterExpression: filter.expression,
                ExpressionAttributeNames: filter.names,
                ExpressionAttributeValues: toAttributes(filter.values ?? {}),
              }),
          ...(filter.pageSize === undefined ? {} : { Limit: filter.pageSize }),
          ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
        }),
      );
      for (const raw of page.Items ?? []) yield parseItem(unmarshall(raw));
      cursor = page.LastEvaluatedKey;
    } while (cursor !== undefined);
  }

  /** Adds one to a counter (duplicates, conflicts, executions) whatever the status. */
  async increment(requestId: string, counter: 'duplicates' | 'conflicts' | 'executions'): Promise<void> {
    await this.db.send(
      new UpdateItemCommand({
        TableName: this.tableName,
        Key: keyOf(requestId),
        UpdateExpression: 'SET #counter = if_not_exists(#counter, :zero) + :one, #updated_at = :now',
        ConditionExpression: 'attribute_exists(request_id)',
        ExpressionAttributeNames: { '#counter': counter, '#updated_at': 'updated_at' },
        ExpressionAttributeValues: toAttributes({
          ':zero': 0,
          ':one': 1,
          ':now': this.clock().toISOString(),
        }),
      }),
    );
  }

  /**
   * Open requests with this status, earliest due first, optionally only those due before
   * `dueBefore`: every shard of the open index is queried page by page and the pages merged, so
   * only one page per shard is held at a time.
   */
  openRequests(
    status: OwedStatus,
    options: { dueBefore?: string; pageSize?: number } = {},
  ): AsyncGenerator<OpenRequest> {
    const shards = Array.from({ length: OPEN_INDEX_SHARDS }, (_, shard) =>
      this.#openShard(`${status}#${shard}`, options),
    );
    return mergeByDueDate(shards);
  }

  async *#openShard(
    shardKey: string,
    options: { dueBefore?: string; pageSize?: number },
  ): AsyncGenerator<OpenRequest> {
    const values: Record<string, unknown> = { ':shard': shardKey };
    let keyCondition = '#shard = :shard';
    if (options.dueBefore !== undefined) {
      keyCondition += ' AND #due_at < :due';
      values[':due'] = options.dueBefore;
    }
    let cursor: Record<string, AttributeValue> | undefined;
    do {
      const page = await this.db.send(
        new QueryCommand({
          TableName: this.tableName,
          IndexName: OPEN_DUE_INDEX,
          KeyConditionExpression: keyCondition,
          ExpressionAttributeNames: {
            '#shard': OPEN_SHARD_ATTRIBUTE,
            ...(options.dueBefore === undefined ? {} : { '#due_at': 'due_at' }),
          },
          ExpressionAttributeValues: toAttributes(values),
          ...(options.pageSize === undefined ? {} : { Limit: options.pageSize }),
          ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
        }),
      );
      for (const raw of page.Items ?? []) yield parseOpenRequest(unmarshall(raw));
      cursor = page.LastEvaluatedKey;
    } while (cursor !== undefined);
  }

  /**
   * Puts every open request of a ledger written before the open index into it: each received,
   * running or failed item without its `open_shard` gets it, on the condition that its status is
   * still the one read (a request that moved meanwhile was indexed by that write). Safe to run
   * again; answers how many items it indexed.
   */
  async backfillOpenIndex(): Promise<number> {
    let indexed = 0;
    let cursor: Record<string, AttributeValue> | undefined;
    do {
      const page = await this.db.send(
        new ScanCommand({
          TableName: this.tableName,
          ProjectionExpression: 'request_id, #status, #shard',
          FilterExpression: `#status IN (${OWED_STATUSES.map((_, index) => `:owed${index}`).join(', ')})`,
          ExpressionAttributeNames: { '#status': 'status', '#shard': OPEN_SHARD_ATTRIBUTE },
          ExpressionAttributeValues: toAttributes(
            Object.fromEntries(OWED_STATUSES.map((status, index) => [`:owed${index}`, status])),
          ),
          ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
        }),
      );
      for (const raw of page.Items ?? []) {
        const item = z
          .object({
            request_id: z.string(),
            status: z.enum(STATUSES),
            [OPEN_SHARD_ATTRIBUTE]: z.string().optional(),
          })
          .parse(unmarshall(raw));
        const shard = openShardKey(item.request_id, item.status);
        if (shard === undefined || item[OPEN_SHARD_ATTRIBUTE] === shard) continue;
        try {
          await this.db.send(
            new UpdateItemCommand({
              TableName: this.tableName,
              Key: keyOf(item.request_id),
              UpdateExpression: 'SET #shard = :shard',
              ConditionExpression: '#status = :status',
              ExpressionAttributeNames: { '#status': 'status', '#shard': OPEN_SHARD_ATTRIBUTE },
              ExpressionAttributeValues: toAttributes({ ':shard': shard, ':status': item.status }),
            }),
          );
          indexed += 1;
        } catch (error) {
          if (!isConditionalFailure(error)) throw error;
        }
      }
      cursor = page.LastEvaluatedKey;
    } while (cursor !== undefined);
    return indexed;
  }

  async #create(item: LedgerItem): Promise<CreateResult> {
    const parsed = ledgerItemSchema.parse(item);
    try {
      await this.db.send(
        new PutItemCommand({
          TableName: this.tableName,
          Item: toAttributes({
            ...parsed,
            [OPEN_SHARD_ATTRIBUTE]: openShardKey(parsed.request_id, parsed.status),
          }),
          ConditionExpression: 'attribute_not_exists(request_id)',
        }),
      );
      return { created: true, item: parsed };
    } catch (error) {
      if (!isConditionalFailure(error)) throw error;
      return { created: false, existing: await this.require(item.request_id) };
    }
  }
}

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
const FRESH_EXPORT_CODES = ['export_failed', 'export_timed_out', 'download_link_expired'];

function retryPlanOf(item: LedgerItem): RetryPlan {
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

function statusIn(statuses: readonly Status[]): LedgerCondition {
  return {
    expression: `#status IN (${statuses.map((status) => `:if_${status}`).join(', ')})`,
    names: { '#status': 'status' },
    values: Object.fromEntries(statuses.map((status) => [`:if_${status}`, status])),
  };
}

function executionsAre(executions: number): LedgerCondition {
  return {
    expression: '(attribute_not_exists(#executions) OR #executions = :if_executions)',
    names: { '#executions': 'executions' },
    values: { ':if_executions': executions },
  };
}

function allOf(...conditions: LedgerCondition[]): LedgerCondition {
  return {
    expression: conditions.map((condition) => condition.expression).join(' AND '),
    names: Object.assign({}, ...conditions.map((condition) => condition.names)),
    values: Object.assign({}, ...conditions.map((condition) => condition.values)),
  };
}

function statusRefusal(item: LedgerItem, allowed: readonly Status[], what: string): string | undefined {
  if ((allowed as readonly string[]).includes(item.status)) return undefined;
  return `request ${item.request_id} is ${item.status}; only ${allowed.join(' or ')} requests can be ${what}`;
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
  condition: () => allOf(statusIn(CANCELLABLE_STATUSES), ERASURE_NOT_STARTED),
};

/** Statuses a request can be denied in: still owed an answer (and its erasure not started). */
export const DENIABLE_STATUSES = OWED_STATUSES;

/** Can deny: still owed an answer (received, running, failed), and the erasure has not started. */
export const CAN_DENY: LedgerRule<void> = {
  doing: 'denied',
  refusal(item) {
    return statusRefusal(item, DENIABLE_STATUSES, 'denied') ?? erasureRefusal(item, 'denied');
  },
  condition: () => allOf(statusIn(DENIABLE_STATUSES), ERASURE_NOT_STARTED),
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
        return `request ${item.request_id} is ${item.status}; a ${input.kind} notice is recorded only for ${allowed.join(' or ')} requests`;
      }
      if (input.kind === 'extension' && !item.extended) {
        return `request ${item.request_id} has not been extended; svc-dsr extend records the extension notice with the extension`;
      }
      if (Date.parse(input.at) > input.now.getTime() + 5 * 60_000) {
        return `the notice time ${input.at} is in the future; give the time the subject was told`;
      }
      return undefined;
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

/** The notices the request calls for and that are not recorded yet. */
export function noticesDue(item: LedgerItem, now: Date): NoticeDue[] {
  const due: NoticeDue[] = [];
  const add = (kind: NoticeKind, dueBy: string | null | undefined) => {
    if (item[`notice_${kind}`] !== undefined) return;
    const by = dueBy ?? null;
    due.push({ kind, due_by: by, overdue: by !== null && Date.parse(by) < now.getTime() });
  };
  if (item.status === 'rejected') return due;
  if (item.confirm_by !== null && item.confirm_by !== undefined) add('receipt', item.confirm_by);
  if (item.extended) add('extension', null);
  if (item.status === 'completed') add('response', item.due_at);
  if (item.status === 'denied') add('denial', item.due_at);
  return due;
}

/** The new due date of an extension, or why there is none (no deadlines, or `decideExtension` refuses). */
function extensionOf(
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
 * Can extend: an extendable status, deadlines recorded, not extended yet, a reason, and the
 * original deadline not passed (`decideExtension`); the write holds the due date it read.
 */
export const CAN_EXTEND: LedgerRule<{ readonly reason: string; readonly now: Date }> = {
  doing: 'extended',
  refusal: (item, input) =>
    statusRefusal(item, EXTENDABLE_STATUSES, 'extended') ?? extensionOf(item, input).refusal,
  condition: (item) =>
    allOf(statusIn(EXTENDABLE_STATUSES), {
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
    return undefined;
  },
  condition: (item) =>
    allOf(statusIn(RETRYABLE_STATUSES), statusIn([item.status]), executionsAre(item.executions)),
};

const DAY_MS = 24 * 3600 * 1000;

/**
 * Statuses whose requests are minimised once their retention has passed: ended, and owed nothing
 * more. A failed request is still owed an answer, and its retry needs the identifiers.
 */
export const MINIMISABLE_STATUSES = [
  'completed',
  'cancelled',
  'rejected',
  'denied',
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

/** When a request's retention ends: `afterDays` after it ended; undefined while it has not ended. */
export function retentionEndsAt(item: LedgerItem, afterDays: number): Date | undefined {
  if (item.completed_at === undefined) return undefined;
  return new Date(Date.parse(item.completed_at) + afterDays * DAY_MS);
}

/** The patch that minimises `item` with `hmacKey` at `now`. */
function minimisedPatch(item: LedgerItem, hmacKey: string, now: Date): LedgerPatch {
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
  condition: (item) =>
    allOf(statusIn(MINIMISABLE_STATUSES), statusIn([item.status]), {
      expression: 'attribute_not_exists(#minimised_at) AND #completed_at = :if_completed_at',
      names: { '#minimised_at': 'minimised_at', '#completed_at': 'completed_at' },
      values: { ':if_completed_at': item.completed_at ?? '' },
    }),
};

/** The item key; a request id is a UUID, kept in lower case whatever spelling the caller has. */
function keyOf(requestId: string): Record<string, AttributeValue> {
  return { request_id: { S: normaliseRequestId(requestId) } };
}

/** Plain values as DynamoDB attributes; undefined fields are left out, as the schema's optional ones are. */
function toAttributes(values: Record<string, unknown>): Record<string, AttributeValue> {
  return marshall(values, { removeUndefinedValues: true });
}

/** True for DynamoDB's conditional-write refusal, whichever SDK copy threw it. */
export function isConditionalFailure(error: unknown): boolean {
  return error instanceof Error && error.name === 'ConditionalCheckFailedException';
}

function parseOpenRequest(raw: Record<string, unknown>): OpenRequest {
  const parsed = openRequestSchema.safeParse(raw);
  if (!parsed.success) {
    throw new LedgerStateError(
      `an open index entry does not match the schema (${parsed.error.issues.map((issue) => issue.path.join('.')).join(', ')})`,
    );
  }
  return parsed.data;
}

/**
 * Merges streams that are each sorted by due date into one, earliest due first: the next item of
 * every stream is read ahead, in parallel.
 */
async function* mergeByDueDate(streams: AsyncGenerator<OpenRequest>[]): AsyncGenerator<OpenRequest> {
  const heads = await Promise.all(streams.map((stream) => stream.next()));
  for (;;) {
    let earliest: number | undefined;
    heads.forEach((head, index) => {
      if (head.done) return;
      const current = earliest === undefined ? undefined : heads[earliest];
      if (current === undefined || current.done || byDueDate(head.value, current.value) < 0) earliest = index;
    });
    if (earliest === undefined) return;
    const head = heads[earliest];
    const stream = streams[earliest];
    if (head === undefined || head.done || stream === undefined) return;
    yield head.value;
    heads[earliest] = await stream.next();
  }
}

function byDueDate(a: OpenRequest, b: OpenRequest): number {
  const left = a.due_at ?? '';
  const right = b.due_at ?? '';
  if (left !== right) return left < right ? -1 : 1;
  return a.request_id < b.request_id ? -1 : a.request_id > b.request_id ? 1 : 0;
}

function parseItem(raw: Record<string, unknown>): LedgerItem {
  const parsed = ledgerItemSchema.safeParse(raw);
  if (!parsed.success) {
    throw new LedgerStateError(
      `a ledger item does not match the schema (${parsed.error.issues.map((issue) => issue.path.join('.')).join(', ')})`,
    );
  }
  return parsed.data;
}
