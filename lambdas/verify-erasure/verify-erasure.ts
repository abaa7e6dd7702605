import { ErasureNotVerifiedError, LedgerStateError } from '#shared/errors';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest } from '#shared/step-guards';
import { type StepInput, stepInputSchema, verifyErasureOutputSchema } from '#shared/step-io';

/** Proves the deletion took effect: retrieve must now answer not-found. The answer is kept as evidence. */
export async function verifyErasure(input: StepInput, deps: StepDeps): Promise<{ verified: true }> {
  const item = await activeRequest(deps, input.request_id, input.execution);
  if (item.erasure_verification !== undefined) return { verified: true };
  if (item.erasure === undefined) throw new LedgerStateError('there is no deletion to verify yet');

  const result = await deps.platform.retrieveUser(item.primary_key);
  if (result.found)
    throw new ErasureNotVerifiedError('the platform still returns the subject after the deletion');
  const at = deps.clock().toISOString();
  await deps.ledger.update(input.request_id, { erasure_verification: { platform_answer: 'not_found', at } }, [
    'running',
  ]);
  await deps.audit.append(input.request_id, {
    eventId: 'VerifyErasure',
    step: 'VerifyErasure',
    action: 'erasure_verified',
    facts: { platform_answer: 'not_found' },
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
