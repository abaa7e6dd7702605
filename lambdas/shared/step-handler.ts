// The thin adapter every step Lambda is, and the waits a step asks for when the platform has no capacity.
import { z } from 'zod';
import {
  awsTransientError,
  PlatformCapacityError,
  PlatformThrottledError,
  StepInputError,
} from './errors.ts';
import { siteOfRequestId } from './sites.ts';
import type { StepDeps } from './step-deps.ts';

/** A step: its input and output contracts and its domain function. */
export interface StepDefinition<I extends z.ZodType, O extends z.ZodType> {
  readonly name: string;
  readonly input: I;
  readonly output: O;
  run(input: z.infer<I>, deps: StepDeps): Promise<z.infer<O>>;
}

/** Any step, for code that handles them all alike (the local runtime, the stack). */
export type AnyStep = StepDefinition<z.ZodType, z.ZodType>;

/**
 * The thin adapter every step Lambda is: parse the input, run the domain function, validate the
 * output. A 429 whose Retry-After fits under the cap is honoured here once; longer ones go back to
 * Step Functions' Retry. An AWS throttle or transient fault, in whatever spelling its SDK client
 * uses, leaves as one AwsTransientError, which the state machine retries.
 */
export function makeStepHandler<I extends z.ZodType, O extends z.ZodType>(
  step: StepDefinition<I, O>,
  deps: () => Promise<StepDeps> | StepDeps,
): (event: unknown, context?: unknown) => Promise<z.infer<O>> {
  return async (event, context) => {
    try {
      return await runStep(step, deps, event, remainingTimeOf(context));
    } catch (error) {
      throw awsTransientError(error) ?? error;
    }
  };
}

async function runStep<I extends z.ZodType, O extends z.ZodType>(
  step: StepDefinition<I, O>,
  deps: () => Promise<StepDeps> | StepDeps,
  event: unknown,
  remainingTimeMs: (() => number) | undefined,
): Promise<z.infer<O>> {
  const parsed = step.input.safeParse(event);
  if (!parsed.success) {
    throw new StepInputError(
      `${step.name}: the input does not match the step's contract (${parsed.error.issues.map((issue) => issue.path.join('.') || '(input)').join(', ')})`,
    );
  }
  const requestId =
    typeof event === 'object' && event !== null && 'request_id' in event ? String(event.request_id) : '';
  const shared = await deps();
  const site = siteOfRequestId(requestId);
  const base = site === undefined || shared.forSite === undefined ? shared : shared.forSite(site);
  const stepDeps: StepDeps = {
    ...base,
    ...(remainingTimeMs === undefined ? {} : { remainingTimeMs }),
    logger: base.logger.child?.({ request_id: requestId, step: step.name }) ?? base.logger,
  };
  const attempt = async () => step.output.parse(await step.run(parsed.data, stepDeps)) as z.infer<O>;
  const run = async () => {
    try {
      return await attempt();
    } catch (error) {
      if (
        error instanceof PlatformThrottledError &&
        error.retryAfterSeconds !== undefined &&
        error.retryAfterSeconds <= base.retryAfterCapSeconds
      ) {
        stepDeps.logger.warn('platform throttled; waiting as asked', {
          retry_after_seconds: error.retryAfterSeconds,
        });
        await base.sleep(error.retryAfterSeconds * 1000);
        return await attempt();
      }
      throw error;
    }
  };
  try {
    return await run();
  } catch (error) {
    if (!(error instanceof PlatformCapacityError)) throw error;
    const counted = await base.ledger.countPlatformWait(requestId, error.reason === 'exports');
    // No longer open: running again lets the step say why (cancelled, ended).
    if (counted === undefined) return await run();
    // However long it has waited, the call waits again: no platform call goes out without its
    // rate slot, nor an export without its export slot. Time, not a count, bounds the wait: the
    // deadline sweep's DueSoonUnfinished alarm names every open request within the deadline
    // margin, and the request keeps its place in the queue meanwhile.
    const { waits, exportSlotWaits } = counted;
    const random = base.random ?? Math.random;
    const seconds =
      error.reason === 'exports'
        ? error.queuedBehind
          ? queuedSlotWaitSeconds(random)
          : exportSlotWaitSeconds(exportSlotWaits, random)
        : error.reason === 'outage'
          ? outageWaitSeconds(error.waitSeconds, random)
          : error.waitSeconds;
    stepDeps.logger.debug('platform call waits', { reason: error.reason, wait_seconds: seconds, waits });
    return platformWaitAnswerSchema.parse({
      ...error.carry,
      platform_wait: { reason: error.reason, seconds, ...(error.reason === 'exports' ? { slot: true } : {}) },
    }) as z.infer<O>;
  }
}

/** The Lambda context's clock of the time left, when the handler was given one. */
function remainingTimeOf(context: unknown): (() => number) | undefined {
  if (typeof context !== 'object' || context === null || !('getRemainingTimeInMillis' in context))
    return undefined;
  const remaining = context.getRemainingTimeInMillis;
  return typeof remaining === 'function' ? () => Number(remaining.call(context)) : undefined;
}

/**
 * The longest wait for an export slot. Long, because a waiter does not wait it out when a slot
 * frees: the slot is handed to the oldest waiter and its execution woken at once
 * (export-waiters.ts); the wait's length bounds only how often a waiter looks again, and so the
 * history events of a request that queues for weeks.
 */
export const EXPORT_SLOT_MAX_WAIT_SECONDS = 16 * 3600;

/** Waits for an export slot over LONGEST_OPEN_DAYS: the ramp to the longest wait, then the longest ones. */
function exportSlotWaitsBudgeted(): number {
  const ramp = Math.ceil(Math.log(EXPORT_SLOT_MAX_WAIT_SECONDS / 2) / Math.log(1.25));
  return ramp + Math.ceil((LONGEST_OPEN_DAYS * 86_400) / (EXPORT_SLOT_MAX_WAIT_SECONDS * SLOT_JITTER_FLOOR));
}

/** The shortest a wait for an export slot is drawn, as a share of its nominal length. */
const SLOT_JITTER_FLOOR = 0.8;

/**
 * The wait for a free export slot after `waits` waits for one: growing by a quarter each time from
 * 2 s, up to sixteen hours, with jitter (each wait 80-100% of its nominal length), so a queue of thousands asks for slots at a pace that does not
 * grow with its length. A quarter, not a half: once slots free up, a waiter sleeps past them by at
 * most about a quarter of its wait so far (a half left a 1,000-request drop a tail of two minutes).
 * Only the waits for a slot count: a request that waited for rate slots on its way here starts at
 * the short end, and does not sleep through the slots that free meanwhile.
 */
export function exportSlotWaitSeconds(waits: number, random: () => number): number {
  const nominal = Math.min(EXPORT_SLOT_MAX_WAIT_SECONDS, 2 * 1.25 ** Math.min(Math.max(waits, 1), 60));
  const share = SLOT_JITTER_FLOOR + (1 - SLOT_JITTER_FLOOR) * Math.min(Math.max(random(), 0), 1);
  return Math.max(1, Math.ceil(nominal * share));
}

/**
 * The longest wait for an export slot of a request queued behind older waiters. A freed slot goes
 * to the oldest waiter and wakes it (export-waiters.ts), so such a request is woken when its turn
 * comes; the wait bounds only what a lost wake-up costs (a slot held that long, the request that
 * long late), and its length makes the StartExport runs of a drop grow with the slots handed over,
 * not with the waiters times the time they wait (measured in local/bench/gate-simulation.ts).
 */
export const QUEUED_SLOT_MAX_WAIT_SECONDS = 7 * 86_400;

/** A wait of a request queued behind older waiters: 80-100% of QUEUED_SLOT_MAX_WAIT_SECONDS. */
export function queuedSlotWaitSeconds(random: () => number): number {
  const share = SLOT_JITTER_FLOOR + (1 - SLOT_JITTER_FLOOR) * Math.min(Math.max(random(), 0), 1);
  return Math.max(1, Math.ceil(QUEUED_SLOT_MAX_WAIT_SECONDS * share));
}

/**
 * The wait out of an open circuit: what the gate asked, stretched by up to half again at random,
 * so the executions the outage held do not all come back in the same second.
 */
export function outageWaitSeconds(asked: number, random: () => number): number {
  return Math.max(1, Math.ceil(asked * (1 + 0.5 * Math.min(Math.max(random(), 0), 1))));
}

/**
 * How many waits for platform capacity one execution is budgeted for in its history
 * (lib/history-budget.ts): the waits for an export slot over the longest a request can stay open
 * (exportSlotWaitsBudgeted), and the rate and outage waits of its platform calls
 * (RATE_WAITS_BUDGETED). Nothing enforces it: no wait ends in a call outside the gate. The
 * simulation in local/bench/gate-simulation.ts measures the longest execution's history against it.
 */
export function platformWaitsBudgeted(): number {
  return exportSlotWaitsBudgeted() + RATE_WAITS_BUDGETED;
}

/** The longest a request can be open: a CCPA deadline extended once (45 + 45 days), and a margin. */
export const LONGEST_OPEN_DAYS = 92;

/**
 * The state machine's execution timeout (lib/dsr-stack.ts): the longest a request can be open, the
 * export poll budget and a day for the rest. No shorter: a request may queue for an export slot
 * until its deadline margin, and an execution that times out is resumed by the reconciler only a few
 * times before it is recorded failed (stranded), so a timeout shorter than the queue would fail
 * requests for having waited. (Local mode's runner caps the timer it times an execution with at
 * Node's longest, 24.8 days: local/runtime/sfn-runner.ts.)
 */
export function workflowExecutionTimeoutSeconds(pollBudgetSeconds: number): number {
  return (LONGEST_OPEN_DAYS + 1) * 86_400 + pollBudgetSeconds;
}

/** The rate and outage waits of one execution's platform calls (about ten calls; the simulation measures fewer than half of this). */
const RATE_WAITS_BUDGETED = 80;

/** A step's answer when its platform call waits: the state machine spends it in a Wait, then runs the step again. */
export const platformWaitAnswerSchema = z.looseObject({
  platform_wait: z.object({
    reason: z.enum(['rate', 'exports', 'outage']),
    seconds: z.number().int().positive(),
    /**
     * Set on a wait for an export slot, which the state machine spends waiting for a wake-up
     * (lib/dsr-workflow.ts): its Choice tests it with IsPresent, which an absent field cannot fail.
     */
    slot: z.literal(true).optional(),
  }),
});
