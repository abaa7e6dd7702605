import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { FaultKind, FaultProfile } from '#local/emulator/faults';
import { type RunningEmulator, startEmulator } from '#local/emulator/server';
import {
  EXPORT_TOKEN,
  exportUntilLink,
  getJson,
  putJson,
  query,
  retrievalSchema,
  SPOT_ID,
  ssoHeaders,
  testOptions,
} from './helpers.ts';

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startEmulator({ ...testOptions, port: 0 });
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(async () => {
  await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
});

async function useFaults(profile: FaultProfile): Promise<void> {
  const result = await putJson(`${emulator.url}/_emulator/faults`, profile);
  expect(result.status).toBe(200);
}

function retrieveAlice(url = emulator.url) {
  return fetch(`${url}/sso/v1/user/pk-alice`, { headers: ssoHeaders });
}

const callsSchema = z.object({
  calls: z.array(z.object({ path: z.string(), status: z.number().nullable(), fault: z.string().nullable() })),
});

describe('injected errors', () => {
  it.each<[FaultKind, string]>([
    ['500', 'internal_error'],
    ['502', 'bad_gateway'],
    ['503', 'service_unavailable'],
  ])('answers %s with a JSON body', async (kind, code) => {
    // Prepare
    await useFaults({ error_rate: 1, errors: [kind] });

    // Act
    const response = await retrieveAlice();

    // Assess
    expect(response.status).toBe(Number(kind));
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await response.json()).toMatchObject({ success: false, error: { code } });
  });

  it('answers 429 with Retry-After set to retry_after_seconds', async () => {
    // Prepare
    await useFaults({ error_rate: 1, errors: ['429'], retry_after_seconds: 7 });

    // Act
    const response = await retrieveAlice();

    // Assess
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('7');
  });

  it('stalls for timeout_ms, then answers 504', async () => {
    // Prepare
    await useFaults({ error_rate: 1, errors: ['timeout'], timeout_ms: 150 });
    const started = performance.now();

    // Act
    const response = await retrieveAlice();

    // Assess
    expect(response.status).toBe(504);
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
  });

  it('drops the connection without an answer on reset', async () => {
    // Prepare
    await useFaults({ error_rate: 1, errors: ['reset'] });

    // Act
    const outcome = retrieveAlice();

    // Assess
    await expect(outcome).rejects.toThrow();
  });

  it('records the injected fault in the call log', async () => {
    // Prepare
    await useFaults({ error_rate: 1, errors: ['503'] });

    // Act
    await retrieveAlice();

    // Assess
    const { calls } = callsSchema.parse((await getJson(`${emulator.url}/_emulator/calls`)).body);
    expect(calls.at(-1)).toMatchObject({ path: '/sso/v1/user/pk-alice', status: 503, fault: '503' });
  });

  it('never faults the control API', async () => {
    // Prepare
    await useFaults({ error_rate: 1, errors: ['reset'] });

    // Act
    const response = await fetch(`${emulator.url}/_emulator/users`);

    // Assess
    expect(response.status).toBe(200);
  });

  it('faults only paths under the listed prefixes', async () => {
    // Prepare
    await useFaults({ error_rate: 1, errors: ['500'], paths: ['/gdpr/'] });

    // Act
    const sso = await retrieveAlice();
    const exportCall = await fetch(
      `${emulator.url}/gdpr/export/status/1?${query({ access_token: EXPORT_TOKEN, spot_id: SPOT_ID })}`,
    );

    // Assess
    expect(sso.status).toBe(200);
    expect(exportCall.status).toBe(500);
  });

  it('injects roughly error_rate of the requests', async () => {
    // Prepare
    await useFaults({ seed: 3, error_rate: 0.3, errors: ['500'] });

    // Act
    const statuses = [];
    for (let index = 0; index < 100; index += 1) statuses.push((await retrieveAlice()).status);

    // Assess
    const faulted = statuses.filter((status) => status === 500).length;
    expect(faulted).toBeGreaterThan(15);
    expect(faulted).toBeLessThan(45);
  });
});

describe('truncated downloads', () => {
  it('sends the full Content-Length but cuts the body short', async () => {
    // Prepare
    await useFaults({ truncate_download_rate: 1, export_padding_bytes: 256 * 1024 });
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const response = await fetch(link);
    const announced = Number(response.headers.get('content-length'));
    let received = 0;
    let failed = false;
    try {
      const reader = response.body?.getReader();
      for (;;) {
        const chunk = await reader?.read();
        if (!chunk || chunk.done) break;
        received += chunk.value.length;
      }
    } catch {
      failed = true;
    }

    // Assess
    expect(announced).toBeGreaterThan(256 * 1024);
    expect(failed || received < announced).toBe(true);
    expect(received).toBeLessThan(announced);
    const { calls } = callsSchema.parse((await getJson(`${emulator.url}/_emulator/calls`)).body);
    expect(calls.at(-1)).toMatchObject({ path: '/_downloads/[redacted].zip', fault: 'truncate' });
  });

  it('truncates a small in-memory archive too', async () => {
    // Prepare
    await useFaults({ truncate_download_rate: 1 });
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const outcome = fetch(link).then((response) => response.arrayBuffer());

    // Assess
    await expect(outcome).rejects.toThrow();
  });
});

describe('determinism', () => {
  async function faultSequence(seed: number): Promise<number[]> {
    const other = await startEmulator({
      ...testOptions,
      faults: { seed, error_rate: 0.5, errors: ['500', '503', '429'] },
    });
    try {
      const statuses = [];
      for (let index = 0; index < 30; index += 1) statuses.push((await retrieveAlice(other.url)).status);
      return statuses;
    } finally {
      await other.close();
    }
  }

  it('repeats the same fault sequence for the same seed and a different one for another seed', async () => {
    // Act
    const first = await faultSequence(42);
    const again = await faultSequence(42);
    const otherSeed = await faultSequence(43);

    // Assess
    expect(again).toEqual(first);
    expect(otherSeed).not.toEqual(first);
    expect(new Set(first).size).toBeGreaterThan(2);
  });

  it('restarts the fault sequence when the same profile is put again', async () => {
    // Prepare
    await useFaults({ seed: 5, error_rate: 0.5, errors: ['500'] });
    const first = [];
    for (let index = 0; index < 20; index += 1) first.push((await retrieveAlice()).status);

    // Act
    await useFaults({ seed: 5, error_rate: 0.5, errors: ['500'] });
    const again = [];
    for (let index = 0; index < 20; index += 1) again.push((await retrieveAlice()).status);

    // Assess
    expect(again).toEqual(first);
  });

  async function suffixAndGuest(seed: number): Promise<{ userName: string; guest: string }> {
    const other = await startEmulator({ ...testOptions, faults: { seed } });
    try {
      const created = await getJson(
        `${other.url}/sso/v1/user?${query({ spot_id: SPOT_ID, primary_key: 'pk-twin', user_name: 'alice_w' })}`,
        {
          method: 'POST',
          headers: ssoHeaders,
        },
      );
      await fetch(`${other.url}/sso/v1/user/pk-bob`, { method: 'DELETE', headers: ssoHeaders });
      const users = z
        .object({ users: z.array(z.object({ registered: z.boolean(), user_name: z.string() })) })
        .parse((await getJson(`${other.url}/_emulator/users`)).body).users;
      return {
        userName: retrievalSchema.parse(created.body).user.user_name,
        guest: users.find((user) => !user.registered)?.user_name ?? '',
      };
    } finally {
      await other.close();
    }
  }

  it('picks the same user_name suffix and guest name for the same seed', async () => {
    // Act
    const first = await suffixAndGuest(9);
    const again = await suffixAndGuest(9);
    const otherSeed = await suffixAndGuest(10);

    // Assess
    expect(again).toEqual(first);
    expect(first.userName).toMatch(/^alice_w[a-z0-9]{4}$/);
    expect(otherSeed.userName).not.toBe(first.userName);
    expect(otherSeed.guest).not.toBe(first.guest);
  });

  it('fails the same exports for the same seed', async () => {
    // Prepare
    const outcomes = async () => {
      await useFaults({ seed: 21, export_failure_rate: 0.5, export_ready_after_polls: 0 });
      const statuses = [];
      for (let index = 0; index < 12; index += 1) {
        const started = await getJson(`${emulator.url}/gdpr/export`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ access_token: EXPORT_TOKEN, spot_id: SPOT_ID, user_id: 'u_bob' }),
        });
        const id = z.object({ id: z.number() }).parse(started.body).id;
        const polled = await getJson(
          `${emulator.url}/gdpr/export/status/${id}?${query({ access_token: EXPORT_TOKEN, spot_id: SPOT_ID })}`,
        );
        statuses.push(z.object({ status: z.string() }).parse(polled.body).status);
      }
      return statuses;
    };

    // Act
    const first = await outcomes();
    await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
    const again = await outcomes();

    // Assess
    expect(again).toEqual(first);
    expect(new Set(first)).toEqual(new Set(['completed', 'failed']));
  });
});

describe('shutdown', () => {
  it('closes promptly while a request is stalled by a timeout fault', async () => {
    // Prepare
    const other = await startEmulator({
      ...testOptions,
      faults: { error_rate: 1, errors: ['timeout'], timeout_ms: 600_000 },
    });
    const stalled = retrieveAlice(other.url).then(
      (response) => response.status,
      () => 'rejected',
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    const started = performance.now();

    // Act
    await other.close();

    // Assess
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(await stalled).toBe('rejected');
  });
});

describe('export_outcomes', () => {
  it('scripts the outcome of the n-th export ahead of the failure rate', async () => {
    const emulator = await startEmulator({
      faults: {
        export_outcomes: ['failed', 'completed'],
        export_failure_rate: 1,
        export_ready_after_polls: 0,
      },
      state: {
        spot_id: 'sp_demo',
        conversations: [],
        users: [{ primary_key: 'u-1', user_name: 'alice', svc_user_id: 'svc-1' }],
        comments: [],
        votes: [],
      },
    });
    try {
      const statuses: string[] = [];
      for (let n = 0; n < 3; n += 1) {
        const started = await fetch(`${emulator.url}/gdpr/export`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            access_token: emulator.exportToken,
            spot_id: emulator.spotId,
            user_id: 'svc-1',
          }),
        });
        const { id } = (await started.json()) as { id: number };
        const status = await fetch(
          `${emulator.url}/gdpr/export/status/${id}?access_token=${emulator.exportToken}&spot_id=${emulator.spotId}`,
        );
        statuses.push(((await status.json()) as { status: string }).status);
      }
      expect(statuses).toEqual(['failed', 'completed', 'failed']);
    } finally {
      await emulator.close();
    }
  });
});
