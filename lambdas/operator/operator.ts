/**
 * Every change an operator makes to a request, in one place: the ledger's ruled change (its
 * conditional write), the locked audit record naming who acted, and what follows (executions
 * stopped or started, archive copies deleted). The operator function runs it; nothing else that a
 * person holds may write the ledger or the audit bucket.
 */
import { StartExecutionCommand, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { noticesChainOf } from '#shared/audit';
import { PLATFORM_KEEPS, platformKeepsFacts } from '#shared/erasure-scope';
import { LedgerRuleError, RequestUnknownError } from '#shared/errors';
import { isLive, latestExecutionName, retryExecutionName } from '#shared/executions';
import type { LedgerItem } from '#shared/ledger';
import { noticeContentFacts } from '#shared/notice-content';
import { MAX_CLOCK_SKEW_MS, rfc3339Instant } from '#shared/request';
import { removeAllVersions } from '#shared/runtime';
import { sitesToRetry } from '#shared/site-outcomes';
import { siteOfRequestId, siteRequestId } from '#shared/sites';
import { executionArnOf, sfnLookup } from '../reconciler/aws.ts';
import type { OperatorCommand, OperatorResult } from './commands.ts';
import { checkStored, handOutPackage } from './hand-out.ts';
import { type OperatorDeps, OperatorInputError, OperatorRefusal, recordAction } from './records.ts';

export {
  type OperatorDeps,
  OperatorInputError,
  type OperatorNames,
  OperatorRefusal,
} from './records.ts';

/**
 * How long after a run is claimed (by intake, a retry or the reconciler's resume) its execution may
 * still be on its way: the claim is written first and the execution started just after, so within
 * this time a missing execution is one being started, not one that never will be.
 */
export const RUN_START_GRACE_MS = 2 * 60_000;

/** Runs one operator command as `operator` (the caller's principal, never a field of the command). */
export async function runOperatorCommand(
  deps: OperatorDeps,
  operator: string,
  command: OperatorCommand,
): Promise<OperatorResult<OperatorCommand['command']>> {
  if (WHOLE_REQUEST_COMMANDS.has(command.command)) {
    const item = await deps.ledger.get(command.request_id);
    if (item?.parent_request_id !== undefined) {
      throw new OperatorRefusal(
        'refused',
        `request ${item.request_id} is the ${item.site ?? ''} part of request ${item.parent_request_id}: cancel, deny, extend and retry act on the request as a whole (npx svc-dsr ${command.command} ${item.parent_request_id})`,
      );
    }
    if (item?.site_results !== undefined) {
      return inParts(deps, operator, command as Of<'cancel' | 'deny' | 'extend' | 'retry'>, item);
    }
  }
  switch (command.command) {
    case 'cancel':
      return cancel(deps, operator, command);
    case 'deny':
      return deny(deps, operator, command);
    case 'extend':
      return extend(deps, operator, command);
    case 'retry':
      return retry(deps, operator, command);
    case 'notice':
      return notice(deps, operator, command);
    case 'hand_out_package':
      return handOutPackage(deps, operator, command);
    case 'check_stored':
      return checkStored(deps, command);
  }
}

type Of<C extends OperatorCommand['command']> = Extract<OperatorCommand, { command: C }>;

/** The commands that act on a request in parts as a whole: on its own item, then on each part. */
const WHOLE_REQUEST_COMMANDS = new Set<OperatorCommand['command']>(['cancel', 'deny', 'extend', 'retry']);

type PartResult = { request_id: string; site: string; done: boolean; detail: string };

/**
 * A change to a request in parts, one part per site (lambdas/shared/site-parts.ts): cancel, deny
 * and extend change the request's own item, then each part under the same rule, each recorded on
 * its own chain with who acted; a part the rule refuses (one that completed keeps what it did) is
 * said so. A retry runs again only the parts that did not complete, and never one that did.
 */
async function inParts(
  deps: OperatorDeps,
  operator: string,
  command: Of<'cancel' | 'deny' | 'extend' | 'retry'>,
  item: LedgerItem,
): Promise<OperatorResult<OperatorCommand['command']>> {
  const sites = item.sites ?? [];
  const partOf = (site: string) => siteRequestId(item.request_id, site);
  const each = async (
    chosen: readonly string[],
    change: (partId: string) => Promise<{ detail: string; done: boolean }>,
  ): Promise<PartResult[]> => {
    const results: PartResult[] = [];
    for (const site of chosen) {
      const partId = partOf(site);
      try {
        results.push({ request_id: partId, site, ...(await change(partId)) });
      } catch (error) {
        if (!(error instanceof OperatorRefusal)) throw error;
        results.push({ request_id: partId, site, done: false, detail: error.message });
      }
    }
    return results;
  };
  switch (command.command) {
    case 'cancel': {
      const own = await cancel(deps, operator, command);
      const parts = await each(sites, async (id) => {
        await cancel(deps, operator, { ...command, request_id: id });
        return { done: true, detail: 'cancelled' };
      });
      return { ...own, parts };
    }
    case 'deny': {
      const own = await deny(deps, operator, command);
      const parts = await each(sites, async (id) => {
        await deny(deps, operator, { ...command, request_id: id });
        return { done: true, detail: 'denied' };
      });
      return { ...own, parts };
    }
    case 'extend': {
      const own = await extend(deps, operator, command);
      const parts = await each(sites, async (id) => {
        const extended = await extend(deps, operator, { ...command, request_id: id });
        return { done: true, detail: `due ${extended.due_at}` };
      });
      return { ...own, parts };
    }
    case 'retry':
      return retryInParts(deps, operator, command, item, each);
  }
}

/**
 * A retry of a request in parts: the request's own item back open under the ledger's retry rule
 * (it has no execution of its own), then a retry of each part that did not complete. When no part
 * could start, the request is failed again, so the retry can be repeated.
 */
async function retryInParts(
  deps: OperatorDeps,
  operator: string,
  command: Of<'retry'>,
  item: LedgerItem,
  each: (
    chosen: readonly string[],
    change: (partId: string) => Promise<{ detail: string; done: boolean }>,
  ) => Promise<PartResult[]>,
): Promise<OperatorResult<'retry'>> {
  const requestId = item.request_id;
  const chosen = sitesToRetry(item.sites ?? [], item.site_results ?? {});
  // The request's own item has no execution: while it is open, its parts run, or another
  // operator's retry is starting them. Only a failed request in parts is retried, so two people
  // pressing retry at once never both start (and one undo) the same parts.
  const retried = await ruled(requestId, () =>
    deps.ledger.retry(requestId, {
      liveExecution: async (current) =>
        current.status === 'failed'
          ? undefined
          : `its sites run (a retry of it is under way); wait for them: npx svc-dsr status ${requestId}`,
    }),
  );
  await recordAction(deps, operator, requestId, {
    eventId: `Operator:retry-${retried.execution}`,
    action: 'request_retried',
    facts: { sites: chosen.join(','), previous_error: retried.before.error?.code ?? null },
    ...(command.reason === undefined ? {} : { reason: command.reason }),
  });
  const executions: string[] = [];
  const parts = await each(chosen, async (partId) => {
    const site = siteOfRequestId(partId) ?? '';
    // Open again before its run starts, so the run's own end is always the later result.
    await deps.ledger.recordSiteResult(requestId, site, {
      status: 'running',
      at: deps.clock().toISOString(),
    });
    try {
      const started = await retry(deps, operator, { ...command, request_id: partId });
      executions.push(started.execution);
      return { done: started.started, detail: started.execution };
    } catch (error) {
      const part = await deps.ledger.get(partId);
      if (part !== undefined) {
        await deps.ledger.recordSiteResult(requestId, site, {
          status: part.status,
          ...(part.error === undefined ? {} : { error_code: part.error.code }),
          at: deps.clock().toISOString(),
        });
      }
      throw error;
    }
  });
  if (!parts.some((part) => part.done)) {
    await deps.ledger.undoRetry(retried.before, retried);
    await recordAction(deps, operator, requestId, {
      eventId: `Operator:retry-${retried.execution}-not-started`,
      action: 'request_failed',
      facts: { code: retried.before.error?.code ?? 'retry_not_started', sites: chosen.join(',') },
      final: true,
    });
    throw new OperatorRefusal(
      'not_started',
      `no site of request ${requestId} could run again: ${parts.map((part) => `${part.site}: ${part.detail}`).join('; ')}`,
    );
  }
  return {
    request_id: requestId,
    execution: executions[0] ?? '',
    execution_arn: null,
    status: retried.status,
    previous_error: retried.before.error ?? null,
    started: true,
    parts,
  };
}

async function cancel(deps: OperatorDeps, operator: string, command: Of<'cancel'>) {
  const { request_id: requestId, reason } = command;
  const { before, after } = await ruled(requestId, () => deps.ledger.cancel(requestId, { reason }));
  const recorded = await recordAction(
    deps,
    operator,
    requestId,
    {
      eventId: `Operator:cancel-${after.executions}`,
      action: 'request_cancelled',
      facts: {
        previous_status: before.status,
        step: before.step ?? null,
        completed_at: after.completed_at ?? null,
      },
      // Cancelled is terminal: this record ends the chain.
      final: true,
      reason,
    },
    { acceptClosedBy: 'request_cancelled' },
  );
  // A cancelled request keeps no copy of the subject's data: whatever a step archived goes.
  const ended = await endRequestRuns(deps, requestId, after.executions, {
    error: 'RequestCancelled',
    cause: 'cancelled by an operator with svc-dsr cancel',
  });
  return {
    request_id: requestId,
    status: 'cancelled' as const,
    previous_status: before.status,
    step: before.step ?? null,
    reason,
    recorded,
    ...ended,
  };
}

async function deny(deps: OperatorDeps, operator: string, command: Of<'deny'>) {
  const { request_id: requestId, reason_code: code, reason } = command;
  const { before, after } = await ruled(requestId, () => deps.ledger.deny(requestId, { code, reason }));
  await recordAction(deps, operator, requestId, {
    eventId: 'Operator:deny',
    action: 'request_denied',
    facts: { previous_status: before.status, reason_code: code, completed_at: after.completed_at ?? null },
    reason,
    final: true,
  });
  // A denied request is never exported: whatever a step archived goes.
  const ended = await endRequestRuns(deps, requestId, after.executions, {
    error: 'RequestDenied',
    cause: 'denied by an operator with svc-dsr deny',
  });
  return {
    request_id: requestId,
    status: 'denied' as const,
    previous_status: before.status,
    reason_code: code,
    reason,
    notice_due: 'denial' as const,
    ...ended,
  };
}

async function extend(deps: OperatorDeps, operator: string, command: Of<'extend'>) {
  const { request_id: requestId, reason } = command;
  const given = noticeGiven(deps, command.notice);
  const { before, after } = await ruled(requestId, () =>
    deps.ledger.extend(requestId, { reason, notice: given }),
  );
  const previousDueAt = before.due_at ?? '';
  const dueAt = after.due_at ?? '';
  await recordAction(deps, operator, requestId, {
    eventId: 'Operator:extend',
    action: 'deadline_extended',
    facts: {
      previous_due_at: previousDueAt,
      due_at: dueAt,
      notice_channel: given.channel,
      notice_at: given.at,
      notice_reference: given.reference ?? null,
    },
    reason,
  });
  return {
    request_id: requestId,
    regulation: before.regulation ?? null,
    previous_due_at: previousDueAt,
    due_at: dueAt,
    reason,
    notice: { channel: given.channel, at: given.at, reference: given.reference ?? null },
  };
}

async function notice(deps: OperatorDeps, operator: string, command: Of<'notice'>) {
  const { request_id: requestId, kind } = command;
  const given = noticeGiven(deps, command.notice);
  const content = command.content;
  const { after } = await ruled(requestId, () =>
    deps.ledger.recordNotice(requestId, kind, {
      ...given,
      ...(content === undefined ? {} : { template: content.template }),
    }),
  );
  // The response to an erased subject says what the platform keeps: the record holds that it did.
  const erasedResponse = kind === 'response' && after.outcome === 'erased';
  // Notices follow the request's end (a response, a denial), after the final record that closes
  // its own chain: they go to the request's notices chain, `<request_id>.notices`.
  await recordAction(
    deps,
    operator,
    requestId,
    {
      eventId: `Operator:notice-${kind}-${given.at}`,
      action: 'notice_given',
      facts: {
        kind,
        channel: given.channel,
        given_at: given.at,
        reference: given.reference ?? null,
        // What the subject was told: the template and the values filled in, not the rendered text.
        ...(content === undefined ? {} : noticeContentFacts(content)),
        ...(erasedResponse ? platformKeepsFacts() : {}),
      },
    },
    { chain: noticesChainOf(requestId) },
  );
  return {
    request_id: requestId,
    kind,
    channel: given.channel,
    at: given.at,
    reference: given.reference ?? null,
    content: content ?? null,
    ...(erasedResponse ? { platform_keeps: PLATFORM_KEEPS.text } : {}),
  };
}

async function retry(deps: OperatorDeps, operator: string, command: Of<'retry'>) {
  const { request_id: requestId } = command;
  let running: string | undefined;
  const retried = await ruled(requestId, () =>
    deps.ledger.retry(requestId, {
      liveExecution: async (item) => {
        running = await liveExecution(deps, item);
        return running;
      },
    }),
  ).catch((error: unknown) => {
    // A running execution is a refusal of its own: a bulk retry counts it apart from failures.
    if (error instanceof OperatorRefusal && running !== undefined && error.message.includes(running)) {
      throw new OperatorRefusal('running', error.message);
    }
    throw error;
  });
  const { before, status, freshExport } = retried;
  const type = retried.after.type;
  const regulation = retried.after.regulation;
  if (type === undefined || regulation === undefined) {
    throw new OperatorRefusal('refused', `request ${requestId} has no type or regulation in the ledger`);
  }
  const n = retried.execution;
  const name = retryExecutionName(requestId, n);
  await recordAction(deps, operator, requestId, {
    eventId: `Operator:retry-${n}`,
    action: 'request_retried',
    facts: { execution: name, previous_error: before.error?.code ?? null, fresh_export: freshExport },
    ...(command.reason === undefined ? {} : { reason: command.reason }),
  });

  let started = true;
  let arn: string | null = null;
  try {
    const answer = await deps.sfn.send(
      new StartExecutionCommand({
        stateMachineArn: deps.names.StateMachineArn,
        name,
        input: JSON.stringify({ request_id: requestId, type, regulation }),
      }),
    );
    arn = answer.executionArn ?? null;
  } catch (error) {
    if (!hasName(error, 'ExecutionAlreadyExists')) {
      const restored = await deps.ledger.undoRetry(before, retried).then(
        (undone) => undone !== undefined,
        () => false,
      );
      // The retry record opened a new segment of the chain; failed again, the request closes it.
      if (restored) {
        await recordAction(deps, operator, requestId, {
          eventId: `Operator:retry-${n}-not-started`,
          action: 'request_failed',
          facts: { code: before.error?.code ?? 'retry_not_started', execution: name },
          final: true,
        });
      }
      const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      throw new OperatorRefusal(
        'not_started',
        restored
          ? `could not start execution ${name} (${detail}); request ${requestId} is failed again, so the retry can be repeated`
          : `could not start execution ${name} (${detail}), nor set request ${requestId} back to failed: the ledger shows ${status} with no execution; check npx svc-dsr status ${requestId}`,
      );
    }
    started = false;
  }
  return {
    request_id: requestId,
    execution: name,
    execution_arn: arn,
    status,
    previous_error: before.error ?? null,
    started,
  };
}

/** A notice as the ledger keeps it; a time to come is refused (clocks may differ by the skew). */
function noticeGiven(deps: OperatorDeps, given: Of<'extend'>['notice']) {
  const at = rfc3339Instant(given.at);
  if (at === undefined || at.getTime() > deps.clock().getTime() + MAX_CLOCK_SKEW_MS) {
    throw new OperatorInputError(`the notice time ${given.at} is in the future`);
  }
  return {
    channel: given.channel,
    at: at.toISOString(),
    ...(given.reference === undefined ? {} : { reference: given.reference }),
  };
}

/** A ledger change under its rule: an unknown request or a refused rule becomes an OperatorRefusal. */
async function ruled<T>(requestId: string, change: () => Promise<T>): Promise<T> {
  try {
    return await change();
  } catch (error) {
    if (error instanceof RequestUnknownError) {
      throw new OperatorRefusal('unknown_request', `no request ${requestId} in the ledger`);
    }
    if (error instanceof LedgerRuleError) throw new OperatorRefusal('refused', error.message);
    throw error;
  }
}

/**
 * Why an open request needs no retry: its latest execution is running, or its run was claimed a
 * moment ago and the execution is being started (by intake, another operator's retry or the
 * reconciler). Undefined when it ended, timed out, was aborted or was never started in time.
 */
async function liveExecution(deps: OperatorDeps, item: LedgerItem): Promise<string | undefined> {
  if (item.status !== 'received' && item.status !== 'running') return undefined;
  const latest = latestExecutionName(item.request_id, item.executions);
  const execution = await sfnLookup(deps.sfn, deps.names.StateMachineArn)(latest);
  if (execution === 'MISSING') {
    const sinceClaim = deps.clock().getTime() - Date.parse(item.updated_at);
    if (sinceClaim >= RUN_START_GRACE_MS) return undefined;
    return `request ${item.request_id} is ${item.status} and its execution ${latest} is being started (the run was claimed at ${item.updated_at}, by intake, another retry or the reconciler); it needs no retry: follow it with npx svc-dsr status ${item.request_id}, and retry only if it has not started ${RUN_START_GRACE_MS / 60_000} minutes after the claim`;
  }
  if (!isLive(execution)) return undefined;
  return `request ${item.request_id} is ${item.status} and its execution ${latest} is running; it needs no retry: the execution goes on by itself (follow it with npx svc-dsr status ${item.request_id}), and cancel would end the request for good, recorded as withdrawn`;
}

/** What ending a request's runs did (cancel, deny). */
interface EndedRuns {
  readonly stopped: string[];
  readonly stop_errors: { execution: string; error: string }[];
  readonly archive_versions_removed: number;
}

/**
 * Every execution name a request may have had: intake's (the request id) and each retry's. Retry
 * numbers follow the `executions` counter, so they run from 2 to executions + 1 at most.
 */
export function executionNames(requestId: string, executions: number): string[] {
  const names = [requestId];
  for (let n = 1; n <= executions + 1; n += 1) names.push(retryExecutionName(requestId, n));
  return names;
}

/**
 * After the ledger has ended a request (cancelled, denied): deletes every archive version a step
 * made, then stops each execution the request may have, with `reason` as the stop's error and cause.
 */
async function endRequestRuns(
  deps: OperatorDeps,
  requestId: string,
  executions: number,
  reason: { readonly error: string; readonly cause: string },
): Promise<EndedRuns> {
  const removed = await removeAllVersions(deps.s3, deps.names.ArchiveBucketName, `exports/${requestId}/`, {
    prefix: true,
  });
  const stopped: string[] = [];
  const stopErrors: EndedRuns['stop_errors'] = [];
  for (const name of executionNames(requestId, executions)) {
    try {
      await deps.sfn.send(
        new StopExecutionCommand({
          executionArn: executionArnOf(deps.names.StateMachineArn, name),
          ...reason,
        }),
      );
      stopped.push(name);
    } catch (error) {
      if (hasName(error, 'ExecutionDoesNotExist')) continue;
      stopErrors.push({
        execution: name,
        error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
      });
    }
  }
  return { stopped, stop_errors: stopErrors, archive_versions_removed: removed };
}

function hasName(error: unknown, name: string): boolean {
  return error instanceof Error && error.name === name;
}
