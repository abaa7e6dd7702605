import { describe, expect, it } from 'vitest';
import { MAX_REQUEST_BYTES, parseRequestMessage } from '#shared/request';

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

  it('calls a body that is not JSON unusable', () => {
    expect(parseRequestMessage('{nope')).toEqual({ kind: 'unusable', reason: 'message body is not JSON' });
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
        'type: must be "access" or "erasure"',
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
      errors: ['primary_key: must not contain control characters'],
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
});
