import {
  type AttributeValue,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import type { Deadlines } from './deadlines.ts';
import { LedgerStateError, RequestCancelledError } from './errors.ts';
import type { DsrRequest } from './request.ts';

export const STATUSES = ['received', 'running', 'completed', 'failed', 'cancelled', 'rejected'] as const;
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
export type Step = (typeof STEPS)[number];
export type Outcome = (typeof OUTCOMES)[number];

/** Name of the index that lists requests by status and due date. */
export const STATUS_DUE_INDEX = 'by-status-due';

const archiveFacts = z.object({
  key: z.string(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string(),
  version_id: z.string().optional(),
  verified_at: z.string(),
  entries: z.number().int().nonnegative(),
});
export type ArchiveFacts = z.infer<typeof archiveFacts>;

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
  export_polls: z.number().int().nonnegative().default(0),
  export_waited_seconds: z.number().int().nonnegative().default(0),
  export_started_at: z.string().optional(),
  archive: archiveFacts.optional(),
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
  rejection_errors: z.array(z.string()).optional(),
  cancel_reason: z.string().optional(),
  duplicates: z.number().int().nonnegative().default(0),
  conflicts: z.number().int().nonnegative().default(0),
  executions: z.number().int().nonnegative().default(0),
  created_at: z.string(),
  updated_at: z.string(),
  completed_at: z.string().optional(),
});
export type LedgerItem = z.infer<typeof ledgerItemSchema>;

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
    deadlines: Deadlines,
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

  /** The fields every new item starts with. */
  #fresh(requestId: string, fingerprint: string) {
    const now = this.clock().toISOString();
    return {
      request_id: requestId,
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
    const sets: string[] = ['#updated_at = :updated_at'];
    const removes: string[] = [];
    const names: Record<string, string> = { '#updated_at': 'updated_at', '#status': 'status' };
    const values: Record<string, unknown> = { ':updated_at': this.clock().toISOString() };
    for (const [field, value] of Object.entries(patch)) {
      if (value === undefined || field === 'request_id' || field === 'updated_at') continue;
      names[`#${field}`] = field;
      if (value === null) removes.push(`#${field}`);
      else {
        sets.push(`#${field} = :${field}`);
        values[`:${field}`] = value;
      }
    }
    allowed.forEach((status, index) => {
      values[`:allowed${index}`] = status;
    });
    for (const field of present) names[`#${field}`] = field;
    const condition = [
      'attribute_exists(request_id)',
      `#status IN (${allowed.map((_, index) => `:allowed${index}`).join(', ')})`,
      ...present.map((field) => `attribute_exists(#${field})`),
    ].join(' AND ');
    const updated = await this.#updateIf(requestId, {
      update: `SET ${sets.join(', ')}${removes.length > 0 ? ` REMOVE ${removes.join(', ')}` : ''}`,
      condition,
      names,
      values,
    });
    if (updated !== undefined) return updated;
    const current = await this.get(requestId);
    if (current === undefined) throw new LedgerStateError('the ledger has no record of this request');
    if (current.status === 'cancelled') throw new RequestCancelledError('the request was cancelled');
    throw new LedgerStateError(`the request is ${current.status}; this change needs ${allowed.join(' or ')}`);
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

  /** Requests with this status, earliest due first, optionally only those due before `dueBefore`. */
  async listByStatus(
    status: Status,
    options: { dueBefore?: string; limit?: number; cursor?: Record<string, unknown> } = {},
  ): Promise<{ items: LedgerItem[]; cursor?: Record<string, unknown> }> {
    const values: Record<string, unknown> = { ':status': status };
    let keyCondition = '#status = :status';
    if (options.dueBefore !== undefined) {
      keyCondition += ' AND due_at < :due';
      values[':due'] = options.dueBefore;
    }
    const { Items, LastEvaluatedKey } = await this.db.send(
      new QueryCommand({
        TableName: this.tableName,
        IndexName: STATUS_DUE_INDEX,
        KeyConditionExpression: keyCondition,
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: toAttributes(values),
        ...(options.limit ? { Limit: options.limit } : {}),
        ...(options.cursor ? { ExclusiveStartKey: toAttributes(options.cursor) } : {}),
      }),
    );
    return {
      items: (Items ?? []).map((raw) => parseItem(unmarshall(raw))),
      ...(LastEvaluatedKey ? { cursor: unmarshall(LastEvaluatedKey) } : {}),
    };
  }

  async #create(item: LedgerItem): Promise<CreateResult> {
    const parsed = ledgerItemSchema.parse(item);
    try {
      await this.db.send(
        new PutItemCommand({
          TableName: this.tableName,
          Item: toAttributes(parsed),
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

function keyOf(requestId: string): Record<string, AttributeValue> {
  return { request_id: { S: requestId } };
}

/** Plain values as DynamoDB attributes; undefined fields are left out, as the schema's optional ones are. */
function toAttributes(values: Record<string, unknown>): Record<string, AttributeValue> {
  return marshall(values, { removeUndefinedValues: true });
}

/** True for DynamoDB's conditional-write refusal, whichever SDK copy threw it. */
export function isConditionalFailure(error: unknown): boolean {
  return error instanceof Error && error.name === 'ConditionalCheckFailedException';
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
