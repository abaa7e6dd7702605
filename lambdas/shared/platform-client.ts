// The platform API client: users (retrieve, update, delete), exports and activity, with checks.
import type { z } from 'zod';
import {
  ActivityNotEnabledError,
  ConfigurationError,
  type DsrError,
  ExportStartUncertainError,
  PlatformAuthError,
  PlatformConnectionResetError,
  PlatformExportsFullError,
  PlatformNotFoundError,
  PlatformRejectedError,
  PlatformResponseInvalidError,
  PlatformThrottledError,
  PlatformTimeoutError,
  PlatformUnavailableError,
  UnaddressableIdError,
} from './errors.ts';
import { type BodyAnswer, type BodyRequest, sendWithBody } from './get-with-body.ts';
import {
  type ActivityPage,
  activityResponseSchema,
  type ExportStatus,
  exportStartResponseSchema,
  exportStatusResponseSchema,
  type PlatformConfig,
  type PlatformConfigInput,
  type PlatformToken,
  platformConfigSchema,
  platformErrorBodySchema,
  type RetrievedUser,
  retrieveResponseSchema,
} from './platform-schemas.ts';
import { traced } from './powertools.ts';
import { Redactor } from './redact.ts';

/** What the client writes to a log. Powertools Logger satisfies it. */
export interface ClientLogger {
  debug(message: string, attributes: Record<string, unknown>): void;
  warn(message: string, attributes: Record<string, unknown>): void;
}

/**
 * Where a token comes from. `refresh` asks for the current value past any cache: the platform
 * refused the cached one, which a rotation makes stale.
 */
export type CredentialSource = (options?: { readonly refresh?: boolean }) => Promise<string> | string;

export interface PlatformClientDeps {
  /**
   * Each token's source, called per request so a rotated secret is picked up. A function that is
   * not given a token cannot make the calls that need it.
   */
  readonly credentials: { readonly [K in PlatformToken]?: CredentialSource };
  readonly fetch?: typeof globalThis.fetch;
  /** Sends a GET with a body (update-user), which fetch refuses. @default sendWithBody over node:http(s) */
  readonly sendWithBody?: (url: URL, spec: BodyRequest) => Promise<BodyAnswer>;
  readonly logger?: ClientLogger;
  /**
   * The shared load control (platform-gate.ts): every call is admitted by it first, and tells it
   * whether the platform answered. @default none: calls go as they come
   */
  readonly gate?: PlatformCallGate;
}

/** What the client needs of the platform gate. */
export interface PlatformCallGate {
  admit(): Promise<void>;
  report(outcome: 'up' | 'down'): Promise<void>;
}

/** The answer of retrieve-user: either the user, or a recorded not-found. */
export type RetrieveResult =
  | { readonly found: true; readonly svcUserId: string; readonly user: RetrievedUser }
  | { readonly found: false };

/** The answer of delete-user: deleted now, or already absent (a not-found answer). */
export type DeleteResult = { readonly outcome: 'deleted' | 'already_absent'; readonly status: number };

/**
 * The full user data update-user (endpoint 4) expects: the profile fields in the query, bio, role
 * and settings in the body. A field left out is wiped by the platform.
 */
/** The profile fields update-user takes in its query string; `bio`, `role` and `settings` go in its body. */
export const UPDATE_QUERY_FIELDS = [
  'user_name',
  'display_name',
  'email',
  'email_verified',
  'image_url',
  'location',
  'private_profile',
  'user_metadata',
] as const;

export interface ProfileUpdate {
  readonly user_name: string;
  readonly display_name: string;
  readonly email: string;
  readonly email_verified: boolean;
  readonly image_url: string;
  readonly location: string;
  readonly private_profile: boolean;
  /** Base64 of the JSON object, as the platform takes it. */
  readonly user_metadata?: string;
  readonly bio: string;
  readonly role?: string;
  readonly settings?: Readonly<Record<string, unknown>>;
}

/** Operation names: the only thing about a call that is logged, since paths carry identifiers. */
type Operation =
  | 'retrieveUser'
  | 'updateUser'
  | 'deleteUser'
  | 'startExport'
  | 'exportStatus'
  | 'userActivity';

interface CallSpec {
  readonly operation: Operation;
  readonly method: 'GET' | 'POST' | 'DELETE';
  /** A body with GET (update-user) goes through {@link sendWithBody}: fetch refuses one. */
  readonly url: URL;
  readonly headers?: Record<string, string>;
  readonly body?: unknown;
  /** Identifiers in play, scrubbed from anything that leaves the client. */
  readonly sensitive: readonly string[];
  /** The caller has had the gate admit this call already. */
  readonly admitted?: boolean;
  /**
   * Whether the answer tells the gate's circuit how the platform is. The activity call goes to a
   * service of its own ({activity_url}), whose outage must not hold every request back. @default true
   */
  readonly circuit?: boolean;
}

interface RawAnswer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

/**
 * Typed client for the platform endpoints the workflow uses (retrieve, delete, export start,
 * export status, activity). Every answer is validated; every failure is a DsrError whose name says
 * whether it is worth retrying. The client itself never retries: Step Functions does, with backoff.
 */
export class PlatformClient {
  readonly config: PlatformConfig;
  readonly #deps: PlatformClientDeps;
  readonly #fetch: typeof globalThis.fetch;

  constructor(config: PlatformConfigInput, deps: PlatformClientDeps) {
    this.config = platformConfigSchema.parse(config);
    this.#deps = deps;
    this.#fetch = deps.fetch ?? globalThis.fetch;
  }

  /** Endpoint 3: the user with this primary_key, or not-found (404 or `success: false`). */
  async retrieveUser(primaryKey: string): Promise<RetrieveResult> {
    return this.#withToken('ssoAccessToken', async (ssoAccessToken) => {
      const answer = await this.#call({
        operation: 'retrieveUser',
        method: 'GET',
        url: this.#pathUrl('retrieveUser', this.config.baseUrl, 'sso/v1/user', primaryKey, 'primary_key'),
        headers: { [this.config.ssoTokenHeader]: ssoAccessToken },
        sensitive: [primaryKey],
      });
      if (answer.status === 404) return { found: false };
      this.#throwForStatus('retrieveUser', answer);
      const body = this.#parse('retrieveUser', retrieveResponseSchema, answer, [primaryKey]);
      if (!body.success || body.user === undefined) return { found: false };
      const svcUserId = body.user[this.config.userIdField];
      if ((typeof svcUserId !== 'string' && typeof svcUserId !== 'number') || String(svcUserId) === '') {
        throw new PlatformResponseInvalidError(
          `retrieveUser: the answer has no ${this.config.userIdField}; check the userIdField setting`,
        );
      }
      return { found: true, svcUserId: String(svcUserId), user: body.user };
    });
  }

  /**
   * Endpoint 4: replaces the user's data with `profile` (the full data: the platform wipes what is
   * left out). Answers `found: false` when the platform has no such user. The values are scrubbed
   * from anything that leaves the client, as identifiers are.
   */
  async updateUser(primaryKey: string, profile: ProfileUpdate): Promise<{ readonly found: boolean }> {
    return this.#withToken('ssoAccessToken', async (ssoAccessToken) => {
      const url = this.#url(this.config.baseUrl, 'sso/v1/update-user');
      url.searchParams.set('primary_key', primaryKey);
      for (const field of UPDATE_QUERY_FIELDS) {
        const value = profile[field];
        if (value !== undefined) url.searchParams.set(field, String(value));
      }
      const body = {
        bio: profile.bio,
        ...(profile.role === undefined ? {} : { role: profile.role }),
        ...(profile.settings === undefined ? {} : { settings: profile.settings }),
      };
      const answer = await this.#call({
        operation: 'updateUser',
        method: 'GET',
        url,
        headers: { [this.config.ssoTokenHeader]: ssoAccessToken },
        body,
        sensitive: [primaryKey, ...Object.values(profile).filter((value) => typeof value === 'string')],
      });
      if (answer.status === 404) return { found: false };
      this.#throwForStatus('updateUser', answer);
      return { found: successFlag(answer.text) !== false };
    });
  }

  /** Endpoint 5: deletes the user; a not-found answer means the user is already gone. */
  async deleteUser(primaryKey: string): Promise<DeleteResult> {
    return this.#withToken('ssoAccessToken', async (ssoAccessToken) => {
      const answer = await this.#call({
        operation: 'deleteUser',
        method: 'DELETE',
        url: this.#pathUrl('deleteUser', this.config.baseUrl, 'sso/v1/user', primaryKey, 'primary_key'),
        headers: { [this.config.ssoTokenHeader]: ssoAccessToken },
        sensitive: [primaryKey],
      });
      if (answer.status === 404) return { outcome: 'already_absent', status: 404 };
      this.#throwForStatus('deleteUser', answer);
      const success = successFlag(answer.text);
      return { outcome: success === false ? 'already_absent' : 'deleted', status: answer.status };
    });
  }

  /**
   * Endpoint 6: starts an export and returns its id as a string. Once the request may have reached
   * the platform, a failure is an ExportStartUncertainError, never a plain retryable error, so
   * nothing retries it blindly into a second export.
   */
  async startExport(svcUserId: string, options: { admitted?: boolean } = {}): Promise<{ exportId: string }> {
    return this.#withToken('exportToken', async (exportToken) => {
      let answer: RawAnswer;
      try {
        answer = await this.#call({
          operation: 'startExport',
          method: 'POST',
          url: this.#url(this.config.exportUrl, 'gdpr/export'),
          body: { access_token: exportToken, spot_id: this.config.spotId, user_id: svcUserId },
          sensitive: [svcUserId],
          ...(options.admitted ? { admitted: true } : {}),
        });
      } catch (error) {
        throw uncertainIfSent(error);
      }
      // 503 says the platform did not take the request on: no export began, so it is a plain retry.
      if (answer.status >= 500 && answer.status !== 503) {
        throw new ExportStartUncertainError(
          `startExport: the platform answered ${answer.status}; an export may have started`,
        );
      }
      if (answer.status === 404)
        throw new PlatformNotFoundError('startExport: the platform does not know this user');
      this.#throwForStatus('startExport', answer);
      const body = this.#parse('startExport', exportStartResponseSchema, answer, [svcUserId]);
      const exportId = extractExportId(body);
      if (exportId === '') throw new PlatformResponseInvalidError('startExport: the export id is empty');
      return { exportId };
    });
  }

  /** Endpoint 7: the export's state, normalised (see ExportStatus). */
  async exportStatus(exportId: string): Promise<ExportStatus> {
    return this.#withToken('exportToken', async (exportToken) => {
      const url = this.#pathUrl(
        'exportStatus',
        this.config.exportUrl,
        'gdpr/export/status',
        exportId,
        'export id',
      );
      url.searchParams.set('access_token', exportToken);
      url.searchParams.set('spot_id', this.config.spotId);
      const answer = await this.#call({ operation: 'exportStatus', method: 'GET', url, sensitive: [] });
      if (answer.status === 404)
        throw new PlatformNotFoundError('exportStatus: the platform does not know this export');
      this.#throwForStatus('exportStatus', answer);
      const body = this.#parse('exportStatus', exportStatusResponseSchema, answer, []);
      const reported = body.status.trim().toLowerCase();
      if (reported === 'failed') return { status: 'failed' };
      if (reported === 'completed' && body.link) {
        const link = URL.canParse(body.link) ? new URL(body.link) : undefined;
        if (link === undefined)
          throw new PlatformResponseInvalidError('exportStatus: the download link is not a URL');
        return { status: 'completed', link };
      }
      return {
        status: 'pending',
        reported: reported === 'completed' ? 'completed_without_link' : safeWord(reported),
      };
    });
  }

  /**
   * Endpoint 8: one page of the user's activity. A 403 whose error code says the call is not
   * enabled for the account is an ActivityNotEnabledError: no token refresh can change that.
   */
  async userActivity(svcUserId: string, page: { count: number; offset: number }): Promise<ActivityPage> {
    return this.#withToken('exportToken', async (exportToken) => {
      const answer = await this.#call({
        operation: 'userActivity',
        method: 'POST',
        url: this.#url(this.config.activityUrl, 'v1/user/activity'),
        headers: { 'x-spot-id': this.config.spotId, apikey: exportToken },
        body: { profile_user_id: svcUserId, count: page.count, offset: page.offset },
        sensitive: [svcUserId],
        circuit: false,
      });
      if (answer.status === 403 && errorDetail(answer.text) === ': activity_not_enabled') {
        throw new ActivityNotEnabledError(
          'userActivity: the platform says the activity call is not enabled for this account; its support can enable it',
        );
      }
      this.#throwForStatus('userActivity', answer);
      return this.#parse('userActivity', activityResponseSchema, answer, [svcUserId]);
    });
  }

  /**
   * Runs `work` with the token; when the platform refuses it (401/403), reads the secret afresh
   * once and, if it has changed (rotated since it was cached), runs `work` again with the new one.
   * A refused call started nothing on the platform, so repeating it is safe. The same token
   * refused again is a PlatformAuthError for a person to fix.
   */
  async #withToken<T>(kind: PlatformToken, work: (token: string) => Promise<T>): Promise<T> {
    const token = await this.#token(kind, false);
    try {
      return await work(token);
    } catch (error) {
      if (!(error instanceof PlatformAuthError) || error.status === 0) throw error;
      const fresh = await this.#token(kind, true);
      if (fresh === token) throw error;
      this.#deps.logger?.warn(
        'platform refused the cached token; retrying once with the secret read afresh',
        {
          token: kind,
          status: error.status,
        },
      );
      return work(fresh);
    }
  }

  async #token(kind: PlatformToken, refresh: boolean): Promise<string> {
    const label = kind === 'ssoAccessToken' ? 'the SSO access token' : 'the export token';
    const source = this.#deps.credentials[kind];
    if (source === undefined) {
      throw new ConfigurationError(`this function is not given ${label}, which this platform call needs`);
    }
    const token = await source(refresh ? { refresh: true } : undefined);
    if (token === '') throw new PlatformAuthError(`${label} is empty; set it in its secret`, 0);
    return token;
  }

  #url(base: string, path: string): URL {
    return new URL(path, base.endsWith('/') ? base : `${base}/`);
  }

  /**
   * `<base>/<prefix>/<value>` with the value percent-encoded as one path segment, checked to arrive
   * as exactly that segment. "." and ".." (even encoded, as %2E) are path steps to URL parsers and
   * proxies: the call would reach another path, whose 404 would read as "no such user".
   */
  #pathUrl(operation: Operation, base: string, prefix: string, value: string, what: string): URL {
    const segment = encodeURIComponent(value);
    const url = value === '.' || value === '..' ? undefined : this.#url(base, `${prefix}/${segment}`);
    if (url === undefined || !url.pathname.endsWith(`/${prefix}/${segment}`)) {
      throw new UnaddressableIdError(
        `${operation}: the ${what} is "." or "..", which a URL path cannot carry (it is a path step, so the call would reach another endpoint); the platform API cannot address it: handle this request with the platform directly`,
      );
    }
    return url;
  }

  async #call(spec: CallSpec): Promise<RawAnswer> {
    const gate = this.#deps.gate;
    if (spec.admitted !== true) await gate?.admit();
    const circuit = spec.circuit === false ? undefined : gate;
    let answer: RawAnswer;
    try {
      answer = await this.#send(spec);
    } catch (error) {
      // No answer: unreachable, timed out or cut off.
      await circuit?.report('down');
      throw error;
    }
    // A 5xx is the platform failing; anything else, even a refusal, is the platform answering.
    await circuit?.report(answer.status >= 500 ? 'down' : 'up');
    return answer;
  }

  /** One platform call, traced as `platform.<operation>` with its status (never its URL). */
  #send(spec: CallSpec): Promise<RawAnswer> {
    return traced(`platform.${spec.operation}`, async (annotate) => {
      const answer = await this.#fetchAnswer(spec);
      annotate('status', answer.status);
      return answer;
    });
  }

  async #fetchAnswer(spec: CallSpec): Promise<RawAnswer> {
    const started = performance.now();
    const headers: Record<string, string> = { accept: 'application/json', ...spec.headers };
    if (spec.body !== undefined) headers['content-type'] = 'application/json';
    let answer: RawAnswer;
    try {
      if (spec.method === 'GET' && spec.body !== undefined) {
        answer = await (this.#deps.sendWithBody ?? sendWithBody)(spec.url, {
          method: spec.method,
          headers,
          body: JSON.stringify(spec.body),
          timeoutMs: this.config.timeoutMs,
        });
      } else {
        const response = await this.#fetch(spec.url, {
          method: spec.method,
          headers,
          body: spec.body === undefined ? undefined : JSON.stringify(spec.body),
          // A redirect could carry the token header to another host: never follow one.
          redirect: 'manual',
          signal: AbortSignal.timeout(this.config.timeoutMs),
        });
        answer = { status: response.status, headers: response.headers, text: await response.text() };
      }
    } catch (error) {
      const classified = classifyNetworkError(spec.operation, error, this.config.timeoutMs);
      this.#deps.logger?.warn('platform call failed', {
        operation: spec.operation,
        error: classified.name,
        duration_ms: Math.round(performance.now() - started),
      });
      throw classified;
    }
    this.#deps.logger?.debug('platform call', {
      operation: spec.operation,
      status: answer.status,
      duration_ms: Math.round(performance.now() - started),
    });
    return answer;
  }

  #throwForStatus(operation: Operation, answer: RawAnswer): void {
    const { status } = answer;
    if (status >= 200 && status < 300) return;
    const detail = errorDetail(answer.text);
    if (status === 429) {
      const retryAfter = parseRetryAfter(answer.headers.get('retry-after'));
      if (operation === 'startExport' && namesOpenExports(answer.text)) {
        throw new PlatformExportsFullError(
          `${operation}: the platform has too many exports open (429 too_many_open_exports${retryAfter === undefined ? '' : `, retry after ${retryAfter} s`}); no export began`,
          retryAfter,
        );
      }
      throw new PlatformThrottledError(
        `${operation}: the platform is throttling (429${retryAfter === undefined ? '' : `, retry after ${retryAfter} s`})`,
        retryAfter,
      );
    }
    if (status >= 500)
      throw new PlatformUnavailableError(`${operation}: the platform answered ${status}`, status);
    if (status === 401 || status === 403) {
      throw new PlatformAuthError(
        `${operation}: the platform refused the credentials (${status}${detail}); check the tokens in the secret and the spot id`,
        status,
      );
    }
    if (status >= 300 && status < 400) {
      throw new PlatformRejectedError(
        `${operation}: the platform answered a redirect (${status}), which is not followed`,
        status,
      );
    }
    throw new PlatformRejectedError(
      `${operation}: the platform rejected the request (${status}${detail})`,
      status,
    );
  }

  #parse<T extends z.ZodType>(
    operation: Operation,
    schema: T,
    answer: RawAnswer,
    sensitive: readonly string[],
  ): z.infer<T> {
    let json: unknown;
    try {
      json = JSON.parse(answer.text);
    } catch {
      throw new PlatformResponseInvalidError(
        `${operation}: the answer is not JSON (status ${answer.status})`,
      );
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      const redactor = new Redactor(sensitive);
      const issues = parsed.error.issues.map(
        (issue) => `${issue.path.join('.') || '(body)'}: ${issue.message}`,
      );
      throw new PlatformResponseInvalidError(
        redactor.text(`${operation}: the answer does not match the documented shape (${issues.join('; ')})`),
      );
    }
    return parsed.data;
  }
}

function extractExportId(body: z.infer<typeof exportStartResponseSchema>): string {
  if (typeof body === 'string' || typeof body === 'number') return String(body).trim();
  if ('id' in body) return String(body.id).trim();
  if ('export_id' in body) return String(body.export_id).trim();
  if ('exportId' in body) return String(body.exportId).trim();
  return String(body.data.id).trim();
}

function successFlag(text: string): boolean | undefined {
  try {
    const json: unknown = JSON.parse(text);
    if (json !== null && typeof json === 'object' && 'success' in json && typeof json.success === 'boolean') {
      return json.success;
    }
  } catch {
    // A delete answer is not documented; an empty or non-JSON 2xx body means it worked.
  }
  return undefined;
}

/** A short machine word from an error body (code and field), never free text that could echo input. */
function errorDetail(text: string): string {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return '';
  }
  const parsed = platformErrorBodySchema.safeParse(json);
  if (!parsed.success || parsed.data.error === undefined) return '';
  const { error } = parsed.data;
  const words = typeof error === 'string' ? [error] : [error.code, error.field];
  const safe = words.filter((word): word is string => word !== undefined).map(safeWord);
  return safe.length === 0 ? '' : `: ${safe.join(' ')}`;
}

/** The error code of the platform's 429 for an export start while too many exports are open. */
export const OPEN_EXPORTS_ERROR_CODE = 'too_many_open_exports';

/**
 * Whether a 429 body says the refusal is for the exports open, not the rate: its error code is
 * `too_many_open_exports` (a string error, or an object's `code`). The platform documents no error
 * bodies (docs/platform-api.md); this is the code the emulator answers, and anything else is a
 * rate-limit 429.
 */
export function namesOpenExports(text: string): boolean {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return false;
  }
  const parsed = platformErrorBodySchema.safeParse(json);
  if (!parsed.success || parsed.data.error === undefined) return false;
  const { error } = parsed.data;
  const code = typeof error === 'string' ? error : error.code;
  return code?.trim().toLowerCase() === OPEN_EXPORTS_ERROR_CODE;
}

function safeWord(word: string): string {
  return /^[a-z0-9_.-]{1,64}$/i.test(word) ? word : 'unrecognised';
}

/** Seconds from a Retry-After header: delta-seconds or an HTTP date. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, Math.ceil((date - now) / 1000));
}

const NEVER_SENT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

function errorCode(error: unknown): string | undefined {
  for (let current: unknown = error; current instanceof Error; current = current.cause) {
    if ('code' in current && typeof current.code === 'string') return current.code;
  }
  return undefined;
}

/** Maps a fetch failure to a named error. The original error is not kept: it may quote a URL. */
export function classifyNetworkError(operation: string, error: unknown, timeoutMs: number): DsrError {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) {
    return new PlatformTimeoutError(`${operation}: no answer within ${timeoutMs} ms`);
  }
  const code = errorCode(error);
  if (code !== undefined && NEVER_SENT_CODES.has(code)) {
    return new PlatformUnavailableError(`${operation}: cannot reach the platform (${code})`, undefined);
  }
  return new PlatformConnectionResetError(
    `${operation}: the connection dropped (${safeWord(code ?? 'unknown')})`,
  );
}

function uncertainIfSent(error: unknown): unknown {
  if (error instanceof PlatformTimeoutError || error instanceof PlatformConnectionResetError) {
    return new ExportStartUncertainError(
      `startExport: ${error.message.replace(/^startExport: /, '')}; an export may have started`,
    );
  }
  return error;
}
