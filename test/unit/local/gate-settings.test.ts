import { describe, expect, it } from 'vitest';
import { gateSettingsFor } from '#local/local-mode';
import { LATE_MS } from '#shared/platform-gate';

describe('gateSettingsFor', () => {
  it('keeps the calls of any one second, late ones and a share for local delays included, within the emulator rate', () => {
    for (const requestsPerSecond of [2, 5, 10, 50, 100, 500]) {
      // Act
      const settings = gateSettingsFor({ requests_per_second: requestsPerSecond, burst: requestsPerSecond });
      const rate = Number(settings.PLATFORM_REQUESTS_PER_SECOND);
      const burst = Number(settings.PLATFORM_BURST);

      // Assess: the most the gate lets into a second, with 5% of it left for the time between
      // the gate's check and the emulator's count.
      expect(rate).toBeGreaterThanOrEqual(1);
      expect(burst).toBeGreaterThanOrEqual(1);
      if (requestsPerSecond >= 10) {
        expect(rate * (1 + LATE_MS / 1000) + burst + rate * 0.05).toBeLessThanOrEqual(requestsPerSecond);
      }
    }
    expect(gateSettingsFor({ requests_per_second: 50, burst: 50 })).toMatchObject({
      PLATFORM_REQUESTS_PER_SECOND: '42',
      PLATFORM_BURST: '1',
    });
  });

  it('gives an emulator without limits a gate that rarely has anyone wait', () => {
    expect(gateSettingsFor(undefined)).toMatchObject({
      PLATFORM_REQUESTS_PER_SECOND: '1000',
      PLATFORM_BURST: '1000',
      PLATFORM_MAX_OPEN_EXPORTS: '1000',
    });
  });
});
