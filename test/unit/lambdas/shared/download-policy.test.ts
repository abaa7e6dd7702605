import { describe, expect, it } from 'vitest';
import {
  assertDownloadAllowed,
  type DownloadPolicyInput,
  downloadPolicySchema,
} from '#shared/download-policy';
import { DownloadHostNotAllowedError } from '#shared/errors';

function policy(input: Partial<DownloadPolicyInput> = {}) {
  return downloadPolicySchema.parse({ allowedHosts: ['exports.example.com'], ...input });
}

function refusal(url: string, input: Partial<DownloadPolicyInput> = {}): DownloadHostNotAllowedError {
  try {
    assertDownloadAllowed(new URL(url), policy(input));
  } catch (error) {
    if (error instanceof DownloadHostNotAllowedError) return error;
    throw error;
  }
  throw new Error(`expected ${url} to be refused`);
}

describe('downloadPolicySchema', () => {
  it('defaults insecureHosts to none and maxRedirects to 3', () => {
    // Act
    const parsed = downloadPolicySchema.parse({ allowedHosts: ['exports.example.com'] });
    // Assess
    expect(parsed).toEqual({ allowedHosts: ['exports.example.com'], insecureHosts: [], maxRedirects: 3 });
  });

  it('lowercases and trims entries, so a capitalised setting still matches', () => {
    // Act
    const parsed = downloadPolicySchema.parse({
      allowedHosts: [' Exports.Example.COM '],
      insecureHosts: ['LocalHost:4010'],
    });
    // Assess
    expect(parsed.allowedHosts).toEqual(['exports.example.com']);
    expect(parsed.insecureHosts).toEqual(['localhost:4010']);
  });

  it.each([
    ['a scheme', { allowedHosts: ['https://exports.example.com'] }],
    ['a path', { allowedHosts: ['exports.example.com/files'] }],
    ['a space', { allowedHosts: ['exports example.com'] }],
    ['a bare wildcard', { allowedHosts: ['*'] }],
    ['an insecure host without a port', { allowedHosts: [], insecureHosts: ['localhost'] }],
    ['an insecure wildcard', { allowedHosts: [], insecureHosts: ['*.example.com:80'] }],
    ['an unknown field', { allowedHosts: [], allowedHost: ['typo.example.com'] }],
    ['too many redirects', { allowedHosts: [], maxRedirects: 50 }],
  ])('rejects %s', (_label, input) => {
    // Act
    const parsed = downloadPolicySchema.safeParse(input);
    // Assess
    expect(parsed.success).toBe(false);
  });
});

describe('assertDownloadAllowed', () => {
  it('allows https on a listed host, with any path and query', () => {
    // Act / Assess
    expect(() =>
      assertDownloadAllowed(new URL('https://EXPORTS.example.com/f/1.zip?sig=abc'), policy()),
    ).not.toThrow();
  });

  it('refuses a host that is not listed and names the host only, never the path or query', () => {
    // Act
    const error = refusal('https://evil.example.net/exports/subject-42.zip?token=secret-sig-123');
    // Assess
    expect(error.message).toContain('evil.example.net');
    expect(error.message).not.toContain('subject-42');
    expect(error.message).not.toContain('secret-sig-123');
    expect(error.message).not.toContain('https://');
  });

  it('refuses a look-alike host that merely ends with the listed name', () => {
    expect(refusal('https://notexports.example.com/x.zip').message).toContain('notexports.example.com');
    expect(refusal('https://exports.example.com.evil.net/x.zip').message).toContain(
      'exports.example.com.evil.net',
    );
  });

  it('allows a listed host on its default port only; another port needs a host:port entry', () => {
    // Assess
    expect(refusal('https://exports.example.com:8443/x.zip').message).toContain('exports.example.com:8443');
    expect(() =>
      assertDownloadAllowed(
        new URL('https://exports.example.com:8443/x.zip'),
        policy({ allowedHosts: ['exports.example.com:8443'] }),
      ),
    ).not.toThrow();
    expect(() =>
      assertDownloadAllowed(
        new URL('https://exports.example.com/x.zip'),
        policy({ allowedHosts: ['exports.example.com:8443'] }),
      ),
    ).toThrow(DownloadHostNotAllowedError);
  });

  it('matches a wildcard against subdomains at any depth but not the bare domain', () => {
    // Prepare
    const wildcard = policy({ allowedHosts: ['*.cdn.example.com'] });
    // Assess
    expect(() => assertDownloadAllowed(new URL('https://eu.cdn.example.com/x.zip'), wildcard)).not.toThrow();
    expect(() => assertDownloadAllowed(new URL('https://a.b.cdn.example.com/x.zip'), wildcard)).not.toThrow();
    expect(() => assertDownloadAllowed(new URL('https://cdn.example.com/x.zip'), wildcard)).toThrow(
      DownloadHostNotAllowedError,
    );
    expect(() => assertDownloadAllowed(new URL('https://evilcdn.example.com/x.zip'), wildcard)).toThrow(
      DownloadHostNotAllowedError,
    );
  });

  it('refuses plain http even on an allowed host', () => {
    // Act
    const error = refusal('http://exports.example.com/x.zip');
    // Assess
    expect(error.message).toContain('plain http');
  });

  it('allows plain http only on an insecure-listed host:port, and only on that port', () => {
    // Prepare
    const local = policy({ allowedHosts: [], insecureHosts: ['127.0.0.1:4010'] });
    // Assess
    expect(() => assertDownloadAllowed(new URL('http://127.0.0.1:4010/download/1'), local)).not.toThrow();
    expect(() => assertDownloadAllowed(new URL('http://127.0.0.1:4011/download/1'), local)).toThrow(
      DownloadHostNotAllowedError,
    );
    expect(() => assertDownloadAllowed(new URL('https://127.0.0.1:4010/download/1'), local)).toThrow(
      DownloadHostNotAllowedError,
    );
  });

  it('treats an http link without a port as port 80', () => {
    // Prepare
    const local = policy({ allowedHosts: [], insecureHosts: ['emulator.local:80'] });
    // Assess
    expect(() => assertDownloadAllowed(new URL('http://emulator.local/x.zip'), local)).not.toThrow();
  });

  it.each(['ftp://exports.example.com/x.zip', 'file:///etc/passwd', 'data:application/zip;base64,UEsFBg=='])(
    'refuses the non-http scheme of %s',
    (url) => {
      expect(refusal(url).message).toContain('only https is allowed');
    },
  );

  it('refuses a link with credentials in it, even on an allowed host, without repeating them', () => {
    // Act
    const error = refusal('https://user:hunter2pass@exports.example.com/x.zip');
    // Assess
    expect(error.message).toContain('credentials');
    expect(error.message).not.toContain('hunter2pass');
  });

  it('allows IPv6 literals with a port when listed that way', () => {
    // Prepare
    const local = policy({ allowedHosts: ['[::1]:8443'], insecureHosts: ['[::1]:4010'] });
    // Assess
    expect(() => assertDownloadAllowed(new URL('https://[::1]:8443/x.zip'), local)).not.toThrow();
    expect(() => assertDownloadAllowed(new URL('http://[::1]:4010/x.zip'), local)).not.toThrow();
    expect(() => assertDownloadAllowed(new URL('https://[::1]/x.zip'), local)).toThrow(
      DownloadHostNotAllowedError,
    );
  });
});
