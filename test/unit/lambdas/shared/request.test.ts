import { describe, expect, it } from 'vitest';
import { MAX_REQUEST_BYTES, normaliseRequestId, parseRequestMessage, rfc3339Instant } from '#shared/request';

const valid = {
  request_id: '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f',
  type: 'access',
  regulation: 'gdpr',
  primary_key: 'u-1',
  received_at: '2026-11-02T09:30:00Z',
  verification: {
    method: 'email_link',
    verified_by: 'privacy@example.com',
    verified_at: '2026-11-02T10:00:00+01:00',
  },
  reference: 'TICKET-1',
};

describe('parseRequestMessage', () => {
  it('accepts a valid request and fingerprints it independently of key order', () => {
    const first = parseRequestMessage(JSON.stringify(valid));
    const reordered = parseRequestMessage(
      JSON.stringify(Object.fromEntries(Object.entries(valid).reverse())),
    );
    expect(first.kind).toBe('valid');
    expect(
      first.kind === 'valid' && reordered.kind === 'valid' && first.fingerprint === reordered.fingerprint,
    ).toBe(true);
  });

  it('gives a different fingerprint for different content', () => {
    const a = parseRequestMessage(JSON.stringify(valid));
    const b = parseRequestMessage(JSON.stringify({ ...valid, type: 'erasure' }));
    expect(a.kind === 'valid' && b.kind === 'valid' && a.fingerprint !== b.fingerprint).toBe(true);
  });

  it('accepts a channel from the closed list and refuses any other, naming the list', () => {
    expect(parseRequestMessage(JSON.stringify({ ...valid, channel: 'in_person' }))).toMatchObject({
      kind: 'valid',
      request: { channel: 'in_person' },
    });
    expect(parseRequestMessage(JSON.stringify({ ...valid, channel: 'Web Form' }))).toMatchObject({
      kind: 'invalid',
      errors: [
        'channel: must be one of "web_form", "email", "phone", "postal_mail", "in_person", "authorized_agent", "other"',
      ],
    });
  });

  it('calls a body that is not JSON unusable', () => {
    expect(parseRequestMessage('{nope')).toEqual({
      kind: 'unusable',
      reason: 'message body is not valid JSON: it has an object key that is not a string (character 2)',
    });
  });

  it('calls a JSON array unusable', () => {
    expect(parseRequestMessage('[]')).toMatchObject({
      kind: 'unusable',
      reason: expect.stringContaining('object'),
    });
  });

  it('calls an oversized body unusable', () => {
    const big = JSON.stringify({ ...valid, reference: 'x'.repeat(MAX_REQUEST_BYTES) });
    expect(parseRequestMessage(big)).toMatchObject({
      kind: 'unusable',
      reason: expect.stringContaining('limit'),
    });
  });

  it('calls a message without a UUID request_id unusable', () => {
    expect(parseRequestMessage(JSON.stringify({ ...valid, request_id: 'abc' }))).toMatchObject({
      kind: 'unusable',
      reason: expect.stringContaining('request_id'),
    });
  });

  it('lists every field error, including unknown and missing fields', () => {
    const { primary_key: _omitted, ...rest } = valid;
    const parsed = parseRequestMessage(
      JSON.stringify({ ...rest, type: 'delete', regulaton: 'gdpr', received_at: 'yesterday' }),
    );
    expect(parsed.kind).toBe('invalid');
    if (parsed.kind !== 'invalid') return;
    expect(parsed.requestId).toBe(valid.request_id);
    expect(parsed.errors).toEqual(
      expect.arrayContaining([
        'type: must be "access", "erasure" or "correction"',
        'primary_key: is required',
        expect.stringContaining('received_at: must be an RFC 3339'),
        expect.stringContaining('unknown field(s) "regulaton"'),
      ]),
    );
  });

  it('rejects control characters in primary_key', () => {
    const parsed = parseRequestMessage(JSON.stringify({ ...valid, primary_key: 'a\nb' }));
    expect(parsed).toMatchObject({
      kind: 'invalid',
      errors: [
        'primary_key: must be well-formed text without control characters (C0, DEL, C1) or lone surrogates',
      ],
    });
  });

  it('rejects unknown fields inside verification', () => {
    const parsed = parseRequestMessage(
      JSON.stringify({ ...valid, verification: { ...valid.verification, extra: 1 } }),
    );
    expect(parsed).toMatchObject({
      kind: 'invalid',
      errors: [expect.stringContaining('verification: unknown field(s) "extra"')],
    });
  });

  it('keeps an upper-case request id in lower case, so both spellings have one fingerprint', () => {
    const lower = parseRequestMessage(JSON.stringify(valid));
    const upper = parseRequestMessage(
      JSON.stringify({ ...valid, request_id: valid.request_id.toUpperCase() }),
    );
    expect(upper).toMatchObject({ kind: 'valid', request: { request_id: valid.request_id } });
    expect(lower.kind === 'valid' && upper.kind === 'valid' && lower.fingerprint === upper.fingerprint).toBe(
      true,
    );
    const invalid = { ...valid, type: 'delete' };
    const invalidLower = parseRequestMessage(JSON.stringify(invalid));
    const invalidUpper = parseRequestMessage(
      JSON.stringify({ ...invalid, request_id: valid.request_id.toUpperCase() }),
    );
    expect(invalidUpper).toMatchObject({ kind: 'invalid', requestId: valid.request_id });
    expect(
      invalidLower.kind === 'invalid' &&
        invalidUpper.kind === 'invalid' &&
        invalidLower.fingerprint === invalidUpper.fingerprint,
    ).toBe(true);
    expect(normaliseRequestId('7D3C2F9E-1B4A-4C8E-9F2D-5A6B7C8D9E0F')).toBe(valid.request_id);
  });

  it('refuses a message with a repeated key, at any depth, naming the key', () => {
    const top = parseRequestMessage(
      JSON.stringify(valid).replace('"type":"access"', '"type":"access","type":"erasure"'),
    );
    expect(top).toEqual({
      kind: 'unusable',
      reason: expect.stringContaining('repeats the key "type" in one object'),
    });
    const nested = parseRequestMessage(
      JSON.stringify(valid).replace('"method":"email_link"', '"method":"email_link","method":"id_card"'),
    );
    expect(nested).toEqual({
      kind: 'unusable',
      reason: expect.stringContaining('repeats the key "verification.method"'),
    });
  });

  it('quarantines deeply nested arrays under the size limit instead of throwing', () => {
    const depth = 5000;
    const body = `{"request_id":"${valid.request_id}","reference":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    expect(Buffer.byteLength(body)).toBeLessThan(MAX_REQUEST_BYTES);
    expect(parseRequestMessage(body)).toEqual({
      kind: 'unusable',
      reason: 'message body is nested more than 32 levels deep',
    });
  });

  it.each([
    ['a C1 control character', 'u-\u0085-1'],
    ['a lone high surrogate', 'u-\ud800'],
    ['a lone low surrogate', '\udc00-u'],
  ])('rejects %s in primary_key as not well-formed', (_label, escaped) => {
    const body = JSON.stringify({ ...valid, primary_key: 'PLACEHOLDER' }).replace('PLACEHOLDER', escaped);
    expect(parseRequestMessage(body)).toMatchObject({
      kind: 'invalid',
      errors: [expect.stringContaining('primary_key: must be well-formed text')],
    });
  });

  it.each([
    ['a trailing space', 'u-alice '],
    ['a leading space', ' u-alice'],
    ['a trailing no-break space', 'u-alice\u00a0'],
    ['a leading zero-width space', '\u200bu-alice'],
    ['a trailing byte order mark', 'u-alice\ufeff'],
  ])('rejects a primary_key with %s, which would find no user', (_label, escaped) => {
    const body = JSON.stringify({ ...valid, primary_key: 'PLACEHOLDER' }).replace('PLACEHOLDER', escaped);
    expect(parseRequestMessage(body)).toMatchObject({
      kind: 'invalid',
      errors: [
        expect.stringContaining(
          'primary_key: holds an invisible character, a space other than a plain one, or a space at either end',
        ),
      ],
    });
  });

  // One member of each class the invisible set is built from, at the end and inside the key.
  it.each([
    ['a soft hyphen (Default_Ignorable, Cf)', '\u00ad'],
    ['a left-to-right mark (Bidi_Control)', '\u200e'],
    ['an invisible times (Cf, U+2062)', '\u2062'],
    ['a Mongolian vowel separator (Cf)', '\u180e'],
    ['a combining grapheme joiner (Default_Ignorable, Mn)', '\u034f'],
    ['a Hangul filler (Default_Ignorable, Lo)', '\u3164'],
    ['a braille pattern blank (blank-looking, So)', '\u2800'],
    ['a variation selector (Variation_Selector)', '\ufe0f'],
    ['a tag character (Default_Ignorable, Cf, astral)', '\udb40\udc41'],
    ['an ideographic space (White_Space other than U+0020)', '\u3000'],
  ])('rejects a primary_key with %s at the end or inside, which would find no user', (_label, escaped) => {
    for (const key of [`u-alice${escaped}`, `u-al${escaped}ice`]) {
      const body = JSON.stringify({ ...valid, primary_key: 'PLACEHOLDER' }).replace('PLACEHOLDER', key);
      expect(parseRequestMessage(body)).toMatchObject({
        kind: 'invalid',
        errors: [expect.stringContaining('primary_key: holds an invisible character')],
      });
    }
  });

  it('rejects a zero-width space inside a key, and keeps keys with visible non-ASCII letters and inner spaces', () => {
    expect(parseRequestMessage(JSON.stringify({ ...valid, primary_key: 'u-ha\u200bir' }))).toMatchObject({
      kind: 'invalid',
    });
    for (const key of ['u-ålice', 'u-al ice', 'Zoë Müller', '用户-42']) {
      expect(parseRequestMessage(JSON.stringify({ ...valid, primary_key: key }))).toMatchObject({
        kind: 'valid',
      });
    }
  });

  it.each([
    ['a left-to-right mark', '\u200e'],
    ['a right-to-left mark', '\u200f'],
    ['an Arabic letter mark', '\u061c'],
    ['a zero-width space', '\u200b'],
    ['a byte order mark', '\ufeff'],
  ])('refuses %s in a free-text field, as it reorders or hides what a terminal shows', (_label, char) => {
    expect(parseRequestMessage(JSON.stringify({ ...valid, reference: `DSR-1${char}042` }))).toMatchObject({
      kind: 'invalid',
      errors: [expect.stringContaining('reference: must be one line of plain text')],
    });
  });

  it('accepts an emoji joined with zero-width joiners in a free-text field', () => {
    expect(
      parseRequestMessage(
        JSON.stringify({ ...valid, reference: 'family \u{1f468}\u200d\u{1f469}\u200d\u{1f467}' }),
      ),
    ).toMatchObject({
      kind: 'valid',
    });
  });

  it('accepts a primary_key with spaces inside it', () => {
    expect(parseRequestMessage(JSON.stringify({ ...valid, primary_key: 'Jane Q Public' }))).toMatchObject({
      kind: 'valid',
    });
  });

  it('accepts an emoji and other non-ASCII text in primary_key', () => {
    expect(parseRequestMessage(JSON.stringify({ ...valid, primary_key: 'usér-😀-名前' }))).toMatchObject({
      kind: 'valid',
    });
  });

  it('rejects received_at and verified_at more than 5 minutes in the future', () => {
    const later = new Date(Date.now() + 10 * 60 * 1000).toISOString();
    const soon = new Date(Date.now() + 60 * 1000).toISOString();
    const parsed = parseRequestMessage(
      JSON.stringify({
        ...valid,
        received_at: later,
        verification: { ...valid.verification, verified_at: later },
      }),
    );
    expect(parsed).toMatchObject({
      kind: 'invalid',
      errors: [
        expect.stringMatching(/^received_at: is in the future/),
        expect.stringMatching(/^verification\.verified_at: is in the future/),
      ],
    });
    const skewed = parseRequestMessage(
      JSON.stringify({ ...valid, verification: { ...valid.verification, verified_at: soon } }),
    );
    expect(skewed.kind).toBe('valid');
  });

  it('accepts a lower-case t and z and a leap second, as RFC 3339 allows', () => {
    const parsed = parseRequestMessage(
      JSON.stringify({
        ...valid,
        received_at: '2016-12-31t23:59:60z',
        verification: { ...valid.verification, verified_at: '2026-11-02t10:00:00.5+01:00' },
      }),
    );
    expect(parsed).toMatchObject({ kind: 'valid' });
    expect(rfc3339Instant('2016-12-31t23:59:60z')?.toISOString()).toBe('2017-01-01T00:00:00.000Z');
    expect(rfc3339Instant('2026-11-02T10:00:00+01:00')?.toISOString()).toBe('2026-11-02T09:00:00.000Z');
    for (const wrong of [
      '2026-02-30T00:00:00Z',
      '2026-11-02T24:00:00Z',
      '2026-11-02T10:00:61Z',
      '2026-11-02 10:00:00Z',
    ]) {
      expect(rfc3339Instant(wrong)).toBeUndefined();
    }
  });

  it('says what a wrong-typed field should be and what it got, and "is required" only when absent', () => {
    const { reference: _absent, ...rest } = valid;
    const parsed = parseRequestMessage(
      JSON.stringify({ ...rest, primary_key: 42, type: null, verification: 'yes', submitted_by: ['x'] }),
    );
    expect(parsed).toMatchObject({ kind: 'invalid' });
    if (parsed.kind !== 'invalid') return;
    expect(parsed.errors).toEqual(
      expect.arrayContaining([
        'primary_key: must be a string, got a number',
        'verification: must be an object, got a string',
        'submitted_by: must be a string, got an array',
      ]),
    );
    const missing = parseRequestMessage(JSON.stringify({ ...rest, primary_key: undefined }));
    expect(missing.kind === 'invalid' && missing.errors).toEqual(['primary_key: is required']);
  });

  it('rejects an e-mail address or a URL as verification.method, which the audit trail would refuse', () => {
    for (const method of ['jane@example.com', 'https://idp.example.com/check']) {
      const parsed = parseRequestMessage(
        JSON.stringify({ ...valid, verification: { ...valid.verification, method } }),
      );
      expect(parsed).toMatchObject({
        kind: 'invalid',
        errors: [expect.stringContaining('verification.method: must name the method')],
      });
    }
  });
});
