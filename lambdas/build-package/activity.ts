// The subject's activity read page by page for the package: conversation titles, links and comment states.
import {
  ActivityNotEnabledError,
  DsrError,
  PlatformAuthError,
  PlatformCapacityError,
  PlatformThrottledError,
} from '#shared/errors';
import type { PlatformClient } from '#shared/platform-client';
import type { ActivityContext } from './normalise.ts';
import { safeLink } from './normalise.ts';
import type { DetailsReason } from './strings.ts';

/** How the activity endpoint is read. */
export interface ActivityOptions {
  /** Items asked per page; the emulator (and, we assume, the platform) serves at most 100. @default 100 */
  readonly pageSize?: number;
  /** Pages read at most; past it the context is partial. @default 200 (20,000 comments) */
  readonly maxPages?: number;
  /** Tries per page for a transient failure (throttle, 5xx, timeout, reset). @default 3 */
  readonly attempts?: number;
  /** First wait between tries, doubled each time; a Retry-After is honoured up to 20 s. @default 1000 */
  readonly backoffMs?: number;
  readonly sleep: (ms: number) => Promise<void>;
  /**
   * No page is started once `clock()` is at or past this time (epoch ms): the context is then
   * partial. The step's Lambda timeout leaves room for one page's worst chain after it
   * (lib/step-timeouts.ts). @default no limit
   */
  readonly readUntil?: number;
  /** @default Date.now */
  readonly clock?: () => number;
}

/** The context, and why it is missing or partial (recorded in the ledger and the audit trail). */
export interface CollectedActivity {
  readonly context: ActivityContext;
  /** The error name that ended the reading, when it ended early; never a message (it may quote input). */
  readonly failure: string | null;
}

/** How one activity page is retried (withRetries): the step's timeout is computed from these. */
export const ACTIVITY_RETRY = { attempts: 3, backoffMs: 1000, retryAfterCapMs: 20_000 } as const;
const RETRY_AFTER_CAP_MS = ACTIVITY_RETRY.retryAfterCapMs;
/**
 * How long the package step starts activity pages for. A few hundred pages at the platform's
 * usual pace; a throttled or failing platform ends the reading here with a partial context rather
 * than the step's Lambda timeout ending the step.
 */
export const ACTIVITY_READ_BUDGET_SECONDS = 120;

/**
 * Reads the subject's activity page by page (count/offset, until `cursor.has_next` is false) into
 * conversation titles, links and per-comment states. It never fails the package: the call not
 * enabled, refused, invalid, or still failing after its retries ends the reading with a reason,
 * and the package says the details were unavailable. Only a wait for platform capacity
 * (PlatformCapacityError) leaves, so the step waits and runs again.
 */
export async function collectActivity(
  platform: Pick<PlatformClient, 'userActivity'>,
  svcUserId: string | undefined,
  options: ActivityOptions,
): Promise<CollectedActivity> {
  const pageSize = options.pageSize ?? 100;
  const maxPages = options.maxPages ?? 200;
  const conversations = new Map<string, { title: string | null; url: string | null }>();
  const messages = new Map<
    string,
    { deleted?: boolean; edited?: boolean; published?: boolean; status?: string }
  >();
  const unavailable = (reason: DetailsReason, pages: number, failure: string | null): CollectedActivity => ({
    context: {
      details: { status: 'unavailable', reason, pages },
      conversations: new Map(),
      messages: new Map(),
    },
    failure,
  });
  if (svcUserId === undefined) return unavailable('no_user', 0, null);

  let offset = 0;
  let pages = 0;
  const clock = options.clock ?? Date.now;
  for (;;) {
    if (pages >= maxPages || (options.readUntil !== undefined && clock() >= options.readUntil)) {
      return {
        context: { details: { status: 'partial', reason: null, pages }, conversations, messages },
        failure: null,
      };
    }
    let page: Awaited<ReturnType<typeof platform.userActivity>>;
    try {
      page = await withRetries(() => platform.userActivity(svcUserId, { count: pageSize, offset }), options);
    } catch (error) {
      if (error instanceof PlatformCapacityError) throw error;
      return unavailable(reasonOf(error), pages, error instanceof Error ? error.name : 'Error');
    }
    pages += 1;
    for (const item of page.items) {
      const { data } = item;
      if (!conversations.has(data.conversation_id)) {
        const title = data.conversation?.title?.trim();
        conversations.set(data.conversation_id, {
          title: title === undefined || title === '' ? null : title,
          url: safeLink(data.conversation?.url),
        });
      }
      for (const message of data.messages) {
        messages.set(message.id, {
          ...(message.deleted === undefined ? {} : { deleted: message.deleted }),
          ...(message.edited === undefined ? {} : { edited: message.edited }),
          ...(message.published === undefined ? {} : { published: message.published }),
          ...(message.status === undefined ? {} : { status: message.status }),
        });
      }
    }
    // A page that says more remain but returned nothing would loop for ever: it ends the reading.
    if (!page.cursor.has_next || page.cursor.count <= 0) break;
    offset += page.cursor.count;
  }
  return {
    context: { details: { status: 'complete', reason: null, pages }, conversations, messages },
    failure: null,
  };
}

function reasonOf(error: unknown): DetailsReason {
  if (error instanceof ActivityNotEnabledError) return 'not_enabled';
  if (error instanceof PlatformAuthError) return 'refused';
  if (error instanceof DsrError && error.retryable) return 'unavailable';
  if (error instanceof DsrError && error.code === 'platform_response_invalid') return 'invalid_response';
  return 'refused';
}

async function withRetries<T>(call: () => Promise<T>, options: ActivityOptions): Promise<T> {
  const attempts = options.attempts ?? ACTIVITY_RETRY.attempts;
  let wait = options.backoffMs ?? ACTIVITY_RETRY.backoffMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      const transient =
        error instanceof DsrError && error.retryable && !(error instanceof PlatformCapacityError);
      if (!transient || attempt >= attempts) throw error;
      const asked =
        error instanceof PlatformThrottledError && error.retryAfterSeconds !== undefined
          ? Math.min(error.retryAfterSeconds * 1000, RETRY_AFTER_CAP_MS)
          : 0;
      await options.sleep(Math.max(wait, asked));
      wait *= 2;
    }
  }
}
