import { StopExecutionCommand } from '@aws-sdk/client-sfn';
import { AuditTrail } from '#shared/audit';
import { LedgerRuleError, RequestUnknownError } from '#shared/errors';
import { retryExecutionName } from '#shared/executions';
import type { LedgerItem } from '#shared/ledger';
import { removeAllVersions } from '#shared/runtime';
import type { CliIo } from '../format.ts';
import { CliError, EXIT } from '../io.ts';
import type { CliContext } from '../target.ts';

/** The ledger item, or exit 1 naming where it looked. */
export async function loadRequest(
  context: Pick<CliContext, 'ledger' | 'target'>,
  requestId: string,
): Promise<LedgerItem> {
  const item = await context.ledger.get(requestId);
  if (item === undefined) throw unknownRequest(context, requestId);
  return item;
}

function unknownRequest(context: Pick<CliContext, 'ledger' | 'target'>, requestId: string): CliError {
  return new CliError(
    `no request ${requestId} in the ledger (${context.ledger.tableName}, target ${context.target}): check the id, or the --target/--stack-outputs you meant`,
    EXIT.failed,
  );
}

/**
 * Runs one of the ledger's ruled changes (cancel, extend, retry, deny): a request the ledger does
 * not know, or a change its rule refuses, is exit 1 with the rule's words.
 */
export async function ledgerChange<T>(
  context: Pick<CliContext, 'ledger' | 'target'>,
  requestId: string,
  change: () => Promise<T>,
): Promise<T> {
  try {
    return await change();
  } catch (error) {
    if (error instanceof RequestUnknownError) throw unknownRequest(context, requestId);
    if (error instanceof LedgerRuleError) throw new CliError(error.message, EXIT.failed);
    throw error;
  }
}

/** The ARN of an execution of the state machine (`...:execution:<machine>:<name>`). */
export function executionArn(stateMachineArn: string, name: string): string {
  const match = /^(arn:[^:]+:states:[^:]*:[^:]*):stateMachine:([^:]+)$/.exec(stateMachineArn);
  if (match === null) {
    throw new CliError(
      `StateMachineArn ${stateMachineArn} is not a state machine ARN; check the outputs file`,
      EXIT.usage,
    );
  }
  return `${match[1]}:execution:${match[2]}:${name}`;
}

export { retryExecutionName };

/**
 * Every execution name a request may have had: intake's (the request id) and each retry's. Retry
 * numbers follow the `executions` counter, so they run from 2 to executions + 1 at most.
 */
export function executionNames(requestId: string, executions: number): string[] {
  const names = [requestId];
  for (let n = 1; n <= executions + 1; n += 1) names.push(retryExecutionName(requestId, n));
  return names;
}

/** True when the error has this `name` (SDK exceptions from another package copy fail `instanceof`). */
export function hasName(error: unknown, name: string): boolean {
  return error instanceof Error && error.name === name;
}

/** What ending a request's runs did (cancel, deny). */
export interface EndedRuns {
  /** Executions StopExecution accepted (one that had already ended keeps its outcome). */
  readonly stopped: string[];
  /** StopExecution failures other than "does not exist": the execution still ends at its next step. */
  readonly stop_errors: { execution: string; error: string }[];
  /** Archive object versions deleted: a request that ends this way keeps no copy of the subject's data. */
  readonly archive_versions_removed: number;
}

/**
 * After the ledger has ended a request (cancelled, denied): deletes every archive version a step
 * made, then stops each execution the request may have, with `reason` as the stop's error and cause.
 */
export async function endRequestRuns(
  context: Pick<CliContext, 'sfn' | 's3' | 'names'>,
  requestId: string,
  executions: number,
  reason: { readonly error: string; readonly cause: string },
): Promise<EndedRuns> {
  const removed = await removeAllVersions(
    context.s3,
    context.names.ArchiveBucketName,
    `exports/${requestId}/`,
    {
      prefix: true,
    },
  );
  const stopped: string[] = [];
  const stopErrors: EndedRuns['stop_errors'] = [];
  for (const name of executionNames(requestId, executions)) {
    try {
      await context.sfn.send(
        new StopExecutionCommand({
          executionArn: executionArn(context.names.StateMachineArn, name),
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

/** What `endRequestRuns` did, on stderr; the warnings for executions it could not stop also with --json. */
export function printEnded(io: CliIo, ended: EndedRuns, status: string, json: boolean): void {
  if (!json) {
    if (ended.stopped.length > 0) io.err(`asked Step Functions to stop: ${ended.stopped.join(', ')}\n`);
    if (ended.archive_versions_removed > 0)
      io.err(`deleted ${ended.archive_versions_removed} archive version(s) of the request\n`);
  }
  for (const failure of ended.stop_errors) {
    io.err(
      `warning: could not stop execution ${failure.execution} (${failure.error}); it ends at its next step, which finds the request ${status}\n`,
    );
  }
}

/** The statuses a request is still being worked on in. */
export const OPEN_STATUSES = ['received', 'running'] as const;

/**
 * Appends an operator action to the request's audit chain, after the ledger change it records,
 * with who acted (`operator`) and why (`reason`). Operator records carry no subject, so no HMAC
 * key is needed.
 * A failure is exit 1 that says the change stands but its audit record is missing.
 */
export async function recordOperatorAction(
  context: Pick<CliContext, 's3' | 'names' | 'ledger' | 'operator'>,
  requestId: string,
  event: {
    eventId: string;
    action: string;
    facts: Record<string, string | number | boolean | null>;
    /** Why the operator acted, in their words (checked by parseReason like any audit fact). */
    reason?: string;
    /** The request's last record: set when the action ends the request (a denial). */
    final?: boolean;
  },
  options: {
    acceptClosedBy?: string;
    /** The chain to append to, when not the request's own (its notices chain). */
    chain?: string;
    /** What has happened without a record, for the failure message; by default the ledger change. */
    done?: string;
  } = {},
): Promise<'appended' | 'closed'> {
  const chain = options.chain ?? requestId;
  const trail = new AuditTrail(
    { s3: context.s3, bucket: context.names.AuditBucketName },
    {
      hmacKey: () => {
        throw new Error('operator records carry no subject');
      },
      heads: context.ledger,
    },
  );
  try {
    // Who acted and why go into the record itself: the ledger's copy of the reason can change.
    const { reason, ...rest } = event;
    const facts = { ...rest.facts, operator: await context.operator(), reason: reason ?? null };
    await trail.append(chain, { ...rest, facts, step: 'Operator' });
    return 'appended';
  } catch (error) {
    // The workflow may have closed the chain first with a final record of the same change (its
    // own record of the cancellation): the change is then on record, and that is no failure.
    if (options.acceptClosedBy !== undefined) {
      const last = (await trail.list(chain).catch(() => [])).at(-1);
      if (last?.final === true && last.action === options.acceptClosedBy) return 'closed';
    }
    throw new CliError(
      `${options.done ?? `the ledger change for ${requestId} is made`}, but its audit record (${event.action}) could not be written: ${error instanceof Error ? error.message : String(error)}`,
      EXIT.failed,
    );
  }
}
