import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { emulatorControl, type RunningEmulator, startEmulator } from '#local/emulator/server';
import {
  EXPORT_TOKEN,
  errorBodySchema,
  exportUntilLink,
  getJson,
  postJson,
  putJson,
  query,
  rawRequest,
  SPOT_ID,
  SSO_TOKEN,
  ssoHeaders,
  testOptions,
} from './helpers.ts';

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startEmulator({ ...testOptions, port: 0, faults: { export_ready_after_polls: 1 } });
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(async () => {
  await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
});

const control = (path: string) => `${emulator.url}/_emulator${path}`;

const callSchema = z.object({
  seq: z.number(),
  method: z.string(),
  path: z.string(),
  status: z.number().nullable(),
  fault: z.string().nullable(),
  credential: z
    .object({
      kind: z.string(),
      expected: z.string(),
      location: z.string(),
      name: z.string(),
      present: z.boolean(),
      valid: z.boolean(),
    })
    .nullable(),
  stray_credentials: z.array(z.object({ kind: z.string(), location: z.string(), name: z.string() })),
});
const callsSchema = z.object({ calls: z.array(callSchema), dropped: z.number() });

async function calls() {
  return callsSchema.parse((await getJson(control('/calls'))).body).calls;
}

describe('control API', () => {
  it('describes itself without any token', async () => {
    // Act
    const result = await getJson(control('/info'));

    // Assess
    expect(result.body).toMatchObject({ url: emulator.url, spot_id: SPOT_ID, activity_enabled: true });
    expect(JSON.stringify(result.body)).not.toContain(SSO_TOKEN);
    expect(JSON.stringify(result.body)).not.toContain(EXPORT_TOKEN);
  });

  it('resets the data, the call log and the fault profile', async () => {
    // Prepare
    await fetch(`${emulator.url}/sso/v1/user/pk-alice`, { method: 'DELETE', headers: ssoHeaders });
    await putJson(control('/faults'), { error_rate: 0.5 });

    // Act
    const reset = await getJson(control('/reset'), { method: 'POST' });

    // Assess
    expect(reset.body).toEqual({ success: true });
    expect((await getJson(control('/users/pk-alice'))).status).toBe(200);
    expect(await calls()).toEqual([]);
    expect((await getJson(control('/faults'))).body).toMatchObject({
      error_rate: 0,
      export_ready_after_polls: 1,
    });
  });

  it('loads a state document that later resets return to', async () => {
    // Prepare
    const other = await startEmulator({ ...testOptions });
    const document = {
      conversations: [{ id: 'k1', url: 'https://x.example/1', title: 'K' }],
      users: [{ primary_key: 'pk-zed', user_name: 'zed_z' }],
      comments: [{ id: 'z-1', primary_key: 'pk-zed', conversation_id: 'k1', text: 'Zed', written_at: 1 }],
    };
    try {
      // Act
      const loaded = await postJson(`${other.url}/_emulator/state`, document);
      await fetch(`${other.url}/_emulator/reset`, { method: 'POST' });

      // Assess
      expect(loaded).toEqual({
        status: 200,
        body: { success: true, spot_id: SPOT_ID, users: 1, comments: 1 },
      });
      expect((await getJson(`${other.url}/_emulator/users/pk-zed`)).status).toBe(200);
      expect((await getJson(`${other.url}/_emulator/users/pk-alice`)).status).toBe(404);
    } finally {
      await other.close();
    }
  });

  it('refuses an invalid state document with 400 naming each field', async () => {
    // Act
    const result = await postJson(control('/state'), {
      users: [{ primary_key: 'pk-1', user_name: 'ab' }],
      comments: [{ id: 'x', primary_key: 'pk-1', conversation_id: 'c', text: 't', written_at: 1 }],
      extra: true,
    });

    // Assess
    expect(result.status).toBe(400);
    const body = z
      .object({
        error: z.object({
          code: z.string(),
          problems: z.array(z.object({ field: z.string(), message: z.string() })),
        }),
      })
      .parse(result.body);
    expect(body.error.code).toBe('invalid_state');
    expect(body.error.problems.map((problem) => problem.field)).toEqual(
      expect.arrayContaining(['users[0].user_name', 'extra']),
    );
    expect((await getJson(control('/users/pk-alice'))).status).toBe(200);
  });

  it('reads and replaces the fault profile, filling defaults', async () => {
    // Act
    const put = await putJson(control('/faults'), { seed: 99, error_rate: 0.25 });
    const read = await getJson(control('/faults'));

    // Assess
    expect(put.status).toBe(200);
    expect(read.body).toEqual({
      seed: 99,
      error_rate: 0.25,
      errors: ['500', '503', '429', 'timeout', 'reset'],
      retry_after_seconds: 1,
      export_ready_after_polls: 2,
      export_failure_rate: 0,
      truncate_download_rate: 0,
      link_ttl_seconds: 5_184_000,
      timeout_ms: 30_000,
      export_id_shape: 'id_number',
      export_padding_bytes: 0,
      paths: ['/'],
      export_outcomes: [],
      rate_limit: null,
      outage: null,
    });
  });

  it('refuses an invalid fault profile with 400 and keeps the current one', async () => {
    // Act
    const result = await putJson(control('/faults'), { error_rate: 2, errors: ['404'], surprise: 1 });

    // Assess
    expect(result.status).toBe(400);
    const problems = z
      .object({ error: z.object({ problems: z.array(z.object({ field: z.string() })) }) })
      .parse(result.body).error.problems;
    expect(problems.map((problem) => problem.field).sort()).toEqual(['error_rate', 'errors[0]', 'surprise']);
    expect((await getJson(control('/faults'))).body).toMatchObject({ error_rate: 0 });
  });

  it('lists users with svc_user_id, and finds one by primary_key', async () => {
    // Act
    const list = z
      .object({ users: z.array(z.object({ primary_key: z.string().nullable(), svc_user_id: z.string() })) })
      .parse((await getJson(control('/users'))).body);
    const one = await getJson(control('/users/pk-bob'));
    const missing = await getJson(control('/users/pk-nobody'));

    // Assess
    expect(list.users.map((user) => [user.primary_key, user.svc_user_id])).toEqual([
      ['pk-alice', 'u_alice'],
      ['pk-bob', 'u_bob'],
      ['pk-carol', 'u_carol'],
    ]);
    expect(one.body).toMatchObject({
      user: { primary_key: 'pk-bob', svc_user_id: 'u_bob', registered: true },
    });
    expect(missing.status).toBe(404);
  });

  it('lists comments with their authors and votes', async () => {
    // Act
    const result = await getJson(control('/comments'));

    // Assess
    const comments = z
      .object({ comments: z.array(z.record(z.string(), z.unknown())) })
      .parse(result.body).comments;
    expect(comments).toHaveLength(5);
    expect(comments[0]).toMatchObject({
      id: 'c-1',
      author_primary_key: 'pk-alice',
      likes: 1,
      dislikes: 1,
      parent_id: null,
    });
  });

  it('lists exports with status, polls, dates, link expiry and size', async () => {
    // Prepare
    await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const result = await getJson(control('/exports'));

    // Assess
    const [listed] = z
      .object({ exports: z.array(z.record(z.string(), z.unknown())) })
      .parse(result.body).exports;
    expect(listed).toMatchObject({
      id: '1',
      svc_user_id: 'u_alice',
      status: 'completed',
      polls: 2,
      link_expired: false,
      byte_size: expect.any(Number),
    });
    expect(Date.parse(String(listed?.link_expires_at)) - Date.parse(String(listed?.link_created_at))).toBe(
      5_184_000_000,
    );
  });

  it('expires a link on request: 404 for an unknown export, 409 before the link exists', async () => {
    // Prepare
    const unknown = await getJson(control('/exports/42/expire'), { method: 'POST' });
    await postJson(`${emulator.url}/gdpr/export`, {
      access_token: EXPORT_TOKEN,
      spot_id: SPOT_ID,
      user_id: 'u_bob',
    });
    const early = await getJson(control('/exports/1/expire'), { method: 'POST' });
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const expired = await getJson(control('/exports/2/expire'), { method: 'POST' });

    // Assess
    expect(unknown.status).toBe(404);
    expect(early.status).toBe(409);
    expect(expired.body).toMatchObject({ success: true, export: { id: '2', link_expired: true } });
    expect((await fetch(link)).status).toBe(410);
  });

  it('switches the activity call on and off and refuses a non-boolean', async () => {
    // Act
    const off = await putJson(control('/activity'), { enabled: false });
    const read = await getJson(control('/activity'));
    const invalid = await putJson(control('/activity'), { enabled: 'no' });

    // Assess
    expect(off.body).toEqual({ enabled: false });
    expect(read.body).toEqual({ enabled: false });
    expect(invalid.status).toBe(400);
  });

  it('answers 404 listing the routes for an unknown control path', async () => {
    // Act
    const result = await getJson(control('/nothing-here'));

    // Assess
    expect(result.status).toBe(404);
    expect(JSON.stringify(result.body)).toContain('POST /_emulator/reset');
  });

  it('offers the same operations in-process', async () => {
    // Prepare
    const inProcess = emulatorControl(emulator);

    // Act
    inProcess.setActivityEnabled(false);
    const users = inProcess.users();

    // Assess
    expect(users).toHaveLength(3);
    expect((await getJson(control('/activity'))).body).toEqual({ enabled: false });
  });
});

describe('call log', () => {
  it('records method, redacted path, status and the credential presented, never a token value', async () => {
    // Prepare
    await fetch(
      `${emulator.url}/sso/v1/register-user?${query({ access_token: SSO_TOKEN, code_a: 'abc', primary_key: 'pk-log', user_name: 'logger' })}`,
    );
    await fetch(`${emulator.url}/sso/v1/user/pk-log`, { headers: ssoHeaders });
    await fetch(`${emulator.url}/sso/v1/user/pk-log`, {
      headers: { 'x-svc-sso-access-token': EXPORT_TOKEN },
    });
    await fetch(`${emulator.url}/sso/v1/user/pk-log`);
    const { link } = await exportUntilLink(emulator.url, 'u_alice');
    await fetch(link);
    await fetch(`${emulator.url}/v1/user/activity`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', apikey: EXPORT_TOKEN, 'x-spot-id': SPOT_ID },
      body: JSON.stringify({ profile_user_id: 'u_alice' }),
    });

    // Act
    const raw = (await fetch(control('/calls'))).text();
    const logged = await calls();

    // Assess
    const text = await raw;
    expect(text).not.toContain(SSO_TOKEN);
    expect(text).not.toContain(EXPORT_TOKEN);
    expect(text).not.toContain(link.split('/').at(-1)?.replace('.zip', ''));
    expect(logged.map((call) => [call.method, call.path, call.status])).toEqual([
      [
        'GET',
        '/sso/v1/register-user?access_token=[redacted]&code_a=[redacted]&primary_key=pk-log&user_name=logger',
        200,
      ],
      ['GET', '/sso/v1/user/pk-log', 200],
      ['GET', '/sso/v1/user/pk-log', 403],
      ['GET', '/sso/v1/user/pk-log', 401],
      ['POST', '/gdpr/export', 200],
      ['GET', '/gdpr/export/status/1?access_token=[redacted]&spot_id=sp_test', 200],
      ['GET', '/gdpr/export/status/1?access_token=[redacted]&spot_id=sp_test', 200],
      ['GET', '/_downloads/[redacted].zip', 200],
      ['POST', '/v1/user/activity', 200],
    ]);
    expect(logged[0]?.credential).toEqual({
      kind: 'sso_access_token',
      expected: 'sso_access_token',
      location: 'query',
      name: 'access_token',
      present: true,
      valid: true,
    });
    expect(logged[1]?.credential).toMatchObject({
      kind: 'sso_access_token',
      location: 'header',
      valid: true,
    });
    expect(logged[2]?.credential).toMatchObject({
      kind: 'export_token',
      expected: 'sso_access_token',
      valid: false,
    });
    expect(logged[3]?.credential).toMatchObject({ kind: 'none', present: false, valid: false });
    expect(logged[4]?.credential).toMatchObject({
      kind: 'export_token',
      location: 'body',
      name: 'access_token',
      valid: true,
    });
    expect(logged[7]?.credential).toBeNull();
    expect(logged[8]?.credential).toMatchObject({
      kind: 'export_token',
      location: 'header',
      name: 'apikey',
      valid: true,
    });
  });

  it('flags a token sent where the endpoint does not read it', async () => {
    // Act
    await fetch(`${emulator.url}/sso/v1/user/pk-bob?access_token=${SSO_TOKEN}`, { headers: ssoHeaders });

    // Assess
    const [call] = await calls();
    expect(call?.path).toBe('/sso/v1/user/pk-bob?access_token=[redacted]');
    expect(call?.stray_credentials).toEqual([
      { kind: 'sso_access_token', location: 'query', name: 'access_token' },
    ]);
  });

  it('keeps the credential of a faulted call', async () => {
    // Prepare
    await putJson(control('/faults'), { error_rate: 1, errors: ['503'] });

    // Act
    await fetch(`${emulator.url}/sso/v1/user/pk-bob`, { headers: ssoHeaders });

    // Assess
    const [call] = await calls();
    expect(call).toMatchObject({
      status: 503,
      fault: '503',
      credential: { kind: 'sso_access_token', valid: true },
    });
  });

  it('is emptied by DELETE /_emulator/calls', async () => {
    // Prepare
    await fetch(`${emulator.url}/sso/v1/user/pk-bob`, { headers: ssoHeaders });

    // Act
    const cleared = await getJson(control('/calls'), { method: 'DELETE' });

    // Assess
    expect(cleared.body).toEqual({ success: true });
    expect(await calls()).toEqual([]);
  });

  it('does not record control API requests', async () => {
    // Act
    await getJson(control('/users'));

    // Assess
    expect(await calls()).toEqual([]);
  });
});

describe('output hygiene', () => {
  it('writes nothing to stdout while serving requests, including refusals', async () => {
    // Prepare
    const write = vi.spyOn(process.stdout, 'write');

    // Act
    await fetch(`${emulator.url}/sso/v1/user/pk-bob`, { headers: ssoHeaders });
    await fetch(`${emulator.url}/sso/v1/user/pk-bob`, { headers: { 'x-svc-sso-access-token': 'bad' } });
    await rawRequest(
      `${emulator.url}/sso/v1/update-user?${query({ primary_key: 'pk-bob', user_name: 'x' })}`,
      {
        headers: ssoHeaders,
      },
    );
    await fetch(`${emulator.url}/nowhere`);

    // Assess
    expect(write).not.toHaveBeenCalled();
    write.mockRestore();
  });

  it('never echoes a token in an error body', async () => {
    // Act
    const bodies = await Promise.all([
      getJson(`${emulator.url}/sso/v1/user/pk-bob`, { headers: { 'x-svc-sso-access-token': EXPORT_TOKEN } }),
      getJson(`${emulator.url}/gdpr/export/status/1?${query({ access_token: SSO_TOKEN, spot_id: SPOT_ID })}`),
      postJson(`${emulator.url}/gdpr/export`, {
        access_token: EXPORT_TOKEN,
        spot_id: 'sp_wrong',
        user_id: 'u_bob',
      }),
      getJson(
        `${emulator.url}/sso/v1/user?${query({ spot_id: SPOT_ID, primary_key: 'p', user_name: SSO_TOKEN.slice(0, 20), access_token: SSO_TOKEN })}`,
        {
          method: 'POST',
          headers: ssoHeaders,
        },
      ),
    ]);

    // Assess
    for (const { status, body } of bodies) {
      expect(status).toBeGreaterThanOrEqual(400);
      errorBodySchema.parse(body);
      expect(JSON.stringify(body)).not.toContain(SSO_TOKEN);
      expect(JSON.stringify(body)).not.toContain(EXPORT_TOKEN);
    }
  });
});
