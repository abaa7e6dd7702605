// The EraseSubject step: deletes the subject on the platform, once, and only after a verified archive.
import { platformKeepsFacts } from '#shared/erasure-scope';
import { LedgerStateError } from '#shared/errors';
import type { ErasureEvidence } from '#shared/ledger';
import type { DeleteResult } from '#shared/platform-client';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest, recordingSideEffect, runOfExecution } from '#shared/step-guards';
import { type EraseOutput, eraseOutputSchema, type StepInput, stepInputSchema } from '#shared/step-io';

/** What the erasure found, and how it knows. */
type ErasureResult = DeleteResult & { readonly evidence: ErasureEvidence };

/**
 * Deletes the subject on the platform, once, and only after a verified archive. Marking the step
 * `erasing` first is what closes the door on cancellation.
 */
export async function eraseSubject(input: StepInput, deps: StepDeps): Promise<EraseOutput> {
  const item = await activeRequest(deps, input.request_id, input.execution);
  if (item.erasure !== undefined) return { outcome: item.erasure.outcome };
  if (item.type !== 'erasure') throw new LedgerStateError('the request is not an erasure request');
  if (item.archive === undefined)
    throw new LedgerStateError('erasure refused: there is no verified archive yet');

  // The mark of a DELETE in flight, written only while this execution is the request's current
  // run: of two executions of one request, one DELETE at most.
  await deps.ledger.updateInRun(
    input.request_id,
    runOfExecution(input.request_id, input.execution),
    { step: 'erasing' },
    ['running'],
  );
  const result = await deleteOnce(item.step === 'erasing', item.primary_key, deps);
  const at = deps.clock().toISOString();
  // The deletion is recorded with the step that follows it: the request is now being verified.
  await recordingSideEffect(
    deps,
    input.request_id,
    () =>
      deps.ledger.update(
        input.request_id,
        {
          erasure: { outcome: result.outcome, platform_status: result.status, evidence: result.evidence, at },
          step: 'verifying',
        },
        ['running'],
      ),
    {
      eventId: 'EraseSubject',
      step: 'EraseSubject',
      action: result.outcome === 'deleted' ? 'subject_deleted' : 'subject_already_absent',
      // An honest "erased": the platform keeps the subject's comments, under a random guest user.
      facts: { platform_status: result.status, evidence: result.evidence, ...platformKeepsFacts() },
      subject: { primaryKey: item.primary_key, ...(item.svc_user_id ? { svcUserId: item.svc_user_id } : {}) },
    },
  );
  deps.logger.info('subject erased', { outcome: result.outcome });
  return { outcome: result.outcome };
}

/**
 * The DELETE, sent only when the subject is still there. An earlier attempt that got as far as
 * `erasing` (the ledger's mark of a DELETE in flight) may have deleted the subject and stopped
 * before recording it (a crash, a timeout on the answer); a look first means that deletion is
 * recorded as this service's own rather than sent again. The subject was on the platform when its
 * archive was made, just before, so a subject now gone is the one that DELETE removed.
 */
async function deleteOnce(resumed: boolean, primaryKey: string, deps: StepDeps): Promise<ErasureResult> {
  if (resumed && !(await deps.platform.retrieveUser(primaryKey)).found) {
    deps.logger.info('the interrupted DELETE had removed the subject');
    return { outcome: 'deleted', status: 404, evidence: 'not_found_after_interrupted_delete' };
  }
  return { ...(await deps.platform.deleteUser(primaryKey)), evidence: 'delete_answer' };
}

/** The EraseSubject step: contract and domain function. */
export const eraseSubjectStep = {
  name: 'EraseSubject',
  input: stepInputSchema,
  output: eraseOutputSchema,
  run: eraseSubject,
} as const;
