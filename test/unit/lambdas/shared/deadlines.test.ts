import { describe, expect, it } from 'vitest';
import {
  addBusinessDays,
  addDays,
  addMonths,
  computeDeadlines,
  decideExtension,
  isTimeZone,
  localDateOf,
  startOfLocalDay,
} from '#shared/deadlines';

describe('computeDeadlines', () => {
  it('gives GDPR one calendar month and a three-month extension limit, to the end of the local day', () => {
    const deadlines = computeDeadlines('gdpr', new Date('2026-03-15T10:00:00Z'));
    expect(deadlines).toEqual({
      due_at: '2026-04-15T23:59:59.999Z',
      extension_limit_at: '2026-06-15T23:59:59.999Z',
      confirm_by: null,
    });
  });

  it('clamps a GDPR month that lacks the day to its last day, 29 February in a leap year', () => {
    expect(computeDeadlines('gdpr', new Date('2026-01-31T08:00:00Z')).due_at).toBe(
      '2026-02-28T23:59:59.999Z',
    );
    expect(computeDeadlines('gdpr', new Date('2028-01-31T08:00:00Z')).due_at).toBe(
      '2028-02-29T23:59:59.999Z',
    );
    expect(computeDeadlines('gdpr', new Date('2026-03-31T08:00:00Z')).due_at).toBe(
      '2026-04-30T23:59:59.999Z',
    );
  });

  it('counts a GDPR request received on 29 February from that date', () => {
    const deadlines = computeDeadlines('gdpr', new Date('2028-02-29T12:00:00Z'));
    expect(deadlines.due_at).toBe('2028-03-29T23:59:59.999Z');
    expect(deadlines.extension_limit_at).toBe('2028-05-29T23:59:59.999Z');
    // A year later has no 29 February: the CCPA count is in days, so it needs no clamp.
    expect(computeDeadlines('ccpa', new Date('2028-02-29T12:00:00Z')).due_at).toBe(
      '2028-04-14T23:59:59.999Z',
    );
  });

  it('counts GDPR on the local date of receipt, not the UTC one (the 28 February case)', () => {
    // 2026-02-28T23:30-01:00 is 1 March in UTC, but 28 February for a controller in the Azores:
    // due at the end of 28 March there (still UTC-1: summer time starts on 29 March).
    const azores = computeDeadlines('gdpr', new Date('2026-02-28T23:30:00-01:00'), 'Atlantic/Azores');
    expect(azores.due_at).toBe('2026-03-29T00:59:59.999Z');
    // The same instant for a controller in Berlin is 1 March, 01:30: due at the end of 1 April (CEST).
    const berlin = computeDeadlines('gdpr', new Date('2026-02-28T23:30:00-01:00'), 'Europe/Berlin');
    expect(berlin.due_at).toBe('2026-04-01T21:59:59.999Z');
  });

  it('ends a deadline that falls on a daylight-saving change at the end of that local day', () => {
    // Berlin's clocks go forward on 29 March 2026: 28 March still ends at 23:00Z (CET).
    expect(computeDeadlines('gdpr', new Date('2026-02-28T12:00:00Z'), 'Europe/Berlin').due_at).toBe(
      '2026-03-28T22:59:59.999Z',
    );
    // 45 days from 12 February is 29 March, the 23-hour day itself: it ends at 22:00Z (CEST).
    expect(computeDeadlines('ccpa', new Date('2026-02-12T12:00:00Z'), 'Europe/Berlin').due_at).toBe(
      '2026-03-29T21:59:59.999Z',
    );
  });

  it('handles offsets east of UTC past the date line', () => {
    // 2026-06-30T13:00Z is already 1 July in Kiritimati (UTC+14).
    const deadlines = computeDeadlines('ccpa', new Date('2026-06-30T13:00:00Z'), 'Pacific/Kiritimati');
    expect(deadlines.due_at).toBe('2026-08-15T09:59:59.999Z');
  });

  it('gives CCPA 45 days, 90 with extension, and a 10-business-day confirmation', () => {
    // Friday 2026-11-20: ten business days later is Friday 2026-12-04.
    const deadlines = computeDeadlines('ccpa', new Date('2026-11-20T12:00:00Z'));
    expect(deadlines).toEqual({
      due_at: '2027-01-04T23:59:59.999Z',
      extension_limit_at: '2027-02-18T23:59:59.999Z',
      confirm_by: '2026-12-04T23:59:59.999Z',
    });
  });

  it('counts a Sunday-evening receipt in California from that Sunday, not from the UTC Monday', () => {
    // Sunday 2026-11-22, 20:00 PST is Monday 04:00Z. Ten business days from the Sunday end on
    // Friday 4 December (from Monday they would run to Monday 7 December, three days late).
    const deadlines = computeDeadlines('ccpa', new Date('2026-11-22T20:00:00-08:00'), 'America/Los_Angeles');
    expect(deadlines).toEqual({
      confirm_by: '2026-12-05T07:59:59.999Z',
      due_at: '2027-01-07T07:59:59.999Z',
      extension_limit_at: '2027-02-21T07:59:59.999Z',
    });
  });

  it('counts a Saturday receipt from the Monday after', () => {
    const deadlines = computeDeadlines('ccpa', new Date('2026-11-21T10:00:00Z'));
    expect(deadlines.confirm_by).toBe('2026-12-04T23:59:59.999Z');
  });

  it('crosses a year end and a month end', () => {
    expect(computeDeadlines('gdpr', new Date('2026-12-31T00:00:00Z')).due_at).toBe(
      '2027-01-31T23:59:59.999Z',
    );
    expect(computeDeadlines('gdpr', new Date('2026-12-31T00:00:00Z')).extension_limit_at).toBe(
      '2027-03-31T23:59:59.999Z',
    );
    expect(computeDeadlines('gdpr', new Date('2026-11-30T00:00:00Z')).extension_limit_at).toBe(
      '2027-02-28T23:59:59.999Z',
    );
  });

  it('is never later than the UTC count for a controller west of UTC on the same local date', () => {
    for (const at of ['2026-01-01T00:30:00Z', '2026-07-15T06:59:00Z', '2028-02-29T03:00:00Z']) {
      for (const regulation of ['gdpr', 'ccpa'] as const) {
        const local = computeDeadlines(regulation, new Date(at), 'America/Los_Angeles');
        const received = localDateOf(new Date(at), 'America/Los_Angeles');
        const dueDay = localDateOf(new Date(local.due_at), 'America/Los_Angeles');
        // The due day is the statutory one counted from the local date of receipt, ending that day.
        const expected = regulation === 'gdpr' ? addMonths(received, 1) : addDays(received, 45);
        expect(dueDay).toEqual(expected);
        expect(localDateOf(new Date(Date.parse(local.due_at) + 1), 'America/Los_Angeles')).toEqual(
          addDays(expected, 1),
        );
      }
    }
  });
});

describe('addMonths', () => {
  it('crosses a year end', () => {
    expect(addMonths({ year: 2026, month: 12, day: 31 }, 2)).toEqual({ year: 2027, month: 2, day: 28 });
  });
});

describe('addBusinessDays', () => {
  it('skips the weekend', () => {
    // Saturday + 1 business day = Monday
    expect(addBusinessDays({ year: 2026, month: 11, day: 21 }, 1)).toEqual({
      year: 2026,
      month: 11,
      day: 23,
    });
  });
});

describe('startOfLocalDay', () => {
  it('finds a day that begins at 01:00 because the clocks went forward at midnight', () => {
    // Chile's clocks went forward at midnight on 6 September 2026: that day begins at 01:00 -03.
    expect(startOfLocalDay({ year: 2026, month: 9, day: 6 }, 'America/Santiago').toISOString()).toBe(
      '2026-09-06T04:00:00.000Z',
    );
  });
});

describe('isTimeZone', () => {
  it('accepts IANA zones and refuses anything else', () => {
    expect(isTimeZone('Europe/Paris')).toBe(true);
    expect(isTimeZone('UTC')).toBe(true);
    expect(isTimeZone('Mars/Olympus_Mons')).toBe(false);
    expect(isTimeZone('')).toBe(false);
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
