/**
 * The console's response headers, one table for both places that serve it: the stack's CloudFront
 * response-headers policy and local mode's loopback server. The page runs its own script and
 * style only, talks to the API's origin only, and may not be framed, referred or sniffed.
 */

/** The Content-Security-Policy of a console that calls the API at `apiOrigin` ('self' where it is the page's own). */
export function consoleContentSecurityPolicy(apiOrigin: string): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    `connect-src ${apiOrigin === 'self' ? "'self'" : apiOrigin}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "object-src 'none'",
  ].join('; ');
}

/** Every header the console's files are served with, beside their content type. */
export function consoleHeaders(apiOrigin: string): Readonly<Record<string, string>> {
  return {
    'content-security-policy': consoleContentSecurityPolicy(apiOrigin),
    'strict-transport-security': 'max-age=63072000; includeSubDomains; preload',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'cross-origin-opener-policy': 'same-origin',
    'permissions-policy': 'camera=(), microphone=(), geolocation=(), payment=()',
    'cache-control': 'no-cache',
  };
}

/** The file the console reads its settings from, beside its index: the API's address, the time zone, the sign-in. */
export const CONSOLE_CONFIG_FILE = 'config.json';

/** What config.json holds. */
export interface ConsoleConfig {
  /** The API's base URL, without a trailing slash ('' where the console is served by the API's own origin). */
  readonly api_url: string;
  /** The controller's time zone: every date on the page is shown in it, with the zone named. */
  readonly time_zone: string;
  /** How a person signs in: local mode's one-time codes, traded at `path`. */
  readonly sign_in: { readonly kind: 'local'; readonly path: string };
}
