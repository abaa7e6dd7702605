// Where export downloads may come from: the allowed hosts, and the check every download link passes.
import { z } from 'zod';
import { DownloadHostNotAllowedError } from './errors.ts';

// A host name or IP literal, optionally with a port. Kept narrow so a scheme, path or user info
// pasted into the setting is an error rather than an entry that silently never matches.
const HOST = String.raw`(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])`;
const PORT = '(?::[1-9][0-9]{0,4})';
const allowedHostPattern = new RegExp(`^(?:\\*\\.)?${HOST}${PORT}?$`);
const insecureHostPattern = new RegExp(`^${HOST}${PORT}$`);

const hostEntry = (pattern: RegExp, expected: string) =>
  z.string().trim().toLowerCase().regex(pattern, `expected ${expected}, without scheme or path`);

/** Where export downloads may come from. */
export const downloadPolicySchema = z.strictObject({
  /** `host` (default port only), `host:port`, or `*.example.com` for any subdomain; https only. */
  allowedHosts: z.array(hostEntry(allowedHostPattern, 'a host, host:port or *.domain')),
  /** `host:port` that may be fetched over plain http: only the local platform emulator. */
  insecureHosts: z.array(hostEntry(insecureHostPattern, 'host:port')).default([]),
  /** Redirect hops followed, each checked against the lists. */
  maxRedirects: z.number().int().min(0).max(10).default(3),
});
export type DownloadPolicy = z.infer<typeof downloadPolicySchema>;
export type DownloadPolicyInput = z.input<typeof downloadPolicySchema>;

const DEFAULT_PORTS: Record<string, string> = { 'https:': '443', 'http:': '80' };

/**
 * Throws DownloadHostNotAllowedError unless `url` is https on an allowed host, or http on an
 * insecure-listed host:port. The message names the host only: the rest of a link is a credential.
 */
export function assertDownloadAllowed(url: URL, policy: DownloadPolicy): void {
  const hostname = url.hostname.toLowerCase();
  const explicitPort = url.port;
  const host = hostname === '' ? '(no host)' : explicitPort === '' ? hostname : `${hostname}:${explicitPort}`;
  if (url.username !== '' || url.password !== '') {
    throw new DownloadHostNotAllowedError(`the download link to ${host} carries credentials in the URL`);
  }
  const defaultPort = DEFAULT_PORTS[url.protocol];
  if (defaultPort === undefined) {
    throw new DownloadHostNotAllowedError(
      `the download link to ${host} uses the ${url.protocol.replace(/:$/, '')} scheme; only https is allowed`,
    );
  }
  if (url.protocol === 'http:') {
    const hostWithPort = `${hostname}:${explicitPort === '' ? defaultPort : explicitPort}`;
    if (policy.insecureHosts.includes(hostWithPort)) return;
    throw new DownloadHostNotAllowedError(
      `the download link to ${host} is plain http; only https is allowed (add ${hostWithPort} to insecureHosts only for the local emulator)`,
    );
  }
  if (policy.allowedHosts.some((entry) => hostMatches(entry, hostname, explicitPort))) return;
  throw new DownloadHostNotAllowedError(
    `the download host ${host} is not on the allowlist; add it to allowedHosts if the platform moved its downloads`,
  );
}

function hostMatches(entry: string, hostname: string, explicitPort: string): boolean {
  // IPv6 literals contain colons, so the port is whatever follows the closing bracket.
  const portSeparator = entry.startsWith('[')
    ? entry.indexOf(':', entry.indexOf(']'))
    : entry.lastIndexOf(':');
  const entryHost = portSeparator === -1 ? entry : entry.slice(0, portSeparator);
  const entryPort = portSeparator === -1 ? '' : entry.slice(portSeparator + 1);
  // An entry without a port allows the default port only (URL drops an explicit default port), so a
  // listed CDN name cannot be used to reach some other service on the same host.
  if (entryPort !== explicitPort) return false;
  if (entryHost.startsWith('*.')) return hostname.endsWith(entryHost.slice(1));
  return hostname === entryHost;
}
