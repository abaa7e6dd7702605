import { describe, expect, it } from 'vitest';
import {
  DEFAULT_SITE_ID,
  MAX_SITES,
  requestSitesSchema,
  siteIdSchema,
  siteIdsEnvSchema,
  unknownSites,
} from '#shared/sites';

describe('site ids', () => {
  it.each(['a', 'news', 'shop-de', 'x1', 'a-b-c'])('accepts %s', (id) => {
    // Act
    const parsed = siteIdSchema.safeParse(id);

    // Assess
    expect(parsed.success).toBe(true);
  });

  it.each(['', 'News', 'shop-', '-shop', '1news', 'shop_de', 'a'.repeat(17), 'shop de', 'ѕhop'])(
    'refuses %j with the form a site id takes',
    (id) => {
      // Act
      const parsed = siteIdSchema.safeParse(id);

      // Assess
      expect(parsed.success).toBe(false);
      expect(parsed.error?.issues[0]?.message).toContain('1-16 lower-case letters');
    },
  );
});

describe('the sites a request names', () => {
  it('refuses an empty list, a site named twice and more than the most sites a stack serves', () => {
    // Act
    const empty = requestSitesSchema.safeParse([]);
    const twice = requestSitesSchema.safeParse(['news', 'shop', 'news']);
    const tooMany = requestSitesSchema.safeParse(Array.from({ length: MAX_SITES + 1 }, (_, i) => `s${i}`));

    // Assess
    expect(empty.error?.issues[0]?.message).toContain('leave "sites" out');
    expect(twice.error?.issues[0]?.message).toBe('names a site twice');
    expect(tooMany.success).toBe(false);
  });

  it('tells the ids that are not configured, in the order requested', () => {
    // Act
    const unknown = unknownSites(['shop', 'blog', 'news', 'forum'], ['news', 'shop']);

    // Assess
    expect(unknown).toEqual(['blog', 'forum']);
  });
});

describe('the configured site ids a function is given', () => {
  it('is the default site when the stack sets none, and the list in order when it does', () => {
    // Act
    const none = siteIdsEnvSchema.parse(undefined);
    const listed = siteIdsEnvSchema.parse('news,shop-de,blog');

    // Assess
    expect(none).toEqual([DEFAULT_SITE_ID]);
    expect(listed).toEqual(['news', 'shop-de', 'blog']);
  });

  it('refuses a list with an id that is not one', () => {
    // Act
    const parsed = siteIdsEnvSchema.safeParse('news,Shop');

    // Assess
    expect(parsed.success).toBe(false);
  });
});
