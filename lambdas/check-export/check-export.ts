import { z } from 'zod';
import { nextWaitSeconds } from '#shared/config';
import { ExportTimedOutError, LedgerStateError, PlatformThrottledError } from '#shared/errors';
import type { ExportStatus } from '#shared/platform-schemas';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest } from '#shared/step-guards';
import { type ExportState, exportStateSchema } from '#shared/step-io';

export const checkExportInputSchema = z.looseObject({
  request_id: z.uuid(),
  /** How long the Wait before this poll lasted, in seconds. */
  waited: z.number().int().nonnegative(),
});
export type CheckExportInput = z.infer<typeof checkExportInputSchema>;

/**
 * Polls the export once. Pending answers schedule the next wait (doubling, capped, and never
 * shorter than a Retry-After the platform sent); past the total budget the export has timed out.
 */
export async function checkExport(input: CheckExportInput, deps: StepDeps): Promise<ExportState> {
  const item = await activeRequest(deps, input.request_id);
  const exportId = item.export_id;
  if (exportId === undefined || item.export_status === undefined || item.export_status === 'starting') {
    throw new LedgerStateError('no export is under way for this request');
  }
  const polls = item.export_polls + 1;
  const waited = item.export_waited_seconds + input.waited;
  const base = { export_id: exportId, attempt: item.export_attempts, polls, waited_seconds: waited };
  if (item.archive !== undefined || item.export_status === 'completed')
    return { ...base, status: 'completed', wait_seconds: 0 };

  let status: ExportStatus;
  let retryAfter = 0;
  try {
    status = await deps.platform.exportStatus(exportId);
  } catch (error) {
    if (!(error instanceof PlatformThrottledError)) throw error;
    // A throttled poll is just a pending poll: wait at least as long as the platform asked.
    status = { status: 'pending', reported: 'throttled' };
    retryAfter = Math.min(error.retryAfterSeconds ?? 0, deps.schedule.maxSeconds);
  }

  if (status.status === 'completed' || status.status === 'failed') {
    // A completed export moves the request on to archiving in the same write.
    await deps.ledger.update(
      input.request_id,
      {
        export_status: status.status,
        export_polls: polls,
        export_waited_seconds: waited,
        ...(status.status === 'completed' ? { step: 'archiving' as const } : {}),
      },
      ['running'],
    );
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
  await deps.ledger.update(input.request_id, { export_polls: polls, export_waited_seconds: waited }, [
    'running',
  ]);
  if (remaining <= 0) {
    throw new ExportTimedOutError(
      `the export was still pending after ${waited} s of waiting (${polls} polls); the budget is ${deps.schedule.budgetSeconds} s`,
    );
  }
  const wait = Math.min(Math.max(nextWaitSeconds(deps.schedule, polls), retryAfter), remaining);
  deps.logger.debug('export pending', {
    export_id: exportId,
    polls,
    next_wait_seconds: wait,
    reported: status.reported,
  });
  return { ...base, status: 'pending', wait_seconds: wait };
}

/** The CheckExport step: contract and domain function. */
export const checkExportStep = {
  name: 'CheckExport',
  input: checkExportInputSchema,
  output: exportStateSchema,
  run: checkExport,
} as const;
