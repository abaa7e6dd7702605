/**
 * The console's calls to the API: the signed-in person's token on each, a time limit, and every
 * failure turned into an ApiError that carries the API's code and its sentence with the fix.
 */
import type { ConsoleConfig } from '../headers.ts';

/** Where the token of this tab's session is kept: the tab's own storage, gone when it closes. */
const TOKEN_KEY = 'svc-dsr-token';

/** How long a call may take before the page says it is slow and gives up. */
export const CALL_TIMEOUT_MS = 30_000;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** Who is signed in, as the token says (shown on the page; the API enforces the roles itself). */
export interface Session {
  readonly token: string;
  readonly username: string;
  readonly roles: readonly string[];
  readonly expiresAt: number;
}

function base64UrlJson(part: string): unknown {
  const padded = part.replace(/-/g, '+').replace(/_/g, '/');
  return JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(padded), (c) => c.charCodeAt(0))));
}

/** The session a token holds, or undefined when it does not read or has expired. */
export function sessionOf(token: string, now = Date.now()): Session | undefined {
  try {
    const claims = base64UrlJson(token.split('.')[1] ?? '') as Record<string, unknown>;
    const username = claims['cognito:username'];
    const groups = claims['cognito:groups'];
    const exp = claims.exp;
    if (typeof username !== 'string' || typeof exp !== 'number' || exp * 1000 <= now) return undefined;
    const roles = Array.isArray(groups) ? groups.filter((g): g is string => typeof g === 'string') : [];
    return { token, username, roles, expiresAt: exp * 1000 };
  } catch {
    return undefined;
  }
}

export function storedSession(): Session | undefined {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const session = token === null ? undefined : sessionOf(token);
  if (session === undefined) sessionStorage.removeItem(TOKEN_KEY);
  return session;
}

export function keepSession(token: string): Session | undefined {
  const session = sessionOf(token);
  if (session !== undefined) sessionStorage.setItem(TOKEN_KEY, token);
  return session;
}

export function endSession(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** The API of one console: its base URL and the session to call it with. */
export class Api {
  constructor(
    readonly config: ConsoleConfig,
    private readonly session: Session | undefined,
    private readonly onSignedOut: () => void,
  ) {}

  async get<T>(path: string, query?: Readonly<Record<string, string | undefined>>): Promise<T> {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {}))
      if (value !== undefined && value !== '') search.set(name, value);
    const text = search.toString();
    return await this.call<T>('GET', text === '' ? path : `${path}?${text}`);
  }

  async post<T>(path: string, body: unknown): Promise<T> {
    return await this.call<T>('POST', path, body);
  }

  async call<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), CALL_TIMEOUT_MS);
    let response: Response;
    try {
      response = await fetch(`${this.config.api_url}${path}`, {
        method,
        headers: {
          ...(this.session === undefined ? {} : { authorization: `Bearer ${this.session.token}` }),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: controller.signal,
        cache: 'no-store',
        credentials: 'omit',
      });
    } catch {
      throw controller.signal.aborted
        ? new ApiError(0, 'timeout', `the API did not answer within ${CALL_TIMEOUT_MS / 1000} s: try again`)
        : new ApiError(0, 'unreachable', 'the API cannot be reached: check the connection and try again');
    } finally {
      clearTimeout(timer);
    }
    const answer: unknown = await response.json().catch(() => undefined);
    if (response.ok) return answer as T;
    const error = (answer as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
    const code = typeof error?.code === 'string' ? error.code : 'internal';
    const message =
      typeof error?.message === 'string' ? error.message : `the API answered ${response.status}`;
    if (response.status === 401) this.onSignedOut();
    throw new ApiError(response.status, code, message);
  }
}
