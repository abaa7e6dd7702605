import { describe, expect, it } from 'vitest';
import { REDACTED, Redactor, redactQuerySecrets, redactUrls, redactValues } from '#shared/redact';

describe('redactValues', () => {
  it('replaces every occurrence of a known value, raw and URL-encoded', () => {
    const text = 'token=a b+c/d and again a b+c/d, encoded a%20b%2Bc%2Fd';
    const out = redactValues(text, ['a b+c/d']);
    expect(out).toBe(`token=${REDACTED} and again ${REDACTED}, encoded ${REDACTED}`);
  });

  it('ignores values too short to be secrets, so common words survive', () => {
    expect(redactValues('id 12 of 123', ['12', undefined])).toBe('id 12 of 123');
  });
});

describe('redactQuerySecrets', () => {
  it('scrubs access_token and apikey values in query strings', () => {
    const out = redactQuerySecrets('GET /gdpr/export/status/1?access_token=s3cr3t&spot_id=sp&apikey=k3y');
    expect(out).toBe(`GET /gdpr/export/status/1?access_token=${REDACTED}&spot_id=sp&apikey=${REDACTED}`);
  });
});

describe('redactUrls', () => {
  it('replaces whole URLs, since a download link is a credential', () => {
    expect(redactUrls('fetching https://cdn.example.com/x.zip?sig=1 now')).toBe(
      `fetching ${REDACTED}-url now`,
    );
  });
});

describe('Redactor', () => {
  it('scrubs nested strings and errors in a deep copy without touching the original', () => {
    const redactor = new Redactor(['subject-123']);
    const original = {
      user: 'subject-123',
      list: ['x subject-123'],
      error: new Error('no subject-123'),
      n: 5,
    };
    const out = redactor.deep(original);
    expect(out).toEqual({
      user: REDACTED,
      list: [`x ${REDACTED}`],
      error: { name: 'Error', message: `no ${REDACTED}` },
      n: 5,
    });
    expect(original.user).toBe('subject-123');
  });

  it('learns values added later', () => {
    const redactor = new Redactor();
    expect(redactor.text('svc-user-9')).toBe('svc-user-9');
    redactor.add('svc-user-9');
    expect(redactor.text('svc-user-9')).toBe(REDACTED);
  });
});
