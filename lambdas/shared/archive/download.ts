/**
 * The platform side of the copy: open the export link (following only redirects the download
 * policy allows), map its status to the workflow's errors, and pump the body chunk by chunk with an
 * idle timer, counting bytes against Content-Length. Nothing here knows about S3.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { pipeline, type Readable, type Transform } from 'node:stream';
import { crc32, createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { assertDownloadAllowed, type DownloadPolicy } from '../download-policy.ts';
import {
  DownloadLinkExpiredError,
  DownloadNotResumableError,
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
  /** Resolves once the sink can take the next chunk; `crc` is the chunk's CRC-32, computed once here. */
  write(chunk: Uint8Array, crc: number): Promise<void>;
}

/** How a download is stopped: the signal aborts the request, the watchdog fires it when the platform stalls. */
export interface DownloadControl {
  readonly signal: AbortSignal;
  readonly watchdog: IdleWatchdog;
}

/**
 * One GET: resolves with the answer's status and headers, its body unread. The body's bytes are the
 * stored bytes: a content coding the server applied despite `accept-encoding: identity` is decoded.
 */
export type HttpGet = (
  url: URL,
  headers: Readonly<Record<string, string>>,
  signal: AbortSignal,
) => Promise<DownloadResponse>;

export interface DownloadResponse {
  readonly status: number;
  header(name: string): string | undefined;
  readonly body: AsyncIterator<Uint8Array, unknown>;
  /** Drops the body unread. */
  discard(): void;
}

/**
 * The download over node:http and node:https. Their streams hand the socket's buffers over as they
 * are; fetch's web streams cost about twice the CPU per byte received (0.33-0.42 against 0.62-0.81
 * CPU seconds per GiB on loopback, measured on this project's 2-core hosts).
 */
export const nodeHttpGet: HttpGet = (url, headers, signal) =>
  new Promise((resolve, reject) => {
    const client = url.protocol === 'https:' ? https : http;
    const request = client.request(url, { method: 'GET', headers, signal }, (response) =>
      resolve(nodeResponse(response)),
    );
    // Also catches a failure after the answer: the body's stream reports that one itself.
    request.on('error', reject);
    request.end();
  });

const DECODERS: Readonly<Record<string, () => Transform>> = {
  gzip: () => createGunzip(),
  'x-gzip': () => createGunzip(),
  deflate: () => createInflate(),
  br: () => createBrotliDecompress(),
};

function nodeResponse(response: http.IncomingMessage): DownloadResponse {
  const header = (name: string) => {
    const value = response.headers[name.toLowerCase()];
    return Array.isArray(value) ? value.join(', ') : value;
  };
  // Codings are listed in the order applied; they are undone last first. An unknown one is kept as is.
  const codings = (header('content-encoding') ?? '')
    .split(',')
    .map((coding) => coding.trim().toLowerCase())
    .filter((coding) => coding !== '' && coding !== 'identity')
    .reverse();
  const decoders = codings.every((coding) => coding in DECODERS)
    ? codings.map((coding) => (DECODERS[coding] as () => Transform)())
    : [];
  // pipeline destroys every stream on a failure, so the last decoder reports a broken response.
  if (decoders.length > 0) pipeline([response, ...decoders], () => {});
  const body: Readable = decoders.at(-1) ?? response;
  return {
    status: response.statusCode ?? 0,
    header,
    body: body[Symbol.asyncIterator](),
    discard: () => {
      body.destroy();
      response.destroy();
    },
  };
}

/** The download over a `fetch` (tests inject one to serve what real HTTP cannot). */
export function fetchGet(fetchImpl: typeof fetch): HttpGet {
  return async (url, headers, signal) => {
    // A redirect is followed only after its target passed the allowlist.
    const response = await fetchImpl(url, { method: 'GET', redirect: 'manual', headers, signal });
    const reader = (response.body ?? new Blob([]).stream()).getReader();
    return {
      status: response.status,
      header: (name) => response.headers.get(name) ?? undefined,
      body: {
        next: () => reader.read() as Promise<IteratorResult<Uint8Array>>,
        return: async () => {
          await reader.cancel().catch(() => undefined);
          return { done: true, value: undefined };
        },
      },
      discard: () => void reader.cancel().catch(() => undefined),
    };
  };
}

/**
 * Where a resumed download starts: the byte offset to ask for with `Range: bytes=<from>-`, and the
 * archive's whole size as the first download announced it (the answer must say the same).
 */
export interface ResumeFrom {
  readonly from: number;
  readonly totalBytes: number;
}

/**
 * Opens the link, following allowed redirects; resolves with a 200 whose body is still unread. With
 * `resume`, every hop asks for the rest of the archive from `resume.from`, and only a 206 for
 * exactly that range of an archive of the recorded size is accepted.
 */
export async function openDownload(
  link: URL,
  policy: DownloadPolicy,
  get: HttpGet,
  control: DownloadControl,
  resume?: ResumeFrom,
): Promise<DownloadResponse> {
  let url = link;
  const headers =
    resume === undefined ? REQUEST_HEADERS : { ...REQUEST_HEADERS, range: `bytes=${resume.from}-` };
  for (let hop = 0; ; hop += 1) {
    const response = await getOnce(url, get, control, headers);
    if (!isFollowableRedirect(response.status)) {
      if (resume === undefined) throwForStatus(response);
      else throwForRangeStatus(response, resume);
      return response;
    }
    response.discard();
    if (hop >= policy.maxRedirects) {
      throw new PlatformRejectedError(
        `${DOWNLOAD}: more than ${policy.maxRedirects} redirects; raise maxRedirects if the platform's CDN needs them`,
        response.status,
      );
    }
    const location = response.header('location');
    if (location === undefined || !URL.canParse(location, url.href)) {
      throw new PlatformResponseInvalidError(
        `${DOWNLOAD}: a ${response.status} redirect without a usable Location`,
      );
    }
    url = new URL(location, url);
    // Checked before the next request, so nothing is ever fetched from a host off the list.
    assertDownloadAllowed(url, policy);
  }
}

/** Redirects are never followed by the transport: each hop is checked against the policy first. */
const REQUEST_HEADERS = {
  accept: 'application/zip, application/octet-stream;q=0.9, */*;q=0.1',
  // A compressed transfer would make Content-Length count other bytes than the ones stored.
  'accept-encoding': 'identity',
};

async function getOnce(
  url: URL,
  get: HttpGet,
  { signal, watchdog }: DownloadControl,
  headers: Readonly<Record<string, string>>,
): Promise<DownloadResponse> {
  watchdog.arm();
  try {
    return await get(url, headers, signal);
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

function throwForStatus(response: DownloadResponse): void {
  const { status } = response;
  if (status === 200) return;
  response.discard();
  // Signed links answer 403 once expired; the platform's own links 410; a removed file 404.
  if (status === 401 || status === 403 || status === 404 || status === 410) {
    throw new DownloadLinkExpiredError(
      `${DOWNLOAD}: the download link is no longer valid (${status}); the export must be started again`,
    );
  }
  if (status === 429) {
    const retryAfter = parseRetryAfter(response.header('retry-after') ?? null);
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

/**
 * A resumed download's answer: a 206 whose Content-Range starts at the offset asked for, runs to the
 * end and gives the recorded size. A 200 is the whole archive again: the server does not honour
 * Range, and a copy that needs more than one invocation cannot go on (DownloadNotResumableError).
 */
function throwForRangeStatus(response: DownloadResponse, resume: ResumeFrom): void {
  if (response.status !== 206) {
    if (response.status === 200) {
      response.discard();
      throw new DownloadNotResumableError(
        `${DOWNLOAD}: the download answered a request for the bytes from ${resume.from} with the whole archive; the platform does not honour Range, so an export that takes more than one invocation to copy cannot be archived`,
      );
    }
    throwForStatus(response);
    return;
  }
  const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(response.header('content-range')?.trim() ?? '');
  const expectedEnd = resume.totalBytes - 1;
  if (
    range === null ||
    Number(range[1]) !== resume.from ||
    Number(range[2]) !== expectedEnd ||
    Number(range[3]) !== resume.totalBytes
  ) {
    response.discard();
    throw new DownloadNotResumableError(
      `${DOWNLOAD}: the download answered the bytes from ${resume.from} with another range than bytes ${resume.from}-${expectedEnd}/${resume.totalBytes}; the archive changed or the platform's ranges are not usable`,
    );
  }
}

/** The announced length, when it counts the bytes the body hands over. */
export function declaredLength(response: DownloadResponse): number | undefined {
  const encoding = response.header('content-encoding');
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') return undefined;
  const value = response.header('content-length')?.trim();
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
  body: AsyncIterator<Uint8Array, unknown>,
  tally: DownloadTally,
  watchdog: IdleWatchdog,
  sink: ChunkSink,
): Promise<void> {
  try {
    await pump(body, tally, watchdog, sink);
  } finally {
    // Stops a body nobody reads any more; a finished or broken one ignores this.
    body.return?.().catch(() => undefined);
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
  body: AsyncIterator<Uint8Array, unknown>,
  tally: DownloadTally,
  watchdog: IdleWatchdog,
  sink: ChunkSink,
): Promise<void> {
  for (;;) {
    let next: IteratorResult<Uint8Array, unknown>;
    watchdog.arm();
    try {
      next = await body.next();
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
    await sink.write(chunk, crc32(chunk));
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
