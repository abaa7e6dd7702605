/**
 * The request ledger on DynamoDB: every read, and every write, each conditional. The item's layout is
 * in schema.ts, the operator changes' rules in rules.ts.
 */

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
import type { AuditHead } from '../audit.ts';
import { parseChainId } from '../audit-chains.ts';
import type { Deadlines } from '../deadlines.ts';
import {
  LedgerRuleError,
  LedgerStateError,
  RequestCancelledError,
  RequestUnknownError,
  SupersededRunError,
} from '../errors.ts';
import { type Corrections, correctionFields } from '../profile-fields.ts';
import { type DsrRequest, type IntakeWarning, normaliseRequestId } from '../request.ts';
import { type SiteResult, siteResultSchema } from '../site-outcomes.ts';
import { isSitePart, siteRequestId } from '../sites.ts';
import { readPrimaryKeys } from './key-reads.ts';
import { countOpenRequests, type OpenListFilter, readOpenPage } from './open-pages.ts';
import {
  allOf,
  CAN_CANCEL,
  CAN_DENY,
  CAN_EXTEND,
  CAN_MINIMISE,
  CAN_NOTICE,
  CAN_RETRY,
  DAY_MS,
  executionsAre,
  extensionOf,
  type LedgerCondition,
  type LedgerRule,
  minimisedPatch,
  type RetryChange,
  type RetryPlan,
  type RuledChange,
  retentionEndsAt,
  retryPlanOf,
  runIsCurrent,
  statusIn,
} from './rules.ts';
import {
  type CreateResult,
  chainHeadFields,
  type DenialCode,
  ENDED_INDEX,
  ENDED_SHARD_ATTRIBUTE,
  endedShardKey,
  type LedgerItem,
  type LedgerPatch,
  type LedgerTimeField,
  ledgerItemSchema,
  type Notice,
  type NoticeKind,
  OPEN_DUE_INDEX,
  OPEN_INDEX_SHARDS,
  OPEN_SHARD_ATTRIBUTE,
  type OpenRequest,
  OWED_STATUSES,
  type OwedStatus,
  openRequestSchema,
  openShardKey,
  STATUSES,
  type Status,
  type Step,
} from './schema.ts';

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
    deadlines: Deadlines & {
      readonly overdue_at_intake?: boolean;
      readonly intake_warnings?: readonly IntakeWarning[];
    },
    /** What a request in parts (createInParts) adds: its empty results, or a part's site and request. */
    parts: Pick<LedgerItem, 'sites' | 'site_results' | 'site' | 'parent_request_id'> = {},
  ): Promise<CreateResult> {
    const { corrections, ...rest } = request;
    const { intake_warnings: warnings, ...dates } = deadlines;
    return this.#create({
      ...rest,
      ...correctionItemFields(corrections, true),
      ...dates,
      ...(warnings === undefined || warnings.length === 0 ? {} : { intake_warnings: [...warnings] }),
      ...this.#fresh(request.request_id, fingerprint),
      ...parts,
      status: 'received',
    });
  }

  /**
   * Records a valid request that runs in parts, one per site, as `received`: the request's own
   * item, whose `site_results` its parts fill in (recordSiteResult), and one item per site, a
   * request of its own under siteRequestId with its `site` and `parent_request_id`, which the
   * workflow runs as it runs any request. Each item is created once: intake run again creates the
   * parts a run cut short, and leaves the others as they are.
   */
  async createInParts(
    request: DsrRequest,
    fingerprint: string,
    deadlines: Parameters<Ledger['createReceived']>[2],
    sites: readonly string[],
  ): Promise<{ readonly request: CreateResult; readonly parts: readonly CreateResult[] }> {
    const own = await this.createReceived(request, fingerprint, deadlines, {
      sites: [...sites],
      site_results: {},
    });
    const requestId = normaliseRequestId(request.request_id);
    const parts: CreateResult[] = [];
    for (const site of sites) {
      parts.push(
        await this.createReceived(
          { ...request, request_id: siteRequestId(requestId, site), sites: undefined },
          fingerprint,
          deadlines,
          {
            site,
            parent_request_id: requestId,
          },
        ),
      );
    }
    return { request: own, parts };
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
    const { corrections, ...rest } = request;
    return this.#create({
      ...rest,
      // A denied correction is never applied: its values are not kept.
      ...correctionItemFields(corrections, false),
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
    return this.#updateOn(
      requestId,
      patch,
      allowed,
      present.map((field) => ({
        expression: `attribute_exists(#${field})`,
        names: { [`#${field}`]: field },
        values: {},
      })),
    );
  }

  /**
   * `update`, by the execution whose run number is `run`, only while it is the request's current
   * run: no retry or resume has claimed a later one (`executions` is at most `run`; intake counts its
   * own execution just after starting it). A superseded run raises SupersededRunError and writes
   * nothing, so two executions of one request never both act on the platform.
   */
  async updateInRun(
    requestId: string,
    run: number | undefined,
    patch: LedgerPatch,
    allowed: readonly Status[],
  ): Promise<LedgerItem> {
    if (run === undefined) return this.update(requestId, patch, allowed);
    return this.#updateOn(requestId, patch, allowed, [runIsCurrent(run)], (current) =>
      current.executions > run
        ? new SupersededRunError(
            `execution run ${run} is superseded: the request's current run is ${current.executions}; this one stops`,
          )
        : undefined,
    );
  }

  async #updateOn(
    requestId: string,
    patch: LedgerPatch,
    allowed: readonly Status[],
    conditions: readonly LedgerCondition[],
    refusalOf?: (current: LedgerItem) => Error | undefined,
  ): Promise<LedgerItem> {
    const condition = allOf(statusIn(allowed), ...conditions);
    const updated = await this.#updateIf(requestId, this.#patchExpression(requestId, patch, condition));
    if (updated !== undefined) return updated;
    const current = await this.get(requestId);
    if (current === undefined) throw new LedgerStateError('the ledger has no record of this request');
    const refusal = refusalOf?.(current);
    if (refusal !== undefined) throw refusal;
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
    // When a request failed starts its retention (the retention pass minimises failed requests
    // too); the first failure counts until the request moves on (a retry), so a failure recorded
    // again does not push it back.
    if (patch.status !== undefined && patch.status !== null && patch.failed_at === undefined) {
      names['#failed_at'] = 'failed_at';
      if (patch.status === 'failed') {
        sets.push('#failed_at = if_not_exists(#failed_at, :failed_at)');
        values[':failed_at'] = values[':updated_at'];
      } else removes.push('#failed_at');
    }
    // The ended index holds a request from its end until it is minimised.
    const ended =
      patch.status === undefined || patch.status === null
        ? undefined
        : endedShardKey(requestId, patch.status);
    // A request that ends (completed, cancelled, denied) will never apply a correction's values.
    if (ended !== undefined && patch.correction_values === undefined) {
      names['#correction_values'] = 'correction_values';
      removes.push('#correction_values');
    }
    if (patch.minimised_at !== undefined && patch.minimised_at !== null) {
      names['#ended_shard'] = ENDED_SHARD_ATTRIBUTE;
      removes.push('#ended_shard');
    } else if (patch.status !== undefined && patch.status !== null) {
      names['#ended_shard'] = ENDED_SHARD_ATTRIBUTE;
      if (ended === undefined) removes.push('#ended_shard');
      else {
        sets.push('#ended_shard = :ended_shard');
        values[':ended_shard'] = ended;
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
    const input = { reason: change.reason, now: this.clock(), noticeAt: change.notice.at };
    return this.#applyRule(requestId, CAN_EXTEND, input, (item) => ({
      due_at: extensionOf(item, input).due_at,
      original_due_at: item.due_at,
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
      failed_at: before.failed_at ?? null,
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
    const current = await this.#known(requestId);
    await judge(current);
    if (current.executions !== before.executions) {
      throw new LedgerRuleError(
        `request ${before.request_id} was not ${rule.doing}: a retry or resume started run ${current.executions} of it at the same moment, and that change won; check it with npx svc-dsr status ${before.request_id}, then run the command again if it is still needed`,
      );
    }
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
   * minimised yet, read from the ended index (ENDED_INDEX) up to the cutoff, so a pass reads only
   * the requests due, whatever the ledger's history. The key is read only once there is something
   * to minimise. A request that moved meanwhile is left for the
   * next pass. Safe to run again: a minimised request is never rewritten.
   */
  async minimiseDue(options: {
    readonly hmacKey: () => Promise<string>;
    readonly afterDays: number;
    readonly pageSize?: number;
  }): Promise<{ readonly minimised: number; readonly skipped: number }> {
    const cutoff = new Date(this.clock().getTime() - options.afterDays * DAY_MS).toISOString();
    const candidates = this.#endedBefore(cutoff, options.pageSize);
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
        // A failed request minimised, then denied or cancelled, ended again: it has nothing left
        // for this pass, so it leaves the index instead of being skipped on every pass.
        if (!(await this.#leaveEndedIndexIfMinimised(item.request_id))) skipped += 1;
      }
    }
    // Failed requests stay in the open index (still owed an answer), not the ended one: each is
    // read and minimised once its retention since the failure has passed; one not due yet is
    // neither minimised nor counted as skipped.
    for await (const item of this.#failedDue(options.afterDays, options.pageSize)) {
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

  /** Removes `ended_shard` from a minimised item; answers whether it was one. */
  async #leaveEndedIndexIfMinimised(requestId: string): Promise<boolean> {
    try {
      await this.db.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: keyOf(requestId),
          UpdateExpression: 'REMOVE #ended_shard',
          ConditionExpression: 'attribute_exists(#minimised_at)',
          ExpressionAttributeNames: {
            '#ended_shard': ENDED_SHARD_ATTRIBUTE,
            '#minimised_at': 'minimised_at',
          },
        }),
      );
      return true;
    } catch (error) {
      if (isConditionalFailure(error)) return false;
      throw error;
    }
  }

  /** The failed requests not yet minimised whose retention since the failure has passed. */
  async *#failedDue(afterDays: number, pageSize: number | undefined): AsyncGenerator<LedgerItem> {
    const now = this.clock().getTime();
    for (let shard = 0; shard < OPEN_INDEX_SHARDS; shard++) {
      for await (const open of this.#openShard(
        `failed#${shard}`,
        pageSize === undefined ? {} : { pageSize },
      )) {
        const item = await this.get(open.request_id);
        if (item === undefined || item.status !== 'failed' || item.minimised_at !== undefined) continue;
        const ends = retentionEndsAt(item, afterDays);
        if (ends !== undefined && ends.getTime() <= now) yield item;
      }
    }
  }

  /**
   * The request ids of the ended index that ended before `cutoff`, every shard, page by page: the
   * ones the retention pass minimises.
   */
  async *#endedBefore(cutoff: string, pageSize: number | undefined): AsyncGenerator<{ request_id: string }> {
    yield* this.#ended('#completed_at < :at', cutoff, pageSize);
  }

  /**
   * The request ids of the ended index (completed, cancelled, rejected or denied, not minimised)
   * that ended at or after `since`, every shard, page by page: the deadline sweep reads their
   * response and denial notices.
   */
  async *endedSince(
    since: string,
    options: { readonly pageSize?: number } = {},
  ): AsyncGenerator<{ request_id: string }> {
    yield* this.#ended('#completed_at >= :at', since, options.pageSize);
  }

  async *#ended(
    timeCondition: string,
    at: string,
    pageSize: number | undefined,
  ): AsyncGenerator<{ request_id: string }> {
    for (let shard = 0; shard < OPEN_INDEX_SHARDS; shard++) {
      let cursor: Record<string, AttributeValue> | undefined;
      do {
        const page = await this.db.send(
          new QueryCommand({
            TableName: this.tableName,
            IndexName: ENDED_INDEX,
            KeyConditionExpression: `#shard = :shard AND ${timeCondition}`,
            ExpressionAttributeNames: { '#shard': ENDED_SHARD_ATTRIBUTE, '#completed_at': 'completed_at' },
            ExpressionAttributeValues: toAttributes({ ':shard': `ended#${shard}`, ':at': at }),
            ...(pageSize === undefined ? {} : { Limit: pageSize }),
            ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
          }),
        );
        for (const raw of page.Items ?? []) yield z.object({ request_id: z.string() }).parse(unmarshall(raw));
        cursor = page.LastEvaluatedKey;
      } while (cursor !== undefined);
    }
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
   * Records where one site's part of a request stands on the request's own item (`site_results`,
   * lambdas/shared/site-outcomes.ts) and answers the item after. Run again with the same result, it
   * changes nothing; an older result never replaces a newer one (a stream delivers changes at least
   * once, not always in order). Answers undefined when the request has no parts or is gone.
   */
  async recordSiteResult(
    requestId: string,
    site: string,
    result: SiteResult,
  ): Promise<LedgerItem | undefined> {
    const recorded = await this.#updateIf(requestId, {
      update: 'SET #results.#site = :result, #updated_at = :now',
      condition:
        'attribute_exists(request_id) AND attribute_exists(#results) AND (attribute_not_exists(#results.#site) OR #results.#site.#at <= :at)',
      names: { '#results': 'site_results', '#site': site, '#at': 'at', '#updated_at': 'updated_at' },
      values: {
        ':result': siteResultSchema.parse(result),
        ':at': result.at,
        ':now': this.clock().toISOString(),
      },
    });
    if (recorded !== undefined) return recorded;
    const current = await this.get(requestId);
    return current?.site_results === undefined ? undefined : current;
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
      /**
       * Told of each item the schema refuses, which is then left out; without it such an item ends
       * the scan with a LedgerStateError.
       */
      onInvalid?: (invalid: { readonly requestId: string | undefined; readonly problem: string }) => void;
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
      ...(options.onInvalid === undefined ? {} : { onInvalid: options.onInvalid }),
    });
  }

  /** Every item that passes the filter, page by page. */
  async *#scanPages(filter: {
    expression?: string;
    names?: Record<string, string>;
    values?: Record<string, unknown>;
    pageSize?: number;
    onInvalid?: (invalid: { readonly requestId: string | undefined; readonly problem: string }) => void;
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
      for (const raw of page.Items ?? []) {
        const plain = unmarshall(raw);
        const parsed = ledgerItemSchema.safeParse(plain);
        if (parsed.success) yield parsed.data;
        else if (filter.onInvalid === undefined) throw invalidItem(parsed.error);
        else {
          const requestId = typeof plain.request_id === 'string' ? plain.request_id : undefined;
          filter.onInvalid({ requestId, problem: schemaProblem(parsed.error) });
        }
      }
      cursor = page.LastEvaluatedKey;
    } while (cursor !== undefined);
  }

  /**
   * Counts intake's execution (`<request_id>`, run 1): `executions` becomes 1 unless a run is
   * already counted. Not an increment: StartExecution answers success again for a running execution
   * of the same name and input (a redelivered or duplicate message), and counting that as a second
   * run would make the running one look superseded.
   */
  async countFirstRun(requestId: string): Promise<void> {
    try {
      await this.db.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: keyOf(requestId),
          UpdateExpression: 'SET #executions = :one, #updated_at = :now',
          ConditionExpression:
            'attribute_exists(request_id) AND (attribute_not_exists(#executions) OR #executions < :one)',
          ExpressionAttributeNames: { '#executions': 'executions', '#updated_at': 'updated_at' },
          ExpressionAttributeValues: toAttributes({ ':one': 1, ':now': this.clock().toISOString() }),
        }),
      );
    } catch (error) {
      if (!(error instanceof Error && error.name === 'ConditionalCheckFailedException')) throw error;
      // A run is counted already (or the item is gone, which the caller's next read reports).
    }
  }

  /** Adds one to a counter (duplicates, conflicts) whatever the status. */
  async increment(requestId: string, counter: 'duplicates' | 'conflicts'): Promise<void> {
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
   * Open requests with this status, earliest due first (a site's part of a request in parts is
   * not one: its request is; the reconciler reads the parts page by page), optionally only those due before
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
    return requestsOnly(mergeByDueDate(shards));
  }

  /**
   * Every open request with one of these statuses, optionally only those due before `dueBefore`,
   * in no order, read with one scan of the open index, page by page. The index is sparse (open
   * requests only), so a reader that wants them all at once (`svc-dsr list`) makes one request
   * per megabyte of it, where openRequests makes at least one per shard and status.
   */
  async allOpenRequests(
    statuses: readonly OwedStatus[],
    options: { dueBefore?: string; pageSize?: number } = {},
  ): Promise<OpenRequest[]> {
    if (statuses.length === 0) return [];
    const values: Record<string, unknown> = {};
    const prefixes = statuses.map((status, index) => {
      values[`:status${index}`] = `${status}#`;
      return `begins_with(#shard, :status${index})`;
    });
    let filter = prefixes.length === 1 ? (prefixes[0] ?? '') : `(${prefixes.join(' OR ')})`;
    if (options.dueBefore !== undefined) {
      filter += ' AND #due_at < :due';
      values[':due'] = options.dueBefore;
    }
    const requests: OpenRequest[] = [];
    for await (const request of this.#openIndex('scan', filter, values, options)) {
      if (!isSitePart(request.request_id)) requests.push(request);
    }
    return requests;
  }

  /** One page of the open requests a person follows, filtered, earliest due first (open-pages.ts). */
  async openPage(
    filter: OpenListFilter,
    options: { readonly limit: number; readonly cursor?: string },
  ): Promise<{ readonly requests: OpenRequest[]; readonly next: string | null }> {
    return await readOpenPage(this.db, this.tableName, filter, options);
  }

  /** How many open requests of each status pass the filter (open-pages.ts). */
  async openCounts(filter: OpenListFilter): Promise<Record<OwedStatus, number>> {
    return await countOpenRequests(this.db, this.tableName, filter);
  }

  /** The primary_key of each request named, by request id (key-reads.ts). */
  async primaryKeys(requestIds: readonly string[]): Promise<Map<string, string>> {
    return await readPrimaryKeys(this.db, this.tableName, requestIds);
  }

  /**
   * One page of the open requests with this status in one shard of the open index, earliest due
   * first, from `after` (the `next` of the page before): for a pass that stops and continues
   * later from where it stopped. `next` is undefined after the shard's last page.
   */
  async openRequestsPage(
    status: OwedStatus,
    shard: number,
    options: { after?: OpenPageKey; pageSize?: number } = {},
  ): Promise<{ readonly items: OpenRequest[]; readonly next?: OpenPageKey }> {
    const page = await this.db.send(
      new QueryCommand({
        TableName: this.tableName,
        IndexName: OPEN_DUE_INDEX,
        KeyConditionExpression: '#shard = :shard',
        ExpressionAttributeNames: { '#shard': OPEN_SHARD_ATTRIBUTE },
        ExpressionAttributeValues: toAttributes({ ':shard': `${status}#${shard}` }),
        Limit: options.pageSize ?? 100,
        ...(options.after === undefined
          ? {}
          : {
              ExclusiveStartKey: Object.fromEntries(
                Object.entries(options.after).map(([k, v]) => [k, { S: v }]),
              ),
            }),
      }),
    );
    const items = (page.Items ?? []).map((raw) => parseOpenRequest(unmarshall(raw)));
    const next =
      page.LastEvaluatedKey === undefined
        ? undefined
        : openPageKeySchema.parse(unmarshall(page.LastEvaluatedKey));
    return next === undefined ? { items } : { items, next };
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
    yield* this.#openIndex('query', keyCondition, values, options);
  }

  /**
   * The open index read page by page, by a query on `condition` (a key condition) or a scan
   * filtered by it; `#shard` and, with `dueBefore`, `#due_at` name their attributes in it.
   */
  async *#openIndex(
    read: 'query' | 'scan',
    condition: string,
    values: Record<string, unknown>,
    options: { dueBefore?: string; pageSize?: number },
  ): AsyncGenerator<OpenRequest> {
    let cursor: Record<string, AttributeValue> | undefined;
    do {
      const input = {
        TableName: this.tableName,
        IndexName: OPEN_DUE_INDEX,
        ExpressionAttributeNames: {
          '#shard': OPEN_SHARD_ATTRIBUTE,
          ...(options.dueBefore === undefined ? {} : { '#due_at': 'due_at' }),
        },
        ExpressionAttributeValues: toAttributes(values),
        ...(options.pageSize === undefined ? {} : { Limit: options.pageSize }),
        ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
      };
      const page = await this.db.send(
        read === 'query'
          ? new QueryCommand({ ...input, KeyConditionExpression: condition })
          : new ScanCommand({ ...input, FilterExpression: condition }),
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
    return this.#backfillShard({
      attribute: OPEN_SHARD_ATTRIBUTE,
      statuses: OWED_STATUSES,
      shardOf: openShardKey,
    });
  }

  /**
   * Puts every ended request of a ledger written before the ended index into it: each completed,
   * cancelled, rejected or denied item not minimised and without its `ended_shard` gets it, on the
   * condition that its status is still the one read and it is still not minimised. Safe to run
   * again; answers how many items it indexed.
   */
  async backfillEndedIndex(): Promise<number> {
    return this.#backfillShard({
      attribute: ENDED_SHARD_ATTRIBUTE,
      statuses: ['completed', 'cancelled', 'rejected', 'denied'],
      shardOf: endedShardKey,
      // A minimised request has nothing left for the retention pass, so it stays out of the index.
      notMinimised: true,
    });
  }

  /**
   * Scans for items of `statuses` whose index key `attribute` is not the one `shardOf` gives, and
   * sets it, on the condition that the status is still the one read (and, with `notMinimised`,
   * that the item is still not minimised). Answers how many items it indexed.
   */
  async #backfillShard(index: {
    readonly attribute: string;
    readonly statuses: readonly Status[];
    readonly shardOf: (requestId: string, status: Status) => string | undefined;
    readonly notMinimised?: boolean;
  }): Promise<number> {
    const minimisedName: Record<string, string> =
      index.notMinimised === true ? { '#minimised_at': 'minimised_at' } : {};
    const notMinimised = index.notMinimised === true ? ' AND attribute_not_exists(#minimised_at)' : '';
    let indexed = 0;
    let cursor: Record<string, AttributeValue> | undefined;
    do {
      const page = await this.db.send(
        new ScanCommand({
          TableName: this.tableName,
          ProjectionExpression: 'request_id, #status, #shard',
          FilterExpression: `#status IN (${index.statuses.map((_, n) => `:status${n}`).join(', ')})${notMinimised}`,
          ExpressionAttributeNames: { '#status': 'status', '#shard': index.attribute, ...minimisedName },
          ExpressionAttributeValues: toAttributes(
            Object.fromEntries(index.statuses.map((status, n) => [`:status${n}`, status])),
          ),
          ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
        }),
      );
      for (const raw of page.Items ?? []) {
        const stored = unmarshall(raw);
        const item = z.object({ request_id: z.string(), status: z.enum(STATUSES) }).parse(stored);
        const shard = index.shardOf(item.request_id, item.status);
        if (shard === undefined || stored[index.attribute] === shard) continue;
        try {
          await this.db.send(
            new UpdateItemCommand({
              TableName: this.tableName,
              Key: keyOf(item.request_id),
              UpdateExpression: 'SET #shard = :shard',
              ConditionExpression: `#status = :status${notMinimised}`,
              ExpressionAttributeNames: { '#status': 'status', '#shard': index.attribute, ...minimisedName },
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
            [ENDED_SHARD_ATTRIBUTE]: endedShardKey(parsed.request_id, parsed.status),
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

/** The requests of `entries`, without the sites' parts of requests in parts. */
async function* requestsOnly(entries: AsyncGenerator<OpenRequest>): AsyncGenerator<OpenRequest> {
  for await (const entry of entries) if (!isSitePart(entry.request_id)) yield entry;
}

/**
 * Where a page of the open index ends: the key of its last item (request id, shard, due date), as
 * plain strings, so a pass can keep it between runs.
 */
export const openPageKeySchema = z.record(z.string(), z.string());
export type OpenPageKey = z.infer<typeof openPageKeySchema>;

/** The item key; a request id is a UUID, kept in lower case whatever spelling the caller has. */
/** A correction's item fields: its field names, and its values while it is still to be applied. */
function correctionItemFields(corrections: Corrections | undefined, keepValues: boolean) {
  if (corrections === undefined) return {};
  return {
    correction_fields: correctionFields(corrections),
    ...(keepValues ? { correction_values: { ...corrections } } : {}),
  };
}

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
  if (!parsed.success) throw invalidItem(parsed.error);
  return parsed.data;
}

function invalidItem(error: z.ZodError): LedgerStateError {
  return new LedgerStateError(`a ledger item does not match the schema (${schemaProblem(error)})`);
}

/** The fields a schema refused, by path: never their values, which may name a person. */
function schemaProblem(error: z.ZodError): string {
  return error.issues.map((issue) => issue.path.join('.')).join(', ');
}
