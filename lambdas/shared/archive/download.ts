/**
 * The platform side of the copy: open the export link (following only redirects the download
 * policy allows), map its status to the workflow's errors, and pump the body chunk by chunk with an
 * idle timer, counting bytes against Content-Length. Nothing here knows about S3.
 */
import { createHash } from 'node:crypto';
import { assertDownloadAllowed, type DownloadPolicy } from '../download-policy.ts';
import {
  DownloadLinkExpiredError,
  type DsrError,
  PlatformRejectedError,
  PlatformResponseInvalidError,
  PlatformThrottledError,
  PlatformTimeoutError,
  PlatformUnavailableError,
  TruncatedDownloadError,
} from '../errors.ts';
import { classifyNetworkError, parseRetryAfter } from '../platform-client.ts';

const DOWNLOAD = 'downloadExport';

/** Where the body's chunks go; its failure, once set, is the reason the download was cut off. */
export interface ChunkSink {
  readonly failure: unknown;
  /** Resolves once the sink can take the next chunk. */
  write(chunk: Uint8Array): Promise<void>;
}

/** How a download is stopped: the signal aborts fetch, the watchdog fires it when the platform stalls. */
export interface DownloadControl {
  readonly signal: AbortSignal;
  readonly watchdog: IdleWatchdog;
}

/** Fetches the link, following allowed redirects; resolves with a 200 whose body is still unread. */
export async function openDownload(
  link: URL,
  policy: DownloadPolicy,
  fetchImpl: typeof fetch,
  control: DownloadControl,
): Promise<Response> {
  let url = link;
  for (let hop = 0; ; hop += 1) {
    const response = await fetchOnce(url, fetchImpl, control);
    if (!isFollowableRedirect(response.status)) {
      await throwForStatus(response);
      return response;
    }
    await discard(response);
    if (hop >= policy.maxRedirects) {
      throw new PlatformRejectedError(
        `${DOWNLOAD}: more than ${policy.maxRedirects} redirects; raise maxRedirects if the platform's CDN needs them`,
        response.status,
      );
    }
    const location = response.headers.get('location');
    if (location === null || !URL.canParse(location, url.href)) {
      throw new PlatformResponseInvalidError(
        `${DOWNLOAD}: a ${response.status} redirect without a usable Location`,
      );
    }
    url = new URL(location, url);
    // Checked before the next request, so nothing is ever fetched from a host off the list.
    assertDownloadAllowed(url, policy);
  }
}

async function fetchOnce(
  url: URL,
  fetchImpl: typeof fetch,
  { signal, watchdog }: DownloadControl,
): Promise<Response> {
  watchdog.arm();
  try {
    return await fetchImpl(url, {
      method: 'GET',
      // A redirect is followed only after its target passed the allowlist.
      redirect: 'manual',
      // fetch would decode a compressed transfer, and Content-Length would then not count the bytes stored.
      headers: {
        accept: 'application/zip, application/octet-stream;q=0.9, */*;q=0.1',
        'accept-encoding': 'identity',
      },
      signal,
    });
  } catch (error) {
    // The original error is dropped: it can quote the link.
    throw watchdog.fired ? idleTimeout(watchdog) : classifyNetworkError(DOWNLOAD, error, watchdog.ms);
  } finally {
    watchdog.disarm();
  }
}

function isFollowableRedirect(status: number): boolean {
  return status === 301 || status === 302 || status === 303 || status === 307 || status === 308;
}

async function throwForStatus(response: Response): Promise<void> {
  const { status } = response;
  if (status === 200) return;
  await discard(response);
  // Signed links answer 403 once expired; the platform's own links 410; a removed file 404.
  if (status === 401 || status === 403 || status === 404 || status === 410) {
    throw new DownloadLinkExpiredError(
      `${DOWNLOAD}: the download link is no longer valid (${status}); the export must be started again`,
    );
  }
  if (status === 429) {
    const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
    throw new PlatformThrottledError(
      `${DOWNLOAD}: the download is throttled (429${retryAfter === undefined ? '' : `, retry after ${retryAfter} s`})`,
      retryAfter,
    );
  }
  if (status >= 500) {
    throw new PlatformUnavailableError(`${DOWNLOAD}: the download answered ${status}`, status);
  }
  if (status >= 200 && status < 300) {
    throw new PlatformResponseInvalidError(`${DOWNLOAD}: the download answered ${status} instead of 200`);
  }
  throw new PlatformRejectedError(`${DOWNLOAD}: the download answered ${status}`, status);
}

async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

/** The announced length, when it counts the bytes fetch hands over. */
export function declaredLength(response: Response): number | undefined {
  const encoding = response.headers.get('content-encoding');
  if (encoding !== null && encoding.trim().toLowerCase() !== 'identity') return undefined;
  const value = response.headers.get('content-length')?.trim();
  return value !== undefined && /^\d+$/.test(value) ? Number(value) : undefined;
}

/** What has gone through so far, and why the download stopped when it did not finish. */
export class DownloadTally {
  readonly hash = createHash('sha256');
  bytes = 0;
  failure: DsrError | undefined;

  constructor(readonly declared: number | undefined) {}

  fail(error: DsrError): DsrError {
    this.failure = error;
    return error;
  }

  get announced(): string {
    return this.declared === undefined ? '' : ` of the announced ${this.declared}`;
  }
}

/**
 * Reads the body straight from fetch's reader, hashing, counting and handing each chunk to the
 * upload. The idle timer runs only while waiting on the platform, not while S3 is slow to take a
 * part, so a slow upload is never mistaken for a stall.
 */
export async function copyBody(
  body: ReadableStream<Uint8Array> | null,
  tally: DownloadTally,
  watchdog: IdleWatchdog,
  sink: ChunkSink,
): Promise<void> {
  // A reader rather than an async iterator: one promise per chunk and no stream adapter between.
  const reader = (body ?? new Blob([]).stream()).getReader();
  try {
    await pump(reader, tally, watchdog, sink);
  } finally {
    // Stops a body nobody reads any more; a finished or broken one ignores this.
    reader.cancel().catch(() => undefined);
  }
  if (tally.declared !== undefined && tally.bytes < tally.declared) {
    throw tally.fail(
      new TruncatedDownloadError(
        `${DOWNLOAD}: the download ended after ${tally.bytes} bytes${tally.announced}`,
      ),
    );
  }
}

async function pump(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  tally: DownloadTally,
  watchdog: IdleWatchdog,
  sink: ChunkSink,
): Promise<void> {
  for (;;) {
    let next: Awaited<ReturnType<typeof reader.read>>;
    watchdog.arm();
    try {
      next = await reader.read();
    } catch {
      // S3 failed first and hung up on the platform: its error is the one that matters.
      if (sink.failure !== undefined) throw sink.failure;
      throw tally.fail(
        watchdog.fired
          ? idleTimeout(watchdog)
          : new TruncatedDownloadError(
              `${DOWNLOAD}: the download broke off after ${tally.bytes} bytes${tally.announced}`,
            ),
      );
    } finally {
      watchdog.disarm();
    }
    if (next.done) break;
    const chunk = next.value;
    if (!(chunk instanceof Uint8Array)) {
      throw tally.fail(
        new PlatformResponseInvalidError(`${DOWNLOAD}: the body stream produced a non-byte chunk`),
      );
    }
    tally.bytes += chunk.length;
    if (tally.declared !== undefined && tally.bytes > tally.declared) {
      throw tally.fail(
        new TruncatedDownloadError(
          `${DOWNLOAD}: the download sent more than the announced ${tally.declared} bytes; the transfer is corrupt`,
        ),
      );
    }
    tally.hash.update(chunk);
    await sink.write(chunk);
  }
}

function idleTimeout(watchdog: IdleWatchdog): PlatformTimeoutError {
  return new PlatformTimeoutError(`${DOWNLOAD}: no bytes arrived for ${watchdog.ms} ms`);
}

/**
 * A timer armed while waiting on the platform; when it fires the download is aborted. It is armed
 * once per chunk, so it reuses one timer: disarming only marks it, and a marked timer that fires
 * does nothing.
 */
export class IdleWatchdog {
  fired = false;
  #armed = false;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    readonly ms: number,
    private readonly onIdle: () => void,
  ) {}

  arm(): void {
    this.#armed = true;
    if (this.#timer === undefined) {
      this.#timer = setTimeout(() => {
        if (!this.#armed) return;
        this.fired = true;
        this.onIdle();
      }, this.ms);
    } else {
      this.#timer.refresh();
    }
  }

  disarm(): void {
    this.#armed = false;
  }

  /** Disarms for good and lets the process exit. */
  stop(): void {
    this.#armed = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
