/**
 * A request across several sites, run by the product's own intake, state machine and steps on the
 * local stand-ins, against an emulator that serves each site as an account of its own (its
 * spot_id, its tokens, its users and its call log).
 */

import { createHash } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { SFNClient } from '@aws-sdk/client-sfn';
import { afterEach, describe, expect, it } from 'vitest';
import { emulatorControl } from '#local/emulator/server';
import { emulatorStateSchema } from '#local/emulator/state';
import { localOperatorDeps } from '#local/runtime/operator-endpoint';
import { runOperatorCommand } from '../../../lambdas/operator/operator.ts';
import { siteRequestId } from '../../../lambdas/shared/sites.ts';
import { type Harness, requestFor, startHarness } from './harness.ts';
import { storedObject, zipEntries } from './stored.ts';
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
    // One package for the request: each site's own in its folder, and a page naming all three.
    const facts = item.subject_package;
    if (facts === undefined) throw new Error('the request over its sites must record one package');
    expect(facts.sites).toEqual([
      { site: 'news', held_data: true },
      { site: 'shop', held_data: true },
      { site: 'blog', held_data: false },
    ]);
    const stored = await storedObject(harness, facts.key);
    expect({ bytes: stored.length, sha256: createHash('sha256').update(stored).digest('hex') }).toEqual({
      bytes: facts.bytes,
      sha256: facts.sha256,
    });
    const entries = await zipEntries(stored);
    for (const part of ['news', 'shop']) {
      const own = await harness.workflow.ledger.require(siteRequestId(request.request_id, part));
      const ownEntries = await zipEntries(await storedObject(harness, own.subject_package?.key ?? ''));
      expect(ownEntries.size).toBeGreaterThan(3);
      // Every entry of the site's own package, byte for byte, under sites/<site>/.
      for (const [name, bytes] of ownEntries) expect(entries.get(`sites/${part}/${name}`)).toEqual(bytes);
    }
    expect([...entries.keys()].filter((name) => name.startsWith('sites/blog/'))).toEqual([]);
    const page = entries.get('index.html')?.toString('utf8') ?? '';
    const held = page.slice(page.indexOf('id="held-heading"'), page.indexOf('id="none-heading"'));
    const none = page.slice(page.indexOf('id="none-heading"'));
    expect(held).toContain('<a href="sites/news/index.html">Open your data on Example News</a>');
    expect(held).toContain('<a href="sites/shop/index.html">Open your data on Example Shop</a>');
    expect(held).not.toContain('Example Blog');
    expect(none).toContain('<li>Example Blog</li>');
    expect(JSON.parse(entries.get('sites.json')?.toString('utf8') ?? '{}').sites).toEqual([
      { id: 'news', name: 'Example News', held_data: true, folder: 'sites/news/' },
      { id: 'shop', name: 'Example Shop', held_data: true, folder: 'sites/shop/' },
      { id: 'blog', name: 'Example Blog', held_data: false, folder: null },
    ]);
    // The request's chain records the package it holds, before its final record.
    const chain = await harness.workflow.audit.list(request.request_id);
    const actions = chain.map((record) => record.action);
    expect(actions.slice(-2)).toEqual(['subject_package_built', 'request_completed']);
    expect(chain.at(-2)?.facts).toMatchObject({
      sha256: facts.sha256,
      sites_with_data: 2,
      sites_without_data: 1,
    });
  });
});

/** The privacy team's retry of a request, as `svc-dsr retry` has the operator function run it. */
async function retryAs(h: Harness, who: string, id: string) {
  const { workflow } = h;
  const sfn = new SFNClient({
    region: h.aws.region,
    endpoint: workflow.shim.endpoint,
    credentials: h.aws.credentials,
  });
  try {
    return await runOperatorCommand(
      localOperatorDeps(workflow, sfn),
      `arn:aws:sts::000000000000:assumed-role/privacy-team/${who}`,
      { command: 'retry', request_id: id },
    );
  } finally {
    sfn.destroy();
  }
}

/** An erasure over the three sites that failed on shop alone: shop was down past the outage horizon. */
async function failedOnShop() {
  harness = await startHarness({ state, config, env: { OUTAGE_HORIZON_SECONDS: '3' } });
  const h = harness;
  const shop = emulatorControl(h.emulator, 'sp_shop');
  shop.setFaults({ ...shop.faults(), outage: { after_seconds: 0, duration_seconds: 600 } });
  const request = requestFor('u-1', { type: 'erasure' });
  await submitAndSettle(h, request);
  return { h, shop, id: request.request_id };
}

describe('two people retrying one request over several sites at once', () => {
  it('runs the failed site once: one export start and one DELETE on it, none on the others', async () => {
    // Prepare: shop is down past the horizon, so the erasure fails on shop alone
    const { h, shop, id } = await failedOnShop();
    expect(await h.workflow.ledger.require(id)).toMatchObject({
      status: 'failed',
      error: { code: 'sites_failed' },
    });
    const calls = (spotId: string) => emulatorControl(h.emulator, spotId).calls();
    const before = { news: calls('sp_news').length, blog: calls('sp_blog').length };
    const shopBefore = calls('sp_shop').length;
    const runsBefore = (await h.workflow.ledger.require(siteRequestId(id, 'shop'))).executions;
    shop.setFaults({ ...shop.faults(), outage: null });
    await delay(6_000);

    // Act: jane and omar press retry at the same moment
    const answers = await Promise.allSettled([retryAs(h, 'jane', id), retryAs(h, 'omar', id)]);
    await h.workflow.settled();

    // Assess: one of them ran it (the other was told it is running already, or found it so)
    expect(answers.some((answer) => answer.status === 'fulfilled')).toBe(true);
    expect(await h.workflow.ledger.require(id)).toMatchObject({
      status: 'completed',
      outcome: 'erased',
      site_results: {
        news: { outcome: 'erased' },
        shop: { outcome: 'erased' },
        blog: { outcome: 'no_data' },
      },
    });
    const onShop = calls('sp_shop').slice(shopBefore);
    expect(onShop.filter((call) => call.method === 'DELETE')).toHaveLength(1);
    expect(onShop.filter((call) => call.method === 'POST' && call.path.endsWith('/export'))).toHaveLength(1);
    expect({ news: calls('sp_news').length, blog: calls('sp_blog').length }).toEqual(before);
    const shopPart = await h.workflow.ledger.require(siteRequestId(id, 'shop'));
    // One execution more than before: the two retries started one between them.
    expect(shopPart.executions).toBe(runsBefore + 1);
  }, 90_000);

  it("refuses a second retry while the first is starting the parts, and never undoes the first one's run", async () => {
    // Prepare: the erasure failed on shop; one person's retry has opened the request again and
    // not yet started the part (the moment the other person's retry used to pass).
    const { h, id } = await failedOnShop();
    const partRuns = (await h.workflow.ledger.require(siteRequestId(id, 'shop'))).executions;
    await h.workflow.ledger.retry(id, { liveExecution: async () => undefined });

    // Act
    const second = retryAs(h, 'omar', id);

    // Assess
    await expect(second).rejects.toMatchObject({ name: 'OperatorRefusal' });
    expect((await h.workflow.ledger.require(id)).status).toBe('received');
    expect((await h.workflow.ledger.require(siteRequestId(id, 'shop'))).executions).toBe(partRuns);
  }, 90_000);
});
