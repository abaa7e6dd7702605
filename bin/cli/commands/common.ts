// What the operator commands share: loading a request from the ledger, and reporting the runs they ended.
import type { LedgerItem } from '#shared/ledger';
import type { CliIo } from '../format.ts';
import { unknownRequestError } from '../resolve-target.ts';
import type { CliContext } from '../target.ts';

/** The ledger item, or exit 1 naming where it looked. */
export async function loadRequest(
  context: Pick<CliContext, 'ledger' | 'target'>,
  requestId: string,
): Promise<LedgerItem> {
  const item = await context.ledger.get(requestId);
  if (item === undefined) throw unknownRequestError(context.ledger.tableName, context.target, requestId);
  return item;
}

/** True when the error has this `name` (SDK exceptions from another package copy fail `instanceof`). */
export function hasName(error: unknown, name: string): boolean {
  return error instanceof Error && error.name === name;
}

/** What ending a request's runs did (cancel, deny), as the operator function answers it. */
export interface EndedRuns {
  /** Executions StopExecution accepted (one that had already ended keeps its outcome). */
  readonly stopped: string[];
  /** StopExecution failures other than "does not exist": the execution still ends at its next step. */
  readonly stop_errors: { execution: string; error: string }[];
  /** Archive object versions deleted: a request that ends this way keeps no copy of the subject's data. */
  readonly archive_versions_removed: number;
}

/** What ending the runs did, on stderr; the warnings for executions it could not stop also with --json. */
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
