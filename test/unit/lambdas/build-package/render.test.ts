import { describe, expect, it } from 'vitest';
import { type ActivityContext, normalisePackage } from '../../../../lambdas/build-package/normalise.ts';
import { escapeHtml, PAGE_COLOURS, renderIndexHtml } from '../../../../lambdas/build-package/render.ts';
import { CCPA_NOTICE, exportedMessage, GDPR_NOTICE, normaliseInput, T0 } from './fixtures.ts';

/** The only elements and attributes the page is written with: hostile text must not add any. */
const ALLOWED_TAGS = new Set([
  'html',
  'head',
  'meta',
  'title',
  'style',
  'body',
  'a',
  'header',
  'h1',
  'h2',
  'h3',
  'p',
  'nav',
  'ol',
  'ul',
  'li',
  'main',
  'section',
  'dl',
  'div',
  'dt',
  'dd',
  'code',
  'time',
  'span',
  'strong',
  'article',
  'bdi',
  'footer',
]);
const ALLOWED_ATTRIBUTES = new Set([
  'lang',
  'charset',
  'http-equiv',
  'content',
  'name',
  'class',
  'href',
  'id',
  'aria-labelledby',
  'dir',
  'datetime',
  'rel',
  'role',
]);

function tagsAndAttributes(html: string): { tags: Set<string>; attributes: Set<string> } {
  const tags = new Set<string>();
  const attributes = new Set<string>();
  const body = html.replace(/<style>[^<]*<\/style>/, '<style></style>');
  for (const match of body.matchAll(/<([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>/g)) {
    tags.add((match[1] ?? '').toLowerCase());
    for (const attribute of (match[2] ?? '').matchAll(/\s([a-zA-Z-]+)(?:="[^"]*")?/g)) {
      attributes.add((attribute[1] ?? '').toLowerCase());
    }
  }
  return { tags, attributes };
}

const HOSTILE = {
  script: '<script>alert("x")</script>',
  img: '"><img src=x onerror=alert(1)>',
  closeTitle: '</title></head><body onload=alert(1)>',
  rtl: 'مرحبا بالعالم \u202Egnp.exe\u202C שלום',
  emoji: 'Great 👩🏽‍💻🎉 article',
  control: 'nul\u0000byte and \u001b escape',
  long: `${'A very long comment. '.repeat(238)}END`,
};

function hostileHtml(): string {
  const messages = [
    exportedMessage('m1', 'conv-a', T0, HOSTILE.script),
    exportedMessage('m2', 'conv-a', T0 + 60, HOSTILE.img),
    exportedMessage('m3', 'conv-b', T0 + 120, HOSTILE.rtl),
    exportedMessage('m4', 'conv-b', T0 + 180, HOSTILE.emoji),
    exportedMessage('m5', 'conv-c', T0 + 240, HOSTILE.long),
    exportedMessage('m6', 'conv-c', T0 + 300, HOSTILE.control),
  ];
  const activity: ActivityContext = {
    details: { status: 'complete', reason: null, pages: 1 },
    conversations: new Map([
      ['conv-a', { title: HOSTILE.closeTitle, url: 'javascript:alert(1)' }],
      ['conv-b', { title: 'Ordinary title', url: 'https://news.example.test/b?x="><script>' }],
    ]),
    messages: new Map(),
  };
  const input = normaliseInput(messages, {
    activity,
    controller: { name: 'Evil <b>Corp</b>', contact: '<a href="https://evil.test">mail</a>' },
  });
  return renderIndexHtml(normalisePackage(input));
}

describe('renderIndexHtml', () => {
  it('escapes hostile comment, title and config text so it adds no element or attribute', () => {
    const html = hostileHtml();

    const { tags, attributes } = tagsAndAttributes(html);
    expect([...tags].filter((tag) => !ALLOWED_TAGS.has(tag))).toEqual([]);
    expect([...attributes].filter((attribute) => !ALLOWED_ATTRIBUTES.has(attribute))).toEqual([]);
    expect(html).not.toMatch(/<script/i);
    expect(html).not.toMatch(/<img/i);
    expect(html).not.toMatch(/href="javascript:/i);
    expect(html).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;');
    expect(html).toContain('Evil &lt;b&gt;Corp&lt;/b&gt;');
    expect(html).toContain('&lt;/title&gt;&lt;/head&gt;&lt;body onload=alert(1)&gt;');
  });

  it('keeps right-to-left text and emoji intact inside isolated elements', () => {
    const html = hostileHtml();
    expect(html).toContain(`<p class="text" dir="auto">${HOSTILE.rtl}</p>`);
    expect(html).toContain(`<p class="text" dir="auto">${HOSTILE.emoji}</p>`);
  });

  it('keeps a 5,000-character comment whole and replaces control characters', () => {
    const html = hostileHtml();
    expect(HOSTILE.long.length).toBeGreaterThanOrEqual(5000);
    expect(html).toContain(HOSTILE.long);
    expect(html).not.toContain('\u0000');
    expect(html).toContain('nul\uFFFDbyte and \uFFFD escape');
  });

  it('links only http(s) conversation addresses, escaped, and names the untitled conversation', () => {
    const html = hostileHtml();
    expect(html).toContain('href="https://news.example.test/b?x=%22%3E%3Cscript%3E"');
    expect(html).toContain('<h3>Conversation without a title</h3>');
  });

  it('is self-contained and accessible: lang, a CSP without scripts, landmarks, headings, no external resources', () => {
    const html = hostileHtml();
    expect(html).toMatch(/^<!DOCTYPE html>\n<html lang="en-GB">/);
    expect(html).toContain(`content="default-src 'none'; style-src 'unsafe-inline'`);
    for (const landmark of ['<header>', '<nav aria-labelledby=', '<main id="main">', '<footer>']) {
      expect(html).toContain(landmark);
    }
    expect(html.match(/<h1>/g)).toHaveLength(1);
    const { tags, attributes } = tagsAndAttributes(html);
    expect(tags.has('link') || tags.has('img') || tags.has('script') || attributes.has('src')).toBe(false);
    expect(html.match(/<style>[^<]*<\/style>/)?.[0]).not.toMatch(/@import|url\(/i);
  });

  it('shows who answers and when, dates in the controller’s language and time zone', () => {
    const html = hostileHtml();
    expect(html).toContain('<dt>Answered by</dt><dd>Evil &lt;b&gt;Corp&lt;/b&gt;</dd>');
    expect(html).toContain('<time datetime="2026-11-20T09:00:00.000Z">20 November 2026</time>');
    expect(html).toContain('<time datetime="2026-11-23T12:00:00.000Z">23 November 2026</time>');
    // 2024-01-01T10:00Z is 10:00 in London in winter.
    expect(html).toContain('<time datetime="2024-01-01T10:00:00.000Z">1 January 2024 at 10:00</time>');
    expect(html).toContain('All dates and times are shown in the Europe/London time zone.');
    // Art. 15(1)(a)-(h) and 15(2), each under its heading, from the config.
    for (const heading of [
      'Why we process your data (GDPR Art. 15(1)(a))',
      'Your right to complain (Art. 15(1)(f))',
      'Automated decisions and profiling (Art. 15(1)(h))',
      'Transfers outside the EU and how they are safeguarded (Art. 15(2))',
    ]) {
      expect(html).toContain(`<h3>${heading}</h3>`);
    }
    expect(html).toContain('<p class="text">No decision about you is automated.</p>');
    expect(html).toContain(`<p class="text">${GDPR_NOTICE.transfers}</p>`);
  });

  it("tells a CCPA consumer what §1798.110 says, in its terms, and nothing of the GDPR's", () => {
    // Prepare: a CCPA request, with the business's §1798.110 texts.
    const input = normaliseInput([exportedMessage('m1', 'conv-a', T0, 'hello')], {
      information: { ccpa: CCPA_NOTICE },
      request: { ...normaliseInput([]).request, regulation: 'ccpa' },
    });
    // Act
    const data = normalisePackage(input);
    const html = renderIndexHtml(data);
    // Assess: the four categories under their headings, in the order of §1798.110(a).
    const headings = [...html.matchAll(/<h3>([^<]*§1798\.110[^<]*|[^<]*\(§1798[^<]*)<\/h3>/g)].map(
      (m) => m[1],
    );
    expect(headings).toEqual([
      'The categories of personal information we collected about you (Cal. Civ. Code §1798.110(a)(1))',
      'The categories of sources we collected it from (§1798.110(a)(2))',
      'Why we collect, sell or share it: the business or commercial purpose (§1798.110(a)(3))',
      'The categories of third parties we disclose it to (§1798.110(a)(4))',
    ]);
    for (const text of Object.values(CCPA_NOTICE)) expect(html).toContain(`<p class="text">${text}</p>`);
    expect(html).toContain('California Consumer Privacy Act');
    expect(html).not.toMatch(/Art\. 15|GDPR|General Data Protection/);
    expect(JSON.stringify(data.information)).toBe(JSON.stringify({ ccpa: CCPA_NOTICE }));
  });

  it('writes dates in another zone when the controller is elsewhere', () => {
    const input = normaliseInput([exportedMessage('m1', 'conv-a', T0, 'hello')], {
      language: 'en-US',
      timeZone: 'America/Los_Angeles',
    });
    const html = renderIndexHtml(normalisePackage(input));
    expect(html).toContain('January 1, 2024 at 2:00');
  });

  it('says why conversation details are missing when the activity call was not enabled', () => {
    const html = renderIndexHtml(
      normalisePackage(normaliseInput([exportedMessage('m1', 'conv-a', T0, 'hi')])),
    );
    expect(html).toContain(
      'Conversation details (titles, links, whether a comment was deleted or edited) were unavailable: the comment service has not enabled them for this site.',
    );
  });
});

describe('renderIndexHtml settings', () => {
  it('explains each notification setting and marks the ones left at their default', () => {
    const html = renderIndexHtml(
      normalisePackage({
        ...normaliseInput([]),
        account: {
          notifications: { email: { user_mentioned: 'never' }, in_app: {} },
          privateProfile: false,
          subscriber: null,
        },
      }),
    );
    expect(html).toContain('<dt>By e-mail: Someone mentioned you</dt><dd>never sent</dd>');
    expect(html).toContain(
      '<dt>In the app or page: Your comment was rejected</dt><dd>sent at once (not changed: the default)</dd>',
    );
    expect(html).toContain('<dt>Profile and comment history hidden from others</dt><dd>No</dd>');
  });

  it('says the settings could not be read when the account was not available', () => {
    const html = renderIndexHtml(normalisePackage(normaliseInput([])));
    expect(html).toContain('Your notification settings could not be read from the comment service.');
  });
});

describe('escapeHtml', () => {
  it('escapes the five HTML characters and lone surrogates', () => {
    expect(escapeHtml(`<a href="x" title='y'>&</a>`)).toBe(
      '&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;',
    );
    expect(escapeHtml('a\uD800b')).toBe('a\uFFFDb');
    expect(escapeHtml('😀')).toBe('😀');
  });
});

describe('PAGE_COLOURS', () => {
  /** WCAG 2 contrast ratio of two #rrggbb colours. */
  function contrast(a: string, b: string): number {
    const luminance = (hex: string) => {
      const [r = 0, g = 0, bl = 0] = [1, 3, 5].map((at) => {
        const channel = Number.parseInt(hex.slice(at, at + 2), 16) / 255;
        return channel <= 0.04045 ? channel / 12.92 : ((channel + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
    };
    const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return ((light ?? 0) + 0.05) / ((dark ?? 0) + 0.05);
  }

  it('gives every text colour 7:1 or more against its background (WCAG AAA)', () => {
    const { background, noticeBackground, text, muted, link, deleted, held } = PAGE_COLOURS;
    const pairs = { text, muted, link, deleted, held };
    for (const [name, colour] of Object.entries(pairs)) {
      expect({ name, ratio: contrast(colour, background) >= 7 }).toEqual({ name, ratio: true });
    }
    expect(contrast(text, noticeBackground)).toBeGreaterThanOrEqual(7);
  });

  it('is what the page’s style uses', () => {
    const html = renderIndexHtml(normalisePackage(normaliseInput([])));
    const style = /<style>([^<]*)<\/style>/.exec(html)?.[1] ?? '';
    for (const colour of Object.values(PAGE_COLOURS)) expect(style).toContain(colour);
  });
});
