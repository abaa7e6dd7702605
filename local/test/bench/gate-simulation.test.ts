import { describe, expect, it } from 'vitest';
import { HISTORY_EVENT_LIMIT, SAFE_HISTORY_FRACTION } from '../../../lib/history-budget.ts';
import { REGIMES, simulateGate } from '../../bench/gate-simulation.ts';

/**
 * The gate simulation's small version (local/bench/gate-simulation.ts, `npm run bench` runs 50,000): a
 * drop through four export slots, so requests queue for hours. The second regime's deadline is two
 * days with a one-day margin, so the queue cannot drain before the margin at this size either.
 */
const REQUESTS = 40;
const SLOTS = 2;

describe('the gate in virtual time', () => {
  it('exports a drop of quick exports before the deadline margin, within the rate and the cap', async () => {
    // Prepare / Act
    const result = await simulateGate({
      requests: REQUESTS,
      regime: REGIMES[0] ?? fail(),
      maxOpenExports: SLOTS,
    });

    // Assess
    expect(result.callsAboveRate).toBe(0);
    expect(result.exportsAboveCap).toBe(0);
    expect(result.maxOpenExports).toBe(SLOTS);
    expect(result.unmeteredCalls).toBe(0);
    expect(result.exportedBeforeMargin).toBeGreaterThanOrEqual(0.999);
    expect(result.failed).toBe(0);
    // A request queued behind others waits for its wake-up, not in a ramp of short waits: the
    // StartExport runs grow with the slots handed over.
    expect(result.slotAttempts).toBeLessThan(3 * REQUESTS);
    expect(result.longestHistoryEvents).toBeLessThan(HISTORY_EVENT_LIMIT * SAFE_HISTORY_FRACTION);
  }, 120_000);

  it('alarms every request not exported by the margin, which keeps waiting in its place', async () => {
    // Prepare / Act
    const result = await simulateGate({
      requests: REQUESTS,
      regime: REGIMES[1] ?? fail(),
      maxOpenExports: SLOTS,
      deadlineDays: 2,
      marginDays: 1,
    });

    // Assess
    expect(result.callsAboveRate).toBe(0);
    expect(result.exportsAboveCap).toBe(0);
    expect(result.unmeteredCalls).toBe(0);
    expect(result.unfinishedAtMargin).toBeGreaterThan(REQUESTS / 4);
    expect(result.alarmedAtMargin).toBe(1);
    expect(result.failed).toBe(0);
    expect(result.waitingAtEnd).toBeGreaterThan(0);
    expect(result.waitersInOrder).toBe(true);
    expect(result.slotAttempts).toBeLessThan(3 * REQUESTS);
  }, 120_000);
});

function fail(): never {
  throw new Error('the simulation has two regimes');
}
