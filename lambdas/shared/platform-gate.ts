import { AsyncLocalStorage } from 'node:async_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import {
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import { PlatformCapacityError, PlatformOutageError } from './errors.ts';

/**
 * The platform's load control, shared by every Lambda through one small DynamoDB table:
 * - a rate limit for platform calls (a GCRA token bucket: calls per second, with a burst);
 * - a cap on exports open at once (a semaphore: the requests holding a slot, by id);
 * - a circuit breaker, which stops every execution from calling a platform that is down.
 *
 * A call that finds no capacity is not made: the step ends with a wait (PlatformCapacityError),
 * which the state machine spends in a Wait state. A rate slot a few seconds away is waited for
 * inside the Lambda instead; further ones join a waiting room that hands out return times at the
 * rate the bucket frees slots, so the callers that were turned away do not all come back at once.
 */
export interface GateSettings {
  /** Platform calls per second, across every Lambda. */
  readonly requestsPerSecond: number;
  /** Calls that may go at once after a quiet spell. */
  readonly burst: number;
  /** Exports open at once: started and not yet downloaded or failed. */
  readonly maxOpenExports: number;
  /** How long requests wait out an outage (the circuit open) before they fail as `platform_outage`. */
  readonly outageHorizonSeconds: number;
  /** The longest wait for a rate slot spent inside the Lambda. @default 3000 */
  readonly maxSleepMs?: number;
  /** Platform failures in a row (5xx, timeouts, broken connections) that open the circuit. @default 5 */
  readonly failureThreshold?: number;
}

/**
 * The name ending of the Wait states in which a step's platform call waits for capacity: they last
 * as long as the step asked, in real time, locally too, because the platform's limits run in real
 * time.
 */
export const PLATFORM_WAIT_SUFFIX = 'WaitsForPlatform';

/** The gate table's key attribute, and the names of its two items. */
export const GATE_KEY = 'gate';
const RATE_ITEM = 'platform';
const EXPORTS_ITEM = 'exports';

/** The circuit's first cool-down; each failed probe doubles it, up to the longest. */
const FIRST_COOLDOWN_MS = 1_000;
const LONGEST_COOLDOWN_MS = 15_000;
/** How long the one probe of a half-open circuit holds it before another may try. */
const PROBE_MS = 15_000;
/** Conditional writes lost to another caller before this call is sent to wait a second. */
const MAX_CONFLICTS = 8;

const count = z.number().int().nonnegative();
/** The shared item: bucket, waiting room and circuit. Times are epoch milliseconds. */
const rateItemSchema = z.object({
  version: count.default(0),
  /** The bucket's theoretical arrival time: when it is empty again at the current pace. */
  tat: z.number().default(0),
  /** The last return time handed out by the waiting room. */
  room: z.number().default(0),
  failures: count.default(0),
  /** When the circuit opened for this outage; 0 while closed. */
  opened_at: z.number().default(0),
  open_until: z.number().default(0),
  probe_until: z.number().default(0),
  openings: count.default(0),
});
export type GateState = z.infer<typeof rateItemSchema>;

const exportsItemSchema = z.object({ holders: z.record(z.string(), z.number()).default({}) });

/** What the gate decides for one call, from the shared state and the time. */
export type GateDecision =
  | { readonly kind: 'go'; readonly sleepMs: number; readonly next: GateState }
  | {
      readonly kind: 'wait';
      readonly reason: 'rate' | 'outage';
      readonly seconds: number;
      readonly next: GateState | null;
    }
  | { readonly kind: 'outage'; readonly sinceSeconds: number };

/**
 * The decision for one platform call at `now` (pure, so every rule is tested without a table):
 * the circuit first (open: wait; half-open: one probe goes), then the bucket (a slot within
 * `maxSleepMs`: go after sleeping until it; else a return time from the waiting room).
 */
export function decide(state: GateState, now: number, settings: GateSettings): GateDecision {
  let next: GateState = { ...state, version: state.version + 1 };
  if (state.opened_at > 0) {
    const since = now - state.opened_at;
    if (since > settings.outageHorizonSeconds * 1000) {
      return { kind: 'outage', sinceSeconds: Math.round(since / 1000) };
    }
    if (state.open_until > now) {
      return { kind: 'wait', reason: 'outage', seconds: secondsUntil(state.open_until, now), next: null };
    }
    if (state.probe_until > now) {
      return { kind: 'wait', reason: 'outage', seconds: secondsUntil(state.probe_until, now), next: null };
    }
    // Half-open: this call is the probe; the others wait for its answer.
    next = { ...next, probe_until: now + PROBE_MS };
  }
  const interval = 1000 / settings.requestsPerSecond;
  const tolerance = (Math.max(1, settings.burst) - 1) * interval;
  const slot = Math.max(now, state.tat - tolerance);
  const maxSleepMs = settings.maxSleepMs ?? 3_000;
  if (slot - now <= maxSleepMs) {
    return { kind: 'go', sleepMs: slot - now, next: { ...next, tat: Math.max(state.tat, slot) + interval } };
  }
  // The waiting room: return times spaced at the bucket's pace, from when the slots are near.
  const back = Math.max(state.room, slot - maxSleepMs / 2) + interval;
  return { kind: 'wait', reason: 'rate', seconds: secondsUntil(back, now), next: { ...next, room: back } };
}

/** The state after a platform failure (`down`) or success (`up`); null when nothing changes. */
export function afterOutcome(
  state: GateState,
  outcome: 'up' | 'down',
  now: number,
  settings: GateSettings,
): GateState | null {
  const next = { ...state, version: state.version + 1 };
  if (outcome === 'up') {
    if (state.failures === 0 && state.opened_at === 0) return null;
    return { ...next, failures: 0, opened_at: 0, open_until: 0, probe_until: 0, openings: 0 };
  }
  const failures = state.failures + 1;
  if (state.opened_at === 0 && failures < (settings.failureThreshold ?? 5)) return { ...next, failures };
  // Opened now, or a probe failed: stay open, each time a little longer.
  const openings = state.openings + 1;
  const cooldown = Math.min(LONGEST_COOLDOWN_MS, FIRST_COOLDOWN_MS * 2 ** (openings - 1));
  return {
    ...next,
    failures,
    openings,
    opened_at: state.opened_at === 0 ? now : state.opened_at,
    open_until: now + cooldown,
    probe_until: 0,
  };
}

function secondsUntil(at: number, now: number): number {
  return Math.max(1, Math.ceil((at - now) / 1000));
}

/** Calls made inside `run` skip the gate: a request that has waited its most (see `unmetered`). */
const unmeteredScope = new AsyncLocalStorage<true>();

/** Runs `work` with its platform calls outside the rate limit, the export cap and the circuit. */
export function unmetered<T>(work: () => Promise<T>): Promise<T> {
  return unmeteredScope.run(true, work);
}

/** What the gate logs: that the circuit opened or closed. Never identifiers. */
export interface GateLogger {
  warn(message: string, attributes?: Record<string, unknown>): void;
  info(message: string, attributes?: Record<string, unknown>): void;
}

/** The platform gate of one function, over the shared table. */
export class PlatformGate {
  readonly #dynamo: DynamoDBClient;
  readonly #table: string;
  readonly #settings: GateSettings;
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<unknown>;
  readonly #logger: GateLogger | undefined;
  /** Whether the last state this function saw had failures or an open circuit: a success then resets it. */
  #troubled = false;

  constructor(
    dynamo: DynamoDBClient,
    table: string,
    settings: GateSettings,
    options: { now?: () => number; sleep?: (ms: number) => Promise<unknown>; logger?: GateLogger } = {},
  ) {
    this.#dynamo = dynamo;
    this.#table = table;
    this.#settings = settings;
    // The platform's limits run in real time, so the gate does too, whatever the steps' clock.
    this.#now = options.now ?? Date.now;
    this.#sleep = options.sleep ?? ((ms) => delay(ms));
    this.#logger = options.logger;
  }

  get settings(): GateSettings {
    return this.#settings;
  }

  /**
   * Admits one platform call: resolves when it may go (perhaps after a short sleep), throws
   * PlatformCapacityError when it must wait longer, PlatformOutageError past the outage horizon.
   */
  async admit(): Promise<void> {
    if (unmeteredScope.getStore()) return;
    for (let conflicts = 0; conflicts < MAX_CONFLICTS; conflicts++) {
      const state = await this.#readState();
      this.#troubled = state.failures > 0 || state.opened_at > 0;
      const now = this.#now();
      const decision = decide(state, now, this.#settings);
      if (decision.kind === 'outage') {
        throw new PlatformOutageError(
          `the platform has been down for ${decision.sinceSeconds} s, past the outage horizon of ${this.#settings.outageHorizonSeconds} s; once it is back, run svc-dsr retry --status failed --code platform_outage`,
        );
      }
      if (decision.next !== null && !(await this.#writeState(decision.next, state.version))) {
        await this.#sleep(Math.random() * 20);
        continue;
      }
      if (decision.kind === 'wait') throw new PlatformCapacityError(decision.reason, decision.seconds);
      if (decision.sleepMs > 0) await this.#sleep(decision.sleepMs);
      return;
    }
    throw new PlatformCapacityError('rate', 1);
  }

  /** Tells the circuit how a platform call went: `down` for a 5xx, a timeout or a broken connection. */
  async report(outcome: 'up' | 'down'): Promise<void> {
    if (unmeteredScope.getStore()) return;
    if (outcome === 'up' && !this.#troubled) return;
    for (let conflicts = 0; conflicts < MAX_CONFLICTS; conflicts++) {
      const state = await this.#readState();
      const next = afterOutcome(state, outcome, this.#now(), this.#settings);
      this.#troubled = next === null ? false : next.failures > 0 || next.opened_at > 0;
      if (next === null) return;
      if (await this.#writeState(next, state.version)) {
        if (next.opened_at > 0 && state.open_until <= this.#now()) {
          this.#logger?.warn('platform circuit open: calls wait', {
            metric: 'PlatformCircuitOpened',
            open_seconds: Math.round((next.open_until - this.#now()) / 1000),
            failures: next.failures,
          });
        } else if (next.opened_at === 0 && state.opened_at > 0) {
          this.#logger?.info('platform circuit closed: the platform answers again', {
            down_seconds: Math.round((this.#now() - state.opened_at) / 1000),
          });
        }
        return;
      }
    }
  }

  /**
   * Takes an export slot for the request (a slot it already holds is kept); throws
   * PlatformCapacityError (`exports`) when every slot is taken.
   */
  async acquireExport(requestId: string): Promise<void> {
    if (unmeteredScope.getStore()) return;
    const update = () =>
      this.#dynamo.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall({ [GATE_KEY]: EXPORTS_ITEM }),
          UpdateExpression: 'SET holders.#request = if_not_exists(holders.#request, :now)',
          // No map yet lets the update through to DynamoDB's ValidationException, handled below.
          ConditionExpression:
            'attribute_not_exists(holders) OR attribute_exists(holders.#request) OR size(holders) < :cap',
          ExpressionAttributeNames: { '#request': requestId },
          ExpressionAttributeValues: marshall({ ':now': this.#now(), ':cap': this.#settings.maxOpenExports }),
        }),
      );
    try {
      await update();
    } catch (error) {
      if (errorName(error) === 'ConditionalCheckFailedException') {
        // The wait itself is the step handler's: it grows with the request's waits so far.
        throw new PlatformCapacityError('exports', 1);
      }
      if (errorName(error) !== 'ValidationException') throw error;
      // The first export ever: the item and its map do not exist yet.
      await this.#dynamo
        .send(
          new PutItemCommand({
            TableName: this.#table,
            Item: marshall({ [GATE_KEY]: EXPORTS_ITEM, holders: {} }),
            ConditionExpression: 'attribute_not_exists(#key)',
            ExpressionAttributeNames: { '#key': GATE_KEY },
          }),
        )
        .catch((put: unknown) => {
          if (errorName(put) !== 'ConditionalCheckFailedException') throw put;
        });
      await this.acquireExport(requestId);
    }
  }

  /** Gives the request's export slot back; nothing when it holds none. */
  async releaseExport(requestId: string): Promise<void> {
    try {
      await this.#dynamo.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall({ [GATE_KEY]: EXPORTS_ITEM }),
          UpdateExpression: 'REMOVE holders.#request',
          ConditionExpression: 'attribute_exists(holders.#request)',
          ExpressionAttributeNames: { '#request': requestId },
        }),
      );
    } catch (error) {
      if (
        errorName(error) !== 'ConditionalCheckFailedException' &&
        errorName(error) !== 'ValidationException'
      ) {
        throw error;
      }
    }
  }

  /** The requests holding export slots, with when each took it (epoch ms). */
  async exportHolders(): Promise<Record<string, number>> {
    const answer = await this.#dynamo.send(
      new GetItemCommand({
        TableName: this.#table,
        Key: marshall({ [GATE_KEY]: EXPORTS_ITEM }),
        ConsistentRead: true,
      }),
    );
    return answer.Item === undefined ? {} : exportsItemSchema.parse(unmarshall(answer.Item)).holders;
  }

  /** The shared bucket and circuit as they stand. */
  async state(): Promise<GateState> {
    return this.#readState();
  }

  async #readState(): Promise<GateState> {
    const answer = await this.#dynamo.send(
      new GetItemCommand({
        TableName: this.#table,
        Key: marshall({ [GATE_KEY]: RATE_ITEM }),
        ConsistentRead: true,
      }),
    );
    return rateItemSchema.parse(answer.Item === undefined ? {} : unmarshall(answer.Item));
  }

  /** Writes the state if nobody else has since `version`; false when someone has. */
  async #writeState(next: GateState, version: number): Promise<boolean> {
    try {
      await this.#dynamo.send(
        new PutItemCommand({
          TableName: this.#table,
          Item: marshall({ [GATE_KEY]: RATE_ITEM, ...next }),
          ConditionExpression: 'attribute_not_exists(#key) OR version = :version',
          ExpressionAttributeNames: { '#key': GATE_KEY },
          ExpressionAttributeValues: marshall({ ':version': version }),
        }),
      );
      return true;
    } catch (error) {
      if (errorName(error) === 'ConditionalCheckFailedException') return false;
      throw error;
    }
  }
}

function errorName(error: unknown): string | undefined {
  return error instanceof Error ? error.name : undefined;
}
