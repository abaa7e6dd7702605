import type { AuditTrail } from '#shared/audit';
import { computeDeadlines, type Deadlines } from '#shared/deadlines';
import type { Ledger } from '#shared/ledger';
import { type DsrRequest, parseRequestMessage } from '#shared/request';
import type { StepLogger } from '#shared/step-deps';
import type { ExecutionInput } from '#shared/step-io';

/** What intake needs, as narrow interfaces. */
export interface IntakeDeps {
  readonly ledger: Ledger;
  readonly audit: Pick<AuditTrail, 'append'>;
  /** Keeps a message that cannot be accepted, with the reason, on the quarantine queue. */
  readonly quarantine: (body: string, reason: string, requestId?: string) => Promise<void>;
  /** Starts the execution named `name`; an execution of that name already existing is not an error. */
  readonly startExecution: (name: string, input: ExecutionInput) => Promise<'started' | 'already_exists'>;
  readonly logger: StepLogger;
}

/** What became of one message. */
export type IntakeResult =
  | {
      readonly kind: 'accepted' | 'duplicate' | 'conflict' | 'rejected';
      readonly requestId: string;
      readonly reason?: string;
    }
  | { readonly kind: 'quarantined'; readonly reason: string };

/**
 * Judges one intake message (DESIGN.md section 2). Throws only when a store is unreachable, so the
 * message returns to the queue; every judgement about the message itself is a result.
 */
export async function intakeMessage(body: string, deps: IntakeDeps): Promise<IntakeResult> {
  const parsed = parseRequestMessage(body);
  if (parsed.kind === 'unusable') {
    await deps.quarantine(body, parsed.reason);
    deps.logger.warn('message quarantined', { reason: parsed.reason });
    return { kind: 'quarantined', reason: parsed.reason };
  }

  if (parsed.kind === 'invalid') {
    const created = await deps.ledger.createRejected(parsed.requestId, parsed.fingerprint, parsed.errors);
    if (!created.created)
      return sameIdAgain(body, parsed.requestId, parsed.fingerprint, created.existing, deps);
    const reason = `invalid request: ${parsed.errors.join('; ')}`;
    await deps.quarantine(body, reason, parsed.requestId);
    await deps.audit.append(parsed.requestId, {
      eventId: 'Intake',
      step: 'Intake',
      action: 'request_rejected',
      facts: { errors: parsed.errors.length },
      final: true,
    });
    deps.logger.warn('request rejected', { request_id: parsed.requestId, errors: parsed.errors.length });
    return { kind: 'rejected', requestId: parsed.requestId, reason };
  }

  const { request } = parsed;
  const deadlines = computeDeadlines(request.regulation, new Date(request.received_at));
  const created = await deps.ledger.createReceived(request, parsed.fingerprint, deadlines);
  if (!created.created) {
    const again = await sameIdAgain(body, request.request_id, parsed.fingerprint, created.existing, deps);
    // A crash between the ledger write and StartExecution leaves a received request with no
    // execution; the redelivered message finishes the job: the intake record (written once, by its
    // eventId) and StartExecution (idempotent by name).
    if (again.kind === 'duplicate' && created.existing.status === 'received') {
      await accept(request, deadlines, deps, { newChain: false });
    }
    return again;
  }
  await accept(request, deadlines, deps, { newChain: true });
  deps.logger.info('request accepted', { request_id: request.request_id, type: request.type });
  return { kind: 'accepted', requestId: request.request_id };
}

/** Records the request's intake in its audit chain and starts its execution. */
async function accept(
  request: DsrRequest,
  deadlines: Deadlines,
  deps: IntakeDeps,
  chain: { newChain: boolean },
): Promise<void> {
  await deps.audit.append(
    request.request_id,
    {
      eventId: 'Intake',
      step: 'Intake',
      action: 'request_received',
      facts: {
        type: request.type,
        regulation: request.regulation,
        received_at: request.received_at,
        due_at: deadlines.due_at,
        confirm_by: deadlines.confirm_by,
        verification_method: request.verification.method,
      },
      subject: { primaryKey: request.primary_key },
    },
    chain,
  );
  await start(
    request.request_id,
    { request_id: request.request_id, type: request.type, regulation: request.regulation },
    deps,
  );
}

async function start(requestId: string, input: ExecutionInput, deps: IntakeDeps): Promise<void> {
  const started = await deps.startExecution(requestId, input);
  if (started === 'started') await deps.ledger.increment(requestId, 'executions');
}

async function sameIdAgain(
  body: string,
  requestId: string,
  fingerprint: string,
  existing: Awaited<ReturnType<Ledger['require']>>,
  deps: IntakeDeps,
): Promise<IntakeResult> {
  if (existing.fingerprint === fingerprint) {
    await deps.ledger.increment(requestId, 'duplicates');
    deps.logger.info('duplicate request ignored', { request_id: requestId });
    return { kind: 'duplicate', requestId };
  }
  const reason =
    'conflict: this request_id was already received with different content; the original is kept';
  await deps.ledger.increment(requestId, 'conflicts');
  await deps.quarantine(body, reason, requestId);
  deps.logger.warn('conflicting request quarantined', { request_id: requestId });
  return { kind: 'conflict', requestId, reason };
}
