/**
 * The platform gate in virtual time: a drop of requests through the export path, driven by the
 * real gate code on dynalite under a clock the simulation advances.
 *
 * Real: the platform gate (lambdas/shared/platform-gate.ts: rate slots, the waiting room, export
 * slots), the waiters and their hand-over (export-waiters.ts), the step handler's waits
 * (step-handler.ts, makeStepHandler around slices of ResolveSubject, StartExport, CheckExport and
 * ArchiveExport that make the same gate calls in the same order), the ledger's wait counts, the
 * reconciler's pass (reconcile(): the slot reclaim, then its figures; the paging of the open index
 * is left out, it needs no virtual time) every 15 minutes, and the deadline sweep's count
 * (sweepDeadlines) with its alarm threshold.
 *
 * Simulated: the state machine, as an event queue (each execution's next state at a virtual time;
 * a Wait jumps the clock; a slot wait writes its task token into the waiter item as the state
 * machine does and ends at its timeout or when a release answers it); the platform, which starts
 * exports, answers them ready after a drawn preparation time, and records every call. The calls'
 * times are judged afterwards by the emulator's own token bucket (local/emulator/limits.ts) at
 * the platform's limit, and the exports open at once against its cap.
 *
 * A step runs to its end before the next event: a sleep for a rate slot inside a step moves that
 * step's clock, not the queue's.
 */
import {
  BatchWriteItemCommand,
  type DynamoDBClient,
  UpdateItemCommand,
  type WriteRequest,
} from '@aws-sdk/client-dynamodb';
import { marshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import { PlatformLimits } from '#local/emulator/limits';
import { createRandom } from '#local/emulator/prng';
import { sweepDeadlines } from '../../lambdas/deadline-sweep/deadline-sweep.ts';
import { memoryCursor } from '../../lambdas/reconciler/cursor.ts';
import { reconcile } from '../../lambdas/reconciler/reconciler.ts';
import { jitteredSeconds, nextWaitSeconds, type PollSchedule } from '../../lambdas/shared/config.ts';
import { DEFAULTS } from '../../lambdas/shared/defaults.ts';
import { ExportWaiters, waiterKey } from '../../lambdas/shared/export-waiters.ts';
import { Ledger, OPEN_SHARD_ATTRIBUTE, openShardKey } from '../../lambdas/shared/ledger/index.ts';
import { createGateTable, createLedgerTable } from '../../lambdas/shared/ledger/table.ts';
import { GATE_KEY, PlatformGate } from '../../lambdas/shared/platform-gate.ts';
import type { StepDeps } from '../../lambdas/shared/step-deps.ts';
import {
  makeStepHandler,
  type StepDefinition,
  workflowExecutionTimeoutSeconds,
} from '../../lambdas/shared/step-handler.ts';
import { EVENTS_PER, HISTORY_EVENT_LIMIT } from '../../lib/history-budget.ts';
import { startDynamo } from '../test/helpers/dynamo.ts';

const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** One regime: how long the platform takes to prepare an export, drawn evenly between the two. */
export interface Regime {
  readonly name: string;
  readonly preparationMinutes: readonly [number, number];
}

export const REGIMES: readonly Regime[] = [
  { name: 'exports ready in 1-30 min', preparationMinutes: [1, 30] },
  { name: 'exports ready in 1-4 h', preparationMinutes: [60, 240] },
];

export interface GateSimulationOptions {
  readonly requests: number;
  readonly regime: Regime;
  /** @default 1 */
  readonly seed?: number;
  /** The gate's settings, and the platform's limits it is set to. @default the stack's defaults */
  readonly requestsPerSecond?: number;
  readonly burst?: number;
  readonly maxOpenExports?: number;
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
  /** Platform calls the platform's token bucket would have refused. */
  readonly callsAboveRate: number;
  /** The most platform calls within any one second. */
  readonly maxCallsPerSecond: number;
  /** Exports started while the cap's worth were open. */
  readonly exportsAboveCap: number;
  readonly maxOpenExports: number;
  /** Platform calls made without a rate slot (an export start without an export slot counts too). */
  readonly unmeteredCalls: number;
  readonly platformCalls: number;
  /** Requests exported (downloaded) before the deadline margin, as a share of all. */
  readonly exportedBeforeMargin: number;
  /** Requests still unfinished at the margin. */
  readonly unfinishedAtMargin: number;
  /** Of those, the share the first deadline sweep at or after the margin counted (DueSoonRequests). */
  readonly alarmedAtMargin: number;
  /** Executions that failed (none may fail for having waited). */
  readonly failed: number;
  /** Executions that timed out (each then resumed by the reconciler, or stranded after three). */
  readonly executionsTimedOut: number;
  /** Requests still waiting for a slot at the end, and whether they hold the order they began to wait in. */
  readonly waitingAtEnd: number;
  readonly waitersInOrder: boolean;
  /** StartExport runs (each an export-slot attempt) and how many found no slot. */
  readonly slotAttempts: number;
  readonly slotWaits: number;
  readonly rateWaits: number;
  readonly stateTransitions: number;
  readonly longestHistoryEvents: number;
  readonly virtualDays: number;
  /** DynamoDB calls the run made (dynalite), for its wall time. */
  readonly dynamoCalls: number;
  readonly wallSeconds: number;
  readonly cpuSeconds: number;
}

type Phase = 'resolve' | 'start' | 'poll' | 'archive' | 'done' | 'failed';

interface Execution {
  readonly id: string;
  phase: Phase;
  /** Bumped whenever what was scheduled for it no longer holds (woken, timed out). */
  generation: number;
  startedAt: number;
  executions: number;
  polls: number;
  /** Seconds waited between polls in all (the ledger's export_waited_seconds), which the schedule runs on. */
  waited: number;
  events: number;
  transitions: number;
  firstWaitAt?: number;
  exportedAt?: number;
  /** The task token of its running slot wait. */
  token?: string;
}

type EventInput =
  | { at: number; kind: 'step' | 'timeout'; execution: Execution; generation: number }
  | { at: number; kind: 'reconcile' | 'sweep' | 'end' };
type Event = EventInput & { seq: number };

/** A binary heap of events by time, then by insertion. */
class EventQueue {
  readonly #heap: Event[] = [];
  #seq = 0;

  push(event: EventInput): void {
    const item: Event = { ...event, seq: this.#seq++ };
    const heap = this.#heap;
    heap.push(item);
    let index = heap.length - 1;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      if (!before(item, heap[parent] as Event)) break;
      heap[index] = heap[parent] as Event;
      index = parent;
    }
    heap[index] = item;
  }

  pop(): Event | undefined {
    const heap = this.#heap;
    const top = heap[0];
    const last = heap.pop();
    if (top === undefined || last === undefined || heap.length === 0) return top;
    let index = 0;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child = right < heap.length && before(heap[right] as Event, heap[left] as Event) ? right : left;
      if (!before(heap[child] as Event, last)) break;
      heap[index] = heap[child] as Event;
      index = child;
    }
    heap[index] = last;
    return top;
  }
}

function before(a: Event, b: Event): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}

/** What a step answers in the simulation: a platform wait, or the next state's input. */
const answerSchema = z.looseObject({
  platform_wait: z
    .object({
      reason: z.enum(['rate', 'exports', 'outage']),
      seconds: z.number(),
      slot: z.literal(true).optional(),
    })
    .optional(),
  wait_seconds: z.number().optional(),
  ready: z.boolean().optional(),
});
const inputSchema = z.object({ request_id: z.string() });
type Answer = z.infer<typeof answerSchema>;

/** Runs one regime against a fresh dynalite in this process. */
export async function simulateGate(options: GateSimulationOptions): Promise<GateSimulationResult> {
  const dynamo = await startDynamo({ maxAttempts: 10 });
  const { client } = dynamo;
  let dynamoCalls = 0;
  client.middlewareStack.add(
    (next) => async (args) => {
      dynamoCalls += 1;
      return next(args);
    },
    { step: 'initialize' },
  );
  try {
    return { ...(await run(client, options)), dynamoCalls };
  } finally {
    await dynamo.close();
  }
}

async function run(
  client: DynamoDBClient,
  options: GateSimulationOptions,
): Promise<Omit<GateSimulationResult, 'dynamoCalls'>> {
  const wallStart = process.hrtime.bigint();
  const cpuStart = process.cpuUsage();
  const rate = options.requestsPerSecond ?? DEFAULTS.platformRequestsPerSecond;
  const burst = options.burst ?? DEFAULTS.platformBurst;
  const cap = options.maxOpenExports ?? DEFAULTS.platformMaxOpenExports;
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
  const preparation = createRandom(seed, 'gate-simulation-exports');
  const [prepLow, prepHigh] = options.regime.preparationMinutes;

  // The drop comes in mid-morning; the passes run on the hour and the quarter-hour.
  const dropAt = Date.parse('2027-01-04T09:17:00.000Z');
  const firstHour = Math.ceil(dropAt / HOUR) * HOUR;
  const dueAt = dropAt + deadlineDays * DAY;
  const marginAt = dueAt - marginDays * DAY;
  let clock = dropAt;
  const now = () => clock;

  await createLedgerTable(client, 'ledger');
  await createGateTable(client, 'gate');
  const ids = Array.from(
    { length: options.requests },
    (_, index) => `00000000-0000-4000-8000-${index.toString(16).padStart(12, '0')}`,
  );
  await writeRunningRequests(client, ids, new Date(dropAt), new Date(dueAt));
  const ledger = new Ledger(client, 'ledger', () => new Date(clock));

  const queue = new EventQueue();
  const executions = new Map<string, Execution>();
  const byToken = new Map<string, Execution>();
  let tokens = 0;

  // The platform: every call's time, the exports it prepares, and the starts and ends of exports.
  const callTimes: number[] = [];
  const exportChanges: { at: number; change: 1 | -1 }[] = [];
  const ready = new Map<string, number>();
  let admitted = 0;
  let unmetered = 0;
  const platformCall = () => {
    callTimes.push(clock);
    if (admitted > 0) admitted -= 1;
    else unmetered += 1;
  };

  // Step Functions' SendTaskSuccess: the woken execution runs StartExport at once.
  const succeed = async (token: string) => {
    const execution = byToken.get(token);
    byToken.delete(token);
    if (execution === undefined || execution.token !== token) {
      throw Object.assign(new Error('task timed out'), { name: 'TaskTimedOut' });
    }
    if (execution.phase === 'failed' || execution.phase === 'done') {
      throw Object.assign(new Error('gone'), { name: 'TaskDoesNotExist' });
    }
    execution.token = undefined;
    execution.generation += 1;
    // The callback Task ends (its submission and success): then StartExport runs again.
    queue.push({ at: clock, kind: 'step', execution, generation: execution.generation });
  };
  const waiters = new ExportWaiters(client, 'gate', succeed, { logger: silent, now });
  const gate = new PlatformGate(
    client,
    'gate',
    {
      requestsPerSecond: rate,
      burst,
      maxOpenExports: cap,
      outageHorizonSeconds: DEFAULTS.retryHorizonHours * 3600,
    },
    {
      now,
      sleep: async (ms) => {
        clock += ms;
      },
      waiters,
    },
  );
  let slotAttempts = 0;
  const stepGate: StepDeps['gate'] = {
    admit: async () => {
      await gate.admit();
      admitted += 1;
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
  const unused = () => Promise.reject(new Error('not part of the simulation'));
  const deps: StepDeps = {
    ledger,
    gate: stepGate,
    audit: { append: unused },
    platform: {
      retrieveUser: unused,
      updateUser: unused,
      deleteUser: unused,
      startExport: unused,
      exportStatus: unused,
      userActivity: unused,
    },
    archive: {
      copy: unused,
      verify: unused,
      verifyContinued: unused,
      abandonUpload: unused,
      remove: unused,
      read: unused,
      storePackage: unused,
    },
    schedule,
    exportMaxAttempts: DEFAULTS.exportMaxAttempts,
    retryAfterCapSeconds: DEFAULTS.retryAfterCapSeconds,
    clock: () => new Date(clock),
    sleep: async (ms) => {
      clock += ms;
    },
    random: () => random.next(),
    logger: silent,
  };
  const step = (name: string, body: (requestId: string) => Promise<Answer>) =>
    makeStepHandler(
      {
        name,
        input: inputSchema,
        output: answerSchema,
        run: (input) => body(input.request_id),
      } satisfies StepDefinition<typeof inputSchema, typeof answerSchema>,
      () => deps,
    );
  // The gate calls of each step, in the order the real step makes them.
  const resolveSubject = step('ResolveSubject', async () => {
    await stepGate.admit();
    platformCall();
    return {};
  });
  const startExport = step('StartExport', async (requestId) => {
    await stepGate.acquireExport(requestId);
    await stepGate.admit();
    platformCall();
    exportChanges.push({ at: clock, change: 1 });
    ready.set(requestId, clock + (prepLow + (prepHigh - prepLow) * preparation.next()) * MINUTE);
    return { wait_seconds: jitteredSeconds(schedule.initialSeconds, () => random.next()) };
  });
  const checkExport = (waited: number) =>
    step('CheckExport', async (requestId) => {
      await stepGate.admit();
      platformCall();
      const isReady = (ready.get(requestId) ?? Number.POSITIVE_INFINITY) <= clock;
      return {
        ready: isReady,
        wait_seconds: jitteredSeconds(nextWaitSeconds(schedule, waited), () => random.next()),
      };
    });
  const archiveExport = step('ArchiveExport', async (requestId) => {
    // The link's status, then the download, each a platform call through the gate.
    await stepGate.admit();
    platformCall();
    await stepGate.admit();
    platformCall();
    exportChanges.push({ at: clock, change: -1 });
    await stepGate.releaseExport(requestId);
    await ledger.update(requestId, { status: 'completed' }, ['running']);
    return {};
  });

  let slotWaits = 0;
  let rateWaits = 0;
  let failed = 0;
  let timedOut = 0;
  let exported = 0;
  let exportedBeforeMargin = 0;
  let unfinishedAtMargin: number | undefined;
  let alarmedAtMargin: number | undefined;
  const resumes = new Map<string, number>();
  const firstWaits: { id: string; at: number }[] = [];

  const schedule_ = (execution: Execution, at: number) =>
    queue.push({ at, kind: 'step', execution, generation: execution.generation });
  /** A Task attempt and the Choice after it. */
  const visit = (execution: Execution) => {
    execution.events += EVENTS_PER.taskAttempt + EVENTS_PER.choice;
    execution.transitions += 2;
  };
  const waitState = (execution: Execution) => {
    execution.events += EVENTS_PER.wait;
    execution.transitions += 1;
  };

  const runStep = async (execution: Execution): Promise<void> => {
    const startedAt = clock;
    const { id } = execution;
    admitted = 0;
    const handler =
      execution.phase === 'resolve'
        ? resolveSubject
        : execution.phase === 'start'
          ? startExport
          : execution.phase === 'poll'
            ? checkExport(execution.waited)
            : archiveExport;
    const answer = answerSchema.parse(await handler({ request_id: id, execution: 'run' }));
    visit(execution);
    const wait = answer.platform_wait;
    if (wait !== undefined) {
      if (wait.reason === 'rate' || wait.reason === 'outage') rateWaits += 1;
      if (wait.slot === true) {
        slotWaits += 1;
        if (execution.firstWaitAt === undefined) {
          execution.firstWaitAt = startedAt;
          firstWaits.push({ id, at: startedAt });
        }
        // The state machine writes this wait's token into the waiter item, then waits for it.
        tokens += 1;
        const token = `token-${tokens}`;
        try {
          await client.send(
            new UpdateItemCommand({
              TableName: 'gate',
              Key: marshall({ [GATE_KEY]: waiterKey(id) }),
              UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
              ConditionExpression: 'attribute_exists(#since)',
              ExpressionAttributeNames: { '#token': 'token', '#since': 'since' },
              ExpressionAttributeValues: { ':token': { S: token }, ':wait': { N: String(wait.seconds) } },
            }),
          );
          execution.token = token;
          byToken.set(token, execution);
          execution.events += EVENTS_PER.callbackTask;
          execution.transitions += 1;
          execution.generation += 1;
          queue.push({
            at: clock + wait.seconds * 1000,
            kind: 'timeout',
            execution,
            generation: execution.generation,
          });
        } catch {
          waitState(execution);
          schedule_(execution, clock + wait.seconds * 1000);
        }
        return;
      }
      waitState(execution);
      schedule_(execution, clock + wait.seconds * 1000);
      return;
    }
    if (execution.phase === 'resolve') {
      execution.phase = 'start';
      schedule_(execution, clock);
    } else if (execution.phase === 'start') {
      execution.phase = 'poll';
      waitState(execution);
      execution.waited += answer.wait_seconds ?? 0;
      schedule_(execution, clock + (answer.wait_seconds ?? 0) * 1000);
    } else if (execution.phase === 'poll') {
      execution.polls += 1;
      if (answer.ready === true) {
        execution.phase = 'archive';
        schedule_(execution, clock);
      } else {
        waitState(execution);
        execution.waited += answer.wait_seconds ?? 0;
        schedule_(execution, clock + (answer.wait_seconds ?? 0) * 1000);
      }
    } else {
      execution.phase = 'done';
      execution.exportedAt = clock;
      execution.events += EVENTS_PER.end;
      exported += 1;
      if (clock < marginAt) exportedBeforeMargin += 1;
    }
  };

  // The drop: intake starts the executions at its pace.
  const startsPerSecond = options.startsPerSecond ?? 50;
  ids.forEach((id, index) => {
    const startedAt = dropAt + Math.floor((index / startsPerSecond) * 1000);
    const execution: Execution = {
      id,
      phase: 'resolve',
      generation: 0,
      startedAt,
      executions: 1,
      polls: 0,
      waited: 0,
      events: EVENTS_PER.execution,
      transitions: 0,
    };
    executions.set(id, execution);
    schedule_(execution, startedAt);
  });
  queue.push({ at: Math.ceil(dropAt / (15 * MINUTE)) * 15 * MINUTE, kind: 'reconcile' });
  queue.push({ at: firstHour, kind: 'sweep' });

  const cursor = memoryCursor();
  const alarmThreshold = 1;
  let lastReport = dropAt;
  const open = () => ids.length - exported;
  for (;;) {
    const event = queue.pop();
    if (event === undefined) break;
    clock = event.at;
    if (options.progress !== undefined && clock - lastReport >= DAY) {
      lastReport = clock;
      options.progress(
        `  day ${((clock - dropAt) / DAY).toFixed(1)}: ${exported.toLocaleString('en')} exported, ${slotAttempts.toLocaleString('en')} slot attempts, ${(Number(process.hrtime.bigint() - wallStart) / 1e9) | 0} s`,
      );
    }
    if (event.kind === 'end') break;
    if (event.kind === 'reconcile') {
      // Its slot reclaim and its figures (the open index's paging needs no virtual time).
      await reconcile(
        {
          ledger,
          audit: { append: unused },
          // Given no time for the open index, the pass lists nothing and looks at no request.
          list: async () => ({ executions: [] }),
          describe: async () => 'RUNNING',
          start: async () => 'started',
          clock: () => new Date(clock),
          logger: silent,
          gate,
          publish: () => {},
          cursor,
        },
        { maxResumes: 3, graceSeconds: 600, timeLeftMs: () => 0 },
      );
      if (open() > 0) queue.push({ at: clock + 15 * MINUTE, kind: 'reconcile' });
      continue;
    }
    if (event.kind === 'sweep') {
      // Hourly in the stack; here daily until a day before the margin (every request has the same
      // deadline, so none is due soon before), then hourly.
      const counts = await sweepDeadlines(
        { ledger, clock: () => new Date(clock) },
        { dueSoonDays: marginDays, pageSize: 1000 },
      );
      if (clock >= marginAt && unfinishedAtMargin === undefined) {
        unfinishedAtMargin = open();
        alarmedAtMargin = counts.due_soon >= alarmThreshold ? Math.min(counts.due_soon, open()) : 0;
        if (counts.due_soon !== open()) {
          throw new Error(`the sweep counted ${counts.due_soon} due soon, ${open()} are open`);
        }
        // The requests keep waiting: one more hour shows them in place, then the run ends.
        queue.push({ at: clock + HOUR, kind: 'end' });
      }
      if (open() > 0) queue.push({ at: clock + (clock + DAY < marginAt ? DAY : HOUR), kind: 'sweep' });
      continue;
    }
    if (event.kind !== 'step' && event.kind !== 'timeout') continue;
    const { execution } = event;
    if (event.generation !== execution.generation) continue;
    if (execution.phase === 'done' || execution.phase === 'failed') continue;
    if (clock - execution.startedAt > executionTimeoutMs) {
      // The execution timed out: the reconciler's next pass resumes it (a new execution that
      // picks up from the ledger), up to three times; then it is recorded failed (stranded).
      timedOut += 1;
      if (execution.token !== undefined) byToken.delete(execution.token);
      execution.token = undefined;
      const resumed = (resumes.get(execution.id) ?? 0) + 1;
      resumes.set(execution.id, resumed);
      if (resumed > 3) {
        execution.phase = 'failed';
        failed += 1;
        continue;
      }
      execution.startedAt = clock;
      execution.executions += 1;
      execution.events = EVENTS_PER.execution;
      execution.transitions = 0;
      execution.generation += 1;
      schedule_(execution, clock);
      continue;
    }
    if (event.kind === 'timeout') {
      // Nobody answered: the callback Task times out into StartExport.
      if (execution.token !== undefined) byToken.delete(execution.token);
      execution.token = undefined;
      execution.generation += 1;
      schedule_(execution, clock);
      continue;
    }
    await runStep(execution);
    // Every request exported: what is left in the queue are waits already answered.
    if (open() === 0) break;
  }

  // The platform's judgement of the calls: a token bucket at the limit the gate is set to (the
  // emulator's, local/emulator/limits.ts, in whole thousandths of a token, so that sums of
  // fractions do not refuse a call exact arithmetic allows), and the emulator's busiest second.
  callTimes.sort((a, b) => a - b);
  let judgedAt = 0;
  const limits = new PlatformLimits(() => judgedAt, 0);
  let callsAboveRate = 0;
  const full = burst * 1000;
  let milliTokens = full;
  let refilledAt = callTimes[0] ?? 0;
  for (const at of callTimes) {
    judgedAt = at;
    limits.countRequest();
    milliTokens = Math.min(full, milliTokens + Math.round((at - refilledAt) * rate));
    refilledAt = at;
    if (milliTokens >= 1000) milliTokens -= 1000;
    else callsAboveRate += 1;
  }
  exportChanges.sort((a, b) => a.at - b.at || a.change - b.change);
  let openExports = 0;
  let maxOpen = 0;
  let exportsAboveCap = 0;
  for (const { change } of exportChanges) {
    if (change === 1 && openExports >= cap) exportsAboveCap += 1;
    openExports += change;
    maxOpen = Math.max(maxOpen, openExports);
  }
  // Who still waits, in the order they began to.
  const waiting = firstWaits.filter((entry) => executions.get(entry.id)?.phase === 'start');
  let waitersInOrder = true;
  for (let index = 1; index < waiting.length; index++) {
    if ((waiting[index]?.at ?? 0) < (waiting[index - 1]?.at ?? 0)) waitersInOrder = false;
  }
  const stillWaiting = new Set(waiting.map((entry) => entry.id));
  for (const id of stillWaiting) {
    const item = await ledger.get(id);
    if (item?.status !== 'running') waitersInOrder = false;
  }
  let longest = 0;
  let transitions = 0;
  for (const execution of executions.values()) {
    longest = Math.max(longest, execution.events);
    transitions += execution.transitions;
  }
  const stats = limits.stats(0);
  return {
    requests: ids.length,
    callsAboveRate,
    maxCallsPerSecond: stats.max_requests_per_second,
    exportsAboveCap,
    maxOpenExports: maxOpen,
    unmeteredCalls: unmetered,
    platformCalls: callTimes.length,
    exportedBeforeMargin: exportedBeforeMargin / ids.length,
    unfinishedAtMargin: unfinishedAtMargin ?? 0,
    alarmedAtMargin:
      unfinishedAtMargin === undefined || unfinishedAtMargin === 0
        ? 1
        : (alarmedAtMargin ?? 0) / unfinishedAtMargin,
    failed,
    executionsTimedOut: timedOut,
    waitingAtEnd: waiting.length,
    waitersInOrder,
    slotAttempts,
    slotWaits,
    rateWaits,
    stateTransitions: transitions,
    longestHistoryEvents: longest,
    virtualDays: (clock - dropAt) / DAY,
    wallSeconds: Number(process.hrtime.bigint() - wallStart) / 1e9,
    cpuSeconds: (() => {
      const used = process.cpuUsage(cpuStart);
      return (used.user + used.system) / 1e6;
    })(),
  };
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
        primary_key: `u-${id.slice(-8)}`,
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

/**
 * `BENCH_ONLY=gate-simulation`: both regimes at GATE_SIM_REQUESTS (default 50,000) requests
 * through GATE_SIM_SLOTS export slots (default 25, the stack's).
 */
export async function gateSimulationBench(): Promise<void> {
  const requests = Number(process.env.GATE_SIM_REQUESTS ?? 50_000);
  const slots = Number(process.env.GATE_SIM_SLOTS ?? DEFAULTS.platformMaxOpenExports);
  const only = process.env.GATE_SIM_REGIMES?.split(',').map(Number);
  console.log(
    `\nGate simulation: ${requests.toLocaleString('en')} requests dropped at once, ${slots} export slots, on dynalite, in virtual time`,
  );
  for (const [index, regime] of REGIMES.entries()) {
    if (only !== undefined && !only.includes(index + 1)) continue;
    console.log(`Regime ${index + 1}: ${regime.name}`);
    const result = await simulateGate({
      requests,
      regime,
      maxOpenExports: slots,
      progress: (line) => console.log(line),
    });
    printResult(result);
  }
}

export function printResult(result: GateSimulationResult): void {
  const percent = (share: number) => `${(share * 100).toFixed(2)}%`;
  const rows: [string, string][] = [
    ['calls above the rate', `${result.callsAboveRate} (most in one second: ${result.maxCallsPerSecond})`],
    ['exports above the cap', `${result.exportsAboveCap} (most open at once: ${result.maxOpenExports})`],
    ['unmetered calls', `${result.unmeteredCalls} of ${result.platformCalls.toLocaleString('en')}`],
    ['exported before the deadline margin', percent(result.exportedBeforeMargin)],
    [
      'alarmed at the margin',
      `${percent(result.alarmedAtMargin)} of ${result.unfinishedAtMargin.toLocaleString('en')} unfinished`,
    ],
    ['failed', `${result.failed} (executions timed out: ${result.executionsTimedOut})`],
    [
      'still waiting at the end',
      `${result.waitingAtEnd.toLocaleString('en')}, in order: ${result.waitersInOrder}`,
    ],
    [
      'slot attempts (StartExport runs)',
      `${result.slotAttempts.toLocaleString('en')} (${result.slotWaits.toLocaleString('en')} found no slot); rate waits ${result.rateWaits.toLocaleString('en')}`,
    ],
    ['state transitions', result.stateTransitions.toLocaleString('en')],
    [
      'longest history',
      `${result.longestHistoryEvents.toLocaleString('en')} events of ${HISTORY_EVENT_LIMIT.toLocaleString('en')}`,
    ],
    [
      'virtual time / wall / CPU',
      `${result.virtualDays.toFixed(1)} days / ${result.wallSeconds.toFixed(0)} s / ${result.cpuSeconds.toFixed(0)} s`,
    ],
    ['DynamoDB calls', result.dynamoCalls.toLocaleString('en')],
  ];
  for (const [name, value] of rows) console.log(`  ${name.padEnd(38)} ${value}`);
}
