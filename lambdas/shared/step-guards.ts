// Guards every step uses: the request active and in its current run, the subject resolved, side effects audited.
import { type AuditEvent, sideChainOf } from './audit.ts';
import {
  AuditChainClosedError,
  LedgerStateError,
  PlatformNotFoundError,
  RequestCancelledError,
  SubjectNotFoundError,
  SupersededRunError,
} from './errors.ts';
import { runOf } from './executions.ts';
import type { LedgerItem } from './ledger/index.ts';
import type { StepDeps } from './step-deps.ts';

/**
 * The ledger item of a request a step may work on: it exists, is not cancelled, has a subject, and
 * `execution` (the name of the execution running the step, when known) is its current run.
 */
export async function activeRequest(
  deps: StepDeps,
  requestId: string,
  execution?: string,
): Promise<LedgerItem & { primary_key: string }> {
  const item = await deps.ledger.require(requestId);
  const run = runOfExecution(requestId, execution);
  if (run !== undefined && item.executions > run) {
    throw new SupersededRunError(
      `execution run ${run} is superseded: the request's current run is ${item.executions}; this one stops`,
    );
  }
  if (item.status === 'cancelled') throw new RequestCancelledError('the request was cancelled');
  if (item.status === 'rejected')
    throw new LedgerStateError('the request was rejected at intake and cannot run');
  if (item.status === 'denied')
    throw new LedgerStateError('the request was denied: it is never exported or erased');
  // A request in parts is run by its parts, one per site: a run of its own would act on no site.
  if (item.site_results !== undefined)
    throw new LedgerStateError(
      'the request runs in parts, one per site: its parts are run, never the request itself',
    );
  const primaryKey = item.primary_key;
  if (primaryKey === undefined) throw new LedgerStateError('the ledger item has no subject');
  return { ...item, primary_key: primaryKey };
}

/** The run number of the execution named `execution`, or undefined when no name (or no run) is known. */
export function runOfExecution(requestId: string, execution: string | undefined): number | undefined {
  return execution === undefined ? undefined : runOf(requestId, execution);
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

/**
 * Records a platform side effect (an export started or perhaps started, a DELETE) in the request's
 * chain, or, when a cancel or a denial closed that chain while the call was out, in its effects
 * chain: every call that changed the platform is on record, whether or not the request was still
 * open when it returned.
 */
export async function recordSideEffect(deps: StepDeps, requestId: string, event: AuditEvent): Promise<void> {
  try {
    await deps.audit.append(requestId, event);
  } catch (error) {
    if (!(error instanceof AuditChainClosedError)) throw error;
    await deps.audit.append(sideChainOf('effects', requestId), event);
    deps.logger.warn('a platform side effect was made after the request ended', { action: event.action });
  }
}

/**
 * Runs the ledger write that follows a platform side effect, then records the effect whether or not
 * that write held (a cancel or denial may have ended the request while the call was out); the
 * write's error, if any, is thrown after the record is made.
 */
export async function recordingSideEffect<T>(
  deps: StepDeps,
  requestId: string,
  ledgerWrite: () => Promise<T>,
  event: AuditEvent,
): Promise<T> {
  let written: { value: T } | undefined;
  let failure: unknown;
  try {
    written = { value: await ledgerWrite() };
  } catch (error) {
    failure = error;
  }
  await recordSideEffect(deps, requestId, event);
  if (written === undefined) throw failure;
  return written.value;
}
