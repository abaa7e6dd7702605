/**
 * The platform in virtual time, for the gate simulation: retrieve-user (endpoint 3), the export's
 * start and status (endpoints 6 and 7) and the download, answered as the platform documents them
 * (docs/platform-api.md) and limited as the emulator limits them
 * (local/emulator/limits.ts: a token bucket for every request, a cap on exports open from their
 * start until downloaded or failed). Each call takes a drawn time; the platform sees it a share of
 * that time after it was sent. It is handed to the real PlatformClient as its fetch.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { z } from 'zod';
import { PlatformLimits } from '#local/emulator/limits';
import type { Random } from '#local/emulator/prng';
import { PlatformThrottledError } from '../../lambdas/shared/errors.ts';
import type { VirtualTime } from './virtual-time.ts';

/** What one step invocation sent: the calls its gate admitted, and the calls the platform saw. */
export interface InvocationCalls {
  admits: number;
  calls: number;
}

/** The invocation a platform call belongs to, so that a call without its admission is seen. */
export const invocationCalls = new AsyncLocalStorage<InvocationCalls>();

export interface PlatformModelSettings {
  readonly requestsPerSecond: number;
  readonly burst: number;
  readonly maxOpenExports: number;
  /** How long a call takes from send to answer, drawn evenly between the two (ms). */
  readonly callMs: readonly [number, number];
  /** How long an export takes to prepare, drawn evenly between the two (ms). */
  readonly preparationMs: readonly [number, number];
  /** The export archive's size, drawn evenly between the two (bytes). */
  readonly exportBytes: readonly [number, number];
  /** The Retry-After of a 429 for too many open exports (the emulator's default). */
  readonly retryAfterSeconds: number;
}

export const PLATFORM_BASE_URL = 'https://platform.invalid/api';
export const PLATFORM_EXPORT_URL = 'https://export.platform.invalid';
const DOWNLOAD_PREFIX = 'https://download.platform.invalid/_downloads/';
export const SIM_SPOT_ID = 'sp_simulation';
/** The share of a call's time before the platform sees it (the request's way there). */
const UPLINK_SHARE = 0.2;

interface ModelExport {
  readonly readyAt: number;
  readonly bytes: number;
  readonly link: string;
  linked: boolean;
  downloaded: boolean;
}

const exportBodySchema = z.object({ access_token: z.string(), spot_id: z.string(), user_id: z.string() });

/** The platform's users, exports and limits, and what it saw. */
export class PlatformModel {
  readonly limits: PlatformLimits;
  readonly #time: VirtualTime;
  readonly #settings: PlatformModelSettings;
  readonly #random: Random;
  readonly #users = new Map<string, string>();
  readonly #exports = new Map<string, ModelExport>();
  readonly #byLink = new Map<string, ModelExport>();
  #open = 0;
  #exportCounter = 0;
  /** Platform calls (downloads included) that came without a rate slot of the gate. */
  unmeteredCalls = 0;
  calls = 0;
  /** When each call reached the platform, for judging them afterwards against other buckets. */
  readonly arrivals: number[] = [];
  /** Every download's copy time in all (ms), and the longest. */
  copyMs = 0;

  constructor(time: VirtualTime, settings: PlatformModelSettings, random: Random) {
    this.#time = time;
    this.#settings = settings;
    this.#random = random;
    this.limits = new PlatformLimits(() => time.now(), time.now());
  }

  /** A user the platform knows. */
  addUser(primaryKey: string, svcUserId: string): void {
    this.#users.set(primaryKey, svcUserId);
  }

  get openExports(): number {
    return this.#open;
  }

  /** The PlatformClient's fetch. */
  readonly fetch: typeof globalThis.fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init?.method ?? 'GET';
    const body = typeof init?.body === 'string' ? init.body : undefined;
    const total = this.#draw(this.#settings.callMs);
    await this.#time.sleep(total * UPLINK_SHARE);
    const answer = this.#answer(url, method, body);
    await this.#time.sleep(total * (1 - UPLINK_SHARE));
    return new Response(JSON.stringify(answer.body), {
      status: answer.status,
      headers: { 'content-type': 'application/json', ...answer.headers },
    });
  };

  /**
   * The download of an export's archive by its link: a platform request like the others (it counts
   * against the rate), after which the platform no longer counts the export as open. Answers the
   * archive's size; the copy's time is the archive store's.
   */
  async download(link: URL): Promise<number> {
    const total = this.#draw(this.#settings.callMs);
    await this.#time.sleep(total * UPLINK_SHARE);
    const limited = this.#arrive();
    if (limited !== undefined) {
      throw new PlatformThrottledError(
        'download: the platform is throttling (429)',
        Number(limited.headers?.['Retry-After'] ?? 1),
      );
    }
    const record = this.#byLink.get(link.href);
    if (record === undefined || !record.linked) throw new Error('download: no export archive at this link');
    if (!record.downloaded) {
      record.downloaded = true;
      this.#open -= 1;
    }
    await this.#time.sleep(total * (1 - UPLINK_SHARE));
    return record.bytes;
  }

  #draw([low, high]: readonly [number, number]): number {
    return low + (high - low) * this.#random.next();
  }

  /** Counts a request as it reaches the platform; a 429 when it is over the rate. */
  #arrive(): Answer | undefined {
    this.calls += 1;
    this.arrivals.push(this.#time.now());
    const invocation = invocationCalls.getStore();
    if (invocation !== undefined) {
      invocation.calls += 1;
      if (invocation.calls > invocation.admits) this.unmeteredCalls += 1;
    } else {
      this.unmeteredCalls += 1;
    }
    this.limits.countRequest();
    const retryAfter = this.limits.takeToken({
      requests_per_second: this.#settings.requestsPerSecond,
      burst: this.#settings.burst,
    });
    if (retryAfter === null) return undefined;
    this.limits.countThrottle('rate_limit');
    return tooManyRequests("too many requests: over the platform's rate limit", retryAfter);
  }

  #answer(url: URL, method: string, body: string | undefined): Answer {
    const limited = this.#arrive();
    if (limited !== undefined) return limited;
    const base = new URL(PLATFORM_BASE_URL).pathname;
    const userPath = `${base}/sso/v1/user/`;
    if (
      method === 'GET' &&
      url.origin === new URL(PLATFORM_BASE_URL).origin &&
      url.pathname.startsWith(userPath)
    ) {
      const primaryKey = decodeURIComponent(url.pathname.slice(userPath.length));
      const svcUserId = this.#users.get(primaryKey);
      if (svcUserId === undefined) return { status: 404, body: { success: false } };
      return {
        status: 200,
        body: {
          success: true,
          user: {
            primary_key: primaryKey,
            svc_user_id: svcUserId,
            user_name: 'simulated',
            display_name: 'Guest',
          },
        },
      };
    }
    if (url.origin !== new URL(PLATFORM_EXPORT_URL).origin)
      return failure(404, 'not_found', 'no such endpoint');
    if (method === 'POST' && url.pathname === '/gdpr/export') return this.#startExport(body);
    const statusPrefix = '/gdpr/export/status/';
    if (method === 'GET' && url.pathname.startsWith(statusPrefix)) {
      if (url.searchParams.get('spot_id') !== SIM_SPOT_ID)
        return failure(403, 'wrong_spot', 'unknown spot_id');
      const record = this.#exports.get(decodeURIComponent(url.pathname.slice(statusPrefix.length)));
      if (record === undefined) return failure(404, 'export_not_found', 'no export with this id');
      if (this.#time.now() < record.readyAt) return { status: 200, body: { status: 'pending' } };
      record.linked = true;
      return { status: 200, body: { status: 'completed', link: record.link } };
    }
    return failure(404, 'not_found', 'no such endpoint');
  }

  #startExport(body: string | undefined): Answer {
    const parsed = exportBodySchema.safeParse(body === undefined ? undefined : JSON.parse(body));
    if (!parsed.success) return failure(400, 'invalid_body', 'the body is not an export request');
    if (parsed.data.spot_id !== SIM_SPOT_ID) return failure(403, 'wrong_spot', 'unknown spot_id');
    if (!this.#knownUser(parsed.data.user_id)) {
      return failure(404, 'user_not_found', 'no user with this user_id (the svc_user_id)');
    }
    if (!this.limits.exportAllowed({ max_open_exports: this.#settings.maxOpenExports }, this.#open)) {
      this.limits.countThrottle('open_exports');
      return tooManyRequests(
        'too many open exports: download, or wait for, the exports already started',
        this.#settings.retryAfterSeconds,
        'too_many_open_exports',
      );
    }
    this.#exportCounter += 1;
    const id = `exp-${this.#exportCounter}`;
    const record: ModelExport = {
      readyAt: this.#time.now() + this.#draw(this.#settings.preparationMs),
      bytes: Math.round(this.#draw(this.#settings.exportBytes)),
      link: `${DOWNLOAD_PREFIX}${id}-${Math.floor(this.#random.next() * 2 ** 32).toString(36)}.zip`,
      linked: false,
      downloaded: false,
    };
    this.#exports.set(id, record);
    this.#byLink.set(record.link, record);
    this.#open += 1;
    this.limits.countExportStarted(null, parsed.data.user_id, this.#open);
    return { status: 200, body: { export_id: id } };
  }

  /** Users by svc_user_id, for the export start (a set built once). */
  #svcUserIds: Set<string> | undefined;
  #knownUser(svcUserId: string): boolean {
    this.#svcUserIds ??= new Set(this.#users.values());
    return this.#svcUserIds.has(svcUserId);
  }
}

interface Answer {
  readonly status: number;
  readonly body: unknown;
  readonly headers?: Record<string, string>;
}

function failure(status: number, code: string, message: string): Answer {
  return { status, body: { success: false, error: { code, message } }, headers: {} };
}

/** A 429 as the emulator answers it: `too_many_open_exports` for an export start over the cap. */
function tooManyRequests(
  message: string,
  retryAfterSeconds: number,
  code: 'rate_limited' | 'too_many_open_exports' = 'rate_limited',
): Answer {
  return { ...failure(429, code, message), headers: { 'Retry-After': String(retryAfterSeconds) } };
}
