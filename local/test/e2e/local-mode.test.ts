import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gateSettingsFor, retriedThroughFaults, startLocalMode } from '#local/local-mode';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { DAY_SETTLE_MS } from '../../../lambdas/shared/audit-manifest.ts';
import { LATE_MS } from '../../../lambdas/shared/platform-gate.ts';

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

describe('local mode gate', () => {
  it('follows the limits the emulator enforces: a data dir restarted without --faults keeps its saved rate limit', async () => {
    // Prepare: a first run with a rate limit; its emulator saves the profile in the data dir.
    const dataDir = await mkdtemp(join(tmpdir(), 'gate-settings-'));
    const limited = { rate_limit: { requests_per_second: 20, burst: 20, max_open_exports: 5 } };
    try {
      const first = await startLocalMode({ dataDir, faults: limited, logSink: () => {} });
      const firstSettings = first.workflow.gate.settings;
      await first.close();

      // Act: the same data dir, no fault profile given.
      const second = await startLocalMode({ dataDir, logSink: () => {} });
      const secondSettings = second.workflow.gate.settings;
      await second.close();

      // Assess: the emulator still limits to 20/s and 5 exports, and so does the gate.
      const expected = gateSettingsFor(limited.rate_limit);
      for (const settings of [firstSettings, secondSettings]) {
        expect(settings).toMatchObject({
          requestsPerSecond: Number(expected.PLATFORM_REQUESTS_PER_SECOND),
          burst: Number(expected.PLATFORM_BURST),
          maxOpenExports: 5,
        });
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('retriedThroughFaults', () => {
  const throttled = () =>
    Object.assign(new Error('Rate of requests exceeds the allowed throughput.'), {
      name: 'ThrottlingException',
    });

  it("tries local mode's own work again while AWS throttles it, and answers what it finally gives", async () => {
    let calls = 0;
    const slept: number[] = [];
    const answer = await retriedThroughFaults(
      async () => {
        calls += 1;
        if (calls < 4) throw throttled();
        return 'read';
      },
      async (ms) => {
        slept.push(ms);
      },
    );
    expect(answer).toBe('read');
    expect(calls).toBe(4);
    expect(slept).toEqual([100, 200, 400]);
  });

  it('gives up after 10 throttled tries, and at once on an error that is not transient', async () => {
    let calls = 0;
    await expect(
      retriedThroughFaults(
        async () => {
          calls += 1;
          throw throttled();
        },
        async () => {},
      ),
    ).rejects.toThrow('Rate of requests exceeds');
    expect(calls).toBe(10);
    calls = 0;
    await expect(
      retriedThroughFaults(
        async () => {
          calls += 1;
          throw new Error('the ledger item does not match the schema');
        },
        async () => {},
      ),
    ).rejects.toThrow('does not match');
    expect(calls).toBe(1);
  });
});

describe('local mode deadline sweep', () => {
  it('sweeps at start as the schedule does in AWS: the daily manifest of the day before is written', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'local-sweep-'));
    try {
      // Act
      const mode = await startLocalMode({ dataDir, logSink: () => {} });
      const listed = await mode.workflow.s3.send(
        new ListObjectsV2Command({ Bucket: LOCAL_NAMES.auditBucket, Prefix: 'manifests/' }),
      );
      const { sweepEveryMs } = mode.workflow;
      await mode.close();

      // Assess: the stack's schedule (deadlineSweepMinutes, 60 by default), and yesterday's manifest.
      const yesterday = new Date(Date.now() - 24 * 3600 * 1000 - DAY_SETTLE_MS).toISOString().slice(0, 10);
      expect(sweepEveryMs).toBe(60 * 60_000);
      expect((listed.Contents ?? []).map((object) => object.Key)).toEqual([`manifests/${yesterday}.json`]);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('local mode submitting requests', () => {
  let dataDir: string;
  let mode: Awaited<ReturnType<typeof startLocalMode>>;
  const request = (primaryKey: string) => ({
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: new Date(Date.now() - 60_000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
  });

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'local-submit-'));
    mode = await startLocalMode({ dataDir, logSink: () => {} });
  }, 60_000);
  afterAll(async () => {
    await mode?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('holds no processed request in the SQS journals: its body, primary_key included, is gone once intake took it', async () => {
    // Prepare
    const primaryKey = `u-journal-${randomUUID()}`;
    const processed = request(primaryKey);
    // Act
    const [outcome] = await mode.submit([JSON.stringify(processed)]);
    await mode.idle();
    // Assess
    expect(outcome).toMatchObject({ kind: 'accepted', requestId: processed.request_id });
    expect((await mode.workflow.ledger.require(processed.request_id)).status).toBe('completed');
    const journals = (await readdir(join(dataDir, 'sqs'), { recursive: true })).filter((name) =>
      name.endsWith('journal.jsonl'),
    );
    expect(journals.length).toBeGreaterThan(0);
    for (const name of journals) {
      expect(await readFile(join(dataDir, 'sqs', name), 'utf8')).not.toContain(primaryKey);
    }
  }, 60_000);

  it('refuses a line past the queue size limit alone and takes the others', async () => {
    // Prepare: 8 MB, as one line of a --requests file
    const good = request('u-nobody-here');
    const huge = JSON.stringify({ ...request('u-nobody-here'), reference: 'x'.repeat(8_000_000) });
    // Act
    const outcomes = await mode.submit([JSON.stringify(good), huge]);
    // Assess
    expect(outcomes).toEqual([
      expect.objectContaining({ line: 1, kind: 'accepted', requestId: good.request_id }),
      {
        line: 2,
        kind: 'quarantined',
        reason: expect.stringMatching(
          /^the queue refused it: it is \d+ bytes, and a message may hold at most 262144$/,
        ),
      },
    ]);
  }, 60_000);
});
