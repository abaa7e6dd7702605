// The controller's sites on the platform: a site's id, the one a configuration without `sites` has, and the ids a request names.
import { z } from 'zod';
import { ConfigurationError } from './errors.ts';

/**
 * The id of the one site of a configuration that lists no `sites` (the spot id, secrets and
 * limits at the top of the configuration). Ledger items and records written before sites existed
 * name no site: they belong to this one.
 */
export const DEFAULT_SITE_ID = 'main';

/** The most sites one stack serves (docs/design.md, "Sites"). */
export const MAX_SITES = 16;

const SITE_ID_PATTERN = /^[a-z][a-z0-9-]{0,14}[a-z0-9]$|^[a-z]$/;

/** A site's short id, as the configuration, a request and the CLI write it: "news", "shop-de". */
export const siteIdSchema = z
  .string()
  .regex(
    SITE_ID_PATTERN,
    'expected a site id: 1-16 lower-case letters, digits and "-", starting with a letter and not ending with "-", e.g. "news" or "shop-de"',
  );

/**
 * The sites a request names, as it is submitted: at least one, each once. Which ids are known is the
 * stack's to say ({@link unknownSites}).
 */
export const requestSitesSchema = z
  .array(siteIdSchema)
  .min(1, 'name at least one site, or leave "sites" out for every configured site')
  .max(MAX_SITES, `at most ${MAX_SITES} sites`)
  .refine((ids) => new Set(ids).size === ids.length, 'names a site twice');

/** The ids in `requested` that are not among `known`, in the order requested. */
export function unknownSites(requested: readonly string[], known: readonly string[]): string[] {
  return requested.filter((id) => !known.includes(id));
}

/**
 * The environment that tells a function the configured sites' ids (the stack sets it, in the
 * configuration's order); without it, the one default site.
 */
export const siteIdsEnvSchema = z
  .string()
  .default(DEFAULT_SITE_ID)
  .transform((text) => text.split(',').map((id) => id.trim()))
  .pipe(z.array(siteIdSchema).min(1).max(MAX_SITES));

/**
 * The request id of one site's part of a request that covers several sites: the request's id and
 * the site's, joined by "_" (neither a UUID nor a site id holds one, and Step Functions accepts it
 * in an execution's name, which it does not a dot or a colon). A request of a stack with one site runs under its own id.
 */
export function siteRequestId(requestId: string, site: string): string {
  return `${requestId}_${site}`;
}

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

/**
 * The id a workflow runs under: a request's UUID, or one site's part of it (siteRequestId), in
 * lower case as requests are kept.
 */
export const runRequestIdSchema = z
  .string()
  .transform((id) => id.toLowerCase())
  .pipe(
    z
      .string()
      .regex(
        new RegExp(`^${UUID}(?:_[a-z](?:[a-z0-9-]{0,14}[a-z0-9])?)?$`),
        'must be a request id: a UUID, or a UUID, "_" and a site id',
      ),
  );

/** The site a request id runs on: the part after its "_", or undefined for an id with none. */
export function siteOfRequestId(requestId: string): string | undefined {
  const at = requestId.lastIndexOf('_');
  return at === -1 ? undefined : requestId.slice(at + 1);
}

/** Whether a request id is a site's part of a request in parts (siteRequestId), not a request of its own. */
export function isSitePart(requestId: string): boolean {
  return siteOfRequestId(requestId) !== undefined;
}

/** The environment variable of the configured site ids, in the configuration's order. */
export const SITE_IDS_ENV = 'SITE_IDS';

/** The environment variable of every site but the first: what its functions set differently. */
export const SITES_ENV = 'SITES';

/**
 * What the SITES variable holds for each site but the first, as briefly as Lambda's 4 KB of
 * environment asks: its spot id; the names of its token secrets where they are not the ones the
 * stack creates (SITE_SECRETS_PREFIX, the site's id and the token's name); and its limits where
 * they are not the first site's.
 */
const siteVariablesSchema = z.strictObject({
  spot: z.string().min(1),
  sso: z.string().min(1).optional(),
  export: z.string().min(1).optional(),
  rps: z.string().min(1).optional(),
  burst: z.string().min(1).optional(),
  cap: z.string().min(1).optional(),
});
export type SiteVariables = z.infer<typeof siteVariablesSchema>;
const sitesEnvSchema = z.record(siteIdSchema, siteVariablesSchema);

/** The variable of the names of the token secrets the stack creates for a site: this, the site's id, the token. */
export const SITE_SECRETS_PREFIX_ENV = 'SITE_SECRETS_PREFIX';

/** The last part of the name of a token secret the stack creates for a site. */
export const SITE_SECRET_SUFFIX = {
  ssoAccessToken: 'sso-access-token',
  exportToken: 'export-token',
} as const;

/** The variable that names a site other than the first: its gate items carry it (platform-gate.ts). */
export const GATE_SITE_ENV = 'GATE_SITE';

/**
 * A function's environment as it is for `site`: the function's own for the first site (or a
 * request id that names no site), else its spot id, token secrets and limits from SITES, and
 * GATE_SITE set to it. A token the function does not read for its first site it does not read for
 * any. A site the environment does not know is a ConfigurationError: the request names a site
 * this stack does not serve.
 */
export function siteEnvironment(
  env: Readonly<Record<string, string | undefined>>,
  site: string | undefined,
): Record<string, string | undefined> {
  const ids = siteIdsEnvSchema.parse(env[SITE_IDS_ENV]);
  if (site === undefined || site === ids[0]) return { ...env };
  if (!ids.includes(site)) {
    throw new ConfigurationError(`site "${site}" is not one of this stack's sites (${ids.join(', ')})`);
  }
  const variables = sitesEnvSchema.parse(JSON.parse(env[SITES_ENV] ?? '{}'))[site];
  if (variables === undefined) {
    throw new ConfigurationError(
      `site "${site}" has no settings in the function's environment; redeploy the stack`,
    );
  }
  const secret = (
    own: string | undefined,
    first: string | undefined,
    token: keyof typeof SITE_SECRET_SUFFIX,
  ) =>
    first === undefined
      ? undefined
      : (own ?? `${env[SITE_SECRETS_PREFIX_ENV] ?? ''}${site}/${SITE_SECRET_SUFFIX[token]}`);
  return {
    ...env,
    [GATE_SITE_ENV]: site,
    SPOT_ID: variables.spot,
    SSO_TOKEN_SECRET_ID: secret(variables.sso, env.SSO_TOKEN_SECRET_ID, 'ssoAccessToken'),
    EXPORT_TOKEN_SECRET_ID: secret(variables.export, env.EXPORT_TOKEN_SECRET_ID, 'exportToken'),
    PLATFORM_REQUESTS_PER_SECOND: variables.rps ?? env.PLATFORM_REQUESTS_PER_SECOND,
    PLATFORM_BURST: variables.burst ?? env.PLATFORM_BURST,
    PLATFORM_MAX_OPEN_EXPORTS: variables.cap ?? env.PLATFORM_MAX_OPEN_EXPORTS,
  };
}
