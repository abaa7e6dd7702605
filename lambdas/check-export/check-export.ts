// The CheckExport step: polls the platform export once and schedules the next wait, within the total budget.
import { z } from 'zod';
import { jitteredSeconds, nextWaitSeconds } from '#shared/config';
import {
  ExportTimedOutError,
  LedgerStateError,
  PlatformCapacityError,
  PlatformNotFoundError,
  PlatformThrottledError,
} from '#shared/errors';
import type { LedgerItem } from '#shared/ledger';
import type { ExportStatus } from '#shared/platform-schemas';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest, subjectGoneOr } from '#shared/step-guards';
import { type ExportState, exportStateSchema, stepInputSchema } from '#shared/step-io';

export const checkExportInputSchema = stepInputSchema.extend({
  /** How long the Wait before this poll lasted, in seconds. */
  waited: z.number().int().nonnegative(),
  /** The export StartExport answered; an execution of an older definition sends none, and the ledger is read for it. */
  export_id: z.string().min(1).optional(),
});
export type CheckExportInput = z.infer<typeof checkExportInputSchema>;

/**
 * Polls the export once. Pending answers schedule the next wait (a share of the time waited so far,
 * capped, and never shorter than a Retry-After the platform sent); past the total budget the export has timed out.
 * The poll is counted in one conditional write that holds only while the request is running with
 * this export pending; when it does not hold, the ledger is read to see what changed.
 */
export async function checkExport(input: CheckExportInput, deps: StepDeps): Promise<ExportState> {
  const exportId = input.export_id ?? (await exportUnderWay(deps, input.request_id)).export_id;

  let status: ExportStatus;
  let retryAfter = 0;
  try {
    status = await deps.platform.exportStatus(exportId);
  } catch (error) {
    if (error instanceof PlatformNotFoundError) {
      throw await subjectGoneOr(
        error,
        deps,
        await activeRequest(deps, input.request_id, input.execution),
        'CheckExport',
      );
    }
    if (error instanceof PlatformCapacityError) {
      // No poll was made: the next one, after the wait, polls the same export (nothing counted).
      const item = await activeRequest(deps, input.request_id, input.execution);
      throw error.carrying({
        export_id: exportId,
        attempt: item.export_attempts,
        polls: item.export_polls,
        waited_seconds: item.export_waited_seconds,
        status: 'pending',
        wait_seconds: 0,
      } satisfies ExportState);
    }
    if (!(error instanceof PlatformThrottledError)) throw error;
    // A throttled poll is just a pending poll: wait at least as long as the platform asked.
    status = { status: 'pending', reported: 'throttled' };
    retryAfter = Math.min(error.retryAfterSeconds ?? 0, deps.schedule.maxSeconds);
  }

  const finished =
    status.status === 'completed'
      ? { export_status: 'completed' as const, step: 'archiving' as const }
      : status.status === 'failed'
        ? { export_status: 'failed' as const }
        : undefined;
  // A completed export moves the request on to archiving in the same write.
  const item = await deps.ledger.countPoll(input.request_id, exportId, input.waited, finished);
  if (item === undefined) return settledExport(deps, input.request_id, exportId);
  const polls = item.export_polls;
  const waited = item.export_waited_seconds;
  const base = { export_id: exportId, attempt: item.export_attempts, polls, waited_seconds: waited };

  if (status.status !== 'pending') {
    // A failed export is no longer open on the platform; a completed one is, until it is downloaded.
    if (status.status === 'failed') await deps.gate.releaseExport(input.request_id);
    await deps.audit.append(input.request_id, {
      eventId: `CheckExport:attempt-${item.export_attempts}:${status.status}`,
      step: 'CheckExport',
      action: status.status === 'completed' ? 'export_completed' : 'export_failed',
      facts: { export_id: exportId, attempt: item.export_attempts, polls, waited_seconds: waited },
    });
    deps.logger.info('export finished', { export_id: exportId, status: status.status, polls });
    return { ...base, status: status.status, wait_seconds: 0 };
  }

  const remaining = deps.schedule.budgetSeconds - waited;
  if (remaining <= 0) {
    throw new ExportTimedOutError(
      `the export was still pending after ${waited} s of waiting (${polls} polls); the budget is ${deps.schedule.budgetSeconds} s`,
    );
  }
  const wait = Math.min(
    Math.max(jitteredSeconds(nextWaitSeconds(deps.schedule, waited), deps.random), retryAfter),
    remaining,
  );
  deps.logger.debug('export pending', {
    export_id: exportId,
    polls,
    next_wait_seconds: wait,
    reported: status.reported,
  });
  return { ...base, status: 'pending', wait_seconds: wait };
}

/** The request's export under way, or the error that says why there is none to poll. */
async function exportUnderWay(
  deps: StepDeps,
  requestId: string,
): Promise<LedgerItem & { export_id: string }> {
  const item = await activeRequest(deps, requestId);
  const exportId = item.export_id;
  if (exportId === undefined || item.export_status === undefined || item.export_status === 'starting') {
    throw new LedgerStateError('no export is under way for this request');
  }
  return { ...item, export_id: exportId };
}

/**
 * The answer when the poll could not be counted: the export has already ended in the ledger (a
 * re-run after the state moved on), or the request changed under this execution.
 */
async function settledExport(deps: StepDeps, requestId: string, exportId: string): Promise<ExportState> {
  const item = await exportUnderWay(deps, requestId);
  const ended = item.archive !== undefined ? 'completed' : item.export_status;
  if (item.export_id !== exportId || (ended !== 'completed' && ended !== 'failed')) {
    throw new LedgerStateError(
      `the request is ${item.status} with ${item.export_id === exportId ? `this export ${item.export_status}` : 'another export under way'}; polls are counted only while it is running with this export pending`,
    );
  }
  return {
    export_id: exportId,
    attempt: item.export_attempts,
    polls: item.export_polls,
    waited_seconds: item.export_waited_seconds,
    status: ended,
    wait_seconds: 0,
  };
}

/** The CheckExport step: contract and domain function. */
export const checkExportStep = {
  name: 'CheckExport',
  input: checkExportInputSchema,
  output: exportStateSchema,
  run: checkExport,
} as const;
