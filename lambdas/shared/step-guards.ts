import {
  LedgerStateError,
  PlatformNotFoundError,
  RequestCancelledError,
  SubjectNotFoundError,
} from './errors.ts';
import type { LedgerItem } from './ledger/index.ts';
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
  if (item.status === 'denied')
    throw new LedgerStateError('the request was denied: it is never exported or erased');
  const primaryKey = item.primary_key;
  if (primaryKey === undefined) throw new LedgerStateError('the ledger item has no subject');
  return { ...item, primary_key: primaryKey };
}

/** The svc_user_id ResolveSubject stored, or a LedgerStateError when a step runs out of order. */
export function resolvedUserId(item: LedgerItem): string {
  if (item.svc_user_id === undefined) throw new LedgerStateError('the subject has not been resolved yet');
  return item.svc_user_id;
}

/**
 * What to throw for a failed export call: a not-found answer (the export POST or status call) on a
 * subject that retrieve now also reports gone is SubjectNotFoundError, recorded in the audit trail,
 * so the request ends `no_data` (an erasure of the same subject got there first); anything else is
 * `error` itself.
 */
export async function subjectGoneOr(
  error: unknown,
  deps: StepDeps,
  item: LedgerItem & { primary_key: string },
  step: 'StartExport' | 'CheckExport' | 'ArchiveExport',
): Promise<unknown> {
  if (!(error instanceof PlatformNotFoundError)) return error;
  if ((await deps.platform.retrieveUser(item.primary_key)).found) return error;
  await deps.audit.append(item.request_id, {
    eventId: `${step}:subject_not_found`,
    step,
    action: 'subject_not_found',
    facts: { found: false, export_id: item.export_id ?? null },
    subject: { primaryKey: item.primary_key },
  });
  deps.logger.info('subject gone from the platform during the export', { step });
  return new SubjectNotFoundError(
    `${step}: the platform no longer knows the subject (erased since it was resolved); the request ends with no data`,
  );
}
