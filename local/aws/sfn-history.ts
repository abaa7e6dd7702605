/**
 * An execution's history as GetExecutionHistory answers it, from the event log the local runner
 * kept while the execution ran (aws-local-stepfunctions' events): each entered and exited state,
 * each failure, Map iteration and Parallel branch, in Step Functions' event types and detail shapes
 * (`TaskStateEntered` with `stateEnteredEventDetails`, `ExecutionFailed` with
 * `executionFailedEventDetails`...), numbered from 1 with the previous event's id.
 *
 * What the local log does not hold is not made up: there are no `TaskScheduled`/`TaskStarted`
 * events (a local task is a function call), and a retry shows as the task's failure followed by the
 * state's next attempt rather than as new scheduled events. A running execution's log is written
 * when it ends, so until then its history is its `ExecutionStarted` event.
 */
import type { ExecutionRecord } from '../runtime/executions.ts';

/** One event as GetExecutionHistory gives it (timestamps in epoch seconds, as the JSON protocol carries them). */
export interface HistoryEvent {
  readonly id: number;
  readonly previousEventId: number;
  readonly timestamp: number;
  readonly type: string;
  readonly [details: string]: unknown;
}

/** Step Functions' state type words, by the ASL `Type`. */
const STATE_TYPE: Readonly<Record<string, string>> = {
  Task: 'Task',
  Pass: 'Pass',
  Choice: 'Choice',
  Wait: 'Wait',
  Succeed: 'Succeed',
  Fail: 'Fail',
  Parallel: 'Parallel',
  Map: 'Map',
};

interface StateData {
  readonly name?: unknown;
  readonly type?: unknown;
  readonly input?: unknown;
  readonly output?: unknown;
}

function json(value: unknown): string {
  return JSON.stringify(value ?? null);
}

function text(value: unknown): string {
  return typeof value === 'string' ? value : json(value);
}

function stateOf(event: Readonly<Record<string, unknown>>, field = 'state'): StateData {
  const state = event[field];
  return typeof state === 'object' && state !== null ? (state as StateData) : {};
}

/** The Step Functions event(s) one local log entry stands for; none when Step Functions has no such event. */
function translate(
  event: Readonly<Record<string, unknown>>,
  record: ExecutionRecord,
): Record<string, unknown>[] {
  const state = stateOf(event);
  const stateType = STATE_TYPE[String(state.type)] ?? 'Task';
  const name = String(state.name ?? '');
  const failure = { error: String(event.Error ?? ''), cause: text(event.Cause ?? '') };
  switch (event.type) {
    case 'ExecutionStarted':
      return [
        {
          type: 'ExecutionStarted',
          executionStartedEventDetails: {
            input: json(event.input ?? record.input),
            inputDetails: { truncated: false },
          },
        },
      ];
    case 'ExecutionSucceeded':
      return [
        {
          type: 'ExecutionSucceeded',
          executionSucceededEventDetails: { output: json(event.output), outputDetails: { truncated: false } },
        },
      ];
    case 'ExecutionFailed':
      return [{ type: 'ExecutionFailed', executionFailedEventDetails: failure }];
    case 'ExecutionAborted':
    case 'ExecutionTerminated':
      return [
        {
          type: 'ExecutionAborted',
          executionAbortedEventDetails: {
            ...(record.error === undefined ? {} : { error: record.error }),
            ...(record.cause === undefined ? {} : { cause: record.cause }),
          },
        },
      ];
    case 'StateEntered':
      return [
        {
          type: `${stateType}StateEntered`,
          stateEnteredEventDetails: { name, input: json(state.input), inputDetails: { truncated: false } },
        },
      ];
    case 'StateExited':
      return [
        {
          type: `${stateType}StateExited`,
          stateExitedEventDetails: { name, output: json(state.output), outputDetails: { truncated: false } },
        },
      ];
    case 'StateFailed':
      if (stateType === 'Task')
        return [
          {
            type: 'TaskFailed',
            taskFailedEventDetails: { ...failure, resourceType: 'lambda', resource: 'invoke' },
          },
        ];
      if (stateType === 'Map') return [{ type: 'MapStateFailed' }];
      if (stateType === 'Parallel') return [{ type: 'ParallelStateFailed' }];
      return [];
    case 'MapIterationStarted':
    case 'MapIterationSucceeded':
    case 'MapIterationFailed': {
      const details = `mapIteration${event.type.slice('MapIteration'.length)}EventDetails`;
      return [
        {
          type: event.type,
          [details]: { name: String(stateOf(event, 'parentState').name ?? ''), index: event.index },
        },
      ];
    }
    case 'ParallelBranchStarted':
      return [{ type: 'ParallelStateStarted' }];
    case 'ParallelBranchSucceeded':
      return [{ type: 'ParallelStateSucceeded' }];
    case 'ParallelBranchFailed':
      return [{ type: 'ParallelStateFailed' }];
    default:
      // StateRetried and StateCaught: Step Functions records the failure and the next state, not these.
      return [];
  }
}

/** The execution's history, oldest first. */
export function executionHistory(record: ExecutionRecord): HistoryEvent[] {
  const logged =
    record.events.length > 0
      ? record.events
      : [{ type: 'ExecutionStarted', timestamp: Date.parse(record.startDate) }];
  const history: HistoryEvent[] = [];
  for (const event of logged) {
    const timestamp =
      typeof event.timestamp === 'number' ? event.timestamp / 1000 : Date.parse(record.startDate) / 1000;
    for (const translated of translate(event, record)) {
      const id = history.length + 1;
      history.push({ timestamp, ...translated, type: String(translated.type), id, previousEventId: id - 1 });
    }
  }
  return history;
}
