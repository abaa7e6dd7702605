// The RecordFailure step: the one path every failure takes, `failed` recorded with a code.
import type { z } from 'zod';
import { AuditChainClosedError, errorCodeOf, SupersededRunError } from '#shared/errors';
import type { LedgerPatch } from '#shared/ledger';
import { exportLeftOpen } from '#shared/open-exports';
import { Redactor } from '#shared/redact';
import { settlePart } from '#shared/site-parts';
import type { StepDeps } from '#shared/step-deps';
import { runOfExecution } from '#shared/step-guards';
import { recordFailureInputSchema, recordFailureOutputSchema } from '#shared/step-io';

const MAX_MESSAGE = 500;
/** How many later failures the ledger keeps beside the first. */
const MAX_LATER_ERRORS = 10;

/**
 * The one path every failure takes: records `failed` with a code and a scrubbed message (or
 * confirms a cancellation) so an operator can see why and retry.
 */
export async function recordFailure(
  input: z.infer<typeof recordFailureInputSchema>,
  deps: StepDeps,
): Promise<z.infer<typeof recordFailureOutputSchema>> {
  const item = await deps.ledger.require(input.request_id);
  // An execution that is no longer the request's current run records nothing: the ledger, the
  // export slot and the audit chain belong to the run that superseded it.
  const run = runOfExecution(input.request_id, input.execution);
  if (input.error.Error === SupersededRunError.name || (run !== undefined && item.executions > run)) {
    deps.logger.info('a superseded execution ends without recording', { run, current: item.executions });
    return { status: 'superseded', code: 'superseded_run' };
  }
  // A request that ends here holds no export slot any more, unless its export is still open on the
  // platform, which counts it until it is downloaded, fails or expires: the reconciler takes that
  // export to its end and gives the slot back then.
  if (!exportLeftOpen(item)) await deps.gate.releaseExport(input.request_id);
  const code = errorCodeOf(input.error.Error);
  if (item.status === 'completed') return { status: 'completed', code };
  // Denied while it ran: the denial is the request's answer and closed its record; the execution
  // ends as one whose request ended meanwhile.
  if (item.status === 'denied') return { status: 'completed', code: 'request_denied' };
  if (item.status === 'cancelled' || input.error.Error === 'RequestCancelledError') {
    // The operator's cancel usually closed the chain with its own final record already.
    await unlessClosed(
      deps.audit.append(input.request_id, {
        eventId: 'RecordFailure:cancelled',
        step: 'RecordFailure',
        action: 'request_cancelled',
        facts: { step: item.step ?? null },
        final: true,
      }),
    );
    return { status: 'cancelled', code: 'request_cancelled' };
  }
  const redactor = new Redactor([item.primary_key, item.svc_user_id]);
  const message = redactor.text(causeMessage(input.error.Cause)).slice(0, MAX_MESSAGE);
  // A redriven execution that fails again keeps the failure that failed the request first: an
  // operator and an auditor see why it failed, and the later failures beside it.
  const patch: LedgerPatch =
    item.status === 'failed' && item.error !== undefined
      ? {
          later_errors: [
            ...(item.later_errors ?? []),
            { code, message, at: deps.clock().toISOString() },
          ].slice(-MAX_LATER_ERRORS),
        }
      : { status: 'failed', error: { code, message } };
  const failed = await deps.ledger.update(input.request_id, patch, ['received', 'running', 'failed']);
  // Failed is terminal: this record ends the chain until an operator's retry opens a new segment.
  // A later failure of a redriven execution finds the chain closed and stays in the ledger only.
  await unlessClosed(
    deps.audit.append(input.request_id, {
      eventId: `RecordFailure:${failed.executions}:${code}`,
      step: 'RecordFailure',
      action: 'request_failed',
      facts: { code, step: item.step ?? null, export_attempts: item.export_attempts },
      final: true,
    }),
  );
  deps.logger.warn('request failed', { code, step: item.step });
  // A site's part of a request: the request learns that this site failed, and ends with the last.
  await settlePart(deps, failed);
  return { status: 'failed', code };
}

/** Waits for the append; a chain already closed by a final record is no failure here. */
async function unlessClosed(append: Promise<unknown>): Promise<void> {
  try {
    await append;
  } catch (error) {
    if (!(error instanceof AuditChainClosedError)) throw error;
  }
}

/** A Lambda failure's Cause is JSON with `errorMessage`; Step Functions' own causes are plain text. */
function causeMessage(cause: string | undefined): string {
  if (cause === undefined || cause === '') return 'no detail was given';
  try {
    const parsed: unknown = JSON.parse(cause);
    if (
      parsed !== null &&
      typeof parsed === 'object' &&
      'errorMessage' in parsed &&
      typeof parsed.errorMessage === 'string'
    ) {
      return parsed.errorMessage;
    }
  } catch {
    // plain-text cause
  }
  return cause;
}

/** The RecordFailure step: contract and domain function. */
export const recordFailureStep = {
  name: 'RecordFailure',
  input: recordFailureInputSchema,
  output: recordFailureOutputSchema,
  run: recordFailure,
} as const;
