/**
 * The platform's load limits and what it saw: a token bucket for requests, the outage window, and the
 * counters behind GET /_emulator/stats.
 */
import { z } from 'zod';
import type { Outage, RateLimit } from './faults.ts';

const THROTTLE_REASONS = ['rate_limit', 'open_exports', 'fault'] as const;
/** Why a platform request was answered 429. */
export type ThrottleReason = (typeof THROTTLE_REASONS)[number];

const count = z.number().int().min(0);

/** What GET /_emulator/stats answers; a schema, so a client in another process can read it. */
export const platformStatsSchema = z.object({
  /** Every platform request seen, answered or turned away. */
  requests: count,
  /** The most platform requests seen within any one second (a sliding window). */
  max_requests_per_second: count,
  /** The most exports open at once: started and not yet downloaded, failed or expired. */
  max_open_exports: count,
  open_exports: count,
  /** Every 429 sent, and why. */
  throttled: z.object({ total: count, rate_limit: count, open_exports: count, fault: count }),
  /** 503s sent because of the outage window. */
  outage_answers: count,
  /** Per subject, by primary_key as the rest of the control API reports them. */
  subjects: z.array(
    z.object({
      primary_key: z.string(),
      svc_user_id: z.string(),
      exports_started: count,
      deletes_succeeded: count,
    }),
  ),
});
export type PlatformStats = z.infer<typeof platformStatsSchema>;
type SubjectStats = PlatformStats['subjects'][number];

const WINDOW_MS = 1_000;

/**
 * The platform's load limits and what it saw: a token bucket for requests, the outage window and
 * the counters behind GET /_emulator/stats. Time comes from the emulator's clock, so tests can
 * drive it. Counters live in memory: a restarted emulator starts them again.
 */
export class PlatformLimits {
  private tokens: number | null = null;
  private refilledAt = 0;
  private readonly recent: number[] = [];
  private requests = 0;
  private maxRate = 0;
  private maxOpen = 0;
  private outageAnswers = 0;
  private readonly throttled: Record<ThrottleReason, number> = { rate_limit: 0, open_exports: 0, fault: 0 };
  private readonly subjects = new Map<string, SubjectStats>();

  constructor(
    private readonly now: () => number,
    /** When the outage window's clock starts: the emulator's start. */
    private readonly startedAt: number = now(),
  ) {}

  /** Counts a platform request toward the highest rate seen. */
  countRequest(): void {
    const at = this.now();
    this.requests += 1;
    this.recent.push(at);
    while (this.recent.length > 0 && (this.recent[0] ?? at) <= at - WINDOW_MS) this.recent.shift();
    this.maxRate = Math.max(this.maxRate, this.recent.length);
  }

  /** True while the outage window is open. */
  inOutage(outage: Outage | null): boolean {
    if (outage === null) return false;
    const elapsed = (this.now() - this.startedAt) / 1000;
    const inside =
      elapsed >= outage.after_seconds && elapsed < outage.after_seconds + outage.duration_seconds;
    if (inside) this.outageAnswers += 1;
    return inside;
  }

  /**
   * Takes a token from the bucket; null when one was there, else the seconds until the next one
   * (the Retry-After to answer). Without requests_per_second there is no bucket.
   */
  takeToken(limit: RateLimit | null): number | null {
    const rate = limit?.requests_per_second;
    if (rate === undefined) return null;
    const burst = limit?.burst ?? Math.max(1, Math.ceil(rate));
    const at = this.now();
    const tokens = Math.min(burst, (this.tokens ?? burst) + ((at - this.refilledAt) / 1000) * rate);
    this.refilledAt = at;
    if (tokens >= 1) {
      this.tokens = tokens - 1;
      return null;
    }
    this.tokens = tokens;
    return Math.max(1, Math.ceil((1 - tokens) / rate));
  }

  /** Whether one more export may start, given how many are open now. */
  exportAllowed(limit: RateLimit | null, open: number): boolean {
    const cap = limit?.max_open_exports;
    return cap === undefined || open < cap;
  }

  countThrottle(reason: ThrottleReason): void {
    this.throttled[reason] += 1;
  }

  countExportStarted(primaryKey: string | null, svcUserId: string, openAfter: number): void {
    this.maxOpen = Math.max(this.maxOpen, openAfter);
    if (primaryKey !== null) this.subject(primaryKey, svcUserId).exports_started += 1;
  }

  countDelete(primaryKey: string | null, svcUserId: string): void {
    if (primaryKey !== null) this.subject(primaryKey, svcUserId).deletes_succeeded += 1;
  }

  stats(open: number): PlatformStats {
    const throttled = { ...this.throttled };
    return {
      requests: this.requests,
      max_requests_per_second: this.maxRate,
      max_open_exports: this.maxOpen,
      open_exports: open,
      throttled: { total: throttled.rate_limit + throttled.open_exports + throttled.fault, ...throttled },
      outage_answers: this.outageAnswers,
      subjects: [...this.subjects.values()].map((subject) => ({ ...subject })),
    };
  }

  /** Forgets what it saw and refills the bucket (POST /_emulator/reset); the outage clock keeps running. */
  clear(): void {
    this.tokens = null;
    this.recent.length = 0;
    this.requests = 0;
    this.maxRate = 0;
    this.maxOpen = 0;
    this.outageAnswers = 0;
    for (const reason of THROTTLE_REASONS) this.throttled[reason] = 0;
    this.subjects.clear();
  }

  private subject(primaryKey: string, svcUserId: string) {
    let subject = this.subjects.get(primaryKey);
    if (subject === undefined) {
      subject = { primary_key: primaryKey, svc_user_id: svcUserId, exports_started: 0, deletes_succeeded: 0 };
      this.subjects.set(primaryKey, subject);
    }
    return subject;
  }
}
