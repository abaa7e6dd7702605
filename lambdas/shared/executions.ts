/**
 * How a request's executions are named: intake starts `<request_id>` and counts it as the first;
 * each later one (an operator's retry, the reconciler's resume) is `<request_id>-retry-<n>`, where
 * n is the ledger's `executions` counter once it is claimed.
 */

/** The name of the execution a retry or a resume starts: `<request_id>-retry-<n>`. */
export function retryExecutionName(requestId: string, n: number): string {
  return `${requestId}-retry-${n}`;
}

/**
 * The run number of the execution named `name` for `requestId`: 1 for `<request_id>`, n for
 * `<request_id>-retry-<n>`; undefined for a name of neither form.
 */
export function runOf(requestId: string, name: string): number | undefined {
  if (name === requestId) return 1;
  const prefix = `${requestId}-retry-`;
  if (!name.startsWith(prefix)) return undefined;
  const n = name.slice(prefix.length);
  return /^[1-9][0-9]{0,8}$/.test(n) ? Number(n) : undefined;
}

/** The name of the request's latest execution, as the `executions` counter says. */
export function latestExecutionName(requestId: string, executions: number): string {
  return executions <= 1 ? requestId : retryExecutionName(requestId, executions);
}

/** An execution's status as DescribeExecution reports it, or `MISSING` when there is none of that name. */
export type ExecutionStatus =
  | 'RUNNING'
  | 'SUCCEEDED'
  | 'FAILED'
  | 'TIMED_OUT'
  | 'ABORTED'
  | 'PENDING_REDRIVE'
  | 'MISSING';

/** Reads the status of an execution of the state machine by its name. */
export type ExecutionLookup = (name: string) => Promise<ExecutionStatus>;

/** True while the execution may still move the request: running, or about to run again after a redrive. */
export function isLive(status: ExecutionStatus): boolean {
  return status === 'RUNNING' || status === 'PENDING_REDRIVE';
}

/** A status ListExecutions can filter on: every status but `MISSING`. */
export type ListedStatus = Exclude<ExecutionStatus, 'MISSING'>;

/** One page of the state machine's executions with one status, as ListExecutions answers it. */
export interface ExecutionPage {
  readonly executions: readonly { readonly name: string; readonly status: ExecutionStatus }[];
  /** The token of the next page; none after the last. */
  readonly nextToken?: string;
}

/** Lists the state machine's executions with `status`, a page at a time, from `nextToken`. */
export type ExecutionLister = (status: ListedStatus, nextToken?: string) => Promise<ExecutionPage>;
