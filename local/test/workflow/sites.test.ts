/**
 * A request across several sites, run by the product's own intake, state machine and steps on the
 * local stand-ins, against an emulator that serves each site as an account of its own (its
 * spot_id, its tokens, its users and its call log).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { emulatorControl } from '#local/emulator/server';
import { emulatorStateSchema } from '#local/emulator/state';
import { siteRequestId } from '../../../lambdas/shared/sites.ts';
import { type Harness, requestFor, startHarness } from './harness.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const site = (spotId: string, users: string[]) => ({
  spot_id: spotId,
  sso_access_token: `sso-token-of-${spotId}-5c1e`,
  export_token: `export-token-of-${spotId}-9d2a`,
  conversations: [{ id: `conv-${spotId}`, url: `https://${spotId}.example.com/a`, title: 'A' }],
  users: users.map((primaryKey) => ({ primary_key: primaryKey, user_name: `${primaryKey}_${spotId}` })),
  comments: [],
  votes: [],
});

/** The subject, u-1, has an account on news and on shop, not on blog. */
const state = emulatorStateSchema.parse({
  sites: [site('sp_news', ['u-1', 'u-2']), site('sp_shop', ['u-1']), site('sp_blog', ['u-2'])],
});
const config = {
  sites: [
    { id: 'news', name: 'Example News', spotId: 'sp_news' },
    { id: 'shop', name: 'Example Shop', spotId: 'sp_shop' },
    { id: 'blog', name: 'Example Blog', spotId: 'sp_blog' },
  ],
};

/** The DELETE calls each site's account received. */
function deletesBySite(h: Harness): Record<string, number> {
  return Object.fromEntries(
    ['sp_news', 'sp_shop', 'sp_blog'].map((spotId) => [
      spotId,
      emulatorControl(h.emulator, spotId)
        .calls()
        .filter((call) => call.method === 'DELETE').length,
    ]),
  );
}

describe('a request across three sites, the subject on two', () => {
  it('erases on exactly those two, one DELETE each, verifies each, and answers erased with each site said', async () => {
    // Prepare
    harness = await startHarness({ state, config });
    const request = requestFor('u-1', { type: 'erasure' });

    // Act
    await submitAndSettle(harness, request);

    // Assess
    const { ledger } = harness.workflow;
    const id = request.request_id;
    expect(await ledger.require(id)).toMatchObject({
      status: 'completed',
      outcome: 'erased',
      site_results: {
        news: { status: 'completed', outcome: 'erased' },
        shop: { status: 'completed', outcome: 'erased' },
        blog: { status: 'completed', outcome: 'no_data' },
      },
    });
    for (const erased of ['news', 'shop']) {
      expect(await ledger.require(siteRequestId(id, erased))).toMatchObject({
        status: 'completed',
        outcome: 'erased',
        erasure_verification: { platform_answer: 'not_found' },
      });
    }
    expect(deletesBySite(harness)).toEqual({ sp_news: 1, sp_shop: 1, sp_blog: 0 });
  });

  it('exports on the two sites that hold the subject and answers exported, no data on the third', async () => {
    // Prepare
    harness = await startHarness({ state, config });
    const request = requestFor('u-1');

    // Act
    await submitAndSettle(harness, request);

    // Assess
    const item = await harness.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'exported' });
    expect(item.site_results).toMatchObject({
      news: { outcome: 'exported' },
      shop: { outcome: 'exported' },
      blog: { outcome: 'no_data' },
    });
    expect(deletesBySite(harness)).toEqual({ sp_news: 0, sp_shop: 0, sp_blog: 0 });
  });
});
