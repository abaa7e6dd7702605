/**
 * The requests waiting for an export slot (platform-gate.ts), oldest first, and the hand-over of a
 * freed slot to the oldest of them.
 *
 * The waiters are items of the gate table, one per request (`gate = waiter#<request_id>`), read
 * through an index sorted by when each request first began to wait, so the order is the table's,
 * complete, and kept across a request's later waits. A request that finds every slot taken:
 * - the gate writes its item (`since`, kept from its first wait; `waited_at`, now; its last token
 *   removed), in the same StartExport run that found no slot;
 * - its state machine then writes its task token and its wait into the item itself
 *   (`aws-sdk:dynamodb:updateItem.waitForTaskToken`) and waits for the token, at most its backoff.
 * Whoever gives a slot back takes the oldest live waiter, hands its slot to that request (the gate
 * moves it in one conditional write), and answers the token with SendTaskSuccess: that execution
 * runs StartExport at once and finds its slot held for it. A waiter nobody answers times out and
 * tries again, as it would after a plain Wait, keeping its place; a lost wake-up costs time, never
 * the request, and a slot handed to a waiter that timed out is still its own when it comes back.
 *
 * The index is eventually consistent: a request that began to wait a moment ago may be missed by a
 * release, and one just woken may be read again (its hand-over then fails, as it holds a slot).
 * The order among the others holds.
 */
import {
  type AttributeValue,
  DeleteItemCommand,
  type DynamoDBClient,
  QueryCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import { errorName } from './errors.ts';

/** The gate table's index of waiters: partition {@link WAITERS_QUEUE_ATTRIBUTE}, sort {@link WAITERS_SINCE_ATTRIBUTE}. */
export const WAITERS_INDEX = 'waiters';
/** The index's partition key: which slots the item waits for. */
export const WAITERS_QUEUE_ATTRIBUTE = 'queue';
/** The index's sort key: when the request first began to wait (epoch ms). */
export const WAITERS_SINCE_ATTRIBUTE = 'since';
/** The waiters' partition for export slots. */
export const EXPORT_WAITERS_QUEUE = 'exports';
/** A waiter item's key is this prefix and its request id. */
export const WAITER_KEY_PREFIX = 'waiter#';

/** The gate table's key attribute (platform-gate.ts GATE_KEY, which imports this module). */
const KEY = 'gate';

/** The gate table key of a request's waiter item. */
export function waiterKey(requestId: string): string {
  return `${WAITER_KEY_PREFIX}${requestId}`;
}

/**
 * A waiter item as the gate and the state machine write it (lib/dsr-workflow.ts). No subject
 * identifier: a request id, times, a token.
 */
export const waiterItemSchema = z.object({
  request_id: z.string().min(1).max(128),
  since: z.number(),
  /** When its current wait began (epoch ms): the StartExport run that found no slot. */
  waited_at: z.number(),
  /** The current wait's task token; absent between a wait's end and the next one's start. */
  token: z.string().min(1).max(4096).optional(),
  wait_seconds: z.number().int().positive().optional(),
});
export type WaiterItem = z.infer<typeof waiterItemSchema>;

/** Answers a task token (SendTaskSuccess); throws an error named as Step Functions names it. */
export type TaskTokenSuccess = (token: string) => Promise<void>;

/** Step Functions' answers for a token whose execution has ended (or that was never one). */
const GONE_TOKEN_ERRORS = new Set(['TaskDoesNotExist', 'InvalidToken']);

/** A waiter this close to its timeout is left to time out: it would not run before then. */
const STALE_MARGIN_MS = 1_000;

/** The longest wait for a slot (step-handler.ts), for an item whose wait was never written. */
const LONGEST_WAIT_MS = 3_600_000;

/**
 * How long after its wait ended an item that was not renewed is kept: its execution normally
 * waits again (or takes a slot) within seconds, so one gone this long has ended or left the queue.
 */
const ABANDONED_MS = 30 * 60_000;

/** Waiters read per page of the index, and pages read for one slot. */
const PAGE_SIZE = 10;
const MAX_PAGES = 5;

/** What the wake-up logs: nothing of the token. */
export interface WaiterLogger {
  warn(message: string, attributes?: Record<string, unknown>): void;
}

/**
 * How answering a waiter went: `woken`; `timed_out`, when it stopped waiting but its execution
 * goes on (to StartExport, where a slot handed to it is still its own); `ended`, when its
 * execution has ended; `unanswered`, when Step Functions could not be told (it then waits out its
 * timeout, and comes back to StartExport).
 */
export type WaiterAnswer = 'woken' | 'timed_out' | 'ended' | 'unanswered';

/** A waiter read from the index. */
export interface TakenWaiter {
  readonly requestId: string;
  /** SendTaskSuccess to its token; deletes its item unless Step Functions could not be told. Never throws. */
  answer(): Promise<WaiterAnswer>;
}

/** The requests waiting for an export slot, oldest first, as items of the gate table. */
export class ExportWaiters {
  readonly #dynamo: Pick<DynamoDBClient, 'send'>;
  readonly #table: string;
  readonly #succeed: TaskTokenSuccess;
  readonly #logger: WaiterLogger;
  readonly #now: () => number;
  readonly #queue: string;

  constructor(
    dynamo: Pick<DynamoDBClient, 'send'>,
    table: string,
    succeed: TaskTokenSuccess,
    options: {
      logger: WaiterLogger;
      now?: () => number;
      /** The queue of one site's export slots (platform-gate.ts gateItemName). @default EXPORT_WAITERS_QUEUE */
      queue?: string;
    },
  ) {
    this.#queue = options.queue ?? EXPORT_WAITERS_QUEUE;
    this.#dynamo = dynamo;
    this.#table = table;
    this.#succeed = succeed;
    this.#logger = options.logger;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The request that has waited longest and still waits, leaving out `passed` (waiters this
   * release has tried already). Items abandoned long ago, and unreadable ones, are deleted on the
   * way. Never throws: a table that cannot be read has no waiter to give, and the slot goes back
   * to the gate.
   */
  async take(passed: ReadonlySet<string> = new Set()): Promise<TakenWaiter | undefined> {
    try {
      let cursor: Record<string, AttributeValue> | undefined;
      for (let pages = 0; pages < MAX_PAGES; pages++) {
        const page = await this.#dynamo.send(
          new QueryCommand({
            TableName: this.#table,
            IndexName: WAITERS_INDEX,
            KeyConditionExpression: '#queue = :queue',
            ExpressionAttributeNames: { '#queue': WAITERS_QUEUE_ATTRIBUTE },
            ExpressionAttributeValues: marshall({ ':queue': this.#queue }),
            ScanIndexForward: true,
            Limit: PAGE_SIZE,
            ...(cursor === undefined ? {} : { ExclusiveStartKey: cursor }),
          }),
        );
        // Oldest first within the page, whatever order it came in; the pages follow the index.
        const waiters = await this.#readable(page.Items ?? []);
        for (const waiter of waiters) {
          if (passed.has(waiter.request_id)) continue;
          const token = this.#liveToken(waiter);
          if (token !== undefined) {
            return { requestId: waiter.request_id, answer: () => this.#answer(waiter.request_id, token) };
          }
          if (this.#abandoned(waiter)) await this.#delete(waiter.request_id, { waited_at: waiter.waited_at });
        }
        cursor = page.LastEvaluatedKey;
        if (cursor === undefined) return undefined;
      }
      return undefined;
    } catch (error) {
      this.#warn(error);
      return undefined;
    }
  }

  /** The page's waiters, oldest first; unreadable items are deleted. */
  async #readable(items: readonly Record<string, AttributeValue>[]): Promise<WaiterItem[]> {
    const waiters: WaiterItem[] = [];
    for (const item of items) {
      const parsed = waiterItemSchema.safeParse(unmarshall(item));
      if (parsed.success) {
        waiters.push(parsed.data);
        continue;
      }
      this.#logger.warn('an export-slot waiter item that is not one was deleted');
      const key = item[KEY]?.S;
      if (key !== undefined) {
        await this.#dynamo.send(
          new DeleteItemCommand({ TableName: this.#table, Key: { [KEY]: { S: key } } }),
        );
      }
    }
    return waiters.sort((a, b) => a.since - b.since);
  }

  /** The waiter's token while it waits, long enough to be woken. */
  #liveToken(waiter: WaiterItem): string | undefined {
    if (waiter.token === undefined || waiter.wait_seconds === undefined) return undefined;
    const ends = waiter.waited_at + waiter.wait_seconds * 1000;
    return ends - STALE_MARGIN_MS > this.#now() ? waiter.token : undefined;
  }

  /** Whether a waiter's wait ended so long ago that it no longer waits for a slot. */
  #abandoned(waiter: WaiterItem): boolean {
    const ends =
      waiter.waited_at + (waiter.wait_seconds === undefined ? LONGEST_WAIT_MS : waiter.wait_seconds * 1000);
    return ends + ABANDONED_MS < this.#now();
  }

  async #answer(requestId: string, token: string): Promise<WaiterAnswer> {
    let answer: WaiterAnswer;
    try {
      await this.#succeed(token);
      answer = 'woken';
    } catch (error) {
      const name = errorName(error) ?? '';
      if (name === 'TaskTimedOut') answer = 'timed_out';
      else if (GONE_TOKEN_ERRORS.has(name)) answer = 'ended';
      else {
        // A throttle, a network fault: the waiter times out and comes back to StartExport.
        this.#warn(error);
        return 'unanswered';
      }
    }
    try {
      // Only this wait's item: a later wait of the same request has written its own token.
      await this.#delete(requestId, { token });
    } catch (error) {
      // Answered: an item left behind is found stale, or answered again (TaskDoesNotExist), later.
      this.#warn(error);
    }
    return answer;
  }

  /** Deletes a waiter's item while `field` still holds what was read. */
  async #delete(requestId: string, where: { token: string } | { waited_at: number }): Promise<void> {
    const [field, value] = 'token' in where ? ['token', where.token] : ['waited_at', where.waited_at];
    try {
      await this.#dynamo.send(
        new DeleteItemCommand({
          TableName: this.#table,
          Key: marshall({ [KEY]: waiterKey(requestId) }),
          ConditionExpression: '#field = :value',
          ExpressionAttributeNames: { '#field': field },
          ExpressionAttributeValues: marshall({ ':value': value }),
        }),
      );
    } catch (error) {
      if (errorName(error) !== 'ConditionalCheckFailedException') throw error;
    }
  }

  #warn(error: unknown): void {
    this.#logger.warn(
      'the export-slot waiters could not be read or answered; waiters wait out their backoff',
      {
        error: errorName(error) ?? 'unknown',
      },
    );
  }
}

/**
 * Records that a request found every export slot taken: its waiter item, with when it first began
 * to wait (kept across its waits; `since` when the item was removed meanwhile, as when the request
 * took a slot the platform then refused) and when this wait began, and no token until its state
 * machine writes this wait's own. Answers when the request first began to wait.
 */
export async function recordWaiter(
  dynamo: Pick<DynamoDBClient, 'send'>,
  table: string,
  requestId: string,
  now: number,
  since: number = now,
  queue: string = EXPORT_WAITERS_QUEUE,
): Promise<number> {
  const answer = await dynamo.send(
    new UpdateItemCommand({
      TableName: table,
      Key: marshall({ [KEY]: waiterKey(requestId) }),
      UpdateExpression:
        'SET #queue = :queue, request_id = :request, #since = if_not_exists(#since, :since), waited_at = :now REMOVE #token',
      ExpressionAttributeNames: {
        '#queue': WAITERS_QUEUE_ATTRIBUTE,
        '#since': WAITERS_SINCE_ATTRIBUTE,
        '#token': 'token',
      },
      ExpressionAttributeValues: marshall({
        ':queue': queue,
        ':request': requestId,
        ':now': now,
        ':since': since,
      }),
      ReturnValues: 'UPDATED_NEW',
    }),
  );
  const recorded = Number(answer.Attributes?.[WAITERS_SINCE_ATTRIBUTE]?.N);
  return Number.isFinite(recorded) ? recorded : now;
}

/**
 * Whether some request began to wait for an export slot before `since` and is still among the
 * waiters: one item of the index, read from its oldest end. A request behind others is handed a
 * freed slot only after them, and then woken, so it need not look for one by itself soon.
 */
export async function waitsBehindOthers(
  dynamo: Pick<DynamoDBClient, 'send'>,
  table: string,
  since: number,
  queue: string = EXPORT_WAITERS_QUEUE,
): Promise<boolean> {
  const answer = await dynamo.send(
    new QueryCommand({
      TableName: table,
      IndexName: WAITERS_INDEX,
      KeyConditionExpression: '#queue = :queue AND #since < :since',
      ExpressionAttributeNames: { '#queue': WAITERS_QUEUE_ATTRIBUTE, '#since': WAITERS_SINCE_ATTRIBUTE },
      ExpressionAttributeValues: marshall({ ':queue': queue, ':since': since }),
      ScanIndexForward: true,
      Limit: 1,
    }),
  );
  return (answer.Items?.length ?? 0) > 0;
}

/**
 * Removes a request's waiter item: it holds a slot, so it waits no more. Answers when it first
 * began to wait, undefined when it was not waiting.
 */
export async function forgetWaiter(
  dynamo: Pick<DynamoDBClient, 'send'>,
  table: string,
  requestId: string,
): Promise<number | undefined> {
  const answer = await dynamo.send(
    new DeleteItemCommand({
      TableName: table,
      Key: marshall({ [KEY]: waiterKey(requestId) }),
      ReturnValues: 'ALL_OLD',
    }),
  );
  const since = Number(answer.Attributes?.[WAITERS_SINCE_ATTRIBUTE]?.N);
  return Number.isFinite(since) ? since : undefined;
}
