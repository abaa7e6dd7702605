/**
 * The platform gate in virtual time: a drop of requests through the export path, run by the
 * product's own step handlers (lambdas/steps.ts STEPS behind makeStepHandler, as the Lambdas
 * export them) for ResolveSubject, StartExport, CheckExport, ArchiveExport and RecordOutcome, on
 * dynalite, under a clock that never goes back (virtual-time.ts).
 *
 * Real: the steps and their handler, the Ledger, the PlatformGate (rate slots, waiting room, export
 * slots) and the waiters' hand-over (export-waiters.ts), the PlatformClient, the reconciler's pass
 * (reconcile(): the slot reclaim and its figures; the open index's paging is left out) every 15
 * minutes and the deadline sweep's count (sweepDeadlines) with its alarm threshold.
 *
 * Modelled: the platform (platform-model.ts: its documented answers, its rate and open-export
 * limits as the emulator has them, a drawn time per call), the archive store (a copy takes the
 * export's size over the link speed), the audit trail (an S3 write's time), Step Functions (each
 * execution a task: the hand-over between states, Wait states, the slot wait's task token, Retry
 * on the retryable errors) and Lambda: at most `concurrency` environments, each with its own deps
 * built at a cold start, an invocation waiting for a free one. Every DynamoDB call takes a drawn
 * latency, half before dynalite applies it and half after, so the gate's conditional writes of
 * several invocations interleave as they would on the table; the conflicts are counted.
 *
 * BuildPackage (the subject package, after ArchiveExport in the stack) is left out: its platform
 * calls (retrieve-user and the activity pages) are not part of the export path measured here.
 */
import {
  BatchWriteItemCommand,
  type DynamoDBClient,
  UpdateItemCommand,
  type WriteRequest,
} from '@aws-sdk/client-dynamodb';
import { marshall } from '@aws-sdk/util-dynamodb';
import { Duration } from 'aws-cdk-lib';
import { z } from 'zod';
import { createRandom, type Random } from '#local/emulator/prng';
import { sweepDeadlines } from '../../lambdas/deadline-sweep/deadline-sweep.ts';
import { memoryCursor } from '../../lambdas/reconciler/cursor.ts';
import { reconcile } from '../../lambdas/reconciler/reconciler.ts';
import { AUDIT_SCHEMA, type AuditRecord } from '../../lambdas/shared/audit.ts';
import type { PollSchedule } from '../../lambdas/shared/config.ts';
import { DEFAULTS } from '../../lambdas/shared/defaults.ts';
import { ExportWaiters, waiterKey } from '../../lambdas/shared/export-waiters.ts';
import { Ledger, OPEN_SHARD_ATTRIBUTE, openShardKey } from '../../lambdas/shared/ledger/index.ts';
import { createGateTable, createLedgerTable } from '../../lambdas/shared/ledger/table.ts';
import { PlatformClient } from '../../lambdas/shared/platform-client.ts';
import { GATE_KEY, PlatformGate } from '../../lambdas/shared/platform-gate.ts';
import type { ArchiveStore, StepDeps } from '../../lambdas/shared/step-deps.ts';
import { makeStepHandler, workflowExecutionTimeoutSeconds } from '../../lambdas/shared/step-handler.ts';
import { STEPS } from '../../lambdas/steps.ts';
import { transientRetry } from '../../lib/dsr-workflow.ts';
import { EVENTS_PER, HISTORY_EVENT_LIMIT } from '../../lib/history-budget.ts';
import { startDynamo } from '../test/helpers/dynamo.ts';
import {
  invocationCalls,
  PLATFORM_BASE_URL,
  PLATFORM_EXPORT_URL,
  PlatformModel,
  SIM_SPOT_ID,
} from './platform-model.ts';
import { VirtualTime } from './virtual-time.ts';

const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const MB = 1_000_000;

/** One regime: how long the platform takes to prepare an export, drawn evenly between the two. */
export interface Regime {
  readonly name: string;
  readonly preparationMinutes: readonly [number, number];
}

export const REGIMES: readonly Regime[] = [
  { name: 'exports ready in 1-30 min', preparationMinutes: [1, 30] },
  { name: 'exports ready in 1-4 h', preparationMinutes: [60, 240] },
];

/** How long the work takes, in virtual time. Each range is drawn evenly between its two ends. */
export interface SimulationTimings {
  /** A platform call, from send to answer (ms). */
  readonly platformCallMs: readonly [number, number];
  /** A DynamoDB call (ms). */
  readonly dynamoMs: readonly [number, number];
  /** A Lambda environment's cold start (ms). */
  readonly coldStartMs: number;
  /** The share of invocations that land on a fresh environment (besides the first of each). */
  readonly coldStartShare: number;
  /** Every invocation's own overhead (ms). */
  readonly invocationOverheadMs: number;
  /** Step Functions' hand-over from one state to the next (ms). */
  readonly handOverMs: number;
  /** SendTaskSuccess, which wakes a waiter (ms). */
  readonly taskSuccessMs: number;
  /** An S3 call: an audit record's write, the archive's proof (ms). */
  readonly s3Ms: readonly [number, number];
  /** The export archive's size (MB, 10^6 bytes). */
  readonly exportMegabytes: readonly [number, number];
  /** The link the archive is copied over (Mbit/s). */
  readonly linkMegabitsPerSecond: number;
}

/** 750-1,500 MB over 100 Mbit/s: a copy of 60-120 s. */
export const DEFAULT_TIMINGS: SimulationTimings = {
  platformCallMs: [50, 300],
  dynamoMs: [2, 8],
  coldStartMs: 1000,
  coldStartShare: 0.02,
  invocationOverheadMs: 20,
  handOverMs: 50,
  taskSuccessMs: 20,
  s3Ms: [20, 80],
  exportMegabytes: [750, 1500],
  linkMegabitsPerSecond: 100,
};

export interface GateSimulationOptions {
  readonly requests: number;
  readonly regime: Regime;
  /** @default 1 */
  readonly seed?: number;
  /** The gate's settings. @default the stack's defaults */
  readonly requestsPerSecond?: number;
  readonly burst?: number;
  readonly maxOpenExports?: number;
  /**
   * The platform's own rate limit: per second, and its bucket. @default the rate docs/load-control.md
   * says to set the gate under (the gate's rate × 1.1 + its burst, a call being up to 100 ms late),
   * as both
   */
  readonly platformRequestsPerSecond?: number;
  readonly platformBurst?: number;
  /** The platform's cap on open exports. @default the gate's (maxOpenExports) */
  readonly platformMaxOpenExports?: number;
  /** Lambda environments that may run at once. @default 25 */
  readonly concurrency?: number;
  /** @default DEFAULT_TIMINGS */
  readonly timings?: Partial<SimulationTimings>;
  /** Days before the statutory deadline at which the requests still open are alarmed. @default 7 */
  readonly marginDays?: number;
  /** Days from receipt to the statutory deadline (GDPR, one month). @default 30 */
  readonly deadlineDays?: number;
  /** How fast intake starts the drop's executions. @default 50 a second */
  readonly startsPerSecond?: number;
  /** The execution timeout. @default the stack's (workflowExecutionTimeoutSeconds) */
  readonly executionTimeoutSeconds?: number;
  /** Reports progress (virtual day, exported) now and then. */
  readonly progress?: (line: string) => void;
}

export interface GateSimulationResult {
  readonly requests: number;
  readonly concurrency: number;
  readonly timings: SimulationTimings;
  readonly platformLimit: { readonly requestsPerSecond: number; readonly burst: number };
  /** Platform calls the platform refused for its rate (429 rate_limit). */
  readonly callsAboveRate: number;
  /** Calls that reached the platform above a bucket at the gate's own rate and burst (judged afterwards). */
  readonly callsAboveGateBucket: number;
  /** The most platform calls within any one second. */
  readonly maxCallsPerSecond: number;
  /** Export starts the platform refused for too many open exports (429 open_exports). */
  readonly exportsAboveCap: number;
  readonly maxOpenExports: number;
  /** Platform calls that reached it without a rate slot of the invocation's gate. */
  readonly unmeteredCalls: number;
  readonly platformCalls: number;
  /** Requests exported (archived) before the deadline margin, as a share of all. */
  readonly exportedBeforeMargin: number;
  readonly exported: number;
  /** Days from the drop to the last export, and to the margin. */
  readonly drainedDays: number;
  readonly marginDay: number;
  /** Mean minutes from an export's start to its archive, and its copy. */
  readonly slotHoldMinutes: number;
  readonly copySeconds: number;
  /** Requests still unfinished at the margin. */
  readonly unfinishedAtMargin: number;
  /** Of those, the share the first deadline sweep at or after the margin counted (DueSoonRequests). */
  readonly alarmedAtMargin: number;
  /** Executions that failed, and why. */
  readonly failed: number;
  readonly failures: Readonly<Record<string, number>>;
  /** Step attempts the state machine retried (a retryable error). */
  readonly stepRetries: number;
  readonly executionsTimedOut: number;
  /** Requests still waiting for a slot at the end, and whether they hold the order they began to wait in. */
  readonly waitingAtEnd: number;
  readonly waitersInOrder: boolean;
  /** StartExport's export-slot attempts, and how many found no slot. */
  readonly slotAttempts: number;
  readonly slotWaits: number;
  readonly rateWaits: number;
  readonly stateTransitions: number;
  readonly longestHistoryEvents: number;
  readonly virtualDays: number;
  /** Reads of the virtual clock that found it earlier than the read before. */
  readonly backwardClockSteps: number;
  /** The gate table's conditional writes that failed, by item: the rate item, the export slots, the waiters. */
  readonly gateConflicts: { readonly rate: number; readonly exportSlots: number; readonly waiters: number };
  /** The most invocations in flight at once, the invocations, cold starts and waits for a free environment. */
  readonly concurrencyUsed: number;
  readonly invocations: number;
  readonly coldStarts: number;
  readonly lambdaQueued: number;
  /** DynamoDB calls the run made (dynalite), for its wall time. */
  readonly dynamoCalls: number;
  readonly wallSeconds: number;
  readonly cpuSeconds: number;
}

type StateName = 'ResolveSubject' | 'StartExport' | 'CheckExport' | 'ArchiveExport' | 'RecordOutcome';

interface Execution {
  readonly id: string;
  done: boolean;
  startedAt: number;
  events: number;
  transitions: number;
  firstWaitAt?: number;
  exportStartedAt?: number;
  /** The task token of its running slot wait, and the wait itself. */
  token?: string;
  wake?: () => boolean;
}

/** What a step answers, as far as the state machine's Choices read it. */
const answerSchema = z.looseObject({
  platform_wait: z
    .object({
      reason: z.enum(['rate', 'exports', 'outage']),
      seconds: z.number(),
      slot: z.literal(true).optional(),
    })
    .optional(),
  found: z.boolean().optional(),
  status: z.string().optional(),
  export_id: z.string().optional(),
  wait_seconds: z.number().optional(),
  continuation: z.unknown().optional(),
  key: z.string().optional(),
});
type Answer = z.infer<typeof answerSchema>;

/** The state machine's Retry of the retryable errors (lib/dsr-workflow.ts), with its full jitter. */
const TRANSIENT_RETRY = transientRetry(Duration.hours(DEFAULTS.retryHorizonHours));
const RETRYABLE = new Set<string>(TRANSIENT_RETRY.errors ?? []);
const STEP_MAX_RETRIES = TRANSIENT_RETRY.maxAttempts ?? 3;

/** The nominal delay before retry `retries` + 1, as Step Functions computes it. */
function retryDelayMs(retries: number): number {
  const interval = TRANSIENT_RETRY.interval?.toMilliseconds() ?? 1000;
  const longest = TRANSIENT_RETRY.maxDelay?.toMilliseconds() ?? Number.POSITIVE_INFINITY;
  return Math.min(longest, interval * (TRANSIENT_RETRY.backoffRate ?? 2) ** retries);
}

/** Runs one regime against a fresh dynalite in this process. */
export async function simulateGate(options: GateSimulationOptions): Promise<GateSimulationResult> {
  const dynamo = await startDynamo({ maxAttempts: 10 });
  try {
    return await run(dynamo.client, options);
  } finally {
    await dynamo.close();
  }
}

async function run(client: DynamoDBClient, options: GateSimulationOptions): Promise<GateSimulationResult> {
  const wallStart = process.hrtime.bigint();
  const cpuStart = process.cpuUsage();
  const rate = options.requestsPerSecond ?? DEFAULTS.platformRequestsPerSecond;
  const burst = options.burst ?? DEFAULTS.platformBurst;
  const cap = options.maxOpenExports ?? DEFAULTS.platformMaxOpenExports;
  const documentedLimit = Math.ceil(rate * 1.1 + burst);
  const platformLimit = {
    requestsPerSecond: options.platformRequestsPerSecond ?? documentedLimit,
    burst: options.platformBurst ?? documentedLimit,
  };
  const concurrency = options.concurrency ?? 25;
  const timings: SimulationTimings = { ...DEFAULT_TIMINGS, ...options.timings };
  const marginDays = options.marginDays ?? 7;
  const deadlineDays = options.deadlineDays ?? 30;
  const schedule: PollSchedule = {
    initialSeconds: DEFAULTS.pollInitialSeconds,
    maxSeconds: DEFAULTS.pollMaxSeconds,
    budgetSeconds: DEFAULTS.pollBudgetSeconds,
    growthPercent: DEFAULTS.pollGrowthPercent,
  };
  const executionTimeoutMs =
    (options.executionTimeoutSeconds ?? workflowExecutionTimeoutSeconds(schedule.budgetSeconds)) * 1000;
  const seed = options.seed ?? 1;
  const random = createRandom(seed, 'gate-simulation');
  const durations = createRandom(seed, 'gate-simulation-durations');
  const recycling = createRandom(seed, 'gate-simulation-lambda');
  const draw = (source: Random, [low, high]: readonly [number, number]) => low + (high - low) * source.next();
  const [prepLow, prepHigh] = options.regime.preparationMinutes;

  // The drop comes in mid-morning; the passes run on the hour and the quarter-hour.
  const dropAt = Date.parse('2027-01-04T09:17:00.000Z');
  const dueAt = dropAt + deadlineDays * DAY;
  const marginAt = dueAt - marginDays * DAY;
  const time = new VirtualTime(dropAt);
  const now = () => time.now();
  const clock = () => new Date(time.now());
  const sleep = (ms: number) => time.sleep(ms);

  await createLedgerTable(client, 'ledger');
  await createGateTable(client, 'gate');
  const ids = Array.from(
    { length: options.requests },
    (_, index) => `00000000-0000-4000-8000-${index.toString(16).padStart(12, '0')}`,
  );
  await writeRunningRequests(client, ids, new Date(dropAt), new Date(dueAt));

  // Every DynamoDB call from here takes virtual time: half on the way to the table, half back.
  let dynamoCalls = 0;
  const gateConflicts = { rate: 0, exportSlots: 0, waiters: 0 };
  client.middlewareStack.add(
    (next) => async (args) => {
      dynamoCalls += 1;
      const latency = draw(durations, timings.dynamoMs);
      await time.sleep(latency / 2);
      try {
        return await time.track(() => next(args));
      } catch (error) {
        if (error instanceof Error && error.name === 'ConditionalCheckFailedException')
          countConflict(args.input);
        throw error;
      } finally {
        await time.sleep(latency / 2);
      }
    },
    { step: 'initialize', name: 'virtualLatency' },
  );
  const countConflict = (input: unknown) => {
    const parsed = gateWriteSchema.safeParse(input);
    if (!parsed.success) return;
    const item = parsed.data.Key[GATE_KEY]?.S ?? '';
    if (item === 'exports') gateConflicts.exportSlots += 1;
    else if (item.startsWith(waiterKey(''))) gateConflicts.waiters += 1;
    else gateConflicts.rate += 1;
  };

  const platform = new PlatformModel(
    time,
    {
      requestsPerSecond: platformLimit.requestsPerSecond,
      burst: platformLimit.burst,
      maxOpenExports: options.platformMaxOpenExports ?? cap,
      callMs: timings.platformCallMs,
      preparationMs: [prepLow * MINUTE, prepHigh * MINUTE],
      exportBytes: [timings.exportMegabytes[0] * MB, timings.exportMegabytes[1] * MB],
      retryAfterSeconds: 1,
    },
    createRandom(seed, 'gate-simulation-platform'),
  );
  for (const id of ids) platform.addUser(primaryKeyOf(id), `svc-${id.slice(-12)}`);

  const executions = new Map<string, Execution>();
  const byToken = new Map<string, Execution>();
  let tokens = 0;

  // Step Functions' SendTaskSuccess: the woken execution's callback Task ends, then StartExport runs.
  const succeed = async (token: string) => {
    await time.sleep(timings.taskSuccessMs);
    const execution = byToken.get(token);
    byToken.delete(token);
    if (execution === undefined || execution.token !== token) {
      throw Object.assign(new Error('task timed out'), { name: 'TaskTimedOut' });
    }
    if (execution.done) throw Object.assign(new Error('gone'), { name: 'TaskDoesNotExist' });
    execution.wake?.();
  };

  // The audit trail and the archive bucket: an S3 call's time each.
  let auditRecords = 0;
  const audit: StepDeps['audit'] = {
    append: async (requestId, event): Promise<AuditRecord> => {
      await sleep(draw(durations, timings.s3Ms));
      auditRecords += 1;
      return {
        schema: AUDIT_SCHEMA,
        request_id: requestId,
        seq: auditRecords,
        event_id: event.eventId,
        step: event.step,
        action: event.action,
        at: clock().toISOString(),
        facts: {},
        final: event.final ?? false,
        prev_hash: null,
        hash: `sha256:${'0'.repeat(64)}`,
      };
    },
  };
  let copies = 0;
  let copyMs = 0;
  const bytesPerSecond = (timings.linkMegabitsPerSecond * MB) / 8;
  const unused = () => Promise.reject(new Error('not part of the simulation'));
  const archive: ArchiveStore = {
    copy: async (link, _key, _type, continuable) => {
      const bytes = await platform.download(link);
      await continuable.onDownloadOpened?.();
      const ms = (bytes / bytesPerSecond) * 1000;
      await sleep(ms);
      copies += 1;
      copyMs += ms;
      return { kind: 'copied', copied: { bytes, sha256: 'a'.repeat(64) } };
    },
    verify: async () => {
      await sleep(draw(durations, timings.s3Ms));
      return { entries: 4 };
    },
    verifyContinued: unused,
    abandonUpload: unused,
    remove: unused,
    read: unused,
    storePackage: unused,
  };

  // Lambda: environments built at a cold start, each with its own deps (a gate of its own, as a
  // container has), at most `concurrency` of them busy; an invocation waits for a free one.
  let slotAttempts = 0;
  const gateSettings = {
    requestsPerSecond: rate,
    burst,
    maxOpenExports: cap,
    outageHorizonSeconds: DEFAULTS.retryHorizonHours * 3600,
  };
  type Handler = (event: unknown) => Promise<unknown>;
  interface Environment {
    readonly handlers: Readonly<Record<StateName, Handler>>;
    cold: boolean;
  }
  const newEnvironment = (): Environment => {
    const waiters = new ExportWaiters(client, 'gate', succeed, { logger: silent, now });
    const gate = new PlatformGate(client, 'gate', gateSettings, { now, sleep, waiters, logger: silent });
    const metered: StepDeps['gate'] = {
      admit: async () => {
        await gate.admit();
        const calls = invocationCalls.getStore();
        if (calls !== undefined) calls.admits += 1;
      },
      report: (outcome) => gate.report(outcome),
      acquireExport: async (requestId) => {
        slotAttempts += 1;
        await gate.acquireExport(requestId);
      },
      releaseExport: (requestId) => gate.releaseExport(requestId),
      exportRefused: (requestId) => gate.exportRefused(requestId),
      exportStarted: (requestId) => gate.exportStarted(requestId),
    };
    const deps: StepDeps = {
      ledger: new Ledger(client, 'ledger', clock),
      audit,
      platform: new PlatformClient(
        {
          baseUrl: PLATFORM_BASE_URL,
          exportUrl: PLATFORM_EXPORT_URL,
          activityUrl: PLATFORM_EXPORT_URL,
          spotId: SIM_SPOT_ID,
        },
        {
          credentials: {
            ssoAccessToken: () => 'simulated-sso-token',
            exportToken: () => 'simulated-export-token',
          },
          logger: silent,
          fetch: platform.fetch,
          gate: metered,
        },
      ),
      gate: metered,
      archive,
      schedule,
      exportMaxAttempts: DEFAULTS.exportMaxAttempts,
      retryAfterCapSeconds: DEFAULTS.retryAfterCapSeconds,
      clock,
      sleep,
      random: () => random.next(),
      logger: silent,
    };
    const handlers: Record<StateName, Handler> = {
      ResolveSubject: makeStepHandler(STEPS.ResolveSubject, () => deps),
      StartExport: makeStepHandler(STEPS.StartExport, () => deps),
      CheckExport: makeStepHandler(STEPS.CheckExport, () => deps),
      ArchiveExport: makeStepHandler(STEPS.ArchiveExport, () => deps),
      RecordOutcome: makeStepHandler(STEPS.RecordOutcome, () => deps),
    };
    return { handlers, cold: true };
  };
  const free: Environment[] = [];
  const queued: { environment?: Environment; wake: () => boolean }[] = [];
  let environments = 0;
  let busy = 0;
  let concurrencyUsed = 0;
  let invocations = 0;
  let coldStarts = 0;
  let lambdaQueued = 0;
  const acquire = async (): Promise<Environment> => {
    const warm = free.pop();
    if (warm !== undefined) {
      // Lambda recycles environments now and then: this invocation starts a fresh one.
      return recycling.next() < timings.coldStartShare ? newEnvironment() : warm;
    }
    if (environments < concurrency) {
      environments += 1;
      return newEnvironment();
    }
    lambdaQueued += 1;
    const parked = time.park();
    const entry: { environment?: Environment; wake: () => boolean } = { wake: parked.wake };
    queued.push(entry);
    await parked.settled;
    if (entry.environment === undefined) throw new Error('woken without an environment');
    return entry.environment;
  };
  const releaseEnvironment = (environment: Environment) => {
    const next = queued.shift();
    if (next === undefined) {
      free.push(environment);
      return;
    }
    next.environment = environment;
    next.wake();
  };
  const invoke = async (state: StateName, input: Record<string, unknown>): Promise<Answer> => {
    const environment = await acquire();
    busy += 1;
    invocations += 1;
    concurrencyUsed = Math.max(concurrencyUsed, busy);
    try {
      if (environment.cold) {
        coldStarts += 1;
        environment.cold = false;
        await sleep(timings.coldStartMs);
      }
      await sleep(timings.invocationOverheadMs);
      const calls = { admits: 0, calls: 0 };
      const output = await invocationCalls.run(calls, () => environment.handlers[state](input));
      return answerSchema.parse(output);
    } finally {
      busy -= 1;
      releaseEnvironment(environment);
    }
  };

  let slotWaits = 0;
  let rateWaits = 0;
  let failed = 0;
  const failures: Record<string, number> = {};
  let stepRetries = 0;
  let timedOut = 0;
  let exported = 0;
  let finished = 0;
  let exportedBeforeMargin = 0;
  let lastExportedAt = dropAt;
  let slotHoldMs = 0;
  let unfinishedAtMargin: number | undefined;
  let alarmedAtMargin: number | undefined;
  const firstWaits: { id: string; at: number }[] = [];
  const open = () => ids.length - exported;
  const end = (execution: Execution) => {
    execution.done = true;
    finished += 1;
    if (finished === ids.length) time.stop();
  };

  /** A Task attempt and the Choice after it. */
  const visit = (execution: Execution) => {
    execution.events += EVENTS_PER.taskAttempt + EVENTS_PER.choice;
    execution.transitions += 2;
  };
  const waitState = async (execution: Execution, seconds: number) => {
    execution.events += EVENTS_PER.wait;
    execution.transitions += 1;
    await sleep(seconds * 1000);
  };
  /** The Task's attempts: the state machine's Retry of a retryable error, else the execution fails. */
  const attempt = async (
    execution: Execution,
    state: StateName,
    input: Record<string, unknown>,
  ): Promise<Answer | undefined> => {
    for (let retries = 0; ; retries++) {
      await sleep(timings.handOverMs);
      try {
        const answer = await invoke(state, input);
        visit(execution);
        return answer;
      } catch (error) {
        visit(execution);
        const name = error instanceof Error ? error.name : 'unknown';
        if (RETRYABLE.has(name) && retries < STEP_MAX_RETRIES) {
          stepRetries += 1;
          execution.events += EVENTS_PER.taskRetry;
          await sleep(random.next() * retryDelayMs(retries));
          continue;
        }
        failed += 1;
        failures[`${state}: ${name}`] = (failures[`${state}: ${name}`] ?? 0) + 1;
        return undefined;
      }
    }
  };

  /** A wait for an export slot: its task token in the waiter item, then the wake-up or the timeout. */
  const slotWait = async (execution: Execution, seconds: number, askedAt: number) => {
    slotWaits += 1;
    if (execution.firstWaitAt === undefined) {
      execution.firstWaitAt = askedAt;
      firstWaits.push({ id: execution.id, at: askedAt });
    }
    tokens += 1;
    const token = `token-${tokens}`;
    try {
      await client.send(
        new UpdateItemCommand({
          TableName: 'gate',
          Key: marshall({ [GATE_KEY]: waiterKey(execution.id) }),
          UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
          ConditionExpression: 'attribute_exists(#since)',
          ExpressionAttributeNames: { '#token': 'token', '#since': 'since' },
          ExpressionAttributeValues: { ':token': { S: token }, ':wait': { N: String(seconds) } },
        }),
      );
    } catch {
      // No waiter item (the slot was handed over meanwhile): a plain Wait.
      await waitState(execution, seconds);
      return;
    }
    const parked = time.park(seconds * 1000);
    execution.token = token;
    execution.wake = parked.wake;
    byToken.set(token, execution);
    execution.events += EVENTS_PER.callbackTask;
    execution.transitions += 1;
    await parked.settled;
    byToken.delete(token);
    execution.token = undefined;
    execution.wake = undefined;
  };

  /** One request's executions: the export path of the state machine (lib/dsr-workflow.ts). */
  const runExecution = async (execution: Execution) => {
    const { id } = execution;
    let state: StateName = 'ResolveSubject';
    let waited = 0;
    let exportId: string | undefined;
    let resumes = 0;
    for (;;) {
      if (now() - execution.startedAt > executionTimeoutMs) {
        // Timed out: the reconciler resumes it (a new execution that picks up from the ledger),
        // up to three times; then it is recorded failed (stranded).
        timedOut += 1;
        resumes += 1;
        if (resumes > 3) {
          failed += 1;
          failures['States.Timeout'] = (failures['States.Timeout'] ?? 0) + 1;
          end(execution);
          return;
        }
        execution.startedAt = now();
        execution.events = EVENTS_PER.execution;
        execution.transitions = 0;
        state = 'ResolveSubject';
      }
      const input: Record<string, unknown> =
        state === 'CheckExport'
          ? { request_id: id, waited, ...(exportId === undefined ? {} : { export_id: exportId }) }
          : state === 'RecordOutcome'
            ? { request_id: id, outcome: 'exported' }
            : { request_id: id };
      const askedAt = now();
      const answer = await attempt(execution, state, input);
      if (answer === undefined) {
        end(execution);
        return;
      }
      const wait = answer.platform_wait;
      if (wait !== undefined) {
        if (wait.slot === true) {
          await slotWait(execution, wait.seconds, askedAt);
        } else {
          rateWaits += 1;
          if (state === 'CheckExport') waited = answer.wait_seconds ?? 0;
          await waitState(execution, wait.seconds);
        }
        continue;
      }
      if (state === 'ResolveSubject') {
        if (answer.found !== true) {
          failed += 1;
          failures['ResolveSubject: not found'] = (failures['ResolveSubject: not found'] ?? 0) + 1;
          end(execution);
          return;
        }
        state = 'StartExport';
      } else if (state === 'StartExport' || state === 'CheckExport') {
        if (state === 'StartExport') execution.exportStartedAt ??= now();
        exportId = answer.export_id ?? exportId;
        if (answer.status === 'completed') {
          state = 'ArchiveExport';
        } else if (answer.status === 'failed') {
          state = 'StartExport';
        } else {
          waited = answer.wait_seconds ?? 0;
          state = 'CheckExport';
          await waitState(execution, waited);
        }
      } else if (state === 'ArchiveExport') {
        // A continuation runs ArchiveExport again; an archive goes on to the outcome.
        if (answer.continuation !== undefined) continue;
        exported += 1;
        lastExportedAt = now();
        if (lastExportedAt < marginAt) exportedBeforeMargin += 1;
        slotHoldMs += lastExportedAt - (execution.exportStartedAt ?? lastExportedAt);
        state = 'RecordOutcome';
      } else {
        execution.events += EVENTS_PER.end;
        end(execution);
        return;
      }
    }
  };

  // The drop: intake starts the executions at its pace.
  const startsPerSecond = options.startsPerSecond ?? 50;
  for (const [index, id] of ids.entries()) {
    const execution: Execution = {
      id,
      done: false,
      startedAt: dropAt + Math.floor((index / startsPerSecond) * 1000),
      events: EVENTS_PER.execution,
      transitions: 0,
    };
    executions.set(id, execution);
    void time.spawn(async () => {
      await sleep(execution.startedAt - now());
      await runExecution(execution);
    });
  }

  // The reconciler every 15 minutes: its slot reclaim and its figures, with a gate of its own.
  const reconcilerGate = new PlatformGate(client, 'gate', gateSettings, {
    now,
    sleep,
    logger: silent,
    waiters: new ExportWaiters(client, 'gate', succeed, { logger: silent, now }),
  });
  const cursor = memoryCursor();
  void time.spawn(async () => {
    await sleep(Math.ceil(dropAt / (15 * MINUTE)) * 15 * MINUTE - now());
    while (open() > 0) {
      await reconcile(
        {
          ledger: new Ledger(client, 'ledger', clock),
          audit,
          // Given no time for the open index, the pass lists nothing and looks at no request.
          list: async () => ({ executions: [] }),
          describe: async () => 'RUNNING',
          start: async () => 'started',
          clock,
          logger: silent,
          gate: reconcilerGate,
          publish: () => {},
          cursor,
        },
        { maxResumes: 3, graceSeconds: 600, timeLeftMs: () => 0 },
      );
      await sleep(15 * MINUTE);
    }
  });

  // The deadline sweep: hourly in the stack; here daily until a day before the margin (every
  // request has the same deadline, so none is due soon before), then hourly.
  const ledger = new Ledger(client, 'ledger', clock);
  void time.spawn(async () => {
    await sleep(Math.ceil(dropAt / HOUR) * HOUR - now());
    while (open() > 0) {
      const counts = await sweepDeadlines({ ledger, clock }, { dueSoonDays: marginDays, pageSize: 1000 });
      if (now() >= marginAt && unfinishedAtMargin === undefined) {
        unfinishedAtMargin = open();
        alarmedAtMargin = counts.due_soon >= 1 ? Math.min(counts.due_soon, open()) : 0;
        if (counts.due_soon !== open()) {
          throw new Error(`the sweep counted ${counts.due_soon} due soon, ${open()} are open`);
        }
        // The requests keep waiting: one more hour shows them in place, then the run ends.
        await sleep(HOUR);
        time.stop();
        return;
      }
      await sleep(now() + DAY < marginAt ? DAY : HOUR);
    }
  });

  if (options.progress !== undefined) {
    const progress = options.progress;
    void time.spawn(async () => {
      while (open() > 0) {
        await sleep(DAY);
        progress(
          `  day ${((now() - dropAt) / DAY).toFixed(1)}: ${exported.toLocaleString('en')} exported, ${slotAttempts.toLocaleString('en')} slot attempts, ${(Number(process.hrtime.bigint() - wallStart) / 1e9) | 0} s`,
        );
      }
    });
  }

  await time.settled();
  const endedAt = now();
  const sweepError = [...time.taskErrors.keys()];
  if (sweepError.length > 0) throw new Error(`a simulation task failed: ${sweepError.join(', ')}`);

  // The calls as they reached the platform, judged afterwards by a bucket at the gate's own rate
  // and burst (in whole thousandths of a token, so that sums of fractions do not refuse a call
  // exact arithmetic allows): what the gate's slots look like on arrival.
  const arrivals = [...platform.arrivals].sort((a, b) => a - b);
  let callsAboveGateBucket = 0;
  const full = burst * 1000;
  let milliTokens = full;
  let refilledAt = arrivals[0] ?? 0;
  for (const at of arrivals) {
    milliTokens = Math.min(full, milliTokens + Math.round((at - refilledAt) * rate));
    refilledAt = at;
    if (milliTokens >= 1000) milliTokens -= 1000;
    else callsAboveGateBucket += 1;
  }
  // Who still waits, in the order they began to.
  const waiting = firstWaits.filter((entry) => executions.get(entry.id)?.done === false);
  let waitersInOrder = true;
  for (let index = 1; index < waiting.length; index++) {
    if ((waiting[index]?.at ?? 0) < (waiting[index - 1]?.at ?? 0)) waitersInOrder = false;
  }
  for (const { id } of waiting) {
    const item = await ledger.get(id);
    if (item?.status !== 'running') waitersInOrder = false;
  }
  let longest = 0;
  let transitions = 0;
  for (const execution of executions.values()) {
    longest = Math.max(longest, execution.events);
    transitions += execution.transitions;
  }
  const stats = platform.limits.stats(platform.openExports);
  const used = process.cpuUsage(cpuStart);
  return {
    requests: ids.length,
    concurrency,
    timings,
    platformLimit,
    callsAboveRate: stats.throttled.rate_limit,
    callsAboveGateBucket,
    maxCallsPerSecond: stats.max_requests_per_second,
    exportsAboveCap: stats.throttled.open_exports,
    maxOpenExports: stats.max_open_exports,
    unmeteredCalls: platform.unmeteredCalls,
    platformCalls: platform.calls,
    exportedBeforeMargin: exportedBeforeMargin / ids.length,
    exported,
    drainedDays: (lastExportedAt - dropAt) / DAY,
    marginDay: (marginAt - dropAt) / DAY,
    slotHoldMinutes: exported === 0 ? 0 : slotHoldMs / exported / MINUTE,
    copySeconds: copies === 0 ? 0 : copyMs / copies / 1000,
    unfinishedAtMargin: unfinishedAtMargin ?? 0,
    alarmedAtMargin:
      unfinishedAtMargin === undefined || unfinishedAtMargin === 0
        ? 1
        : (alarmedAtMargin ?? 0) / unfinishedAtMargin,
    failed,
    failures,
    stepRetries,
    executionsTimedOut: timedOut,
    waitingAtEnd: waiting.length,
    waitersInOrder,
    slotAttempts,
    slotWaits,
    rateWaits,
    stateTransitions: transitions,
    longestHistoryEvents: longest,
    virtualDays: (endedAt - dropAt) / DAY,
    backwardClockSteps: time.backwardSteps,
    gateConflicts,
    concurrencyUsed,
    invocations,
    coldStarts,
    lambdaQueued,
    dynamoCalls,
    wallSeconds: Number(process.hrtime.bigint() - wallStart) / 1e9,
    cpuSeconds: (used.user + used.system) / 1e6,
  };
}

/** The part of a DynamoDB command's input that names a gate-table item. */
const gateWriteSchema = z.object({
  TableName: z.literal('gate'),
  Key: z.record(z.string(), z.object({ S: z.string() }).partial()),
});

/** The subject key of a simulated request (the platform model knows it; nothing logs it). */
function primaryKeyOf(id: string): string {
  return `u-${id.slice(-8)}`;
}

/** The drop's ledger items: running, exporting, all due the same day, in the open index. */
async function writeRunningRequests(
  client: DynamoDBClient,
  ids: readonly string[],
  received: Date,
  due: Date,
) {
  const at = received.toISOString();
  const itemOf = (id: string): WriteRequest => ({
    PutRequest: {
      Item: marshall({
        request_id: id,
        status: 'running',
        step: 'exporting',
        type: 'access',
        regulation: 'gdpr',
        primary_key: primaryKeyOf(id),
        received_at: at,
        due_at: due.toISOString(),
        extension_limit_at: new Date(due.getTime() + 60 * DAY).toISOString(),
        fingerprint: 'fp',
        verification: { method: 'email_link', verified_by: 'privacy', verified_at: at },
        export_attempts: 0,
        executions: 1,
        created_at: at,
        updated_at: at,
        [OPEN_SHARD_ATTRIBUTE]: openShardKey(id, 'running') ?? '',
      }),
    },
  });
  for (let start = 0; start < ids.length; start += 25) {
    let pending = ids.slice(start, start + 25).map(itemOf);
    while (pending.length > 0) {
      const answer = await client.send(new BatchWriteItemCommand({ RequestItems: { ledger: pending } }));
      pending = answer.UnprocessedItems?.ledger ?? [];
    }
  }
}

const rangeSchema = z
  .string()
  .regex(/^\d+(\.\d+)?-\d+(\.\d+)?$/, 'a range like 50-300')
  .transform((text): [number, number] => {
    const [low, high] = text.split('-').map(Number);
    return [low ?? 0, high ?? 0];
  })
  .refine(([low, high]) => low <= high, 'the low end first');
const benchEnvSchema = z.object({
  GATE_SIM_REQUESTS: z.coerce.number().int().positive().default(50_000),
  GATE_SIM_SLOTS: z.coerce.number().int().positive().default(DEFAULTS.platformMaxOpenExports),
  GATE_SIM_REGIMES: z
    .string()
    .regex(/^\d+(,\d+)*$/)
    .transform((text) => text.split(',').map(Number))
    .optional(),
  GATE_SIM_CONCURRENCY: z.coerce.number().int().positive().default(25),
  GATE_SIM_CALL_MS: rangeSchema.optional(),
  GATE_SIM_DYNAMO_MS: rangeSchema.optional(),
  GATE_SIM_COLD_START_MS: z.coerce.number().nonnegative().optional(),
  GATE_SIM_COLD_START_SHARE: z.coerce.number().min(0).max(1).optional(),
  GATE_SIM_OVERHEAD_MS: z.coerce.number().nonnegative().optional(),
  GATE_SIM_HANDOVER_MS: z.coerce.number().nonnegative().optional(),
  GATE_SIM_EXPORT_MB: rangeSchema.optional(),
  GATE_SIM_LINK_MBPS: z.coerce.number().positive().optional(),
  GATE_SIM_PLATFORM_RPS: z.coerce.number().positive().optional(),
  GATE_SIM_PLATFORM_BURST: z.coerce.number().int().positive().optional(),
});

/** The regimes a run measures: GATE_SIM_REGIMES (like 1 or 1,2), or both. Numbered from 1. */
export function gateSimulationRegimes(): number[] {
  const { GATE_SIM_REGIMES } = benchEnvSchema.parse(process.env);
  return REGIMES.map((_, index) => index + 1).filter(
    (number) => GATE_SIM_REGIMES === undefined || GATE_SIM_REGIMES.includes(number),
  );
}

/**
 * `BENCH_ONLY=gate-simulation`, one regime (numbered from 1; `npm run bench` records each in a
 * section of its own, so a long run of one regime keeps the other's figures) at GATE_SIM_REQUESTS
 * (default 50,000) requests through GATE_SIM_SLOTS export slots (default 25, the stack's),
 * GATE_SIM_CONCURRENCY Lambda environments (default 25); the durations from GATE_SIM_CALL_MS,
 * GATE_SIM_DYNAMO_MS (ranges like 50-300), GATE_SIM_COLD_START_MS, GATE_SIM_COLD_START_SHARE,
 * GATE_SIM_OVERHEAD_MS, GATE_SIM_HANDOVER_MS, GATE_SIM_EXPORT_MB (a range) and GATE_SIM_LINK_MBPS;
 * the platform's limit from GATE_SIM_PLATFORM_RPS and GATE_SIM_PLATFORM_BURST.
 */
export async function gateSimulationBench(number: number): Promise<void> {
  const env = benchEnvSchema.parse(process.env);
  const timings: Partial<SimulationTimings> = {
    ...(env.GATE_SIM_CALL_MS === undefined ? {} : { platformCallMs: env.GATE_SIM_CALL_MS }),
    ...(env.GATE_SIM_DYNAMO_MS === undefined ? {} : { dynamoMs: env.GATE_SIM_DYNAMO_MS }),
    ...(env.GATE_SIM_COLD_START_MS === undefined ? {} : { coldStartMs: env.GATE_SIM_COLD_START_MS }),
    ...(env.GATE_SIM_COLD_START_SHARE === undefined ? {} : { coldStartShare: env.GATE_SIM_COLD_START_SHARE }),
    ...(env.GATE_SIM_OVERHEAD_MS === undefined ? {} : { invocationOverheadMs: env.GATE_SIM_OVERHEAD_MS }),
    ...(env.GATE_SIM_HANDOVER_MS === undefined ? {} : { handOverMs: env.GATE_SIM_HANDOVER_MS }),
    ...(env.GATE_SIM_EXPORT_MB === undefined ? {} : { exportMegabytes: env.GATE_SIM_EXPORT_MB }),
    ...(env.GATE_SIM_LINK_MBPS === undefined ? {} : { linkMegabitsPerSecond: env.GATE_SIM_LINK_MBPS }),
  };
  console.log(
    `\nGate simulation: ${env.GATE_SIM_REQUESTS.toLocaleString('en')} requests dropped at once, ${env.GATE_SIM_SLOTS} export slots, ${env.GATE_SIM_CONCURRENCY} Lambda environments, the product's step handlers on dynalite, in virtual time`,
  );
  const regime = REGIMES[number - 1];
  if (regime === undefined) throw new Error(`no regime ${number}: the regimes are 1-${REGIMES.length}`);
  console.log(`Regime ${number}: ${regime.name}`);
  const result = await simulateGate({
    requests: env.GATE_SIM_REQUESTS,
    regime,
    maxOpenExports: env.GATE_SIM_SLOTS,
    concurrency: env.GATE_SIM_CONCURRENCY,
    timings,
    ...(env.GATE_SIM_PLATFORM_RPS === undefined
      ? {}
      : { platformRequestsPerSecond: env.GATE_SIM_PLATFORM_RPS }),
    ...(env.GATE_SIM_PLATFORM_BURST === undefined ? {} : { platformBurst: env.GATE_SIM_PLATFORM_BURST }),
    progress: (line) => console.log(line),
  });
  printResult(result);
}

/** The durations a run was given, as printed beside its figures. */
export function describeTimings(timings: SimulationTimings): string {
  const range = ([low, high]: readonly [number, number]) => `${low}-${high}`;
  const bytesPerSecond = (timings.linkMegabitsPerSecond * MB) / 8;
  const copy = timings.exportMegabytes.map((mb) => Math.round((mb * MB) / bytesPerSecond));
  return [
    `platform call ${range(timings.platformCallMs)} ms`,
    `DynamoDB ${range(timings.dynamoMs)} ms`,
    `cold start ${timings.coldStartMs} ms (first of each environment, and ${(timings.coldStartShare * 100).toFixed(0)}% of invocations)`,
    `invocation overhead ${timings.invocationOverheadMs} ms`,
    `hand-over ${timings.handOverMs} ms`,
    `SendTaskSuccess ${timings.taskSuccessMs} ms`,
    `S3 ${range(timings.s3Ms)} ms`,
    `export ${range(timings.exportMegabytes)} MB over ${timings.linkMegabitsPerSecond} Mbit/s (copy ${copy[0]}-${copy[1]} s)`,
  ].join('; ');
}

export function printResult(result: GateSimulationResult): void {
  const percent = (share: number) => `${(share * 100).toFixed(2)}%`;
  const count = (value: number) => value.toLocaleString('en');
  const failures = Object.entries(result.failures)
    .map(([name, times]) => `${name} ${times}`)
    .join(', ');
  const rows: [string, string][] = [
    ['durations', describeTimings(result.timings)],
    [
      'platform limit',
      `${result.platformLimit.requestsPerSecond} a second, burst ${result.platformLimit.burst}`,
    ],
    [
      'calls above the rate',
      `${result.callsAboveRate} (most in one second: ${result.maxCallsPerSecond}; above the gate's own bucket on arrival: ${count(result.callsAboveGateBucket)})`,
    ],
    ['exports above the cap', `${result.exportsAboveCap} (most open at once: ${result.maxOpenExports})`],
    ['unmetered calls', `${result.unmeteredCalls} of ${count(result.platformCalls)}`],
    ['exported before the deadline margin', percent(result.exportedBeforeMargin)],
    [
      'exported / drained',
      `${count(result.exported)}; the last on day ${result.drainedDays.toFixed(2)} (margin: day ${result.marginDay.toFixed(0)}); ${count(Math.round(result.exported / Math.max(result.drainedDays, 1 / 24)))} a day`,
    ],
    [
      'slot hold / copy',
      `${result.slotHoldMinutes.toFixed(2)} min from the export's start to its archive; copy ${result.copySeconds.toFixed(1)} s`,
    ],
    [
      'alarmed at the margin',
      `${percent(result.alarmedAtMargin)} of ${count(result.unfinishedAtMargin)} unfinished`,
    ],
    [
      'failed',
      `${result.failed}${failures === '' ? '' : ` (${failures})`} (executions timed out: ${result.executionsTimedOut}; step retries: ${result.stepRetries})`,
    ],
    ['still waiting at the end', `${count(result.waitingAtEnd)}, in order: ${result.waitersInOrder}`],
    [
      'slot attempts (StartExport)',
      `${count(result.slotAttempts)} (${count(result.slotWaits)} found no slot); rate waits ${count(result.rateWaits)}`,
    ],
    [
      'state transitions',
      `${count(result.stateTransitions)} (${(result.stateTransitions / result.requests).toFixed(1)} a request)`,
    ],
    ['longest history', `${count(result.longestHistoryEvents)} events of ${count(HISTORY_EVENT_LIMIT)}`],
    ['backward clock steps', String(result.backwardClockSteps)],
    [
      'gate write conflicts',
      `${count(result.gateConflicts.rate)} on the rate item, ${count(result.gateConflicts.exportSlots)} on the export slots (a full cap included), ${count(result.gateConflicts.waiters)} on waiters`,
    ],
    [
      'Lambda',
      `${result.concurrencyUsed} of ${result.concurrency} environments busy at most; ${count(result.invocations)} invocations, ${count(result.coldStarts)} cold starts, ${count(result.lambdaQueued)} waited for an environment`,
    ],
    [
      'virtual time / wall / CPU',
      `${result.virtualDays.toFixed(1)} days / ${result.wallSeconds.toFixed(0)} s / ${result.cpuSeconds.toFixed(0)} s (${((result.cpuSeconds / result.requests) * 1000).toFixed(0)} CPU s per 1,000 requests)`,
    ],
    ['DynamoDB calls', count(result.dynamoCalls)],
  ];
  for (const [name, value] of rows) console.log(`  ${name.padEnd(38)} ${value}`);
}
