/**
 * Starts the emulator as an HTTP server on loopback: the platform's endpoints under their documented
 * paths, and the control API under /_emulator/ for tests and the CLI.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { BodyTooLargeError, listen, readBody, trackSockets } from '../http.ts';
import type { InjectedFault } from './calls.ts';
import { EmulatorConfigError } from './config-file.ts';
import { EmulatorControl, handleControlRequest } from './control.ts';
import { Emulator } from './emulator.ts';
import { credentialFor, handlePlatformRequest, type PlatformRequest, strayCredentials } from './endpoints.ts';
import { type FaultKind, type FaultProfile, parseFaultProfile } from './faults.ts';
import {
  type DownloadReply,
  failure,
  flushed,
  type JsonReply,
  MAX_BODY_BYTES,
  parseQuery,
  requestPath,
  sendReply,
  tooManyRequests,
  writable,
} from './http.ts';
import { loadSnapshotSites, SnapshotWriter, sitesSnapshotBytes } from './persistence.ts';
import type { EmulatorSnapshot } from './snapshot-schema.ts';
import { type EmulatorState, parseEmulatorState, stateSites } from './state.ts';

export { EmulatorConfigError } from './config-file.ts';
export { EmulatorControl } from './control.ts';

export interface EmulatorOptions {
  /** @default '127.0.0.1' */
  host?: string;
  /** @default 0 (a free port) */
  port?: number;
  /** @default the state's spot_id, else 'sp_demo' */
  spotId?: string;
  /** @default a random string */
  ssoAccessToken?: string;
  /** @default a random string */
  exportToken?: string;
  /** Parsed state (see state.ts). @default empty */
  state?: EmulatorState;
  /** Parsed fault profile (see faults.ts). @default no faults */
  faults?: FaultProfile;
  /** Clock in milliseconds; tests move it to expire links. @default Date.now */
  now?: () => number;
  /**
   * A file that keeps the emulator's whole state across restarts (see docs/emulator.md,
   * "Persistence"). When it exists the emulator continues from it and `state` is ignored; `faults`,
   * when given, replaces the saved fault profile. Every change is saved to it.
   * @default no file: the state lives in memory only
   */
  persistPath?: string;
  /**
   * Several accounts served on the one url, each with its own spot_id, tokens, data, exports,
   * limits, faults and call log (see docs/emulator.md, "Several sites"). A site without `state`
   * takes the state document's site of the same spot_id, else starts empty. Leave out spotId,
   * ssoAccessToken and exportToken when giving sites.
   * @default the sites of `state`, else one site from spotId, the tokens and state
   */
  sites?: readonly SiteOptions[];
}

/** One account of a multi-site emulator. */
export interface SiteOptions {
  spotId: string;
  /** @default the state document's token for this site, else a random string */
  ssoAccessToken?: string;
  /** @default the state document's token for this site, else a random string */
  exportToken?: string;
  /** This site's data in the one-site form. @default the state's site of this spot_id, else empty */
  state?: EmulatorState;
}

/** A served account's spot_id and tokens. */
export interface RunningSite {
  spotId: string;
  ssoAccessToken: string;
  exportToken: string;
}

export interface RunningEmulator {
  url: string;
  /** The first site's spot_id and tokens (the only site's when there is one). */
  spotId: string;
  ssoAccessToken: string;
  exportToken: string;
  /** Every site served, in the order given. */
  sites: RunningSite[];
  /** Stops accepting, destroys open sockets, resolves when closed. */
  close(): Promise<void>;
}

const CONTROL_PREFIX = '/_emulator';
const controls = new WeakMap<RunningEmulator, Map<string, EmulatorControl>>();

/**
 * The in-process twin of the HTTP control API for one site of an emulator started in this
 * process: the site of spotId, else the first.
 */
export function emulatorControl(running: RunningEmulator, spotId?: string): EmulatorControl {
  const sites = controls.get(running);
  if (!sites)
    throw new Error('emulatorControl() needs an emulator returned by startEmulator() in this process');
  const control = sites.get(spotId ?? running.spotId);
  if (!control) {
    throw new Error(
      `emulatorControl(): no site with spot_id "${spotId ?? ''}"; the emulator serves ${[...sites.keys()].join(', ')}`,
    );
  }
  return control;
}

interface Lifecycle {
  /** Wakes stalled ("timeout" fault) requests so close() does not wait for them. */
  stalls: Set<() => void>;
  closing: boolean;
  /** Requests being answered; close() lets them finish before the last snapshot is saved. */
  active: Set<Promise<void>>;
  writer: SnapshotWriter | null;
}

/** How long close() waits for requests in progress before it saves the last snapshot anyway. */
const CLOSE_GRACE_MS = 1_000;
/**
 * Every save writes the whole state, which grows with every export and call: back-to-back saves of
 * a busy emulator would cost more than its requests. Background saves are spaced (a kill -9 loses
 * at most about that long of the changes not saved at once), and the saves before an answer
 * share one write when they come faster than it takes, so they use at most 1/(factor + 1) of the time.
 */
const SAVE_PACING = { spacingMs: 200, groupFactor: 8, maxGroupWaitMs: 200 };

/** Starts the platform emulator: all eight endpoints, the download links and /_emulator/ on one base url. */
export async function startEmulator(options: EmulatorOptions = {}): Promise<RunningEmulator> {
  const state = parseEmulatorState(options.state ?? {});
  if (!state.success) {
    throw new EmulatorConfigError(
      `Emulator state is invalid: ${state.problems.map((p) => `${p.field}: ${p.message}`).join('; ')}`,
      state.problems,
    );
  }
  const faults = parseFaultProfile(options.faults ?? {});
  if (!faults.success) {
    throw new EmulatorConfigError(
      `Emulator fault profile is invalid: ${faults.problems.map((p) => `${p.field}: ${p.message}`).join('; ')}`,
      faults.problems,
    );
  }
  const now = options.now ?? Date.now;
  const planned = plannedSites(options, state.value);
  const saved = options.persistPath === undefined ? undefined : await loadSnapshotSites(options.persistPath);
  const sites = saved
    ? restoredSites(saved, planned, options, faults.value, now)
    : planned.map(
        (site) =>
          new Emulator({
            spotId: site.spotId,
            ssoAccessToken: site.ssoAccessToken ?? randomBytes(24).toString('base64url'),
            exportToken: site.exportToken ?? randomBytes(24).toString('base64url'),
            state: site.state,
            faults: faults.value,
            now,
          }),
      );
  const writer = options.persistPath === undefined ? null : openWriter(options.persistPath, sites);
  const siteControls = new Map(sites.map((site) => [site.spotId, new EmulatorControl(site)]));
  const lifecycle: Lifecycle = {
    stalls: new Set(),
    closing: false,
    active: new Set(),
    writer,
  };

  const server = createServer((request, response) => {
    const task = handle(sites, siteControls, lifecycle, request, response).catch((error: unknown) => {
      // An emulator bug must not take the server down, nor hide: one line on stderr (stdout stays
      // machine-readable), and a plain 500 that leaks nothing to the client.
      const reason = error instanceof Error ? `${error.name}: ${error.message}` : 'unknown error';
      process.stderr.write(
        `svc-dsr emulator: internal error while answering ${request.method ?? ''}: ${reason}\n`,
      );
      if (!response.headersSent)
        sendReply(response, failure(500, 'emulator_error', 'internal emulator error'));
      else response.destroy();
    });
    lifecycle.active.add(task);
    void task.finally(() => lifecycle.active.delete(task));
  });
  const sockets = trackSockets(server);
  const host = options.host ?? '127.0.0.1';
  const { port } = await listen(server, options.port ?? 0, host);
  const url = `http://${urlHost(host)}:${port}`;
  for (const site of sites) site.baseUrl = url;
  const first = firstSite(sites);

  let closed: Promise<void> | undefined;
  const running: RunningEmulator = {
    url,
    spotId: first.spotId,
    ssoAccessToken: first.ssoAccessToken,
    exportToken: first.exportToken,
    sites: sites.map((site) => ({
      spotId: site.spotId,
      ssoAccessToken: site.ssoAccessToken,
      exportToken: site.exportToken,
    })),
    close() {
      closed ??= (async () => {
        await new Promise<void>((resolve) => {
          lifecycle.closing = true;
          server.close(() => resolve());
          for (const wake of lifecycle.stalls) wake();
          server.closeAllConnections();
          for (const socket of sockets) socket.destroy();
        });
        if (writer) {
          await settled(lifecycle.active, CLOSE_GRACE_MS);
          await writer.close();
        }
      })();
      return closed;
    },
  };
  controls.set(running, siteControls);
  return running;
}

/** A site to start: its spot_id, the tokens given for it and its data. */
interface PlannedSite {
  spotId: string;
  ssoAccessToken: string | undefined;
  exportToken: string | undefined;
  state: EmulatorState;
}

/** The sites the options and the state document ask for, checked: at least one, spot_ids unique. */
function plannedSites(options: EmulatorOptions, state: EmulatorState): PlannedSite[] {
  const fromState = stateSites(state);
  if (options.sites === undefined) {
    const [only, ...others] = fromState;
    if (only !== undefined && others.length === 0) {
      return [
        {
          spotId: options.spotId ?? only.spotId ?? 'sp_demo',
          ssoAccessToken: options.ssoAccessToken,
          exportToken: options.exportToken,
          state: only.state,
        },
      ];
    }
    refuseSingleSiteOptions(options, 'the state lists several sites');
    return fromState.map((site) => ({ ...site, spotId: site.spotId ?? 'sp_demo' }));
  }
  refuseSingleSiteOptions(options, 'sites are given');
  if (options.sites.length === 0) {
    throw new EmulatorConfigError('Emulator sites: must list at least one site, or leave sites out.');
  }
  const seen = new Set<string>();
  return options.sites.map((site, index) => {
    if (site.spotId === '') {
      throw new EmulatorConfigError(`Emulator sites[${index}].spotId: must be a non-empty string.`);
    }
    if (seen.has(site.spotId)) {
      throw new EmulatorConfigError(
        `Emulator sites[${index}].spotId: "${site.spotId}" is given twice; each site needs its own spot_id.`,
      );
    }
    seen.add(site.spotId);
    const own = site.state === undefined ? undefined : parseEmulatorState(site.state);
    if (own !== undefined && (!own.success || own.value.sites !== undefined)) {
      const problems = own.success
        ? 'give one site in the one-site form, not a sites list'
        : own.problems.map((p) => `${p.field}: ${p.message}`).join('; ');
      throw new EmulatorConfigError(
        `Emulator sites[${index}].state is invalid: ${problems}`,
        own.success ? [] : own.problems,
      );
    }
    const named = fromState.find((entry) => entry.spotId === site.spotId);
    return {
      spotId: site.spotId,
      ssoAccessToken: site.ssoAccessToken ?? named?.ssoAccessToken,
      exportToken: site.exportToken ?? named?.exportToken,
      state: own?.success ? own.value : (named?.state ?? {}),
    };
  });
}

function refuseSingleSiteOptions(options: EmulatorOptions, because: string): void {
  const given = (['spotId', 'ssoAccessToken', 'exportToken'] as const).filter(
    (key) => options[key] !== undefined,
  );
  if (given.length > 0) {
    throw new EmulatorConfigError(
      `Emulator ${given.join(', ')}: one site's settings, and ${because}; give each site's spot_id and tokens in its own entry instead.`,
    );
  }
}

/**
 * The sites of a persist file, continued. A one-site file continues as before (a given spot id
 * must match it); with several sites, the sites asked for must be the ones saved.
 */
function restoredSites(
  saved: EmulatorSnapshot[],
  planned: PlannedSite[],
  options: EmulatorOptions,
  faults: FaultProfile,
  now: () => number,
): Emulator[] {
  const path = options.persistPath ?? '';
  const [only] = saved;
  if (saved.length === 1 && only !== undefined && options.sites === undefined && planned.length === 1) {
    if (options.spotId !== undefined && options.spotId !== only.spotId) {
      throw new EmulatorConfigError(
        `Emulator snapshot file ${path} was saved for spot_id "${only.spotId}", not "${options.spotId}". ` +
          'Leave the spot id out to continue that platform, or delete the file to start fresh.',
      );
    }
    return [restoreSite(only, options.ssoAccessToken, options.exportToken, options, faults, now)];
  }
  const savedIds = saved.map((site) => site.spotId);
  const askedIds = planned.map((site) => site.spotId);
  const askedForSites = options.sites !== undefined || options.state?.sites !== undefined;
  if (askedForSites && savedIds.join('\u0000') !== askedIds.join('\u0000')) {
    throw new EmulatorConfigError(
      `Emulator snapshot file ${path} was saved for the sites ${savedIds.join(', ')}, not ${askedIds.join(', ')}. ` +
        'Ask for the same sites in the same order to continue that platform, or delete the file to start fresh.',
    );
  }
  return saved.map((site) => {
    const asked = planned.find((entry) => entry.spotId === site.spotId);
    return restoreSite(site, asked?.ssoAccessToken, asked?.exportToken, options, faults, now);
  });
}

function restoreSite(
  snapshot: EmulatorSnapshot,
  ssoAccessToken: string | undefined,
  exportToken: string | undefined,
  options: EmulatorOptions,
  faults: FaultProfile,
  now: () => number,
): Emulator {
  return Emulator.restore(snapshot, {
    now,
    faults: options.faults === undefined ? undefined : faults,
    ssoAccessToken,
    exportToken,
  });
}

function firstSite(sites: readonly Emulator[]): Emulator {
  const [first] = sites;
  if (first === undefined) throw new EmulatorConfigError('Emulator sites: must list at least one site.');
  return first;
}

/** Opens the persist file for writing and saves the starting point, so a crash right away loses nothing. */
function openWriter(path: string, sites: readonly Emulator[]): SnapshotWriter {
  const writer = new SnapshotWriter(
    path,
    () => {
      const savedAt = new Date().toISOString();
      return sitesSnapshotBytes(
        sites.map((site) => site.snapshotBytes(savedAt)),
        savedAt,
      );
    },
    undefined,
    SAVE_PACING,
  );
  try {
    writer.start();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new EmulatorConfigError(
      `Cannot write emulator snapshot file ${path}: ${reason}. Choose a path in a folder you can write to.`,
      [],
      { cause: error },
    );
  }
  for (const site of sites) site.onChange = () => writer.markDirty();
  return writer;
}

/** Resolves when every task has settled, or after timeoutMs, whichever comes first. */
async function settled(tasks: Set<Promise<void>>, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, timeoutMs);
  });
  await Promise.race([Promise.allSettled([...tasks]), timeout]);
  clearTimeout(timer);
}

function urlHost(host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

async function handle(
  sites: readonly Emulator[],
  siteControls: ReadonlyMap<string, EmulatorControl>,
  lifecycle: Lifecycle,
  request: IncomingMessage,
  response: ServerResponse,
): Promise<void> {
  const started = performance.now();
  const method = request.method ?? 'GET';
  const url = new URL(request.url ?? '/', 'http://emulator.invalid');
  // Routed on the path as sent, not on the URL parser's normalised copy (see requestPath).
  const pathname = requestPath(request.url ?? '/');
  const isControl = pathname === CONTROL_PREFIX || pathname.startsWith(`${CONTROL_PREFIX}/`);
  const platformRequest: PlatformRequest = {
    method,
    pathname,
    query: parseQuery(url.searchParams),
    headers: request.headers,
    body: Buffer.alloc(0),
    credential: null,
  };
  // Until the body is read, the call goes to the first site's log; then to the site it addresses.
  let emulator = firstSite(sites);
  const record = (status: number | null, fault: InjectedFault | null) => {
    if (isControl) return;
    emulator.record({
      at: new Date(emulator.now()).toISOString(),
      method,
      path: redactedPath(url, sites),
      status,
      fault,
      credential: platformRequest.credential,
      stray_credentials: strayCredentials(emulator, platformRequest),
      duration_ms: Math.round(performance.now() - started),
    });
  };

  try {
    platformRequest.body = await readBody(request, MAX_BODY_BYTES);
  } catch (error) {
    if (!(error instanceof BodyTooLargeError)) {
      response.destroy();
      record(null, null);
      return;
    }
    sendReply(response, failure(413, 'body_too_large', 'the request body is larger than 1 MiB'));
    record(413, null);
    return;
  }

  if (isControl) {
    const spotId = url.searchParams.get('spot_id');
    const site = spotId === null ? emulator : sites.find((candidate) => candidate.spotId === spotId);
    const control = site === undefined ? undefined : siteControls.get(site.spotId);
    const reply =
      site === undefined || control === undefined
        ? failure(404, 'site_not_found', 'no site with this spot_id; GET /_emulator/info lists them', {
            spot_ids: sites.map((candidate) => candidate.spotId),
          })
        : handleControlRequest(site, control, method, pathname, platformRequest.body, sites);
    // It may show a deletion or an export whose answer still waits for its write (see below).
    await lifecycle.writer?.pendingSave;
    sendReply(response, reply);
    return;
  }

  emulator = siteFor(sites, platformRequest);
  const limited = limitReply(emulator);
  if (limited) {
    platformRequest.credential = credentialFor(emulator, platformRequest);
    sendReply(response, limited);
    record(limited.status, limited.limit ?? null);
    return;
  }

  const fault = emulator.drawFault(pathname);
  if (fault) {
    platformRequest.credential = credentialFor(emulator, platformRequest);
    const status = await injectFault(emulator, lifecycle, request, response, fault);
    record(status, fault);
    return;
  }

  const reply = handlePlatformRequest(emulator, platformRequest);
  if (reply.kind !== 'download') {
    record(reply.status, reply.kind === 'json' ? (reply.limit ?? null) : null);
    // A deletion, an export start or a new link is on disk before the client hears of it, so a
    // crash can never make a client repeat it; the call-log entry goes into the same snapshot.
    // Those that come close together share one write (SAVE_PACING). An answer given meanwhile may
    // have seen their changes, so it waits for that write too.
    const { writer } = lifecycle;
    if (writer) await (emulator.takeDurableChange() ? writer.saveSoon() : writer.pendingSave);
    sendReply(response, reply);
    return;
  }
  const { status, truncated } = await sendDownload(emulator, response, reply, request.headers.range);
  record(status, truncated ? 'truncate' : null);
}

const FAULT_ANSWERS: Record<'500' | '502' | '503', { code: string; message: string }> = {
  '500': { code: 'internal_error', message: 'internal server error (injected by the fault profile)' },
  '502': { code: 'bad_gateway', message: 'bad gateway (injected by the fault profile)' },
  '503': { code: 'service_unavailable', message: 'service unavailable (injected by the fault profile)' },
};

/**
 * The outage window and the request rate limit, checked on every platform request before anything
 * else: a platform that is down or over its limit answers before it looks at the request.
 */
function limitReply(emulator: Emulator): JsonReply | null {
  emulator.limits.countRequest();
  if (emulator.limits.inOutage(emulator.faults.outage)) {
    return {
      ...failure(503, 'service_unavailable', "the platform is down (the fault profile's outage window)"),
      limit: 'outage',
    };
  }
  const retryAfter = emulator.limits.takeToken(emulator.faults.rate_limit);
  if (retryAfter === null) return null;
  emulator.limits.countThrottle('rate_limit');
  return tooManyRequests(
    "too many requests: over the platform's rate limit (rate_limit.requests_per_second)",
    retryAfter,
    'rate_limit',
  );
}

/** Answers a fault; resolves to the status sent, or null when no answer was sent. */
async function injectFault(
  emulator: Emulator,
  lifecycle: Lifecycle,
  request: IncomingMessage,
  response: ServerResponse,
  fault: FaultKind,
): Promise<number | null> {
  switch (fault) {
    case '500':
    case '502':
    case '503': {
      const answer = FAULT_ANSWERS[fault];
      sendReply(response, failure(Number(fault), answer.code, answer.message));
      return Number(fault);
    }
    case '429':
      emulator.limits.countThrottle('fault');
      sendReply(
        response,
        tooManyRequests(
          'too many requests (injected by the fault profile)',
          emulator.faults.retry_after_seconds,
        ),
      );
      return 429;
    case 'timeout': {
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          lifecycle.stalls.delete(wake);
          response.off('close', wake);
          resolve();
        };
        const timer = setTimeout(wake, emulator.faults.timeout_ms);
        lifecycle.stalls.add(wake);
        response.once('close', wake);
      });
      if (lifecycle.closing || request.socket.destroyed) return null;
      sendReply(
        response,
        failure(504, 'gateway_timeout', 'upstream timed out (injected by the fault profile)'),
      );
      return 504;
    }
    case 'reset':
      request.socket.destroy();
      return null;
  }
}

/**
 * Streams an archive with its full Content-Length, or with `Range: bytes=<first>-[<last>]` just
 * that range as a 206 with its Content-Range (one range; a header it cannot parse, or several
 * ranges, gets the whole archive, as RFC 9110 allows; a range that starts past the end gets 416).
 * A truncation fault cuts the answer short. Resolves the status sent and whether it was cut.
 */
async function sendDownload(
  emulator: Emulator,
  response: ServerResponse,
  reply: DownloadReply,
  rangeHeader: string | undefined,
): Promise<{ status: number; truncated: boolean }> {
  const { record, head, archive } = reply;
  const size = archive.size;
  const range = parseByteRange(rangeHeader, size);
  const headers = {
    'Content-Type': 'application/zip',
    'Accept-Ranges': 'bytes',
    'Content-Disposition': `attachment; filename="export-${record.publicId}.zip"`,
    'Cache-Control': 'no-store',
  };
  if (range === 'unsatisfiable') {
    response.writeHead(416, { ...headers, 'Content-Range': `bytes */${size}`, 'Content-Length': 0 });
    response.end();
    return { status: 416, truncated: false };
  }
  const first = range?.first ?? 0;
  const last = range?.last ?? size - 1;
  const length = size === 0 ? 0 : last - first + 1;
  const status = range === undefined ? 200 : 206;
  response.writeHead(status, {
    ...headers,
    'Content-Length': length,
    ...(range === undefined ? {} : { 'Content-Range': `bytes ${first}-${last}/${size}` }),
  });
  if (head) {
    response.end();
    return { status, truncated: false };
  }
  emulator.countDownload(record);
  const cutoff = emulator.drawTruncation(length);
  let sent = 0;
  // The zip is produced from its start (a streamed entry's CRC-32 is computed as its bytes go by);
  // the bytes before the range are produced and dropped.
  let position = 0;
  for (const produced of archive.chunks()) {
    if (response.destroyed) return { status, truncated: false };
    const start = Math.max(first - position, 0);
    const end = Math.min(last + 1 - position, produced.length);
    position += produced.length;
    if (end <= start) {
      if (position > last) break;
      continue;
    }
    const chunk = start === 0 && end === produced.length ? produced : produced.subarray(start, end);
    if (cutoff !== null && sent + chunk.length >= cutoff) {
      await flushed(response, chunk.subarray(0, cutoff - sent));
      response.socket?.destroy();
      return { status, truncated: true };
    }
    sent += chunk.length;
    if (!response.write(chunk)) await writable(response);
    if (position > last) break;
  }
  response.end();
  return { status, truncated: false };
}

/**
 * One byte range of a `Range` header against an archive of `size` bytes: `bytes=<first>-`,
 * `bytes=<first>-<last>` (a last past the end is cut to it) or the suffix `bytes=-<count>`.
 * Undefined when the header is absent, not understood or asks for several ranges.
 */
export function parseByteRange(
  header: string | undefined,
  size: number,
): { first: number; last: number } | 'unsatisfiable' | undefined {
  const match = /^bytes=(\d*)-(\d*)$/.exec(header?.trim() ?? '');
  if (match === null) return undefined;
  const [, firstText = '', lastText = ''] = match;
  if (firstText === '' && lastText === '') return undefined;
  if (firstText === '') {
    const count = Number(lastText);
    if (count === 0 || size === 0) return 'unsatisfiable';
    return { first: Math.max(size - count, 0), last: size - 1 };
  }
  const first = Number(firstText);
  const last = lastText === '' ? size - 1 : Math.min(Number(lastText), size - 1);
  if (lastText !== '' && Number(lastText) < first) return undefined;
  if (first >= size) return 'unsatisfiable';
  return { first, last };
}

const SECRET_QUERY_PARAMETERS = new Set(['access_token', 'apikey', 'code_a']);

/**
 * The site a platform request addresses: the one whose download link it fetches, else the one
 * its spot_id names (query, body or x-spot-id header), else the one whose token it presents
 * where its endpoint reads it, else the first. That site then checks the request as one
 * account does, so another site's token gets 403 invalid_token and an unknown spot_id 403
 * invalid_spot_id.
 */
function siteFor(sites: readonly Emulator[], request: PlatformRequest): Emulator {
  const first = firstSite(sites);
  if (sites.length === 1) return first;
  const link = DOWNLOAD_PATH.exec(request.pathname);
  if (link) {
    let token = '';
    try {
      token = decodeURIComponent(link[1] ?? '');
    } catch {
      return first;
    }
    return sites.find((site) => site.findDownload(token) !== undefined) ?? first;
  }
  const spotId = requestSpotId(request);
  const named = spotId === undefined ? undefined : sites.find((site) => site.spotId === spotId);
  if (named) return named;
  const owner = sites.find((site) => {
    const kind = credentialFor(site, request)?.kind;
    return kind === 'sso_access_token' || kind === 'export_token';
  });
  return owner ?? first;
}

const DOWNLOAD_PATH = /^\/_downloads\/([^/]+)\.zip$/;

/** The spot_id a request carries where the platform's endpoints read it. */
function requestSpotId(request: PlatformRequest): string | undefined {
  const header = request.headers['x-spot-id'];
  if (typeof header === 'string' && header !== '') return header;
  const query = request.query.values.get('spot_id');
  if (query !== undefined && query !== '') return query;
  if (request.body.length === 0) return undefined;
  try {
    const body: unknown = JSON.parse(request.body.toString('utf8'));
    const value = typeof body === 'object' && body !== null ? Reflect.get(body, 'spot_id') : undefined;
    return typeof value === 'string' && value !== '' ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The request path for the call log: token values (of every site), session codes and download
 * tokens become [redacted].
 */
function redactedPath(url: URL, sites: readonly Emulator[]): string {
  const tokens = sites
    .flatMap((site) => [site.ssoAccessToken, site.exportToken])
    .filter((token) => token !== '');
  const scrub = (text: string) =>
    tokens.reduce(
      (out, token) => out.split(token).join('[redacted]').split(encodeURIComponent(token)).join('[redacted]'),
      text,
    );
  const pathname = scrub(url.pathname.replace(/^\/_downloads\/[^/]+\.zip$/, '/_downloads/[redacted].zip'));
  const parts: string[] = [];
  for (const [key, value] of url.searchParams) {
    const secret = SECRET_QUERY_PARAMETERS.has(key) || tokens.some((token) => value.includes(token));
    parts.push(`${encodeURIComponent(key)}=${secret ? '[redacted]' : encodeURIComponent(value)}`);
  }
  return parts.length > 0 ? `${pathname}?${scrub(parts.join('&'))}` : pathname;
}
