import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { FaultProfile } from '#local/emulator/faults';
import { platformStatsSchema } from '#local/emulator/limits';
import { type RunningEmulator, startEmulator } from '#local/emulator/server';
import {
  EXPORT_TOKEN,
  exportUntilLink,
  getJson,
  putJson,
  SPOT_ID,
  ssoHeaders,
  testOptions,
} from './helpers.ts';

let emulator: RunningEmulator | undefined;
let clock = Date.parse('2026-11-23T10:00:00Z');

afterEach(async () => {
  await emulator?.close();
  emulator = undefined;
});

/** An emulator on a clock the test moves, so rates and windows are exact. */
async function start(faults: FaultProfile): Promise<RunningEmulator> {
  clock = Date.parse('2026-11-23T10:00:00Z');
  emulator = await startEmulator({ ...testOptions, faults, now: () => clock });
  return emulator;
}

function retrieve(running: RunningEmulator, primaryKey = 'pk-alice') {
  return fetch(`${running.url}/sso/v1/user/${primaryKey}`, { headers: ssoHeaders });
}

function startExport(running: RunningEmulator, svcUserId: string) {
  return fetch(`${running.url}/gdpr/export`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ access_token: EXPORT_TOKEN, spot_id: SPOT_ID, user_id: svcUserId }),
  });
}

async function stats(running: RunningEmulator) {
  const { status, body } = await getJson(`${running.url}/_emulator/stats`);
  expect(status).toBe(200);
  return platformStatsSchema.parse(body);
}

describe('rate_limit.requests_per_second and burst (a token bucket)', () => {
  it('answers 429 with Retry-After once the burst is spent, and again after the bucket refills', async () => {
    // Prepare
    const running = await start({ rate_limit: { requests_per_second: 2, burst: 3 } });

    // Act
    const burst = await Promise.all([1, 2, 3].map(() => retrieve(running)));
    const over = await retrieve(running);
    clock += 500; // half a second at 2 per second: one token back
    const refilled = await retrieve(running);
    const overAgain = await retrieve(running);

    // Assess
    expect(burst.map((response) => response.status)).toEqual([200, 200, 200]);
    expect(over.status).toBe(429);
    expect(over.headers.get('retry-after')).toBe('1');
    expect(await over.json()).toMatchObject({ success: false, error: { code: 'rate_limited' } });
    expect(refilled.status).toBe(200);
    expect(overAgain.status).toBe(429);
    const seen = await stats(running);
    expect(seen.throttled).toEqual({ total: 2, rate_limit: 2, open_exports: 0, fault: 0 });
    expect(seen.max_requests_per_second).toBe(6);
  });

  it('holds at most burst tokens however long it stays idle', async () => {
    // Prepare
    const running = await start({ rate_limit: { requests_per_second: 10, burst: 2 } });
    clock += 60_000;

    // Act
    const statuses = [];
    for (let index = 0; index < 3; index += 1) statuses.push((await retrieve(running)).status);

    // Assess
    expect(statuses).toEqual([200, 200, 429]);
  });

  it('never limits the control API, and records the limit in the call log', async () => {
    // Prepare
    const running = await start({ rate_limit: { requests_per_second: 1, burst: 1 } });
    await retrieve(running);

    // Act
    const limited = await retrieve(running);
    const control = await Promise.all([1, 2, 3].map(() => getJson(`${running.url}/_emulator/faults`)));
    const { body } = await getJson(`${running.url}/_emulator/calls`);

    // Assess
    expect(limited.status).toBe(429);
    expect(control.map((answer) => answer.status)).toEqual([200, 200, 200]);
    const calls = z
      .object({
        calls: z.array(
          z.object({ fault: z.string().nullable(), credential: z.object({ valid: z.boolean() }).nullable() }),
        ),
      })
      .parse(body).calls;
    expect(calls.map((call) => call.fault)).toEqual([null, 'rate_limit']);
    expect(calls[1]?.credential).toEqual(expect.objectContaining({ valid: true }));
  });
});

describe('rate_limit.max_open_exports', () => {
  it('answers 429 to one more export start while the cap is reached, and frees a slot on download', async () => {
    // Prepare
    const running = await start({ rate_limit: { max_open_exports: 2 }, export_ready_after_polls: 0 });
    const first = await exportUntilLink(running.url, 'u_alice');
    expect((await startExport(running, 'u_bob')).status).toBe(200);

    // Act
    const refused = await startExport(running, 'u_carol');
    const download = await fetch(first.link);
    await download.arrayBuffer();
    const allowed = await startExport(running, 'u_carol');

    // Assess
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    // Told apart from a rate-limit 429 by its code.
    expect(await refused.json()).toMatchObject({ success: false, error: { code: 'too_many_open_exports' } });
    expect(download.status).toBe(200);
    expect(allowed.status).toBe(200);
    const seen = await stats(running);
    expect(seen.max_open_exports).toBe(2);
    expect(seen.open_exports).toBe(2);
    expect(seen.throttled).toEqual({ total: 1, rate_limit: 0, open_exports: 1, fault: 0 });
  });

  it('frees a slot when an export fails or its link expires', async () => {
    // Prepare
    const running = await start({
      rate_limit: { max_open_exports: 1 },
      export_ready_after_polls: 0,
      export_outcomes: ['failed', 'completed'],
    });
    const poll = (id: number) =>
      fetch(`${running.url}/gdpr/export/status/${id}?access_token=${EXPORT_TOKEN}&spot_id=${SPOT_ID}`);
    expect((await startExport(running, 'u_alice')).status).toBe(200);
    const blocked = await startExport(running, 'u_bob');

    // Act
    expect(await (await poll(1)).json()).toEqual({ status: 'failed' });
    const afterFailure = await startExport(running, 'u_bob');
    await (await poll(2)).json();
    const blockedAgain = await startExport(running, 'u_carol');
    const expire = await fetch(`${running.url}/_emulator/exports/2/expire`, { method: 'POST' });
    const afterExpiry = await startExport(running, 'u_carol');

    // Assess
    expect(blocked.status).toBe(429);
    expect(afterFailure.status).toBe(200);
    expect(blockedAgain.status).toBe(429);
    expect(expire.status).toBe(200);
    expect(afterExpiry.status).toBe(200);
  });
});

describe('outage', () => {
  it('answers 503 on every platform endpoint during the window counted from the start, and not after', async () => {
    // Prepare
    const running = await start({ outage: { after_seconds: 10, duration_seconds: 5 } });
    const before = await retrieve(running);
    const { link } = await exportUntilLink(running.url, 'u_alice');

    // Act
    clock += 10_000;
    const during = await Promise.all([
      retrieve(running),
      startExport(running, 'u_bob'),
      fetch(link),
      fetch(`${running.url}/sso/v1/user/pk-bob`, { method: 'DELETE', headers: ssoHeaders }),
    ]);
    const control = await getJson(`${running.url}/_emulator/users`);
    clock += 5_000;
    const after = await retrieve(running);

    // Assess
    expect(before.status).toBe(200);
    expect(during.map((response) => response.status)).toEqual([503, 503, 503, 503]);
    expect(await during[0]?.json()).toMatchObject({ error: { code: 'service_unavailable' } });
    expect(control.status).toBe(200);
    expect(after.status).toBe(200);
    expect((await stats(running)).outage_answers).toBe(4);
  });

  it('is refused with a message naming the field when malformed', async () => {
    // Prepare
    const running = await start({});

    // Act
    const refused = await putJson(`${running.url}/_emulator/faults`, {
      outage: { after_seconds: -1, duration_seconds: 5 },
      rate_limit: { requests_per_second: 0, burst: 2, per_minute: 3 },
    });

    // Assess
    expect(refused.status).toBe(400);
    const text = JSON.stringify(refused.body);
    expect(text).toContain('outage.after_seconds');
    expect(text).toContain('rate_limit.requests_per_second');
    expect(text).toContain('per_minute');
  });
});

describe('GET /_emulator/stats', () => {
  it('reports the highest rate over a sliding second, exports started and deletions per subject', async () => {
    // Prepare
    const running = await start({ export_ready_after_polls: 0 });

    // Act: 3 requests, then 2 more 600 ms later (5 within one second), then 2 after 1.5 s
    await Promise.all([retrieve(running), retrieve(running), startExport(running, 'u_alice')]);
    clock += 600;
    await Promise.all([startExport(running, 'u_alice'), retrieve(running)]);
    clock += 1_500;
    await fetch(`${running.url}/sso/v1/user/pk-alice`, { method: 'DELETE', headers: ssoHeaders });
    await fetch(`${running.url}/sso/v1/user/pk-alice`, { method: 'DELETE', headers: ssoHeaders });
    const seen = await stats(running);
    await fetch(`${running.url}/_emulator/reset`, { method: 'POST' });
    const afterReset = await stats(running);

    // Assess
    expect(seen.max_requests_per_second).toBe(5);
    // Seven platform requests in all, answered or not.
    expect(seen.requests).toBe(7);
    expect(seen.max_open_exports).toBe(2);
    expect(seen.subjects).toEqual([
      { primary_key: 'pk-alice', svc_user_id: 'u_alice', exports_started: 2, deletes_succeeded: 1 },
    ]);
    expect(afterReset.max_requests_per_second).toBe(0);
    expect(afterReset.requests).toBe(0);
    expect(afterReset.subjects).toEqual([]);
  });
});

describe('snapshots saved before rate_limit and outage existed', () => {
  it('still load, with neither limit in effect', async () => {
    // Prepare
    const dir = await mkdtemp(join(tmpdir(), 'emulator-limits-'));
    const path = join(dir, 'platform.json');
    const first = await startEmulator({ ...testOptions, persistPath: path });
    await first.close();
    const saved = z
      .looseObject({ faults: z.looseObject({}) })
      .parse(JSON.parse(await readFile(path, 'utf8')));
    const { rate_limit: _rateLimit, outage: _outage, ...olderFaults } = saved.faults;
    await writeFile(path, JSON.stringify({ ...saved, faults: olderFaults }));

    // Act
    emulator = await startEmulator({ ...testOptions, persistPath: path });
    const faults = await getJson(`${emulator.url}/_emulator/faults`);

    // Assess
    expect(faults.body).toMatchObject({ rate_limit: null, outage: null });
    await emulator.close();
    emulator = undefined;
    await rm(dir, { recursive: true, force: true });
  });
});
