import { describe, expect, it } from 'vitest';
import { HISTORY_EVENT_LIMIT, SAFE_HISTORY_FRACTION } from '../../../lib/history-budget.ts';
import { REGIMES, simulateGate } from '../../bench/gate-simulation.ts';

/**
 * The gate simulation's small version (local/bench/gate-simulation.ts; `npm run bench` runs it at
 * GATE_SIM_REQUESTS): the product's step handlers for a drop through 25 export slots and 25 Lambda
 * environments, with every call, cold start, copy and hand-over taking virtual time.
 */
const REQUESTS = 200;
/** The slow regime polls each export about 75 times: fewer requests keep the suite's time. */
const SLOW_REQUESTS = 100;
const CONCURRENCY = 25;

describe('the gate in virtual time', () => {
  it('exports a drop of quick exports within the rate and the cap, with the clock never going back', async () => {
    // Prepare / Act
    const result = await simulateGate({
      requests: REQUESTS,
      regime: REGIMES[0] ?? fail(),
      concurrency: CONCURRENCY,
    });

    // Assess
    expect(result.callsAboveRate).toBe(0);
    expect(result.exportsAboveCap).toBe(0);
    expect(result.maxOpenExports).toBe(25);
    expect(result.unmeteredCalls).toBe(0);
    expect(result.backwardClockSteps).toBe(0);
    expect(result.exported).toBe(REQUESTS);
    expect(result.failed).toBe(0);
    expect(result.exportedBeforeMargin).toBe(1);
    // Several invocations ran at once, and their writes of the gate's rate item met.
    expect(result.concurrencyUsed).toBeGreaterThan(1);
    expect(result.concurrencyUsed).toBeLessThanOrEqual(CONCURRENCY);
    expect(result.gateConflicts.rate).toBeGreaterThan(0);
    // Work takes time: every copy at least a minute, and the slot is held through it.
    expect(result.copySeconds).toBeGreaterThanOrEqual(60);
    expect(result.slotHoldMinutes).toBeGreaterThan(result.copySeconds / 60);
    expect(result.coldStarts).toBeGreaterThanOrEqual(result.concurrencyUsed);
    expect(result.longestHistoryEvents).toBeLessThan(HISTORY_EVENT_LIMIT * SAFE_HISTORY_FRACTION);
  }, 180_000);

  it('exports a drop of slow exports the same way, the queued requests woken in turn', async () => {
    // Prepare / Act
    const result = await simulateGate({
      requests: SLOW_REQUESTS,
      regime: REGIMES[1] ?? fail(),
      concurrency: CONCURRENCY,
    });

    // Assess
    expect(result.callsAboveRate).toBe(0);
    expect(result.exportsAboveCap).toBe(0);
    expect(result.unmeteredCalls).toBe(0);
    expect(result.backwardClockSteps).toBe(0);
    expect(result.exported).toBe(SLOW_REQUESTS);
    expect(result.failed).toBe(0);
    expect(result.gateConflicts.rate).toBeGreaterThan(0);
    // A request queued behind others waits for its wake-up, not in a ramp of short waits.
    expect(result.slotWaits).toBeGreaterThan(0);
    expect(result.slotAttempts).toBeLessThan(3 * SLOW_REQUESTS);
    expect(result.waitingAtEnd).toBe(0);
  }, 180_000);

  it('counts the calls and export starts a platform stricter than the gate refuses', async () => {
    // Prepare / Act: the platform allows 2 calls a second and 3 open exports; the gate 10 and 25.
    const result = await simulateGate({
      requests: 20,
      regime: REGIMES[0] ?? fail(),
      concurrency: CONCURRENCY,
      platformRequestsPerSecond: 2,
      platformBurst: 2,
      platformMaxOpenExports: 3,
      timings: { exportMegabytes: [10, 20] },
    });

    // Assess: the platform model, not the gate, decides what is above its limits.
    expect(result.callsAboveRate).toBeGreaterThan(0);
    expect(result.exportsAboveCap).toBeGreaterThan(0);
    expect(result.maxOpenExports).toBeLessThanOrEqual(3);
    // The refused calls go back to the state machine's Retry, as the stack's do.
    expect(result.stepRetries).toBeGreaterThan(0);
    expect(result.backwardClockSteps).toBe(0);
  }, 120_000);
});

function fail(): never {
  throw new Error('the simulation has two regimes');
}
