// Step Functions' API quotas as AWS documents them, and the reconciler's pace within a share of them.

/** The Step Functions API actions the reconciler calls, each with a token bucket of its own. */
export const PACED_ACTIONS = ['ListExecutions', 'DescribeExecution', 'StartExecution'] as const;
export type PacedAction = (typeof PACED_ACTIONS)[number];

/** A token bucket: `bucket` calls at once after a quiet spell, `refillPerSecond` sustained. */
export interface TokenBucketQuota {
  readonly bucket: number;
  readonly refillPerSecond: number;
}

/** A token bucket per action. */
export type ApiQuotas = Readonly<Record<PacedAction, TokenBucketQuota>>;

/** The Regions AWS gives the larger buckets: US East (N. Virginia), US West (Oregon), Europe (Ireland). */
export const LARGEST_REGIONS: readonly string[] = ['us-east-1', 'us-west-2', 'eu-west-1'];

/**
 * Step Functions' API throttling quotas ("Quotas related to API action throttling" in the Step
 * Functions developer guide), per account and Region, shared with every other caller in the
 * account. AWS may raise them at any time; a pass paced under them only goes slower than it could.
 */
export const DOCUMENTED_QUOTAS: { readonly largest: ApiQuotas; readonly other: ApiQuotas } = {
  largest: {
    ListExecutions: { bucket: 200, refillPerSecond: 5 },
    DescribeExecution: { bucket: 300, refillPerSecond: 15 },
    StartExecution: { bucket: 1300, refillPerSecond: 300 },
  },
  other: {
    ListExecutions: { bucket: 100, refillPerSecond: 2 },
    DescribeExecution: { bucket: 250, refillPerSecond: 10 },
    StartExecution: { bucket: 800, refillPerSecond: 150 },
  },
};

/** The documented quotas of `region`; an unknown or missing Region gets the smaller ones. */
export function documentedQuotas(region: string | undefined): ApiQuotas {
  return region !== undefined && LARGEST_REGIONS.includes(region)
    ? DOCUMENTED_QUOTAS.largest
    : DOCUMENTED_QUOTAS.other;
}

/**
 * The share of the account's quotas the reconciler may use (stack setting `reconcileQuotaShare`,
 * the Lambda's `SFN_QUOTA_SHARE`): the rest stays for everything else in the account.
 */
export const QUOTA_SHARE = { min: 0.05, max: 1, default: 0.5 } as const;

/** `share` of each bucket (at least one call) and of each refill. */
export function shareOf(quotas: ApiQuotas, share: number): ApiQuotas {
  const part = ({ bucket, refillPerSecond }: TokenBucketQuota): TokenBucketQuota => ({
    bucket: Math.max(1, Math.floor(bucket * share)),
    refillPerSecond: refillPerSecond * share,
  });
  return {
    ListExecutions: part(quotas.ListExecutions),
    DescribeExecution: part(quotas.DescribeExecution),
    StartExecution: part(quotas.StartExecution),
  };
}

/** The error names AWS answers a throttled call with (after the SDK's own retries). */
const THROTTLING_NAMES = new Set(['ThrottlingException', 'Throttling', 'TooManyRequestsException']);

/** True when `error` says the account's bucket for the call was empty. */
export function isThrottling(error: unknown): boolean {
  return error instanceof Error && THROTTLING_NAMES.has(error.name);
}

/** Time as the pacer sees it: a monotonic clock in ms, and a way to wait. */
export interface PacerClock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

/** The process's monotonic clock and timers. */
export const REAL_CLOCK: PacerClock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/** How a pacer waits and backs off. */
export interface PacerOptions {
  /** @default REAL_CLOCK */
  readonly clock?: PacerClock;
  /** The first wait after a throttled call, ms; each further one doubles, up to `maxBackoffMs`. @default 1000 */
  readonly firstBackoffMs?: number;
  /** @default 20000 */
  readonly maxBackoffMs?: number;
  /** Jitter, in [0, 1). @default Math.random */
  readonly random?: () => number;
}

/** The outcome of a paced call: its value, or `done: false` when the time left could not cover it. */
export type Paced<T> = { readonly done: true; readonly value: T } | { readonly done: false };

/** What a pacer did for one action. */
export interface ActionFigures {
  /** Calls made, throttled ones included. */
  readonly calls: number;
  /** Calls the service answered with a throttling error. */
  readonly throttled: number;
}

/** Makes Step Functions calls within a pace; see ApiPacer. */
export interface Pacer {
  /**
   * Makes `call` once `action` has a token, trying again after a backoff while it is throttled;
   * answers `done: false`, without making it, once the wait would outlast `timeLeftMs()`. Errors
   * other than throttling are thrown as they are.
   */
  run<T>(action: PacedAction, call: () => Promise<T>, timeLeftMs: () => number): Promise<Paced<T>>;
  /** Calls made and throttled so far, per action. */
  figures(): Record<PacedAction, ActionFigures>;
}

interface Bucket {
  readonly size: number;
  readonly perMs: number;
  tokens: number;
  at: number;
  calls: number;
  throttled: number;
}

/**
 * Paces calls under a token bucket per action (a share of the documented quotas, see `shareOf`):
 * each call waits for its token, so the pass never spends more than its share however many calls
 * it has to make. A throttled call (someone else emptied the account's bucket) empties this
 * bucket too and is tried again after a backoff that doubles, with jitter. A call whose wait would
 * outlast the time left is not made: the caller keeps its place for the next pass.
 */
export class ApiPacer implements Pacer {
  readonly #buckets: Record<PacedAction, Bucket>;
  readonly #clock: PacerClock;
  readonly #firstBackoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #random: () => number;

  constructor(quotas: ApiQuotas, options: PacerOptions = {}) {
    this.#clock = options.clock ?? REAL_CLOCK;
    this.#firstBackoffMs = options.firstBackoffMs ?? 1000;
    this.#maxBackoffMs = options.maxBackoffMs ?? 20_000;
    this.#random = options.random ?? Math.random;
    const now = this.#clock.now();
    const bucketOf = ({ bucket, refillPerSecond }: TokenBucketQuota): Bucket => ({
      size: bucket,
      perMs: refillPerSecond / 1000,
      tokens: bucket,
      at: now,
      calls: 0,
      throttled: 0,
    });
    this.#buckets = {
      ListExecutions: bucketOf(quotas.ListExecutions),
      DescribeExecution: bucketOf(quotas.DescribeExecution),
      StartExecution: bucketOf(quotas.StartExecution),
    };
  }

  async run<T>(action: PacedAction, call: () => Promise<T>, timeLeftMs: () => number): Promise<Paced<T>> {
    const bucket = this.#buckets[action];
    for (let attempt = 0; ; attempt++) {
      if (!(await this.#take(bucket, timeLeftMs))) return { done: false };
      bucket.calls += 1;
      try {
        return { done: true, value: await call() };
      } catch (error) {
        if (!isThrottling(error)) throw error;
        bucket.throttled += 1;
        // The account's bucket is empty: nothing of ours should go before it has refilled a little.
        this.#refill(bucket);
        bucket.tokens = Math.min(bucket.tokens, 0);
        const ceiling = Math.min(this.#maxBackoffMs, this.#firstBackoffMs * 2 ** attempt);
        const backoff = ceiling / 2 + (ceiling / 2) * this.#random();
        if (backoff > timeLeftMs()) return { done: false };
        await this.#clock.sleep(backoff);
      }
    }
  }

  figures(): Record<PacedAction, ActionFigures> {
    const of = ({ calls, throttled }: Bucket): ActionFigures => ({ calls, throttled });
    return {
      ListExecutions: of(this.#buckets.ListExecutions),
      DescribeExecution: of(this.#buckets.DescribeExecution),
      StartExecution: of(this.#buckets.StartExecution),
    };
  }

  #refill(bucket: Bucket): void {
    const now = this.#clock.now();
    bucket.tokens = Math.min(bucket.size, bucket.tokens + (now - bucket.at) * bucket.perMs);
    bucket.at = now;
  }

  /**
   * Waits for a token and takes it; false when the wait would outlast the time left. Waiters do
   * not queue up tokens they have yet to get: each one woken takes a token only if one is there,
   * so however late timers fire (a busy or frozen process), no more than the bucket's size goes at
   * once.
   */
  async #take(bucket: Bucket, timeLeftMs: () => number): Promise<boolean> {
    for (;;) {
      this.#refill(bucket);
      if (bucket.tokens >= 1) {
        bucket.tokens -= 1;
        return true;
      }
      const wait = (1 - bucket.tokens) / bucket.perMs;
      if (wait > timeLeftMs()) return false;
      await this.#clock.sleep(wait);
    }
  }
}
