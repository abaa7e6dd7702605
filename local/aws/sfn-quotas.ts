/**
 * Step Functions' API throttling as AWS applies it, in process: a token bucket per API action
 * (the documented sizes and refills, lambdas/reconciler/quota.ts, or smaller ones for a quick
 * run), shared by every caller of the "account", and a ThrottlingException for a call that finds
 * its bucket empty. It answers ListExecutions, DescribeExecution and StartExecution over a map of
 * executions by name, after a latency, as the reconciler calls them: for the reconciler bench and
 * its small run in the suite.
 */

import type {
  ActionFigures,
  ApiQuotas,
  PacedAction,
  TokenBucketQuota,
} from '../../lambdas/reconciler/quota.ts';
import type { ExecutionLister, ExecutionLookup, ExecutionStatus } from '../../lambdas/shared/executions.ts';

/** A token bucket as AWS runs one: full at first, refilled continuously, never above its size. */
export class TokenBucket {
  readonly #size: number;
  readonly #perMs: number;
  readonly #now: () => number;
  #tokens: number;
  #at: number;

  constructor({ bucket, refillPerSecond }: TokenBucketQuota, now: () => number) {
    this.#size = bucket;
    this.#perMs = refillPerSecond / 1000;
    this.#now = now;
    this.#tokens = bucket;
    this.#at = now();
  }

  /** Takes a token; false when there is none (the call is throttled). */
  take(): boolean {
    const now = this.#now();
    this.#tokens = Math.min(this.#size, this.#tokens + (now - this.#at) * this.#perMs);
    this.#at = now;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Takes every token there is: a burst from another caller of the account. */
  drain(): void {
    while (this.take()) {}
  }
}

/** The error Step Functions answers a throttled call with, as the SDK surfaces it. */
export function throttlingException(action: PacedAction): Error {
  return Object.assign(new Error(`Rate exceeded (${action})`), { name: 'ThrottlingException' });
}

/** How to start a {@link ThrottledStepFunctions}. */
export interface ThrottledStepFunctionsOptions {
  /** The account's buckets. */
  readonly quotas: ApiQuotas;
  /** How long each answer takes, ms. @default 0 */
  readonly latencyMs?: number;
  /** A monotonic clock in ms. @default performance.now */
  readonly now?: () => number;
}

interface Execution {
  readonly status: ExecutionStatus;
  /** Order of start: ListExecutions lists the newest first. */
  readonly sequence: number;
}

/** The most executions one ListExecutions page holds. */
const MAX_PAGE = 1000;

/**
 * The executions of one state machine and the account's API buckets. Each call takes a token of
 * its action before it is answered (a throttled call is answered at once, as AWS does); every call
 * and every throttled one is counted per action, whoever made it.
 */
export class ThrottledStepFunctions {
  readonly #executions = new Map<string, Execution>();
  readonly #buckets: Record<PacedAction, TokenBucket>;
  readonly #figures: Record<PacedAction, { calls: number; throttled: number }>;
  readonly #latencyMs: number;
  #sequence = 0;
  /** Each status's executions, newest first, as of `#sequence` and `#changes` (a listing reads it page after page). */
  #listed:
    | { readonly key: string; readonly byStatus: Map<ExecutionStatus, [string, Execution][]> }
    | undefined;
  #changes = 0;

  constructor(options: ThrottledStepFunctionsOptions) {
    const now = options.now ?? (() => performance.now());
    this.#latencyMs = options.latencyMs ?? 0;
    this.#buckets = {
      ListExecutions: new TokenBucket(options.quotas.ListExecutions, now),
      DescribeExecution: new TokenBucket(options.quotas.DescribeExecution, now),
      StartExecution: new TokenBucket(options.quotas.StartExecution, now),
    };
    this.#figures = {
      ListExecutions: { calls: 0, throttled: 0 },
      DescribeExecution: { calls: 0, throttled: 0 },
      StartExecution: { calls: 0, throttled: 0 },
    };
  }

  /** Records an execution that exists already (set-up, no call). */
  add(name: string, status: ExecutionStatus): void {
    this.#sequence += 1;
    this.#changes += 1;
    this.#executions.set(name, { status, sequence: this.#sequence });
  }

  /** The status of the execution `name`, or MISSING (set-up, no call). */
  statusOf(name: string): ExecutionStatus {
    return this.#executions.get(name)?.status ?? 'MISSING';
  }

  /** ListExecutions with a status filter, up to 1,000 a page, newest first. */
  readonly list: ExecutionLister = async (status, nextToken) => {
    await this.#call('ListExecutions');
    const after = nextToken === undefined ? Number.POSITIVE_INFINITY : readToken(nextToken, status);
    const matching = this.#newestFirst(status).filter(([, execution]) => execution.sequence < after);
    const page = matching.slice(0, MAX_PAGE);
    const last = page.at(-1)?.[1].sequence;
    return {
      executions: page.map(([name, execution]) => ({ name, status: execution.status })),
      ...(matching.length > MAX_PAGE && last !== undefined ? { nextToken: tokenOf(last, status) } : {}),
    };
  };

  /** DescribeExecution by name. */
  readonly describe: ExecutionLookup = async (name) => {
    await this.#call('DescribeExecution');
    return this.statusOf(name);
  };

  /** StartExecution: a new running execution, or `already_exists` for a name in use. */
  readonly start = async (name: string): Promise<'started' | 'already_exists'> => {
    await this.#call('StartExecution');
    if (this.#executions.has(name)) return 'already_exists';
    this.add(name, 'RUNNING');
    return 'started';
  };

  /** One call of another caller in the account: true when it got a token. */
  spend(action: PacedAction): boolean {
    this.#figures[action].calls += 1;
    if (this.#buckets[action].take()) return true;
    this.#figures[action].throttled += 1;
    return false;
  }

  /** Another caller empties the bucket of `action` (a burst: the console, a script). */
  drain(action: PacedAction): void {
    this.#buckets[action].drain();
  }

  /** Calls answered and throttled so far, per action, every caller counted. */
  figures(): Record<PacedAction, ActionFigures> {
    return {
      ListExecutions: { ...this.#figures.ListExecutions },
      DescribeExecution: { ...this.#figures.DescribeExecution },
      StartExecution: { ...this.#figures.StartExecution },
    };
  }

  #newestFirst(status: ExecutionStatus): [string, Execution][] {
    const key = String(this.#changes);
    if (this.#listed?.key !== key) {
      const byStatus = new Map<ExecutionStatus, [string, Execution][]>();
      for (const entry of this.#executions) {
        const list = byStatus.get(entry[1].status) ?? [];
        list.push(entry);
        byStatus.set(entry[1].status, list);
      }
      for (const list of byStatus.values()) list.sort(([, a], [, b]) => b.sequence - a.sequence);
      this.#listed = { key, byStatus };
    }
    return this.#listed.byStatus.get(status) ?? [];
  }

  async #call(action: PacedAction): Promise<void> {
    if (!this.spend(action)) throw throttlingException(action);
    if (this.#latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.#latencyMs));
  }
}

/**
 * Another caller spending at most `perSecond` calls of `action` for as long as it runs (the rest
 * of the account), a call at a time: one that falls behind (a busy process) does not catch up in
 * a burst. Answers how to stop it and how many of its calls were throttled.
 */
export function neighbour(
  stepFunctions: ThrottledStepFunctions,
  action: PacedAction,
  perSecond: number,
): { stop: () => { calls: number; throttled: number } } {
  let calls = 0;
  let throttled = 0;
  const gapMs = 1000 / perSecond;
  let last = performance.now() - gapMs;
  const timer = setInterval(
    () => {
      const now = performance.now();
      if (now - last < gapMs) return;
      last = now;
      calls += 1;
      if (!stepFunctions.spend(action)) throttled += 1;
    },
    Math.max(1, Math.min(10, gapMs / 4)),
  );
  return {
    stop: () => {
      clearInterval(timer);
      return { calls, throttled };
    },
  };
}

function tokenOf(sequence: number, status: string): string {
  return Buffer.from(JSON.stringify({ sequence, status }), 'utf8').toString('base64url');
}

function readToken(token: string, status: string): number {
  const parsed: unknown = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  if (
    typeof parsed === 'object' &&
    parsed !== null &&
    'sequence' in parsed &&
    typeof parsed.sequence === 'number' &&
    'status' in parsed &&
    parsed.status === status
  ) {
    return parsed.sequence;
  }
  throw Object.assign(new Error(`Invalid Token: '${token}'`), { name: 'InvalidToken' });
}
