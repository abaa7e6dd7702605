// The Step Functions history budget: a worst-case execution's events, checked against the limit.
import { ARCHIVE_MAX_INVOCATIONS } from '../lambdas/archive-export/continuation.ts';
import { PACKAGE_MAX_PASSES } from '../lambdas/build-package/continuation.ts';
import { nextWaitSeconds, type PollSchedule } from '../lambdas/shared/config.ts';
import { platformWaitsBudgeted } from '../lambdas/shared/step-handler.ts';

/** Step Functions Standard keeps at most this many history events per execution, then fails it. */
export const HISTORY_EVENT_LIMIT = 25_000;

/** The share of the limit a worst-case execution may use; synth refuses a schedule above it. */
export const SAFE_HISTORY_FRACTION = 0.5;

/**
 * History events per state visit, rounded up. A Task attempt: TaskStateEntered, TaskScheduled,
 * TaskStarted, TaskSucceeded or TaskFailed, TaskStateExited; each retry of it writes only its own
 * TaskScheduled, TaskStarted and TaskSucceeded or TaskFailed (the state is entered and exited
 * once). A Wait: entered, exited and the timer; a Choice, a Pass, a Succeed or a Fail: entered and
 * exited; the execution itself: started and ended.
 */
export const EVENTS_PER = {
  taskAttempt: 5,
  taskRetry: 3,
  /** A Task that waits for its token: entered, scheduled, started, submitted, its end, exited. */
  callbackTask: 6,
  wait: 3,
  choice: 2,
  end: 2,
  execution: 2,
} as const;

/**
 * One wait for platform capacity: the step's attempt that answered it, the Choice that reads it and
 * the Wait; at most, a wait for an export slot: the Task that waits for its token, or, when its
 * message cannot be sent, that Task failed (as many events but the submission) and the Wait it
 * falls back to. Its retries are not counted again: an attempt that ends in a wait succeeded, and a
 * visit that both retries and waits is within the margin SAFE_HISTORY_FRACTION keeps. Each
 * execution is budgeted platformWaitsBudgeted() of them: the waits for an export slot of a request
 * queued for the longest it can be open, and the rate and outage waits of its calls.
 */
const PLATFORM_WAIT_EVENTS =
  EVENTS_PER.taskAttempt + EVENTS_PER.choice + EVENTS_PER.callbackTask - 1 + EVENTS_PER.wait;

/** ASL's default MaxAttempts of a Retry rule that names none. */
const DEFAULT_RETRY_ATTEMPTS = 3;

/**
 * The longest path through the workflow (lib/dsr-workflow.ts), by state name: resolve, then each
 * export attempt, then each poll, then the longer of the two tails (archive in at most
 * ARCHIVE_MAX_INVOCATIONS invocations, then erase and verify,
 * or build the package in at most PACKAGE_MAX_PASSES passes; record the outcome) followed by the
 * failure path, which a terminal error in the tail can still take: the outcome not recorded,
 * RecordFailure spending its retries, and the state machine's own ledger write (longer than
 * RecordFailure's Choice, which it replaces on that path).
 */
/** The archive copy in at most ARCHIVE_MAX_INVOCATIONS invocations of ArchiveExport. */
const ARCHIVE_PATH = [
  'ArchiveExport',
  'RequestType?',
  ...Array.from({ length: ARCHIVE_MAX_INVOCATIONS - 1 }, () => [
    'ArchiveContinues?',
    'ArchiveExport',
    'RequestType?',
  ]).flat(),
] as const;

const PATH = {
  once: ['ResolveSubject', 'AlreadyCompleted?'],
  perExportAttempt: ['StartExport', 'StartExportAdmitted?'],
  perPoll: ['WaitForExport', 'CheckExport', 'ExportReady?'],
  tails: [
    [
      ...ARCHIVE_PATH,
      'EraseSubject',
      'EraseSubjectAdmitted?',
      'VerifyErasure',
      'VerifyErasureAdmitted?',
      'RecordErased',
      'OutcomeNotRecorded',
      'RecordFailure',
      'RecordFailedInLedger',
    ],
    [
      ...ARCHIVE_PATH,
      'BuildPackage',
      'BuildPackageAdmitted?',
      ...Array.from({ length: PACKAGE_MAX_PASSES - 1 }, () => [
        'PackageContinues?',
        'ContinuePackage',
        'BuildPackageAdmitted?',
      ]).flat(),
      'RecordExported',
      'OutcomeNotRecorded',
      'RecordFailure',
      'RecordFailedInLedger',
    ],
  ],
} as const;

/**
 * A correction's path (no export): resolve, CorrectSubject (its second attempt is inside the one
 * Lambda), the outcome, and the failure path after it. Far shorter than the export path; counted so
 * that a change that makes it the longer one shows.
 */
const CORRECTION_PATH = [
  'ResolveSubject',
  'AlreadyCompleted?',
  'CorrectSubject',
  'CorrectSubjectAdmitted?',
  'CorrectedAsRequested?',
  'RecordCorrectedWithChanges',
  'OutcomeNotRecorded',
  'RecordFailure',
  'RecordFailedInLedger',
] as const;

/** What the count depends on: the poll schedule, the export attempts and the workflow's states. */
export interface HistoryBudgetInput {
  readonly schedule: PollSchedule;
  readonly exportMaxAttempts: number;
  /** The workflow's states as ASL (`States` of the definition): their types and Retry rules. */
  readonly states: Readonly<Record<string, unknown>>;
}

/** The worst case of one execution. */
export interface HistoryBudget {
  /** History events of the longest execution. */
  readonly events: number;
  /** Export polls in it: every wait as short as the schedule allows, spread over every attempt. */
  readonly polls: number;
  /** `events` as a share of HISTORY_EVENT_LIMIT. */
  readonly fraction: number;
}

/**
 * Worst-case history events of one execution: the most polls the schedule allows (worstCasePolls),
 * every export attempt, and every Task visit spending every retry its Retry rules allow.
 */
export function worstCaseHistory(input: HistoryBudgetInput): HistoryBudget {
  const polls = worstCasePolls(input.schedule);
  const visit = (names: readonly string[]) =>
    names.reduce((sum, name) => sum + stateEvents(input.states, name), 0);
  const waits = platformWaitsBudgeted() * PLATFORM_WAIT_EVENTS;
  const exportPath =
    visit(PATH.once) +
    input.exportMaxAttempts * visit(PATH.perExportAttempt) +
    polls * visit(PATH.perPoll) +
    Math.max(...PATH.tails.map(visit));
  const events = EVENTS_PER.execution + Math.max(exportPath, visit(CORRECTION_PATH)) + waits + EVENTS_PER.end;
  return { events, polls, fraction: events / HISTORY_EVENT_LIMIT };
}

/**
 * The most polls the schedule allows in one execution: every wait as short as the schedule allows
 * (no jitter, no Retry-After) until the waits reach the budget (the last wait is cut to the budget,
 * and the poll after it times out). The export attempts share one schedule as they share the
 * budget, so their number does not change this count.
 */
export function worstCasePolls(schedule: PollSchedule): number {
  let waited = 0;
  let polls = 0;
  while (waited < schedule.budgetSeconds) {
    const wait = nextWaitSeconds(schedule, waited);
    if (wait >= schedule.maxSeconds) {
      // Every wait from here is the cap: the rest of the budget goes in waits of that length.
      return polls + Math.ceil((schedule.budgetSeconds - waited) / schedule.maxSeconds);
    }
    waited += wait;
    polls += 1;
  }
  return polls;
}

/** The events one visit of the state may write: a Task's every attempt, including all its retries. */
function stateEvents(states: Readonly<Record<string, unknown>>, name: string): number {
  const state = states[name];
  if (typeof state !== 'object' || state === null || !('Type' in state)) {
    throw new Error(
      `the workflow has no state "${name}", which the history budget counts; update PATH in lib/history-budget.ts to the states of lib/dsr-workflow.ts`,
    );
  }
  switch (state.Type) {
    case 'Task':
      return EVENTS_PER.taskAttempt + EVENTS_PER.taskRetry * retryAttempts(state);
    case 'Wait':
      return EVENTS_PER.wait;
    case 'Choice':
    case 'Pass':
      return EVENTS_PER.choice;
    default:
      throw new Error(`state "${name}" is a ${String(state.Type)}, which the history budget does not count`);
  }
}

/** The retries a Task may make: each Retry rule counts its own attempts, so they add up. */
function retryAttempts(state: object): number {
  const rules = 'Retry' in state && Array.isArray(state.Retry) ? (state.Retry as unknown[]) : [];
  return rules.reduce<number>((sum, rule) => {
    const attempts =
      typeof rule === 'object' &&
      rule !== null &&
      'MaxAttempts' in rule &&
      typeof rule.MaxAttempts === 'number'
        ? rule.MaxAttempts
        : DEFAULT_RETRY_ATTEMPTS;
    return sum + attempts;
  }, 0);
}

/**
 * The `States` of a synthesized definition: CDK writes it as an `Fn::Join` of JSON text and
 * intrinsics, which only ever stand inside JSON strings (ARNs), so each is replaced by a marker.
 */
export function statesOfDefinition(resolvedDefinition: unknown): Record<string, unknown> {
  const text =
    typeof resolvedDefinition === 'string' ? resolvedDefinition : joinParts(resolvedDefinition).join('');
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== 'object' || parsed === null || !('States' in parsed)) {
    throw new Error('the state machine definition has no States');
  }
  return parsed.States as Record<string, unknown>;
}

function joinParts(value: unknown): string[] {
  if (typeof value === 'object' && value !== null && 'Fn::Join' in value) {
    const [, parts] = value['Fn::Join'] as [string, unknown[]];
    return parts.map((part) => (typeof part === 'string' ? part : 'intrinsic'));
  }
  throw new Error('expected the state machine definition as a string or an Fn::Join');
}
