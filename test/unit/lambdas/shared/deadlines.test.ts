import { describe, expect, it } from 'vitest';
import { addBusinessDays, addCalendarMonths, computeDeadlines, decideExtension } from '#shared/deadlines';

describe('computeDeadlines', () => {
  it('gives GDPR one calendar month and a three-month extension limit', () => {
    const deadlines = computeDeadlines('gdpr', new Date('2026-03-15T10:00:00Z'));
    expect(deadlines).toEqual({
      due_at: '2026-04-15T10:00:00.000Z',
      extension_limit_at: '2026-06-15T10:00:00.000Z',
      confirm_by: null,
    });
  });

  it('clamps a GDPR month that lacks the day to its last day', () => {
    expect(computeDeadlines('gdpr', new Date('2026-01-31T08:00:00Z')).due_at).toBe(
      '2026-02-28T08:00:00.000Z',
    );
    expect(computeDeadlines('gdpr', new Date('2028-01-31T08:00:00Z')).due_at).toBe(
      '2028-02-29T08:00:00.000Z',
    );
  });

  it('gives CCPA 45 days, 90 with extension, and a 10-business-day confirmation', () => {
    // Friday 2026-11-20: ten business days later is Friday 2026-12-04.
    const deadlines = computeDeadlines('ccpa', new Date('2026-11-20T12:00:00Z'));
    expect(deadlines).toEqual({
      due_at: '2027-01-04T12:00:00.000Z',
      extension_limit_at: '2027-02-18T12:00:00.000Z',
      confirm_by: '2026-12-04T12:00:00.000Z',
    });
  });
});

describe('addCalendarMonths', () => {
  it('crosses a year end', () => {
    expect(addCalendarMonths(new Date('2026-12-31T00:00:00Z'), 2).toISOString()).toBe(
      '2027-02-28T00:00:00.000Z',
    );
  });
});

describe('addBusinessDays', () => {
  it('skips the weekend', () => {
    // Saturday + 1 business day = Monday
    expect(addBusinessDays(new Date('2026-11-21T00:00:00Z'), 1).toISOString()).toBe(
      '2026-11-23T00:00:00.000Z',
    );
  });
});

describe('decideExtension', () => {
  const current = {
    due_at: '2026-04-15T10:00:00.000Z',
    extension_limit_at: '2026-06-15T10:00:00.000Z',
    extended: false,
  };

  it('moves the deadline to the limit when asked in time with a reason', () => {
    expect(decideExtension(current, 'complex request', new Date('2026-04-01T00:00:00Z'))).toEqual({
      ok: true,
      due_at: '2026-06-15T10:00:00.000Z',
    });
  });

  it('refuses without a reason', () => {
    expect(decideExtension(current, '  ', new Date('2026-04-01T00:00:00Z'))).toMatchObject({ ok: false });
  });

  it('refuses after the original deadline', () => {
    const decision = decideExtension(current, 'late', new Date('2026-04-15T10:00:00Z'));
    expect(decision).toEqual({ ok: false, reason: expect.stringContaining('has passed') });
  });

  it('refuses a second extension', () => {
    const decision = decideExtension(
      { ...current, extended: true },
      'again',
      new Date('2026-04-01T00:00:00Z'),
    );
    expect(decision).toEqual({ ok: false, reason: expect.stringContaining('already') });
  });
});
