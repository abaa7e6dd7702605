// The controller's sites on the platform: a site's id, the one a configuration without `sites` has, and the ids a request names.
import { z } from 'zod';

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
