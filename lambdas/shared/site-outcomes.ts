// One answer from per-site truth: a request's status and outcome derived from its sites', and the sites a retry runs again.
import { z } from 'zod';
import { OUTCOMES, type REQUEST_TYPES, STATUSES } from './vocabulary.ts';

/** Where one site's part of a request stands, as the request's own item keeps it. */
export const siteResultSchema = z.object({
  status: z.enum(STATUSES),
  outcome: z.enum(OUTCOMES).optional(),
  /** The error code of a failed part (errors.ts), never its message: that stays on the part's own item. */
  error_code: z.string().min(1).max(64).optional(),
  at: z.string(),
});
export type SiteResult = z.infer<typeof siteResultSchema>;

/** The statuses a site's part ends in; a part in any other is still under way. */
const ENDED = new Set<SiteResult['status']>(['completed', 'failed', 'cancelled', 'rejected', 'denied']);

/** What the request's own item says once its sites have answered, or that they have not yet. */
export type RequestVerdict =
  | { readonly kind: 'open'; readonly waiting: readonly string[] }
  | { readonly kind: 'completed'; readonly outcome: (typeof OUTCOMES)[number]; readonly summary: string }
  | { readonly kind: 'failed'; readonly failed: readonly string[]; readonly summary: string };

/**
 * The request's verdict from its sites' results (every site in `sites` order): open while any
 * part is under way or has not answered; failed, naming the sites, when every part has ended and
 * one failed (the others keep what they did, and a retry runs only the failed ones); otherwise
 * completed, with the outcome that says what was done anywhere (exported when any site exported,
 * no data only when no site held any).
 */
export function requestVerdict(
  type: (typeof REQUEST_TYPES)[number],
  sites: readonly string[],
  results: Readonly<Record<string, SiteResult | undefined>>,
): RequestVerdict {
  const waiting = sites.filter((site) => {
    const result = results[site];
    return result === undefined || !ENDED.has(result.status);
  });
  if (waiting.length > 0) return { kind: 'open', waiting };
  const summary = siteSummary(sites, results);
  const failed = sites.filter((site) => results[site]?.status !== 'completed');
  if (failed.length > 0) return { kind: 'failed', failed, summary };
  const outcomes = new Set(sites.map((site) => results[site]?.outcome));
  const first = PRECEDENCE[type].find((outcome) => outcomes.has(outcome));
  return { kind: 'completed', outcome: first ?? 'no_data', summary };
}

/** The outcome a request of each type takes when its sites differ: the most that was done first. */
const PRECEDENCE: Readonly<Record<(typeof REQUEST_TYPES)[number], readonly (typeof OUTCOMES)[number][]>> = {
  access: ['exported', 'no_data'],
  erasure: ['erased', 'no_data'],
  correction: ['corrected_with_changes', 'corrected', 'no_data'],
};

/**
 * The sites' results in a line, counted by what each came to, in the order first met:
 * "exported on 2 (news, shop); no data on 1 (blog)". Site ids only, never what a site held.
 */
export function siteSummary(
  sites: readonly string[],
  results: Readonly<Record<string, SiteResult | undefined>>,
): string {
  const groups = new Map<string, string[]>();
  for (const site of sites) {
    const result = results[site];
    const label =
      result === undefined
        ? 'not started'
        : result.status === 'completed'
          ? (result.outcome ?? 'completed').replaceAll('_', ' ')
          : result.status === 'failed'
            ? `failed${result.error_code === undefined ? '' : ` (${result.error_code})`}`
            : result.status;
    groups.set(label, [...(groups.get(label) ?? []), site]);
  }
  return [...groups.entries()]
    .map(([label, ids]) => `${label} on ${ids.length} (${ids.join(', ')})`)
    .join('; ');
}

/**
 * The sites a retry of the request runs again: those whose part did not complete. A site that
 * completed keeps its export, its erasure or its update, and is never run again.
 */
export function sitesToRetry(
  sites: readonly string[],
  results: Readonly<Record<string, SiteResult | undefined>>,
): string[] {
  return sites.filter((site) => results[site]?.status !== 'completed');
}
