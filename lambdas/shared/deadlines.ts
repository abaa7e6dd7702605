import type { Regulation } from './request.ts';

/** The statutory dates of one request, as ISO strings, computed at intake and stored in the ledger. */
export interface Deadlines {
  /** When the answer is due (before any extension). */
  readonly due_at: string;
  /** The latest due date an extension may set. */
  readonly extension_limit_at: string;
  /** CCPA only: when receipt must have been confirmed (10 business days). */
  readonly confirm_by: string | null;
}

const DAY_MS = 24 * 3600 * 1000;

/**
 * GDPR Art. 12(3): one month from receipt, extendable by two further months. Months follow
 * Regulation 1182/71: the same date in the later month, or its last day when that date does not
 * exist (31 January -> 28/29 February).
 * CCPA regulations section 7021: 45 calendar days, extendable once by 45 more; receipt confirmed within
 * 10 business days. Business days skip Saturdays and Sundays; public holidays are not modelled, so
 * the confirmation date is never later than the statutory one.
 */
export function computeDeadlines(regulation: Regulation, receivedAt: Date): Deadlines {
  if (regulation === 'gdpr') {
    const due = addCalendarMonths(receivedAt, 1);
    return { due_at: iso(due), extension_limit_at: iso(addCalendarMonths(receivedAt, 3)), confirm_by: null };
  }
  return {
    due_at: iso(new Date(receivedAt.getTime() + 45 * DAY_MS)),
    extension_limit_at: iso(new Date(receivedAt.getTime() + 90 * DAY_MS)),
    confirm_by: iso(addBusinessDays(receivedAt, 10)),
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

/** Adds calendar months in UTC, clamping to the month's last day. */
export function addCalendarMonths(from: Date, months: number): Date {
  const year = from.getUTCFullYear();
  const month = from.getUTCMonth() + months;
  const lastDay = new Date(Date.UTC(year, month + 1, 0)).getUTCDate();
  const day = Math.min(from.getUTCDate(), lastDay);
  return new Date(
    Date.UTC(
      year,
      month,
      day,
      from.getUTCHours(),
      from.getUTCMinutes(),
      from.getUTCSeconds(),
      from.getUTCMilliseconds(),
    ),
  );
}

/** Adds business days (Monday to Friday) in UTC. */
export function addBusinessDays(from: Date, days: number): Date {
  let date = new Date(from.getTime());
  let left = days;
  while (left > 0) {
    date = new Date(date.getTime() + DAY_MS);
    const weekday = date.getUTCDay();
    if (weekday !== 0 && weekday !== 6) left -= 1;
  }
  return date;
}

function iso(date: Date): string {
  return date.toISOString();
}
