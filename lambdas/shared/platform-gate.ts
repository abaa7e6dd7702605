// The platform's load control in one DynamoDB table: a rate limit, a cap on open exports, a circuit breaker.
import { setTimeout as delay } from 'node:timers/promises';
import { type DynamoDBClient, GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import { errorName, PlatformCapacityError, PlatformOutageError } from './errors.ts';
import {
  EXPORT_WAITERS_QUEUE,
  type ExportWaiters,
  forgetWaiter,
  recordWaiter,
  waitsBehindOthers,
} from './export-waiters.ts';

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
/** How late after its slot a call may still go. */
export const LATE_MS = 100;
/** The sleep for a slot inside the Lambda, at least: Wait states count whole seconds. */
const MIN_SLEEP_MS = 2_000;
const EXPORTS_ITEM = 'exports';

/**
 * A gate item's key for `site`: the item's own name for the stack's first site (the names a stack
 * of one site has always had), else the site's id before it, so each site's platform account has
 * its own rate bucket, circuit and export slots.
 */
export function gateItemName(name: string, site: string | undefined): string {
  return site === undefined ? name : `${site}#${name}`;
}

/** The circuit's first cool-down; each failed probe doubles it, up to the longest. */
const FIRST_COOLDOWN_MS = 1_000;
const LONGEST_COOLDOWN_MS = 5_000;
/** How long the one probe of a half-open circuit holds it before another may try. */
const PROBE_MS = 15_000;
/** How soon a call held for the probe looks again, early in an outage. */
const PROBE_RECHECK_SECONDS = 2;
/** The longest a call waits out an open circuit before it looks again. */
export const LONGEST_OUTAGE_WAIT_SECONDS = 900;
/**
 * The longest a call is sent away for a rate slot. The waiting room hands out return times no
 * further ahead than this: past it, it starts again from the bucket's end.
 */
export const LONGEST_RATE_WAIT_SECONDS = 900;
/**
 * How far past its own booking horizon (its longest sleep) a gate still reads the bucket's counter
 * as written by a gate: another function may sleep longer (up to 60 s) and its clock may differ a
 * little. A counter further ahead is foreign (a hand edit, another unit) and starts again from now.
 */
const FOREIGN_SLOT_MS = 120_000;
/**
 * Waiters a freed slot may be offered to in turn (each after the last one's execution had ended,
 * or it held a slot already).
 */
const MAX_HANDOVERS = 3;
/** The waiters' places a gate keeps for the starts under way in its process (#places). */
const MAX_PLACES_KEPT = 1_000;
/** Versioned circuit writes lost to another caller before giving up on this one. */
const MAX_CONFLICTS = 8;

const count = z.number().int().nonnegative();
/**
 * The shared item. The bucket is a counter of time: the time of the last slot taken. Taking the
 * next one is a single conditional ADD of the interval between calls (1000 / requestsPerSecond
 * ms), so callers never lose a race and retry: it holds while the counter is within the burst of
 * now (else it has lagged through a quiet spell and is first moved up) and short of
 * `now + maxSleepMs` (else the bucket is booked: the caller takes a return time from the waiting
 * room, a second counter of time). The counters hold times, not slot numbers, so they mean the
 * same at any rate: a gate deployed with another rate or burst takes the next slot at its own pace
 * after the slots already booked. A counter no gate could have written (further ahead than any
 * gate books) is moved back as a lagging one is moved up. The circuit's fields change rarely, by a
 * read and a versioned write. Times are epoch milliseconds.
 */
const rateItemSchema = z.object({
  /** When the last slot taken may go. */
  slot: z.number().default(0),
  /** The last return time handed out by the waiting room. */
  room: z.number().default(0),
  version: count.default(0),
  failures: count.default(0),
  /** When the circuit opened for this outage; 0 while closed. */
  opened_at: z.number().default(0),
  open_until: z.number().default(0),
  probe_until: z.number().default(0),
  openings: count.default(0),
});
export type GateState = z.infer<typeof rateItemSchema>;
/** The circuit's part of the shared item. */
export type CircuitState = Omit<GateState, 'slot' | 'room'>;

/** Where a counter may stand for a take (epoch ms), and the step it moves by. */
interface CounterRange {
  readonly floor: number;
  /** Past this the counter is out of range, and is moved back to the floor. */
  readonly beyond: number;
  readonly step: number;
}

/**
 * How long a cap learned from the platform's refusal holds (renewed by each refusal) before the
 * gate probes one slot above it.
 */
export const LEARNED_CAP_MS = 3_600_000;

/**
 * The export slots' item: the holders, and the cap learned from the platform when it refused a
 * start for too many open exports (fewer than the configured cap: a new platform limit, another
 * system on the account), with until when it holds and how many refusals there have been.
 */
const exportsItemSchema = z.object({
  holders: z.record(z.string(), z.number()).default({}),
  learned_cap: z.number().int().positive().optional(),
  learned_until: z.number().optional(),
  refusals: count.optional(),
});
export type ExportSlots = z.infer<typeof exportsItemSchema>;

/**
 * The cap on open exports the gate works to at `now` (pure): the configured one, or the one
 * learned from the platform while it holds, then one above it (the probe); a start that succeeds
 * above it raises it (exportStarted).
 */
export function workingExportCap(
  slots: Pick<ExportSlots, 'learned_cap' | 'learned_until'>,
  configured: number,
  now: number,
): number {
  const learned = slots.learned_cap;
  if (learned === undefined || learned >= configured) return configured;
  if ((slots.learned_until ?? 0) > now) return learned;
  return learned + 1;
}

/**
 * The condition that one more slot fits under the working cap (workingExportCap, in the update's
 * own terms): under the configured cap `:cap`, and under the learned cap while it holds, or at most
 * one above it once it has lapsed (`:now`).
 */
const UNDER_WORKING_CAP =
  'size(holders) < :cap AND (attribute_not_exists(learned_cap) OR size(holders) < learned_cap OR (learned_until <= :now AND size(holders) <= learned_cap))';

/** What the circuit decides for a call: go (perhaps as the probe), wait, or give up (outage). */
export type CircuitDecision =
  | { readonly kind: 'closed' }
  | { readonly kind: 'probe'; readonly next: CircuitState }
  | { readonly kind: 'wait'; readonly seconds: number }
  | { readonly kind: 'outage'; readonly sinceSeconds: number };

/**
 * The circuit's decision for one platform call at `now` (pure, so each rule is tested without a
 * table): closed, go; open, wait until it is half-open; half-open, one probe goes and the others
 * wait for its answer; open past the outage horizon, give up, but for the probe of a half-open circuit.
 */
export function circuitDecision(state: CircuitState, now: number, settings: GateSettings): CircuitDecision {
  if (state.opened_at === 0) return { kind: 'closed' };
  const since = now - state.opened_at;
  // Past the outage horizon a call that would wait gives up; the one that finds the circuit
  // half-open still probes, so a platform that is back is found (a retry after the outage),
  // however long it was down.
  const halfOpen = state.open_until <= now && state.probe_until <= now;
  if (since > settings.outageHorizonSeconds * 1000 && !halfOpen) {
    return { kind: 'outage', sinceSeconds: Math.round(since / 1000) };
  }
  // The longer the platform has been down, the longer a waiter stays away: half the outage so far,
  // up to a quarter of an hour. An afternoon's outage then costs an execution a few dozen waits
  // (within the history budget), not one every few seconds; the first waiter back probes.
  const patience = Math.min(LONGEST_OUTAGE_WAIT_SECONDS, Math.floor(since / 2000));
  if (state.open_until > now) {
    return { kind: 'wait', seconds: Math.max(secondsUntil(state.open_until, now), patience) };
  }
  // The probe answers within the client's timeout, mostly at once: look again soon.
  if (state.probe_until > now) {
    const soon = Math.min(PROBE_RECHECK_SECONDS, secondsUntil(state.probe_until, now));
    return { kind: 'wait', seconds: Math.max(soon, patience) };
  }
  return { kind: 'probe', next: { ...state, version: state.version + 1, probe_until: now + PROBE_MS } };
}

/** The state after a platform failure (`down`) or success (`up`); null when nothing changes. */
export function afterOutcome(
  state: CircuitState,
  outcome: 'up' | 'down',
  now: number,
  settings: GateSettings,
): CircuitState | null {
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
  readonly #waiters: Pick<ExportWaiters, 'take'> | undefined;
  /** The gate's items: the rate bucket's and the export slots' (a site's own, apart from the others'). */
  readonly #items: { readonly rate: string; readonly exports: string; readonly waiters: string };
  /**
   * When each request that took an export slot in this process had first begun to wait for one,
   * until its start is answered: a start the platform refuses puts the request back in that place.
   */
  readonly #places = new Map<string, number>();
  /** Whether the last state this function saw had failures or an open circuit: a success then resets it. */
  #troubled = false;
  /**
   * The highest value this function has seen each counter at, or the value last read. A counter
   * only grows (but for a foreign one moved back), so one seen at or above a floor does not lag:
   * raising it would fail, and is not tried. One seen below it, or beyond its range, likely is
   * out of range, and is moved first.
   */
  readonly #seen: Record<'slot' | 'room', number | undefined> = { slot: undefined, room: undefined };

  constructor(
    dynamo: DynamoDBClient,
    table: string,
    settings: GateSettings,
    options: {
      now?: () => number;
      sleep?: (ms: number) => Promise<unknown>;
      logger?: GateLogger;
      /** The requests waiting for an export slot: a slot given back is handed to the oldest. @default none: they wait out their backoff */
      waiters?: Pick<ExportWaiters, 'take'>;
      /**
       * The site whose limits these are, other than the stack's first: its items are its own
       * (gateItemName). @default the first site's items, as a stack of one site has them
       */
      site?: string;
    } = {},
  ) {
    this.#items = {
      rate: gateItemName(RATE_ITEM, options.site),
      exports: gateItemName(EXPORTS_ITEM, options.site),
      waiters: gateItemName(EXPORT_WAITERS_QUEUE, options.site),
    };
    this.#dynamo = dynamo;
    this.#table = table;
    this.#settings = settings;
    // The platform's limits run in real time, so the gate does too, whatever the steps' clock.
    this.#now = options.now ?? Date.now;
    this.#sleep = options.sleep ?? ((ms) => delay(ms));
    this.#logger = options.logger;
    this.#waiters = options.waiters;
  }

  get settings(): GateSettings {
    return this.#settings;
  }

  /**
   * Admits one platform call: resolves when it may go (perhaps after a short sleep), throws
   * PlatformCapacityError when it must wait longer, PlatformOutageError past the outage horizon.
   */
  async admit(): Promise<void> {
    const interval = 1000 / this.#settings.requestsPerSecond;
    const maxSleepMs = Math.max(MIN_SLEEP_MS, this.#settings.maxSleepMs ?? 3_000);
    for (let tries = 0; tries < MAX_CONFLICTS; tries++) {
      const now = this.#now();
      // The lowest the counter may stand at: a quiet spell leaves at most the burst to take now.
      const floor = now - Math.max(1, this.#settings.burst) * interval;
      const booked = now + maxSleepMs;
      const foreign = booked + interval + FOREIGN_SLOT_MS;
      const taken = await this.#take(
        'slot',
        { floor, beyond: foreign, step: interval },
        { below: booked, closedCircuit: true },
      );
      if (taken !== undefined) {
        // A slot of the burst lies in the past: it goes now.
        const due = Math.max(taken, now);
        const answered = this.#now();
        if (due > answered) await this.#sleep(due - answered);
        // Going well after its slot (a stalled process, a slow write), the call would go together
        // with the calls of the slots after it: it takes a new slot instead. A burst's worth of
        // lateness is allowed, which a gate of a large burst (no real limit) always has.
        if (this.#now() - due <= Math.max(LATE_MS, this.#settings.burst * interval)) return;
        continue;
      }
      const state = await this.#readState();
      // Read consistently, the counters stand here, whatever this function saw before (a foreign
      // counter moved back stands lower than it was seen).
      this.#seen.slot = state.slot;
      this.#seen.room = state.room;
      this.#troubled = state.failures > 0 || state.opened_at > 0;
      const circuit = circuitDecision(state, now, this.#settings);
      if (circuit.kind === 'outage') {
        throw new PlatformOutageError(
          `the platform has been down for ${circuit.sinceSeconds} s, past the outage horizon of ${this.#settings.outageHorizonSeconds} s; once it is back, run npx svc-dsr retry --status failed --code platform_outage`,
        );
      }
      if (circuit.kind === 'wait') throw new PlatformCapacityError('outage', circuit.seconds);
      if (circuit.kind === 'probe') {
        // One caller wins the probe; it goes at once, outside the bucket, the others wait for it.
        if (await this.#writeCircuit(circuit.next, state.version)) return;
        continue;
      }
      // Another caller moved the counter meanwhile (the bucket has room), or it is foreign and is
      // moved back by the next try.
      if (state.slot < booked || state.slot > foreign) continue;
      // Booked through the sleep: a return time from the waiting room, from when slots come near.
      const roomFloor = Math.max(state.slot, booked) - maxSleepMs / 2;
      const roomEnd = now + LONGEST_RATE_WAIT_SECONDS * 1000 - interval;
      const back = await this.#take('room', { floor: roomFloor, beyond: roomEnd, step: interval });
      const at = back ?? roomFloor + interval;
      throw new PlatformCapacityError('rate', Math.min(LONGEST_RATE_WAIT_SECONDS, secondsUntil(at, now)));
    }
    throw new PlatformCapacityError('rate', 1);
  }

  /** Tells the circuit how a platform call went: `down` for a 5xx, a timeout or a broken connection. */
  async report(outcome: 'up' | 'down'): Promise<void> {
    if (outcome === 'up' && !this.#troubled) return;
    for (let conflicts = 0; conflicts < MAX_CONFLICTS; conflicts++) {
      const state = await this.#readState();
      const next = afterOutcome(state, outcome, this.#now(), this.#settings);
      this.#troubled = next === null ? false : next.failures > 0 || next.opened_at > 0;
      if (next === null) return;
      if (await this.#writeCircuit(next, state.version)) {
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
   * PlatformCapacityError (`exports`) when every slot is taken, after recording the request among
   * the waiters (export-waiters.ts), where it keeps the place of its first wait.
   */
  async acquireExport(requestId: string): Promise<void> {
    const update = () =>
      this.#dynamo.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall({ [GATE_KEY]: this.#items.exports }),
          UpdateExpression: 'SET holders.#request = if_not_exists(holders.#request, :now)',
          // No map yet lets the update through to DynamoDB's ValidationException, handled below.
          ConditionExpression: `attribute_not_exists(holders) OR attribute_exists(holders.#request) OR (${UNDER_WORKING_CAP})`,
          ExpressionAttributeNames: { '#request': requestId },
          ExpressionAttributeValues: marshall({ ':now': this.#now(), ':cap': this.#settings.maxOpenExports }),
        }),
      );
    try {
      await update();
    } catch (error) {
      if (errorName(error) === 'ConditionalCheckFailedException') {
        throw new PlatformCapacityError('exports', 1, {}, await this.#queueWaiter(requestId));
      }
      if (errorName(error) !== 'ValidationException') throw error;
      // The first export ever: the item and its map do not exist yet.
      await this.#dynamo.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall({ [GATE_KEY]: this.#items.exports }),
          UpdateExpression: 'SET holders = if_not_exists(holders, :empty)',
          ExpressionAttributeValues: { ':empty': { M: {} } },
        }),
      );
      await this.acquireExport(requestId);
      return;
    }
    // It holds a slot: it waits no more, and leaves the waiters. Its place is kept in case the
    // platform refuses its start (exportRefused), which puts it back where it was.
    await this.#waiterWrite(async () => {
      const since = await forgetWaiter(this.#dynamo, this.#table, requestId);
      if (since === undefined) return;
      this.#places.delete(requestId);
      this.#places.set(requestId, since);
      // Only the runs in flight need theirs: the oldest go first.
      for (const oldest of this.#places.keys()) {
        if (this.#places.size <= MAX_PLACES_KEPT) break;
        this.#places.delete(oldest);
      }
    });
  }

  /**
   * Records the request among the waiters and answers whether it waits behind older waiters. The
   * wait itself is the step handler's: one behind others is handed a slot after them and woken, so
   * it waits long; the oldest looks again soon, as the hand-over may have missed it (its token not
   * written yet, the index behind). Without waiters to hand slots to, no one is woken: never
   * behind.
   */
  async #queueWaiter(requestId: string, place?: number): Promise<boolean> {
    let since: number | undefined;
    await this.#waiterWrite(async () => {
      since = await recordWaiter(
        this.#dynamo,
        this.#table,
        requestId,
        this.#now(),
        place,
        this.#items.waiters,
      );
    });
    if (since === undefined || this.#waiters === undefined) return false;
    const recorded = since;
    let behind = false;
    await this.#waiterWrite(async () => {
      behind = await waitsBehindOthers(this.#dynamo, this.#table, recorded, this.#items.waiters);
    });
    return behind;
  }

  /**
   * A write of the request's waiter item. One that fails costs the request its place in the
   * order (its wait then falls back to a plain Wait, or its item is dropped as abandoned later),
   * never the slot decision, so it is logged and not thrown.
   */
  async #waiterWrite(write: () => Promise<void>): Promise<void> {
    try {
      await write();
    } catch (error) {
      this.#logger?.warn('an export-slot waiter item could not be written', {
        error: errorName(error) ?? 'unknown',
      });
    }
  }

  /**
   * Gives the request's export slot back; nothing when it holds none. With requests waiting for a
   * slot, the slot goes to the one that has waited longest instead, moved in one write so that no
   * request that did not wait can take it on the way, and that request's execution is woken. A
   * waiter whose execution has ended passes it on to the next.
   */
  async releaseExport(requestId: string): Promise<void> {
    if (this.#waiters === undefined) {
      await this.#remove(requestId);
      return;
    }
    // Only a slot that is held is handed on: a release run again reads, and wakes no one. Only the
    // request itself takes its slot, so one not held now has nothing to give back.
    const slots = await this.exportSlots();
    if (slots.holders[requestId] === undefined) return;
    // A slot above the working cap (held since before the platform's refusal lowered it) is not
    // free on the platform: it is given back, and no waiter is woken for it.
    const held = Object.keys(slots.holders).length;
    if (held > workingExportCap(slots, this.#settings.maxOpenExports, this.#now())) {
      await this.#remove(requestId);
      return;
    }
    let holder = requestId;
    const passed = new Set([requestId]);
    for (let tries = 0; tries < MAX_HANDOVERS; tries++) {
      const waiter = await this.#waiters.take(passed);
      if (waiter === undefined) break;
      passed.add(waiter.requestId);
      if (!(await this.#handOver(holder, waiter.requestId))) {
        // Given back meanwhile (a release run twice at once): nothing left to give.
        if (!(await this.#holds(holder))) return;
        // The waiter holds a slot already (handed to it by another release, or taken as the
        // index had not yet caught up): wake it to use it, and try the next for this one.
        await waiter.answer();
        continue;
      }
      if ((await waiter.answer()) !== 'ended') return;
      // Its execution has ended, so it will never use the slot: on to the next waiter.
      holder = waiter.requestId;
    }
    await this.#remove(holder);
  }

  /**
   * Hands export slots that stand free while requests wait to the oldest of them, and wakes them;
   * answers how many. A slot given back when no waiter could be woken (the one behind it had not
   * written its token yet) stays free, and the requests queued behind others sleep long, so the
   * reconciler calls this on every pass.
   */
  async offerFreeSlots(): Promise<number> {
    if (this.#waiters === undefined) return 0;
    const passed = new Set<string>();
    let offered = 0;
    for (let tries = 0; tries < this.#settings.maxOpenExports; tries++) {
      const slots = await this.exportSlots();
      const held = Object.keys(slots.holders).length;
      if (held >= workingExportCap(slots, this.#settings.maxOpenExports, this.#now())) break;
      const waiter = await this.#waiters.take(passed);
      if (waiter === undefined) break;
      passed.add(waiter.requestId);
      const granted = await this.#updateSlots({
        UpdateExpression: 'SET holders.#request = :now',
        ConditionExpression: `attribute_not_exists(holders.#request) AND ${UNDER_WORKING_CAP}`,
        ExpressionAttributeNames: { '#request': waiter.requestId },
        ExpressionAttributeValues: marshall({ ':now': this.#now(), ':cap': this.#settings.maxOpenExports }),
      });
      // Granted, or it holds one already (woken to use it); a slot of an ended execution is the
      // reconciler's to give back on its next pass.
      await waiter.answer();
      if (granted) offered += 1;
    }
    return offered;
  }

  /** Whether the request holds an export slot, read consistently. */
  async #holds(requestId: string): Promise<boolean> {
    const answer = await this.#dynamo.send(
      new GetItemCommand({
        TableName: this.#table,
        Key: marshall({ [GATE_KEY]: this.#items.exports }),
        ConsistentRead: true,
        ProjectionExpression: 'holders.#request',
        ExpressionAttributeNames: { '#request': requestId },
      }),
    );
    return answer.Item?.holders?.M?.[requestId] !== undefined;
  }

  /** Moves a slot from one request to another in one write: false unless `from` held one and `to` did not. */
  #handOver(from: string, to: string): Promise<boolean> {
    return this.#updateSlots({
      UpdateExpression: 'SET holders.#to = :now REMOVE holders.#from',
      ConditionExpression: 'attribute_exists(holders.#from) AND attribute_not_exists(holders.#to)',
      ExpressionAttributeNames: { '#from': from, '#to': to },
      ExpressionAttributeValues: marshall({ ':now': this.#now() }),
    });
  }

  /** Gives the request's slot back to the gate: false when it held none. */
  #remove(requestId: string): Promise<boolean> {
    return this.#updateSlots({
      UpdateExpression: 'REMOVE holders.#request',
      ConditionExpression: 'attribute_exists(holders.#request)',
      ExpressionAttributeNames: { '#request': requestId },
    });
  }

  /**
   * A conditional update of the export slots' item: false when its condition does not hold, or
   * when there is no holders map yet (no slot was ever taken).
   */
  async #updateSlots(
    update: Omit<ConstructorParameters<typeof UpdateItemCommand>[0], 'TableName' | 'Key'>,
  ): Promise<boolean> {
    try {
      await this.#dynamo.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall({ [GATE_KEY]: this.#items.exports }),
          ...update,
        }),
      );
      return true;
    } catch (error) {
      const name = errorName(error);
      if (name === 'ConditionalCheckFailedException' || name === 'ValidationException') return false;
      throw error;
    }
  }

  /**
   * The platform refused the request's export start for too many open exports: fewer than the
   * gate let open. The gate lowers its working cap to the slots others hold (at least 1) for
   * LEARNED_CAP_MS, renewed by each refusal, and takes the request's slot back without handing it
   * to a waiter (it is not free on the platform); the request joins the waiters as one that found
   * every slot taken does. Answers the wait to end the step with.
   */
  async exportRefused(requestId: string): Promise<PlatformCapacityError> {
    const now = this.#now();
    const slots = await this.exportSlots();
    const others = Object.keys(slots.holders).filter((holder) => holder !== requestId).length;
    const configured = this.#settings.maxOpenExports;
    const cap = Math.max(1, Math.min(others, workingExportCap(slots, configured, now)));
    const holds = slots.holders[requestId] !== undefined;
    await this.#dynamo.send(
      new UpdateItemCommand({
        TableName: this.#table,
        Key: marshall({ [GATE_KEY]: this.#items.exports }),
        UpdateExpression: `SET learned_cap = :cap, learned_until = :until, refusals = if_not_exists(refusals, :zero) + :one${holds ? ' REMOVE holders.#request' : ''}`,
        ...(holds ? { ExpressionAttributeNames: { '#request': requestId } } : {}),
        ExpressionAttributeValues: marshall({
          ':cap': cap,
          ':until': now + LEARNED_CAP_MS,
          ':zero': 0,
          ':one': 1,
        }),
      }),
    );
    if (cap < workingExportCap(slots, configured, now) || slots.learned_cap === undefined) {
      this.#logger?.warn('the platform allows fewer open exports than the gate: its cap is lowered', {
        cap,
        configured_cap: configured,
        hold_minutes: LEARNED_CAP_MS / 60_000,
      });
    }
    // Back in the place of its first wait: the slot it took did not end its wait.
    const place = this.#places.get(requestId);
    this.#places.delete(requestId);
    return new PlatformCapacityError('exports', 1, {}, await this.#queueWaiter(requestId, place));
  }

  /**
   * The platform started the request's export: when it did so with more slots held than the
   * learned cap (the probe once that lapsed), the learned cap goes up one, and is dropped at the
   * configured cap. Never throws: the export has started, and a raise missed is made by a later one.
   */
  async exportStarted(requestId: string): Promise<void> {
    try {
      await this.#raiseLearnedCap(requestId);
    } catch (error) {
      this.#logger?.warn('the learned export cap could not be raised', {
        error: errorName(error) ?? 'unknown',
      });
    }
  }

  async #raiseLearnedCap(requestId: string): Promise<void> {
    this.#places.delete(requestId);
    const slots = await this.exportSlots();
    const learned = slots.learned_cap;
    if (learned === undefined || slots.holders[requestId] === undefined) return;
    const held = Object.keys(slots.holders).length;
    if (held <= learned) return;
    const next = learned + 1;
    const configured = this.#settings.maxOpenExports;
    const raised = await this.#updateSlots({
      UpdateExpression: next >= configured ? 'REMOVE learned_cap, learned_until' : 'SET learned_cap = :next',
      ConditionExpression: 'learned_cap = :learned',
      ExpressionAttributeValues: marshall({
        ':learned': learned,
        ...(next >= configured ? {} : { ':next': next }),
      }),
    });
    if (raised) {
      this.#logger?.info('the platform took an export above the learned cap: the cap goes up', {
        cap: Math.min(next, configured),
        configured_cap: configured,
      });
    }
  }

  /** The requests holding export slots, with when each took it (epoch ms). */
  async exportHolders(): Promise<Record<string, number>> {
    return (await this.exportSlots()).holders;
  }

  /** The export slots' item as it stands: the holders, and the cap learned from the platform. */
  async exportSlots(): Promise<ExportSlots> {
    return exportsItemSchema.parse(await this.#readItem(this.#items.exports));
  }

  /** The shared bucket and circuit as they stand. */
  async state(): Promise<GateState> {
    return this.#readState();
  }

  async #readState(): Promise<GateState> {
    return rateItemSchema.parse(await this.#readItem(this.#items.rate));
  }

  /** One of the gate's items as it stands, `{}` before its first write. */
  async #readItem(name: string): Promise<Record<string, unknown>> {
    const answer = await this.#dynamo.send(
      new GetItemCommand({
        TableName: this.#table,
        Key: marshall({ [GATE_KEY]: name }),
        ConsistentRead: true,
      }),
    );
    // As plain numbers whatever their size: a counter out of all range is read, then moved back.
    return answer.Item === undefined ? {} : unmarshall(answer.Item, { wrapNumbers: Number });
  }

  /**
   * Takes the next value of a counter, `step` on from where it stands, between `floor` and
   * `beyond`: added to, or moved to the floor if it lagged or stood beyond. The write that fits
   * the counter as this function last saw it goes first, so a slot mostly costs one write;
   * undefined when neither holds (booked through, or the circuit open).
   */
  async #take(
    counter: 'slot' | 'room',
    range: CounterRange,
    where: { below?: number; closedCircuit?: boolean } = {},
  ): Promise<number | undefined> {
    const seen = this.#seen[counter];
    const add = () => this.#add(counter, { ...range, ...where });
    const raise = () => this.#raise(counter, range, where);
    const fits = seen !== undefined && seen >= range.floor && seen <= range.beyond;
    const taken = fits ? await add() : ((await raise()) ?? (await add()));
    if (taken !== undefined) this.#saw(counter, taken);
    return taken;
  }

  #saw(counter: 'slot' | 'room', value: number): void {
    this.#seen[counter] = Math.max(this.#seen[counter] ?? value, value);
  }

  /**
   * Takes the next value of a counter in one conditional ADD: only while it stands between `floor`
   * and `beyond` (and below `below`, and the circuit closed, when asked). Undefined when the
   * condition does not hold, or the item does not exist yet.
   */
  #add(
    counter: 'slot' | 'room',
    where: CounterRange & { below?: number; closedCircuit?: boolean },
  ): Promise<number | undefined> {
    const below = where.below === undefined ? [] : ['#counter < :below'];
    return this.#takeIf(counter, where, {
      update: 'ADD #counter :step',
      conditions: ['#counter >= :floor', '#counter <= :beyond', ...below],
      values: {
        ':step': where.step,
        ':beyond': where.beyond,
        ...(where.below === undefined ? {} : { ':below': where.below }),
      },
    });
  }

  /**
   * Moves a counter that lagged through a quiet spell up to `floor`, or one that stands beyond any
   * value a gate writes back down to it, and takes the next value, in one write, so the taker
   * cannot be overtaken by the clock between the two; undefined when the counter is in range
   * (someone else moved it) or the circuit is open (when asked).
   */
  #raise(
    counter: 'slot' | 'room',
    range: CounterRange,
    where: { closedCircuit?: boolean } = {},
  ): Promise<number | undefined> {
    return this.#takeIf(
      counter,
      { floor: range.floor, ...where },
      {
        update: 'SET #counter = :taken',
        conditions: ['(attribute_not_exists(#counter) OR #counter < :floor OR #counter > :beyond)'],
        values: { ':taken': range.floor + range.step, ':beyond': range.beyond },
      },
    );
  }

  /** One conditional write of a counter; its new value, or undefined when the condition fails. */
  async #takeIf(
    counter: 'slot' | 'room',
    where: { floor: number; closedCircuit?: boolean },
    write: { update: string; conditions: string[]; values: Record<string, number> },
  ): Promise<number | undefined> {
    const conditions = [...write.conditions];
    const values: Record<string, number> = { ':floor': where.floor, ...write.values };
    if (where.closedCircuit) {
      conditions.push('(attribute_not_exists(opened_at) OR opened_at = :zero)');
      values[':zero'] = 0;
    }
    try {
      const answer = await this.#dynamo.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall({ [GATE_KEY]: this.#items.rate }),
          UpdateExpression: write.update,
          ConditionExpression: conditions.join(' AND '),
          ExpressionAttributeNames: { '#counter': counter },
          ExpressionAttributeValues: marshall(values),
          ReturnValues: 'UPDATED_NEW',
        }),
      );
      const value = answer.Attributes?.[counter]?.N;
      return value === undefined ? undefined : Number(value);
    } catch (error) {
      if (errorName(error) === 'ConditionalCheckFailedException') return undefined;
      throw error;
    }
  }

  /** Writes the circuit's fields if nobody else has since `version`; false when someone has. */
  async #writeCircuit(next: CircuitState, version: number): Promise<boolean> {
    try {
      await this.#dynamo.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall({ [GATE_KEY]: this.#items.rate }),
          UpdateExpression:
            'SET version = :next, failures = :failures, opened_at = :opened_at, open_until = :open_until, probe_until = :probe_until, openings = :openings',
          ConditionExpression: 'attribute_not_exists(version) OR version = :version',
          ExpressionAttributeValues: marshall({
            ':next': version + 1,
            ':version': version,
            ':failures': next.failures,
            ':opened_at': next.opened_at,
            ':open_until': next.open_until,
            ':probe_until': next.probe_until,
            ':openings': next.openings,
          }),
        }),
      );
      return true;
    } catch (error) {
      if (errorName(error) === 'ConditionalCheckFailedException') return false;
      throw error;
    }
  }
}
