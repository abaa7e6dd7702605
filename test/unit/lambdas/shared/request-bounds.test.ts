import { describe, expect, it } from 'vitest';
import { parseRequestMessage, rfc3339Instant, safeParseRequest } from '#shared/request';

const valid = {
  request_id: '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f',
  type: 'access',
  regulation: 'gdpr',
  primary_key: 'u-1',
  received_at: '2026-11-02T09:30:00Z',
  verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-02T10:00:00Z' },
};

describe('the request_id of a submitted request', () => {
  it.each(['00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff'])(
    'refuses the placeholder %s at intake as unusable, saying why',
    (requestId) => {
      // Act
      const parsed = parseRequestMessage(JSON.stringify({ ...valid, request_id: requestId }));
      // Assess
      expect(parsed).toEqual({
        kind: 'unusable',
        reason:
          'request_id must be a UUID of its own, not the nil or max UUID (a placeholder every request would share), e.g. 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f, so the message cannot be recorded',
      });
    },
  );

  it('refuses the nil UUID in validation too, as submit --dry-run reads it', () => {
    const parsed = safeParseRequest({ ...valid, request_id: '00000000-0000-0000-0000-000000000000' });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues.map((issue) => issue.path.join('.'))).toEqual(['request_id']);
  });
});

describe('the dates of a submitted request', () => {
  it.each([
    ['received_at', { received_at: '0001-01-01T00:00:00Z' }],
    ['received_at', { received_at: '1999-12-31T23:59:59Z' }],
    ['received_at', { received_at: '2000-01-01T00:30:00+01:00' }],
    [
      'verification.verified_at',
      { verification: { ...valid.verification, verified_at: '0099-06-01T00:00:00Z' } },
    ],
  ])('refuses %s before 2000-01-01 with a message naming the year', (field, change) => {
    // Act
    const parsed = parseRequestMessage(JSON.stringify({ ...valid, ...change }));
    // Assess
    expect(parsed).toMatchObject({
      kind: 'invalid',
      errors: [`${field}: is before 2000-01-01: give the time it happened (check the year)`],
    });
  });

  it('accepts 2000-01-01 itself', () => {
    const parsed = parseRequestMessage(JSON.stringify({ ...valid, received_at: '2000-01-01T00:00:00Z' }));
    expect(parsed.kind).toBe('valid');
  });

  it('reads a year below 100 as that year, not as one in the 1900s', () => {
    expect(rfc3339Instant('0001-01-01T00:00:00Z')?.toISOString()).toBe('0001-01-01T00:00:00.000Z');
    expect(rfc3339Instant('0099-12-31T23:00:00-02:00')?.toISOString()).toBe('0100-01-01T01:00:00.000Z');
    // The year 0 is a leap year, as 2000 is and 1900 is not.
    expect(rfc3339Instant('0000-02-29T00:00:00Z')?.toISOString()).toBe('0000-02-29T00:00:00.000Z');
  });
});
