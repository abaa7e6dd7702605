// Intake of one request message: judged (schema, verification, duplicates), recorded and started.
import { z } from 'zod';
import { type AuditEvent, type AuditTrail, auditEventProblem, factDigest } from '#shared/audit';
import { computeDeadlines, DEFAULT_TIME_ZONE, type Deadlines } from '#shared/deadlines';
import type { Ledger, LedgerItem } from '#shared/ledger';
import { INTAKE_METRICS } from '#shared/metrics';
import { redactUrls } from '#shared/redact';
import { type DsrRequest, parseRequestMessage, requestWarnings, rfc3339Instant } from '#shared/request';
import { DEFAULT_SITE_ID, siteRequestId, unknownSites } from '#shared/sites';
import type { StepLogger } from '#shared/step-deps';
import type { ExecutionInput } from '#shared/step-io';
import { parseStrictJson } from '#shared/strict-json';
import {
  DEFAULT_VERIFICATION_POLICY,
  IDENTITY_NOT_VERIFIED,
  judgeVerification,
  unknownMethodError,
  type VerificationJudgement,
  type VerificationPolicy,
} from '#shared/verification';

/** What intake needs, as narrow interfaces. */
export interface IntakeDeps {
  readonly ledger: Ledger;
  readonly audit: Pick<AuditTrail, 'append'>;
  /** Keeps a message that cannot be accepted, with the reason, on the quarantine queue. */
  readonly quarantine: (body: string, reason: string, requestId?: string) => Promise<void>;
  /** Starts the execution named `name`; an execution of that name already existing is not an error. */
  readonly startExecution: (name: string, input: ExecutionInput) => Promise<'started' | 'already_exists'>;
  readonly logger: StepLogger;
  /** The controller's IANA time zone, in which deadlines are counted. @default "UTC" */
  readonly timeZone?: string;
  readonly clock?: () => Date;
  /** Publishes one count (Embedded Metric Format in Lambda): a request overdue at intake is alarmed. */
  readonly countMetric?: (name: string, value: number) => void;
  /** The verification gate: the methods the stack knows and the maximum age. @default DEFAULT_VERIFICATION_POLICY */
  readonly verification?: VerificationPolicy;
  /**
   * The configured sites, in order (sites.ts). With more than one, a request runs in parts, one per
   * site it covers (site-parts.ts). @default the one default site
   */
  readonly sites?: readonly string[];
}

/** What became of one message. */
export type IntakeResult =
  | {
      readonly kind: 'accepted' | 'duplicate' | 'conflict' | 'rejected' | 'denied';
      readonly requestId: string;
      readonly reason?: string;
    }
  | { readonly kind: 'quarantined'; readonly reason: string };

/**
 * Judges one intake message (docs/design.md, "The request"). Never throws because of what the message holds:
 * every judgement about it is a result, and an unexpected failure quarantines it with the reason.
 * It throws only when an AWS service or the network failed, so the message returns to the queue.
 */
export async function intakeMessage(body: string, deps: IntakeDeps): Promise<IntakeResult> {
  const progress: Progress = {};
  try {
    return await judge(body, deps, progress);
  } catch (error) {
    if (isInfrastructureFailure(error)) throw error;
    return quarantineUnexpected(body, error, progress, deps);
  }
}

/** What intake had written for the message when something failed. */
interface Progress {
  /** Set once the message's request was created as `received` by this call. */
  receivedId?: string;
}

async function judge(body: string, deps: IntakeDeps, progress: Progress): Promise<IntakeResult> {
  const parsed = parseRequestMessage(body);
  if (parsed.kind === 'unusable') {
    await deps.quarantine(body, parsed.reason);
    deps.logger.warn('message quarantined', { reason: parsed.reason });
    return { kind: 'quarantined', reason: parsed.reason };
  }

  const policy = deps.verification ?? DEFAULT_VERIFICATION_POLICY;
  if (parsed.kind === 'invalid') {
    // Every field error at once: the method is judged against the list when the schema let it pass.
    const errors = [...parsed.errors, ...methodErrorOfInvalid(body, parsed.errors, policy)];
    return reject(body, parsed.requestId, parsed.fingerprint, errors, deps);
  }
  const { request } = parsed;
  const now = (deps.clock ?? (() => new Date()))();
  const intake = intakeRecord(request, deps.timeZone ?? DEFAULT_TIME_ZONE, now);
  const gate = judgeVerification(policy, request);
  const configured = deps.sites ?? [DEFAULT_SITE_ID];
  const unknown = unknownSites(request.sites ?? [], configured);
  const errors = [
    ...(intake.event === undefined ? intake.errors : []),
    ...(gate.kind === 'unknown' ? [gate.error] : []),
    ...(unknown.length > 0
      ? [
          `sites: ${unknown.map((id) => `"${id}"`).join(', ')} ${unknown.length === 1 ? 'is not a site' : 'are not sites'} of this stack; the sites are ${configured.map((id) => `"${id}"`).join(', ')}: name those, or leave "sites" out for all of them`,
        ]
      : []),
  ];
  if (intake.event === undefined || errors.length > 0) {
    return reject(body, request.request_id, parsed.fingerprint, errors, deps);
  }
  const { deadlines, event, overdue } = intake;
  if (gate.kind === 'denied') {
    return deny(body, request, parsed.fingerprint, { deadlines, event, gate }, deps);
  }
  const warnings = requestWarnings(request);
  const dates = {
    ...deadlines,
    ...(overdue ? { overdue_at_intake: true } : {}),
    ...(warnings.length > 0 ? { intake_warnings: warnings } : {}),
  };
  // The sites it covers, in the configuration's order.
  const sites = configured.filter((id) => request.sites === undefined || request.sites.includes(id));
  const created =
    configured.length > 1
      ? (await deps.ledger.createInParts(request, parsed.fingerprint, dates, sites)).request
      : await deps.ledger.createReceived(request, parsed.fingerprint, dates);
  if (!created.created) {
    const again = await sameIdAgain(body, request.request_id, parsed.fingerprint, created.existing, deps);
    // A crash between the ledger write and StartExecution leaves a received request with no
    // execution; the redelivered message finishes the job: the intake record (written once, by its
    // eventId) and StartExecution (idempotent by name).
    if (again.kind === 'duplicate' && created.existing.status === 'received') {
      await accept(request, event, deps, { newChain: false }, created.existing);
    }
    // A valid request is rejected only by an unexpected failure: a delivery that stopped before
    // its closing record writes it now (once, by its eventId).
    if (again.kind === 'duplicate' && created.existing.status === 'rejected') {
      await closeUnexpected(request.request_id, 'unknown', deps);
    }
    return again;
  }
  progress.receivedId = request.request_id;
  await accept(request, event, deps, { newChain: true }, created.item);
  deps.logger.info('request accepted', { request_id: request.request_id, type: request.type });
  if (warnings.length > 0) {
    // The codes only: the key itself stays out of the logs.
    deps.logger.warn('request accepted with warnings', { request_id: request.request_id, warnings });
  }
  if (overdue) {
    // Accepted all the same: the subject is owed an answer, now late.
    deps.countMetric?.(INTAKE_METRICS.overdueAtIntake, 1);
    deps.logger.warn('request was already overdue at intake', {
      request_id: request.request_id,
      due_at: deadlines.due_at,
    });
  }
  return { kind: 'accepted', requestId: request.request_id };
}

/**
 * The deadlines and the Intake audit record of a valid request, or why the audit trail would refuse
 * it: asked before the first write, so a request is never stranded half-recorded.
 */
function intakeRecord(
  request: DsrRequest,
  timeZone: string,
  now: Date,
):
  | { readonly errors: readonly string[]; readonly event: undefined }
  | { readonly deadlines: Deadlines; readonly event: AuditEvent; readonly overdue: boolean } {
  const receivedAt = rfc3339Instant(request.received_at);
  if (receivedAt === undefined) return { errors: ['received_at: is not a date-time'], event: undefined };
  const deadlines = computeDeadlines(request.regulation, receivedAt, timeZone);
  const overdue = Date.parse(deadlines.due_at) < now.getTime();
  const event: AuditEvent = {
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
      verified_at: request.verification.verified_at,
      reference_sha256: request.reference === undefined ? null : factDigest(request.reference),
      time_zone: timeZone,
      ...(request.channel === undefined ? {} : { channel: request.channel }),
      ...(overdue ? { overdue_at_intake: true } : {}),
    },
    // Who verified and who submitted name people: the record keeps their keyed hashes, which the
    // ledger's clear text (or its minimised hash) is checked against.
    subject: {
      primaryKey: request.primary_key,
      verifiedBy: request.verification.verified_by,
      ...(request.submitted_by === undefined || request.submitted_by === ''
        ? {}
        : { submittedBy: request.submitted_by }),
    },
  };
  const problem = auditEventProblem(event);
  if (problem !== undefined) {
    return { errors: [`(body): the audit trail would refuse this request: ${problem}`], event: undefined };
  }
  return { deadlines, event, overdue };
}

/** Records an invalid request as rejected with its errors, and keeps the message in quarantine. */
async function reject(
  body: string,
  requestId: string,
  fingerprint: string,
  errors: readonly string[],
  deps: IntakeDeps,
): Promise<IntakeResult> {
  const created = await deps.ledger.createRejected(requestId, fingerprint, errors);
  if (!created.created) return sameIdAgain(body, requestId, fingerprint, created.existing, deps);
  const reason = `invalid request: ${errors.join('; ')}`;
  await deps.quarantine(body, reason, requestId);
  await deps.audit.append(requestId, {
    eventId: 'Intake',
    step: 'Intake',
    action: 'request_rejected',
    facts: { errors: errors.length, errors_sha256: factDigest(errors) },
    final: true,
  });
  deps.logger.warn('request rejected', { request_id: requestId, errors: errors.length });
  return { kind: 'rejected', requestId, reason };
}

/**
 * The field error of `verification.method` in a request the schema refused for other fields: the
 * method is judged against the list only when the schema found nothing wrong with it.
 */
function methodErrorOfInvalid(body: string, errors: readonly string[], policy: VerificationPolicy): string[] {
  if (errors.some((error) => error.startsWith('verification.method: '))) return [];
  const read = parseStrictJson(body);
  const method = read.ok ? rawMethodSchema.safeParse(read.value) : undefined;
  if (!method?.success) return [];
  const error = unknownMethodError(policy, method.data.verification.method);
  return error === undefined ? [] : [error];
}

const rawMethodSchema = z.object({ verification: z.object({ method: z.string() }) });

/**
 * Records a valid request the verification gate denies as `denied` (identity_not_verified): its
 * method says the identity was not verified, is not accepted for the request's type, or the
 * verification is older than the stack allows. Its intake record and the denial close its audit
 * chain, no execution starts, so it is never exported or erased, and the subject is owed a notice.
 */
async function deny(
  body: string,
  request: DsrRequest,
  fingerprint: string,
  judged: {
    readonly deadlines: Deadlines;
    readonly event: AuditEvent;
    readonly gate: Extract<VerificationJudgement, { kind: 'denied' }>;
  },
  deps: IntakeDeps,
): Promise<IntakeResult> {
  const { deadlines, event, gate } = judged;
  const requestId = request.request_id;
  const created = await deps.ledger.createDenied(request, fingerprint, deadlines, {
    code: IDENTITY_NOT_VERIFIED,
    reason: gate.reason,
  });
  const record = async (newChain: boolean) => {
    await deps.audit.append(requestId, event, { newChain });
    await deps.audit.append(requestId, {
      eventId: 'Intake:denied',
      step: 'Intake',
      action: 'request_denied',
      facts: {
        reason_code: IDENTITY_NOT_VERIFIED,
        verification_method: request.verification.method,
        verification_problem: gate.problem,
        completed_at: (created.created ? created.item : created.existing).completed_at ?? null,
      },
      final: true,
    });
  };
  if (!created.created) {
    const again = await sameIdAgain(body, requestId, fingerprint, created.existing, deps);
    // A delivery that stopped after the ledger write left the denial unrecorded: records are
    // written once, by their eventIds, so writing them again completes the chain.
    if (again.kind === 'duplicate' && created.existing.status === 'denied') await record(false);
    return again;
  }
  await record(true);
  deps.logger.warn('request denied: its identity verification is not accepted', {
    request_id: requestId,
    type: request.type,
    verification_problem: gate.problem,
  });
  return { kind: 'denied', requestId, reason: `${IDENTITY_NOT_VERIFIED}: ${gate.reason}` };
}

const MAX_REASON_LENGTH = 300;

/**
 * A failure nobody foresaw: the message goes to quarantine with the reason, and a request this call
 * created as received is closed as rejected, so nothing runs it without its intake record.
 */
async function quarantineUnexpected(
  body: string,
  error: unknown,
  progress: Progress,
  deps: IntakeDeps,
): Promise<IntakeResult> {
  const name = error instanceof Error ? error.name : typeof error;
  const message = error instanceof Error ? error.message : String(error);
  const reason = redactUrls(
    `intake failed unexpectedly (${name}: ${message.slice(0, MAX_REASON_LENGTH)}); the message is kept here: fix the cause and send it again`,
  );
  const requestId = progress.receivedId;
  let closed = false;
  if (requestId !== undefined) {
    try {
      await deps.ledger.update(
        requestId,
        { status: 'rejected', rejection_errors: [reason], completed_at: new Date().toISOString() },
        ['received'],
      );
      closed = true;
    } catch (closeError) {
      // Moved on meanwhile (its execution started): it is no longer stranded, so leave it be.
      if (isInfrastructureFailure(closeError)) throw closeError;
    }
  }
  await deps.quarantine(body, reason, requestId);
  // After the quarantine: should the record fail for the trail's store, the redelivery writes it.
  if (closed && requestId !== undefined) await closeUnexpected(requestId, name, deps);
  deps.logger.error('message quarantined after an unexpected failure', {
    error: name,
    ...(requestId === undefined ? {} : { request_id: requestId }),
  });
  return { kind: 'quarantined', reason };
}

/**
 * The final record of a request intake closed as rejected after an unexpected failure: rejected is
 * terminal, so its chain ends here (after the intake record, when that was written). The error's
 * class name only: its message could hold what the audit trail must not keep.
 */
async function closeUnexpected(requestId: string, errorName: string, deps: IntakeDeps): Promise<void> {
  const event: AuditEvent = {
    eventId: 'Intake:unexpected',
    step: 'Intake',
    action: 'request_rejected',
    facts: {
      cause: 'intake_failed',
      error: /^[A-Za-z][A-Za-z0-9_.]{0,63}$/.test(errorName) ? errorName : 'unknown',
    },
    final: true,
  };
  try {
    await deps.audit.append(requestId, event);
  } catch (error) {
    // The trail itself may be what failed: the ledger says rejected, and the message is kept in
    // quarantine; its redelivery writes the record (`svc-dsr verify --all` reports it meanwhile).
    if (isInfrastructureFailure(error)) throw error;
    deps.logger.error('the closing audit record of a request intake rejected could not be written', {
      request_id: requestId,
      error: error instanceof Error ? error.name : typeof error,
    });
  }
}

const awsFailureSchema = z.object({
  name: z.string(),
  $metadata: z.object({}).loose().optional(),
  code: z.string().optional(),
});

const NETWORK_FAILURES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** True when a store (an AWS service) answered with an error or could not be reached: worth another delivery. */
function isInfrastructureFailure(error: unknown): boolean {
  const parsed = awsFailureSchema.safeParse(error);
  if (!parsed.success) return false;
  const { name, $metadata, code } = parsed.data;
  return (
    $metadata !== undefined ||
    (code !== undefined && NETWORK_FAILURES.has(code)) ||
    name === 'TimeoutError' ||
    name === 'AbortError'
  );
}

/**
 * Records the request's intake in its audit chain and starts its execution; a request in parts
 * (recorded with site_results) has no execution of its own: each site's part gets its intake
 * record, naming the site, and its execution, and the request is then running.
 */
async function accept(
  request: DsrRequest,
  event: AuditEvent,
  deps: IntakeDeps,
  chain: { newChain: boolean },
  /** The request's item as intake created or found it. */
  own: LedgerItem,
): Promise<void> {
  await deps.audit.append(request.request_id, event, chain);
  if (own.site_results !== undefined) {
    for (const site of own.sites ?? []) {
      const partId = siteRequestId(own.request_id, site);
      await deps.audit.append(
        partId,
        { ...event, facts: { ...event.facts, site, part_of: own.request_id } },
        chain,
      );
      await start(partId, { request_id: partId, type: request.type, regulation: request.regulation }, deps);
    }
    await deps.ledger.update(own.request_id, { status: 'running' }, ['received', 'running']);
    return;
  }
  await start(
    request.request_id,
    { request_id: request.request_id, type: request.type, regulation: request.regulation },
    deps,
  );
}

async function start(requestId: string, input: ExecutionInput, deps: IntakeDeps): Promise<void> {
  const started = await deps.startExecution(requestId, input);
  if (started === 'started') await deps.ledger.countFirstRun(requestId);
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
