import { LedgerStateError, RequestCancelledError } from './errors.ts';
import type { LedgerItem } from './ledger.ts';
import type { StepDeps } from './step-deps.ts';

/** The ledger item of a request a step may work on: it exists, is not cancelled, and has a subject. */
export async function activeRequest(
  deps: StepDeps,
  requestId: string,
): Promise<LedgerItem & { primary_key: string }> {
  const item = await deps.ledger.require(requestId);
  if (item.status === 'cancelled') throw new RequestCancelledError('the request was cancelled');
  if (item.status === 'rejected')
    throw new LedgerStateError('the request was rejected at intake and cannot run');
  const primaryKey = item.primary_key;
  if (primaryKey === undefined) throw new LedgerStateError('the ledger item has no subject');
  return { ...item, primary_key: primaryKey };
}

/** The svc_user_id ResolveSubject stored, or a LedgerStateError when a step runs out of order. */
export function resolvedUserId(item: LedgerItem): string {
  if (item.svc_user_id === undefined) throw new LedgerStateError('the subject has not been resolved yet');
  return item.svc_user_id;
}
