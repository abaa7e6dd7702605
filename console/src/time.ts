/** Dates as the console shows them: in the controller's time zone, with the zone named. */

const DAY_MS = 24 * 3600 * 1000;

const formats = new Map<string, Intl.DateTimeFormat>();
function format(timeZone: string, withTime: boolean): Intl.DateTimeFormat {
  const name = `${timeZone}|${withTime}`;
  let made = formats.get(name);
  if (made === undefined) {
    made = new Intl.DateTimeFormat('en-CA', {
      timeZone,
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      ...(withTime ? { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' as const } : {}),
    });
    formats.set(name, made);
  }
  return made;
}

/** `2026-12-03` in the zone. */
export function localDate(instant: string | null, timeZone: string): string {
  if (instant === null) return '—';
  const date = new Date(instant);
  return Number.isNaN(date.getTime()) ? '—' : format(timeZone, false).format(date);
}

/** `2026-12-03 14:05` in the zone. */
export function localDateTime(instant: string | null, timeZone: string): string {
  if (instant === null) return '—';
  const date = new Date(instant);
  return Number.isNaN(date.getTime()) ? '—' : format(timeZone, true).format(date).replace(',', '');
}

/** Whole calendar days from today to the due date, both as dates in the zone (negative once past). */
export function daysLeft(dueAt: string | null, timeZone: string, now = new Date()): number | undefined {
  if (dueAt === null) return undefined;
  const due = Date.parse(`${localDate(dueAt, timeZone)}T00:00:00Z`);
  const today = Date.parse(`${format(timeZone, false).format(now)}T00:00:00Z`);
  return Number.isNaN(due) ? undefined : Math.round((due - today) / DAY_MS);
}

/** How pressing a deadline is: overdue, within 3 days, within 10, or not yet. */
export function risk(days: number | undefined): 'overdue' | 'urgent' | 'soon' | 'ok' | 'none' {
  if (days === undefined) return 'none';
  if (days < 0) return 'overdue';
  if (days <= 3) return 'urgent';
  if (days <= 10) return 'soon';
  return 'ok';
}

export function daysLeftText(days: number | undefined): string {
  if (days === undefined) return 'no deadline';
  if (days < 0) return `${-days} day${days === -1 ? '' : 's'} overdue`;
  if (days === 0) return 'due today';
  return `${days} day${days === 1 ? '' : 's'} left`;
}

/** The offset of `timeZone` from UTC at `ms`, in ms (east positive). */
function offsetMs(ms: number, timeZone: string): number {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    })
      .formatToParts(new Date(ms))
      .map((part) => [part.type, Number(part.value)]),
  ) as Record<string, number>;
  const wall = Date.UTC(
    parts.year ?? 0,
    (parts.month ?? 1) - 1,
    parts.day,
    parts.hour,
    parts.minute,
    parts.second,
  );
  return wall - Math.floor(ms / 1000) * 1000;
}

/** The instant of a wall-clock time (`2026-12-03T14:05`, as an input of type datetime-local gives it) in `timeZone`. */
export function instantInZone(wallClock: string, timeZone: string): string | undefined {
  const wall = Date.parse(wallClock.length === 16 ? `${wallClock}:00Z` : `${wallClock}Z`);
  if (Number.isNaN(wall)) return undefined;
  let guess = wall - offsetMs(wall, timeZone);
  guess = wall - offsetMs(guess, timeZone);
  return new Date(guess).toISOString();
}

/** Now as a wall-clock time in `timeZone`, for an input of type datetime-local. */
export function wallClockNow(timeZone: string, now = new Date()): string {
  return localDateTime(now.toISOString(), timeZone).replace(' ', 'T');
}
