// Statutory deadlines: due dates and extensions computed in the controller's time zone, with date arithmetic.
import type { Regulation } from './request.ts';

/** The statutory dates of one request, as ISO strings, computed at intake and stored in the ledger. */
export interface Deadlines {
  /** When the answer is due (before any extension): the last instant of the due day, local time. */
  readonly due_at: string;
  /** The latest due date an extension may set. */
  readonly extension_limit_at: string;
  /** CCPA only: when receipt must have been confirmed (10 business days). */
  readonly confirm_by: string | null;
}

/** The time zone deadlines are counted in when none is configured. */
export const DEFAULT_TIME_ZONE = 'UTC';

/** A calendar date, without a time or a zone (month 1-12). */
export interface CivilDate {
  readonly year: number;
  readonly month: number;
  readonly day: number;
}

/** True when `timeZone` is an IANA time zone this runtime knows (Node's Intl carries the full database). */
export function isTimeZone(timeZone: string): boolean {
  if (timeZone.trim() === '' || timeZone !== timeZone.trim()) return false;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone });
    return true;
  } catch {
    return false;
  }
}

/**
 * The statutory dates of a request received at `receivedAt`, counted on the controller's calendar in
 * `timeZone` (IANA). Every period starts on the local date of receipt, which itself does not count,
 * and ends with the last instant of its last local day. Nothing here extends a period past the law:
 * public holidays and a last day that falls on a weekend, which would extend some periods, are not
 * modelled, so a date here is never later than the statutory one.
 * - GDPR Art. 12(3): one month, extendable by two further months. Months follow Regulation 1182/71
 *   Art. 3(2)(c): the same date in the later month, or its last day when that date does not exist
 *   (31 January -> 28/29 February).
 * - CCPA (Civil Code 1798.130, regulations section 7021): 45 calendar days, extendable once by 45
 *   more (Civil Code section 10: the first day excluded, the last included); receipt confirmed within
 *   10 business days, Saturdays and Sundays skipped.
 */
export function computeDeadlines(
  regulation: Regulation,
  receivedAt: Date,
  timeZone: string = DEFAULT_TIME_ZONE,
): Deadlines {
  const received = localDateOf(receivedAt, timeZone);
  const endOf = (date: CivilDate) => endOfLocalDay(date, timeZone).toISOString();
  if (regulation === 'gdpr') {
    return {
      due_at: endOf(addMonths(received, 1)),
      extension_limit_at: endOf(addMonths(received, 3)),
      confirm_by: null,
    };
  }
  return {
    due_at: endOf(addDays(received, 45)),
    extension_limit_at: endOf(addDays(received, 90)),
    confirm_by: endOf(addBusinessDays(received, 10)),
  };
}

/** Why an extension cannot be granted, or the new due date. */
export type ExtensionDecision =
  | { readonly ok: true; readonly due_at: string }
  | { readonly ok: false; readonly reason: string };

/**
 * An extension is allowed once, with a reason, and only before the original deadline has passed
 * (both regimes require the subject to be told within the first period).
 */
export function decideExtension(
  current: { readonly due_at: string; readonly extension_limit_at: string; readonly extended: boolean },
  reason: string,
  now: Date,
): ExtensionDecision {
  if (reason.trim().length === 0) return { ok: false, reason: 'an extension needs a reason' };
  if (current.extended) return { ok: false, reason: 'the deadline has already been extended once' };
  if (now.getTime() >= Date.parse(current.due_at)) {
    return { ok: false, reason: `the original deadline ${current.due_at} has passed; extend only before it` };
  }
  return { ok: true, due_at: current.extension_limit_at };
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterFor(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat('en-US', {
      timeZone,
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      era: 'short',
    });
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/** The calendar date in `timeZone` at `instant`. */
export function localDateOf(instant: Date, timeZone: string): CivilDate {
  const parts = formatterFor(timeZone).formatToParts(instant);
  const part = (type: Intl.DateTimeFormatPartTypes) => Number(parts.find((p) => p.type === type)?.value);
  const year = part('year');
  // Years before the common era are written as positive numbers with an era of "BC".
  const era = parts.find((p) => p.type === 'era')?.value;
  return { year: era === 'BC' ? 1 - year : year, month: part('month'), day: part('day') };
}

/** -1, 0 or 1 as `a` is before, on or after `b`. */
export function compareDates(a: CivilDate, b: CivilDate): number {
  return Math.sign(a.year - b.year || a.month - b.month || a.day - b.day);
}

/**
 * The first instant of the local day `date` in `timeZone`. Found by bisection on the local date,
 * so a day that starts at 01:00 (clocks going forward at midnight) or any offset is handled alike.
 */
export function startOfLocalDay(date: CivilDate, timeZone: string): Date {
  const midnightUtc = Date.UTC(date.year, date.month - 1, date.day);
  // Every offset in the database lies within a day either way.
  let before = midnightUtc - 30 * HOUR_MS;
  let after = midnightUtc + 30 * HOUR_MS;
  while (after - before > 1) {
    const middle = Math.floor((before + after) / 2);
    if (compareDates(localDateOf(new Date(middle), timeZone), date) < 0) before = middle;
    else after = middle;
  }
  return new Date(after);
}

/** The last instant (millisecond) of the local day `date` in `timeZone`. */
export function endOfLocalDay(date: CivilDate, timeZone: string): Date {
  return new Date(startOfLocalDay(addDays(date, 1), timeZone).getTime() - 1);
}

/** `months` calendar months later, clamped to the month's last day (Regulation 1182/71 Art. 3(2)(c)). */
export function addMonths(date: CivilDate, months: number): CivilDate {
  const monthIndex = date.month - 1 + months;
  const lastDay = new Date(Date.UTC(date.year, monthIndex + 1, 0)).getUTCDate();
  return fromUtc(new Date(Date.UTC(date.year, monthIndex, Math.min(date.day, lastDay))));
}

/** `days` calendar days later. */
export function addDays(date: CivilDate, days: number): CivilDate {
  return fromUtc(new Date(Date.UTC(date.year, date.month - 1, date.day + days)));
}

/** `days` business days (Monday to Friday) after `date`, which itself does not count. */
export function addBusinessDays(date: CivilDate, days: number): CivilDate {
  let current = date;
  let left = days;
  while (left > 0) {
    current = addDays(current, 1);
    const weekday = new Date(Date.UTC(current.year, current.month - 1, current.day)).getUTCDay();
    if (weekday !== 0 && weekday !== 6) left -= 1;
  }
  return current;
}

function fromUtc(date: Date): CivilDate {
  return { year: date.getUTCFullYear(), month: date.getUTCMonth() + 1, day: date.getUTCDate() };
}

const HOUR_MS = 3600 * 1000;
