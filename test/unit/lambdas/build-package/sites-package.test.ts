import { describe, expect, it } from 'vitest';
import { frontPage, type SiteSection } from '../../../../lambdas/build-package/sites-package.ts';

const facts = {
  controllerName: 'Example Media',
  controllerContact: 'privacy@example.com',
  language: 'en',
  timeZone: 'Europe/Berlin',
  answered: new Date('2026-11-30T23:30:00Z'),
};
const built = {
  key: 'exports/x/subject-package.zip',
  bytes: 10,
  sha256: '0'.repeat(64),
  file_name: 'your-data-2026-12-01.zip',
  built_at: '2026-11-30T23:30:00.000Z',
  conversation_details: 'complete' as const,
};

describe('the front page of a package over several sites', () => {
  it('escapes a site name that holds markup, and names the sites that held no data', () => {
    const sections: SiteSection[] = [
      { site: 'news', name: 'News <script>alert(1)</script>', package: built },
      { site: 'blog', name: 'Blog & "Co"', package: undefined },
    ];

    const page = frontPage(sections, facts);

    expect(page.html).not.toContain('<script>');
    expect(page.html).toContain('Open your data on News &lt;script&gt;alert(1)&lt;/script&gt;');
    expect(page.html).toContain('<li>Blog &amp; &quot;Co&quot;</li>');
    expect(page.readme).toContain('sites/news/  News <script>alert(1)</script>');
    expect(page.readme).toMatch(/no data about you\r\n-+\r\nBlog & "Co"\r\n/);
    // The answer date in the controller's time zone: 1 December in Berlin.
    expect(page.html).toContain('December 1, 2026');
  });

  it('says every site held data when none is without', () => {
    const page = frontPage([{ site: 'news', name: 'News', package: built }], facts);

    expect(page.html).toContain('Every site searched holds data about you.');
    expect(page.readme).toContain('(none)');
  });
});
