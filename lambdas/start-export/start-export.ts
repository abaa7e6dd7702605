import { ExportFailedError, ExportStartUncertainError } from '#shared/errors';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest, resolvedUserId } from '#shared/step-guards';
import { type ExportState, exportStateSchema, type StepInput, stepInputSchema } from '#shared/step-io';

/**
 * Starts a platform export, or resumes the one the ledger already has. A new attempt is started
 * only when there is no export under way or the last one failed, and never beyond the limit.
 */
export async function startExport(input: StepInput, deps: StepDeps): Promise<ExportState> {
  const item = await activeRequest(deps, input.request_id);
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
    return { ...resumed, status: 'pending', wait_seconds: deps.schedule.initialSeconds };
  }

  const attempt = item.export_attempts + 1;
  const spent = item.export_attempts - item.export_attempts_base;
  if (spent >= deps.exportMaxAttempts) {
    throw new ExportFailedError(
      `the export did not succeed in ${spent} attempt(s); the limit is ${deps.exportMaxAttempts}`,
    );
  }
  await deps.ledger.update(
    input.request_id,
    {
      step: 'exporting',
      export_attempts: attempt,
      export_status: 'starting',
      export_id: null,
      export_polls: 0,
    },
    ['running'],
  );
  let exportId: string;
  try {
    ({ exportId } = await deps.platform.startExport(svcUserId));
  } catch (error) {
    if (error instanceof ExportStartUncertainError) {
      // The attempt counts: the next one is a new, deliberate export, never a blind repeat.
      await deps.ledger.update(input.request_id, { export_status: 'failed' }, ['running']);
      await deps.audit.append(input.request_id, {
        eventId: `StartExport:attempt-${attempt}`,
        step: 'StartExport',
        action: 'export_start_uncertain',
        facts: { attempt },
      });
    }
    throw error;
  }
  const startedAt = deps.clock().toISOString();
  await deps.ledger.update(
    input.request_id,
    { export_id: exportId, export_status: 'pending', export_started_at: startedAt },
    ['running'],
  );
  await deps.audit.append(input.request_id, {
    eventId: `StartExport:attempt-${attempt}`,
    step: 'StartExport',
    action: 'export_started',
    facts: { export_id: exportId, attempt },
  });
  deps.logger.info('export started', { export_id: exportId, attempt });
  return {
    export_id: exportId,
    attempt,
    status: 'pending',
    polls: 0,
    wait_seconds: deps.schedule.initialSeconds,
    waited_seconds: item.export_waited_seconds,
  };
}

/** The StartExport step: contract and domain function. */
export const startExportStep = {
  name: 'StartExport',
  input: stepInputSchema,
  output: exportStateSchema,
  run: startExport,
} as const;
