// The StartExport step: starts a platform export, or resumes the one the ledger already has.
import { jitteredSeconds, nextWaitSeconds } from '#shared/config';
import {
  DsrError,
  exportAttemptsSpentError,
  PlatformAuthError,
  PlatformExportsFullError,
  PlatformNotFoundError,
  PlatformRejectedError,
  PlatformThrottledError,
  PlatformUnavailableError,
} from '#shared/errors';
import { EXPORT_METRICS } from '#shared/metrics';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest, recordingSideEffect, resolvedUserId, subjectGoneOr } from '#shared/step-guards';
import { type ExportState, exportStateSchema, type StepInput, stepInputSchema } from '#shared/step-io';

/**
 * Starts a platform export, or resumes the one the ledger already has. A new attempt is started
 * only when there is no export under way or the last one failed, and never beyond the limit.
 */
export async function startExport(input: StepInput, deps: StepDeps): Promise<ExportState> {
  const item = await activeRequest(deps, input.request_id, input.execution);
  const svcUserId = resolvedUserId(item);
  const resumed = {
    export_id: item.export_id ?? '',
    attempt: Math.max(item.export_attempts, 1),
    polls: item.export_polls,
    waited_seconds: item.export_waited_seconds,
  };
  if (item.archive !== undefined) return { ...resumed, status: 'completed', wait_seconds: 0 };
  if (
    item.export_id !== undefined &&
    (item.export_status === 'pending' || item.export_status === 'completed')
  ) {
    return {
      ...resumed,
      status: 'pending',
      wait_seconds: jitteredSeconds(deps.schedule.initialSeconds, deps.random),
    };
  }

  let lastStart = item.export_start;
  let lastStatus = item.export_status;
  if (lastStatus === 'starting') {
    await recordInterruptedStart(input.request_id, item.export_attempts, deps);
    lastStart = 'interrupted';
    lastStatus = 'failed';
  }
  const spent = item.export_attempts - item.export_attempts_base;
  if (spent >= deps.exportMaxAttempts) {
    throw exportAttemptsSpentError(spent, deps.exportMaxAttempts, { start: lastStart, status: lastStatus });
  }
  // An export slot, and a rate slot for the POST, before anything is counted: without them the
  // step ends with a wait (PlatformCapacityError) and nothing has changed.
  await deps.gate.acquireExport(input.request_id);
  await deps.gate.admit();
  // The attempt is counted, and the start marked in flight, before the POST: should the process die
  // with the POST out, the next run knows an export may have started (the platform has no way to
  // ask which exports exist, nor an idempotency key), records that, and starts a deliberate new one.
  const attempt = item.export_attempts + 1;
  await deps.ledger.update(
    input.request_id,
    {
      step: 'exporting',
      export_attempts: attempt,
      export_status: 'starting',
      export_start: 'in_flight',
      export_id: null,
      export_polls: 0,
    },
    ['running'],
  );
  let exportId: string;
  try {
    ({ exportId } = await deps.platform.startExport(svcUserId, { admitted: true }));
  } catch (error) {
    if (neverStarted(error)) {
      // No export began (unreachable, throttled, unavailable, refused): this was not an attempt.
      await deps.ledger.update(
        input.request_id,
        {
          export_attempts: item.export_attempts,
          export_status: lastStatus ?? null,
          export_start: 'refused',
          export_starts_refused: (item.export_starts_refused ?? 0) + 1,
        },
        ['running'],
      );
      if (error instanceof PlatformExportsFullError) {
        // The platform has fewer open exports to give than the gate let out: the slot goes back,
        // to no one, and the request waits for one as if the gate's cap were full.
        deps.countMetric?.(EXPORT_METRICS.platformRefusals, 1);
        deps.logger.warn('the platform refused the export start: too many open exports; it waits for a slot');
        throw await deps.gate.exportRefused(input.request_id);
      }
      throw await subjectGoneOr(error, deps, item, 'StartExport');
    }
    // The attempt counts: the next one is a new, deliberate export, never a blind repeat.
    await recordingSideEffect(
      deps,
      input.request_id,
      () =>
        deps.ledger.update(input.request_id, { export_status: 'failed', export_start: 'uncertain' }, [
          'running',
        ]),
      {
        eventId: `StartExport:attempt-${attempt}`,
        step: 'StartExport',
        action: 'export_start_uncertain',
        facts: { attempt, cause: error instanceof DsrError ? error.code : 'unknown' },
      },
    );
    throw error;
  }
  const startedAt = deps.clock().toISOString();
  // The export exists on the platform now: it is recorded even if the request ended meanwhile.
  await recordingSideEffect(
    deps,
    input.request_id,
    () =>
      deps.ledger.update(
        input.request_id,
        {
          export_id: exportId,
          export_status: 'pending',
          export_start: 'accepted',
          export_started_at: startedAt,
        },
        ['running'],
      ),
    {
      eventId: `StartExport:attempt-${attempt}`,
      step: 'StartExport',
      action: 'export_started',
      facts: { export_id: exportId, attempt },
    },
  );
  // Started at the learned cap's probe, the start tells the gate the platform takes one more.
  await deps.gate.exportStarted(input.request_id);
  deps.logger.info('export started', { export_id: exportId, attempt });
  return {
    export_id: exportId,
    attempt,
    status: 'pending',
    polls: 0,
    wait_seconds: jitteredSeconds(nextWaitSeconds(deps.schedule, item.export_waited_seconds), deps.random),
    waited_seconds: item.export_waited_seconds,
  };
}

/**
 * True for a start failure that says no export began: the POST never reached the platform
 * (refused connection, DNS), or the platform turned it away (429, 503, 4xx) before starting one.
 */
function neverStarted(error: unknown): boolean {
  return (
    error instanceof PlatformThrottledError ||
    error instanceof PlatformExportsFullError ||
    error instanceof PlatformUnavailableError ||
    error instanceof PlatformAuthError ||
    error instanceof PlatformRejectedError ||
    error instanceof PlatformNotFoundError
  );
}

/**
 * The last start was in flight when its execution or process died: it is counted (it may have
 * reached the platform) and recorded as uncertain, in the ledger and the audit trail, before a new
 * attempt is considered. The platform cannot tell whether it began an export.
 */
async function recordInterruptedStart(requestId: string, attempt: number, deps: StepDeps): Promise<void> {
  await deps.ledger.update(requestId, { export_status: 'failed', export_start: 'interrupted' }, ['running']);
  await deps.audit.append(requestId, {
    eventId: `StartExport:attempt-${attempt}`,
    step: 'StartExport',
    action: 'export_start_uncertain',
    facts: { attempt, cause: 'interrupted' },
  });
  deps.logger.warn('an export start was interrupted; the platform may have begun an export', { attempt });
}

/** The StartExport step: contract and domain function. */
export const startExportStep = {
  name: 'StartExport',
  input: stepInputSchema,
  output: exportStateSchema,
  run: startExport,
} as const;
