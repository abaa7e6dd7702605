// The VerifyErasure step: proves the deletion took effect, then removes the archived copy unless it is kept.
import { ErasureNotVerifiedError, LedgerStateError } from '#shared/errors';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest } from '#shared/step-guards';
import { type StepInput, stepInputSchema, verifyErasureOutputSchema } from '#shared/step-io';

/**
 * Proves the deletion took effect: retrieve must now answer not-found. The answer is kept as
 * evidence. Then, unless the stack keeps it for some days (`erasureArchiveKeepDays`), the copy of
 * the subject's data taken before the deletion goes too, every version of it: once the erasure is
 * verified nothing needs it, and kept it could still be handed out.
 */
export async function verifyErasure(input: StepInput, deps: StepDeps): Promise<{ verified: true }> {
  const item = await activeRequest(deps, input.request_id, input.execution);
  if (item.erasure_verification !== undefined) return { verified: true };
  if (item.erasure === undefined) throw new LedgerStateError('there is no deletion to verify yet');

  const result = await deps.platform.retrieveUser(item.primary_key);
  if (result.found)
    throw new ErasureNotVerifiedError('the platform still returns the subject after the deletion');
  const at = deps.clock().toISOString();
  // Deleted before the ledger says verified: a retry after a crash here deletes again (nothing left).
  const deleteArchive = deps.erasureArchiveKeepDays === 0 && item.archive !== undefined;
  const versions = deleteArchive && item.archive ? await deps.archive.remove(item.archive.key) : 0;
  await deps.ledger.update(
    input.request_id,
    {
      erasure_verification: { platform_answer: 'not_found', at },
      ...(deleteArchive ? { archive_deleted_at: at } : {}),
    },
    ['running'],
  );
  await deps.audit.append(input.request_id, {
    eventId: 'VerifyErasure',
    step: 'VerifyErasure',
    action: 'erasure_verified',
    facts: {
      platform_answer: 'not_found',
      ...(deleteArchive ? { archive_deleted: true, archive_versions_deleted: versions } : {}),
    },
    subject: { primaryKey: item.primary_key },
  });
  return { verified: true };
}

/** The VerifyErasure step: contract and domain function. */
export const verifyErasureStep = {
  name: 'VerifyErasure',
  input: stepInputSchema,
  output: verifyErasureOutputSchema,
  run: verifyErasure,
} as const;
