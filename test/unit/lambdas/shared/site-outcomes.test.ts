import { describe, expect, it } from 'vitest';
import { requestVerdict, type SiteResult, siteSummary, sitesToRetry } from '#shared/site-outcomes';

const at = '2026-12-01T10:00:00.000Z';
const done = (outcome: SiteResult['outcome']): SiteResult => ({ status: 'completed', outcome, at });
const failed = (code: string): SiteResult => ({ status: 'failed', error_code: code, at });
const running: SiteResult = { status: 'running', at };

describe('requestVerdict', () => {
  it('stays open while any site is under way or has not answered, naming those sites', () => {
    // Act
    const verdict = requestVerdict('access', ['news', 'shop', 'blog'], {
      news: done('exported'),
      shop: running,
    });

    // Assess
    expect(verdict).toEqual({ kind: 'open', waiting: ['shop', 'blog'] });
  });

  it('completes an access request exported when one site exported and the others held no data', () => {
    // Act
    const verdict = requestVerdict('access', ['news', 'shop', 'blog'], {
      news: done('no_data'),
      shop: done('exported'),
      blog: done('no_data'),
    });

    // Assess
    expect(verdict).toEqual({
      kind: 'completed',
      outcome: 'exported',
      summary: 'no data on 2 (news, blog); exported on 1 (shop)',
    });
  });

  it.each([
    ['erasure', ['no_data', 'no_data'], 'no_data'],
    ['erasure', ['erased', 'no_data'], 'erased'],
    ['correction', ['corrected', 'corrected_with_changes'], 'corrected_with_changes'],
    ['correction', ['no_data', 'corrected'], 'corrected'],
  ] as const)('derives a %s request from %j as %s', (type, outcomes, expected) => {
    // Act
    const verdict = requestVerdict(type, ['a', 'b'], { a: done(outcomes[0]), b: done(outcomes[1]) });

    // Assess
    expect(verdict).toMatchObject({ kind: 'completed', outcome: expected });
  });

  it('fails, naming the failed site, only once every other site has ended, and keeps what they did', () => {
    // Act
    const early = requestVerdict('erasure', ['news', 'shop'], {
      news: failed('platform_outage'),
      shop: running,
    });
    const late = requestVerdict('erasure', ['news', 'shop'], {
      news: failed('platform_outage'),
      shop: done('erased'),
    });

    // Assess
    expect(early.kind).toBe('open');
    expect(late).toEqual({
      kind: 'failed',
      failed: ['news'],
      summary: 'failed (platform_outage) on 1 (news); erased on 1 (shop)',
    });
  });
});

describe('sitesToRetry', () => {
  it('runs again only the sites that did not complete', () => {
    // Act
    const sites = sitesToRetry(['news', 'shop', 'blog'], {
      news: done('erased'),
      shop: failed('export_failed'),
    });

    // Assess
    expect(sites).toEqual(['shop', 'blog']);
  });
});

describe('siteSummary', () => {
  it('says which sites have not started', () => {
    // Act / Assess
    expect(siteSummary(['news', 'shop'], { news: { status: 'cancelled', at } })).toBe(
      'cancelled on 1 (news); not started on 1 (shop)',
    );
  });
});
