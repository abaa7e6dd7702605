/**
 * The sites of a stack configuration as local mode serves them: each an emulator account by its
 * spot id, and every site but the first with its tokens under its own secret names.
 */
import { z } from 'zod';

/** A configured site as local mode needs it: its id and spot id. */
export interface LocalSite {
  readonly id: string;
  readonly spotId: string;
}

/**
 * The sites the stack configuration lists (`sites`, lib/config.ts, which synth checks in full),
 * when it lists several; undefined for one site.
 */
export function configuredSitesOf(stackConfig: unknown): LocalSite[] | undefined {
  const parsed = z
    .object({ sites: z.array(z.object({ id: z.string(), spotId: z.string() })).optional() })
    .safeParse(stackConfig ?? {});
  const sites = parsed.success ? parsed.data.sites : undefined;
  return sites !== undefined && sites.length > 1 ? sites : undefined;
}

/**
 * The tokens of every configured site but the first (whose are the functions' own secrets): the
 * tokens of the emulator's account with that site's spot id, for startLocalWorkflow's siteTokens.
 */
export function siteTokensOf(
  sites: readonly LocalSite[],
  served: readonly { spotId: string; ssoAccessToken: string; exportToken: string }[],
): Record<string, { ssoAccessToken: string; exportToken: string }> {
  return Object.fromEntries(
    sites.slice(1).flatMap((site) => {
      const account = served.find((each) => each.spotId === site.spotId);
      return account === undefined
        ? []
        : [[site.id, { ssoAccessToken: account.ssoAccessToken, exportToken: account.exportToken }]];
    }),
  );
}
