import { describe, expect, it } from 'vitest';
import { jitteredSeconds, nextWaitSeconds, type PollSchedule } from '#shared/config';
import { DEFAULTS } from '#shared/defaults';

const stackDefault: PollSchedule = {
  initialSeconds: DEFAULTS.pollInitialSeconds,
  maxSeconds: DEFAULTS.pollMaxSeconds,
  budgetSeconds: DEFAULTS.pollBudgetSeconds,
  growthPercent: DEFAULTS.pollGrowthPercent,
};

/** The times, from the export's start, at which the schedule polls, without jitter. */
function pollTimes(schedule: PollSchedule, until: number): number[] {
  const times: number[] = [];
  let at = 0;
  while (at < until) {
    at += nextWaitSeconds(schedule, at);
    times.push(at);
  }
  return times;
}

describe('nextWaitSeconds', () => {
  it('doubles each wait from the first up to the cap at 100% growth', () => {
    // Prepare
    const schedule = { initialSeconds: 30, maxSeconds: 600, budgetSeconds: 3600, growthPercent: 100 };

    // Act
    const times = pollTimes(schedule, 2500);

    // Assess
    const waits = times.map((at, index) => at - (times[index - 1] ?? 0));
    expect(waits).toEqual([30, 60, 120, 240, 480, 600, 600, 600]);
  });

  it('notices an export ready at any time from 10 minutes to 40 hours within 5% of that time, by default', () => {
    // Prepare
    const times = pollTimes(stackDefault, 40 * 3600 + DEFAULTS.pollMaxSeconds);

    // Act: for each moment an export may become ready, the first poll at or after it.
    const worst = { lateness: 0, readyAt: 0 };
    for (let readyAt = 600; readyAt <= 40 * 3600; readyAt += 7) {
      const noticed = times.find((at) => at >= readyAt) ?? Number.POSITIVE_INFINITY;
      const lateness = (noticed - readyAt) / readyAt;
      if (lateness > worst.lateness) Object.assign(worst, { lateness, readyAt });
    }

    // Assess: 5% of the time waited plus the first wait, and the rounding.
    expect(worst.lateness).toBeLessThanOrEqual(0.05 * (1 + 30 / 600) + 1 / 600);
    expect(worst.lateness).toBeGreaterThan(0.04);
    // Before 10 minutes the 30-second floor sets the pace: a poll every 30 s.
    expect(times.filter((at) => at <= 600)).toEqual(
      Array.from({ length: 20 }, (_, index) => 30 * (index + 1)),
    );
  });

  it('never waits less than the first wait nor more than the cap, whatever the growth', () => {
    for (const growthPercent of [1, 5, 15, 50, 100]) {
      // Prepare
      const schedule = { initialSeconds: 45, maxSeconds: 3600, budgetSeconds: 86_400, growthPercent };

      // Act
      const times = pollTimes(schedule, 86_400);
      const waits = times.map((at, index) => at - (times[index - 1] ?? 0));

      // Assess
      expect(Math.min(...waits)).toBe(45);
      expect(Math.max(...waits)).toBeLessThanOrEqual(3600);
      for (let index = 1; index < waits.length; index++) {
        expect(waits[index]).toBeGreaterThanOrEqual(waits[index - 1] ?? 0);
      }
    }
  });

  it('polls a 15-minute export 28 times by default where doubling waits polled it 5 times', () => {
    // Prepare
    const doubling = { ...stackDefault, maxSeconds: 1800, growthPercent: 100 };

    // Act
    const polled = (schedule: PollSchedule) => pollTimes(schedule, 900).length;

    // Assess: the price of noticing a ready export sooner (docs/cost.md).
    expect([polled(stackDefault), polled(doubling)]).toEqual([28, 5]);
  });

  it('keeps the jitter above the schedule, so the worst case of polls still holds', () => {
    // Prepare
    const wait = nextWaitSeconds(stackDefault, 3600);

    // Act
    const jittered = [0, 0.5, 1].map((draw) => jitteredSeconds(wait, () => draw));

    // Assess
    expect(jittered[0]).toBe(wait);
    expect(jittered[2]).toBe(Math.round(wait * 1.2));
  });
});
