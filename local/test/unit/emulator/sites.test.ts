import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  EmulatorConfigError,
  emulatorControl,
  type RunningEmulator,
  startEmulator,
} from '#local/emulator/server';
import { type EmulatorState, parseEmulatorState } from '#local/emulator/state';
import { errorBodySchema, getJson, postJson, query, TEST_STATE, testOptions } from './helpers.ts';

const SITES = [
  { spot_id: 'sp_north', sso: 'sso-north-Zm9yZXN0', exp: 'export-north-bGFrZXM' },
  { spot_id: 'sp_south', sso: 'sso-south-ZGVzZXJ0', exp: 'export-south-ZHVuZXM' },
  { spot_id: 'sp_east', sso: 'sso-east-b2NlYW4', exp: 'export-east-d2F2ZXM' },
] as const;

/** Each site has one user of its own, and pk-shared exists on north and south as two users. */
const MULTI_STATE: EmulatorState = {
  sites: SITES.map((site, index) => ({
    spot_id: site.spot_id,
    sso_access_token: site.sso,
    export_token: site.exp,
    users: [
      { primary_key: `pk-${site.spot_id}`, svc_user_id: `u_${site.spot_id}` },
      ...(index < 2 ? [{ primary_key: 'pk-shared', svc_user_id: `u_shared_${index}` }] : []),
    ],
  })),
};

let running: RunningEmulator | undefined;
let folder: string | undefined;

afterEach(async () => {
  await running?.close();
  running = undefined;
  if (folder) await rm(folder, { recursive: true, force: true });
  folder = undefined;
});

function site(index: 0 | 1 | 2) {
  return SITES[index];
}

function retrieve(url: string, ssoToken: string, primaryKey: string) {
  return getJson(`${url}/sso/v1/user/${primaryKey}`, {
    headers: { 'x-svc-sso-access-token': ssoToken },
  });
}

function startExport(url: string, exportToken: string, spotId: string, userId: string) {
  return postJson(`${url}/gdpr/export`, { access_token: exportToken, spot_id: spotId, user_id: userId });
}

const userSchema = z.object({ success: z.literal(true), user: z.object({ svc_user_id: z.string() }) });
const idSchema = z.object({ id: z.union([z.number(), z.string()]) });

describe('an emulator serving several sites', () => {
  it('lists every site with its tokens, and finds each user only on its own site', async () => {
    running = await startEmulator({ state: MULTI_STATE });
    expect(running.sites.map((entry) => entry.spotId)).toEqual(['sp_north', 'sp_south', 'sp_east']);
    expect(running.sites[1]?.ssoAccessToken).toBe(site(1).sso);
    expect(running.spotId).toBe('sp_north');

    for (const own of SITES) {
      const found = await retrieve(running.url, own.sso, `pk-${own.spot_id}`);
      expect(found.status).toBe(200);
      for (const other of SITES.filter((entry) => entry !== own)) {
        const missing = await retrieve(running.url, own.sso, `pk-${other.spot_id}`);
        expect(missing.status).toBe(404);
      }
    }
    // The same primary_key on two sites is two users.
    const north = userSchema.parse((await retrieve(running.url, site(0).sso, 'pk-shared')).body);
    const south = userSchema.parse((await retrieve(running.url, site(1).sso, 'pk-shared')).body);
    expect([north.user.svc_user_id, south.user.svc_user_id]).toEqual(['u_shared_0', 'u_shared_1']);
    expect((await retrieve(running.url, site(2).sso, 'pk-shared')).status).toBe(404);

    const info = z
      .object({ sites: z.array(z.object({ spot_id: z.string() })) })
      .parse((await getJson(`${running.url}/_emulator/info`)).body);
    expect(info.sites.map((entry) => entry.spot_id)).toEqual(['sp_north', 'sp_south', 'sp_east']);
  });

  it("refuses one site's token on another site's spot_id, and an unknown spot_id", async () => {
    running = await startEmulator({ state: MULTI_STATE });
    const crossed = await startExport(running.url, site(0).exp, site(1).spot_id, 'u_sp_south');
    expect(crossed.status).toBe(403);
    expect(errorBodySchema.parse(crossed.body).error.code).toBe('invalid_token');

    const unknown = await startExport(running.url, site(0).exp, 'sp_elsewhere', 'u_sp_north');
    expect(unknown.status).toBe(403);
    expect(errorBodySchema.parse(unknown.body).error.code).toBe('invalid_spot_id');

    const activity = await postJson(
      `${running.url}/v1/user/activity`,
      { profile_user_id: 'u_sp_east' },
      { 'x-spot-id': site(2).spot_id, apikey: site(1).exp },
    );
    expect(activity.status).toBe(403);
    expect(errorBodySchema.parse(activity.body).error.code).toBe('invalid_token');

    // An SSO token used as an export token is refused as on one site.
    const wrongKind = await startExport(running.url, site(1).sso, site(1).spot_id, 'u_sp_south');
    expect(wrongKind.status).toBe(403);
  });

  it('keeps an export, its status and its link on the site that started it', async () => {
    running = await startEmulator({ state: MULTI_STATE });
    const started = await startExport(running.url, site(0).exp, site(0).spot_id, 'u_sp_north');
    expect(started.status).toBe(200);
    const id = String(idSchema.parse(started.body).id);

    const onSouth = await getJson(
      `${running.url}/gdpr/export/status/${id}?${query({ access_token: site(1).exp, spot_id: site(1).spot_id })}`,
    );
    expect(onSouth.status).toBe(404);
    expect(emulatorControl(running, 'sp_south').exports()).toEqual([]);
    expect(emulatorControl(running, 'sp_north').exports()).toHaveLength(1);

    let link: string | undefined;
    for (let poll = 0; poll < 5 && link === undefined; poll += 1) {
      const status = await getJson(
        `${running.url}/gdpr/export/status/${id}?${query({ access_token: site(0).exp, spot_id: site(0).spot_id })}`,
      );
      link = z.object({ link: z.string().optional() }).parse(status.body).link;
    }
    expect(link).toBeDefined();
    const download = await fetch(link ?? '');
    expect(download.status).toBe(200);
    expect(download.headers.get('content-type')).toBe('application/zip');
    await download.arrayBuffer();
    // Another site's export of the same id number gets a different, unguessable link.
    const southStart = await startExport(running.url, site(1).exp, site(1).spot_id, 'u_sp_south');
    expect(String(idSchema.parse(southStart.body).id)).toBe(id);
  });

  it("counts each site's requests against its own rate limit and its own open-exports cap", async () => {
    const clock = Date.parse('2026-11-23T10:00:00Z');
    running = await startEmulator({
      state: MULTI_STATE,
      faults: { rate_limit: { requests_per_second: 1, burst: 2, max_open_exports: 1 } },
      now: () => clock,
    });
    expect((await retrieve(running.url, site(0).sso, 'pk-sp_north')).status).toBe(200);
    expect((await retrieve(running.url, site(0).sso, 'pk-sp_north')).status).toBe(200);
    expect((await retrieve(running.url, site(0).sso, 'pk-sp_north')).status).toBe(429);
    // South's bucket is still full.
    expect((await retrieve(running.url, site(1).sso, 'pk-sp_south')).status).toBe(200);
    expect((await startExport(running.url, site(1).exp, site(1).spot_id, 'u_sp_south')).status).toBe(200);
    expect(emulatorControl(running, 'sp_south').stats().open_exports).toBe(1);
    expect(emulatorControl(running, 'sp_north').stats().throttled.rate_limit).toBe(1);
    expect(emulatorControl(running, 'sp_south').stats().throttled.rate_limit).toBe(0);
    // East has its own cap: one open export on south does not stop east's first.
    expect((await startExport(running.url, site(2).exp, site(2).spot_id, 'u_sp_east')).status).toBe(200);
    const second = await startExport(running.url, site(2).exp, site(2).spot_id, 'u_sp_east');
    expect(second.status).toBe(429);
    expect(errorBodySchema.parse(second.body).error.code).toBe('too_many_open_exports');
  });

  it('logs each call on the site it addressed, with every site token redacted', async () => {
    running = await startEmulator({ state: MULTI_STATE });
    await retrieve(running.url, site(1).sso, 'pk-sp_south');
    const registered = await fetch(
      `${running.url}/sso/v1/register-user?${query({ access_token: site(2).sso, code_a: 'abc', primary_key: 'pk-new' })}`,
    );
    expect(registered.status).toBe(200);
    await registered.text();

    expect(emulatorControl(running, 'sp_north').calls()).toEqual([]);
    expect(
      emulatorControl(running, 'sp_south')
        .calls()
        .map((call) => call.path),
    ).toEqual(['/sso/v1/user/pk-sp_south']);
    const eastCalls = emulatorControl(running, 'sp_east').calls();
    expect(eastCalls).toHaveLength(1);
    expect(eastCalls[0]?.status).toBe(200);
    expect(JSON.stringify(eastCalls)).not.toContain(site(2).sso);
    // register-user carried only the token, and made the user on east alone.
    expect(emulatorControl(running, 'sp_east').user('pk-new')).toBeDefined();
    expect(emulatorControl(running, 'sp_north').user('pk-new')).toBeUndefined();

    const southLog = z
      .object({ calls: z.array(z.object({ path: z.string() })) })
      .parse((await getJson(`${running.url}/_emulator/calls?spot_id=sp_south`)).body);
    expect(southLog.calls).toHaveLength(1);
    const missing = await getJson(`${running.url}/_emulator/calls?spot_id=sp_nowhere`);
    expect(missing.status).toBe(404);
    expect(errorBodySchema.parse(missing.body).error.code).toBe('site_not_found');
  });

  it('changes the faults of, and resets, only the site the control route names', async () => {
    running = await startEmulator({ state: MULTI_STATE });
    const put = await fetch(`${running.url}/_emulator/faults?spot_id=sp_east`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ error_rate: 1, errors: ['503'] }),
    });
    expect(put.status).toBe(200);
    expect((await retrieve(running.url, site(2).sso, 'pk-sp_east')).status).toBe(503);
    expect((await retrieve(running.url, site(0).sso, 'pk-sp_north')).status).toBe(200);
    expect(emulatorControl(running, 'sp_north').faults().error_rate).toBe(0);

    const reset = await fetch(`${running.url}/_emulator/reset?spot_id=sp_east`, { method: 'POST' });
    expect(reset.status).toBe(200);
    expect(emulatorControl(running, 'sp_east').calls()).toEqual([]);
    expect(emulatorControl(running, 'sp_north').calls()).toHaveLength(1);
    // Without a spot_id the route acts on the first site.
    const calls = z
      .object({ calls: z.array(z.unknown()) })
      .parse((await getJson(`${running.url}/_emulator/calls`)).body);
    expect(calls.calls).toHaveLength(1);
  });

  it('loads a state document into the site the control route names, and refuses a sites list there', async () => {
    running = await startEmulator({ state: MULTI_STATE });
    const loaded = await postJson(`${running.url}/_emulator/state?spot_id=sp_south`, {
      users: [{ primary_key: 'pk-fresh' }],
    });
    expect(loaded.status).toBe(200);
    expect(emulatorControl(running, 'sp_south').user('pk-fresh')).toBeDefined();
    expect(emulatorControl(running, 'sp_south').user('pk-sp_south')).toBeUndefined();
    expect(emulatorControl(running, 'sp_north').user('pk-sp_north')).toBeDefined();

    const refused = await postJson(`${running.url}/_emulator/state`, { sites: [{ spot_id: 'sp_north' }] });
    expect(refused.status).toBe(400);
    expect(errorBodySchema.parse(refused.body).error.code).toBe('invalid_state');
    expect(emulatorControl(running, 'sp_north').user('pk-sp_north')).toBeDefined();
  });

  it('serves two sites given as start-up options, their state from the state document by spot_id', async () => {
    running = await startEmulator({
      state: MULTI_STATE,
      sites: [
        { spotId: 'sp_south', ssoAccessToken: 'sso-given-c291dGg' },
        { spotId: 'sp_west', state: { users: [{ primary_key: 'pk-west' }] } },
      ],
    });
    expect(running.sites.map((entry) => entry.spotId)).toEqual(['sp_south', 'sp_west']);
    expect((await retrieve(running.url, 'sso-given-c291dGg', 'pk-sp_south')).status).toBe(200);
    expect((await retrieve(running.url, site(1).sso, 'pk-sp_south')).status).toBe(403);
    const west = running.sites[1];
    expect((await retrieve(running.url, west?.ssoAccessToken ?? '', 'pk-west')).status).toBe(200);
    expect(west?.exportToken).toMatch(/^[\w-]{32}$/);
  });

  it('refuses sites given twice and one-site options beside several sites', async () => {
    await expect(startEmulator({ sites: [{ spotId: 'sp_a' }, { spotId: 'sp_a' }] })).rejects.toThrow(
      /sites\[1\]\.spotId: "sp_a" is given twice/,
    );
    await expect(startEmulator({ state: MULTI_STATE, spotId: 'sp_a' })).rejects.toThrow(EmulatorConfigError);
  });

  it('saves every site in its persist file and continues them all after a restart', async () => {
    folder = await mkdtemp(join(tmpdir(), 'emulator-sites-'));
    const persistPath = join(folder, 'platform.json');
    running = await startEmulator({ state: MULTI_STATE, persistPath });
    await startExport(running.url, site(1).exp, site(1).spot_id, 'u_sp_south');
    await running.close();
    const saved = z
      .object({ sites: z.array(z.object({ spotId: z.string() })) })
      .parse(JSON.parse(await readFile(persistPath, 'utf8')));
    expect(saved.sites.map((entry) => entry.spotId)).toEqual(['sp_north', 'sp_south', 'sp_east']);

    running = await startEmulator({ persistPath });
    expect(running.sites.map((entry) => entry.exportToken)).toEqual(SITES.map((entry) => entry.exp));
    expect(emulatorControl(running, 'sp_south').exports()).toHaveLength(1);
    expect(emulatorControl(running, 'sp_north').exports()).toEqual([]);
    await running.close();
    running = undefined;

    await expect(startEmulator({ persistPath, sites: [{ spotId: 'sp_north' }] })).rejects.toThrow(
      /was saved for the sites sp_north, sp_south, sp_east/,
    );
  });

  it('refuses a persist file that saves one spot_id twice', async () => {
    folder = await mkdtemp(join(tmpdir(), 'emulator-sites-'));
    const persistPath = join(folder, 'platform.json');
    running = await startEmulator({ state: MULTI_STATE, persistPath });
    await running.close();
    running = undefined;
    const saved = z
      .looseObject({ sites: z.array(z.looseObject({ spotId: z.string() })) })
      .parse(JSON.parse(await readFile(persistPath, 'utf8')));
    const [first] = saved.sites;
    await writeFile(persistPath, JSON.stringify({ ...saved, sites: [first, first] }));
    await expect(startEmulator({ persistPath })).rejects.toThrow(
      /sites\[1\]\.spotId: duplicates sites\[0\]\.spotId/,
    );
  });

  it('keeps the one-site state file and snapshot as they were', async () => {
    folder = await mkdtemp(join(tmpdir(), 'emulator-sites-'));
    const persistPath = join(folder, 'platform.json');
    running = await startEmulator({ ...testOptions, persistPath });
    expect(running.sites).toEqual([
      { spotId: 'sp_test', ssoAccessToken: testOptions.ssoAccessToken, exportToken: testOptions.exportToken },
    ]);
    await running.close();
    const document = z
      .looseObject({ spotId: z.string(), format: z.string() })
      .parse(JSON.parse(await readFile(persistPath, 'utf8')));
    expect(document.spotId).toBe('sp_test');
    expect(Object.hasOwn(document, 'sites')).toBe(false);
    running = await startEmulator({ persistPath });
    expect(running.spotId).toBe('sp_test');
    expect(emulatorControl(running).users()).toHaveLength(TEST_STATE.users?.length ?? 0);
  });
});

describe('the multi-site state schema', () => {
  it('refuses a spot_id listed twice, naming the site and the fix', () => {
    const outcome = parseEmulatorState({
      sites: [{ spot_id: 'sp_a' }, { spot_id: 'sp_b' }, { spot_id: 'sp_a' }],
    });
    expect(outcome).toEqual({
      success: false,
      problems: [
        {
          field: 'sites[2].spot_id',
          message: 'duplicates sites[0].spot_id; each site needs its own spot_id',
        },
      ],
    });
  });

  it('applies the one-site rules within each site, and lets a primary_key live on two sites', () => {
    expect(
      parseEmulatorState({
        sites: [
          { spot_id: 'sp_a', users: [{ primary_key: 'pk-1' }] },
          { spot_id: 'sp_b', users: [{ primary_key: 'pk-1' }] },
        ],
      }).success,
    ).toBe(true);
    const outcome = parseEmulatorState({
      sites: [
        { spot_id: 'sp_a', users: [{ primary_key: 'pk-1' }, { primary_key: 'pk-1' }] },
        { spot_id: 'sp_b', votes: [{ primary_key: 'pk-1', comment_id: 'c-1', value: 'like' }] },
      ],
    });
    expect(outcome.success ? [] : outcome.problems.map((problem) => problem.field)).toEqual([
      'sites[0].users[1].primary_key',
      'sites[1].votes[0].primary_key',
      'sites[1].votes[0].comment_id',
    ]);
  });

  it('refuses site data beside sites and a site without a spot_id', () => {
    const outcome = parseEmulatorState({ users: [], sites: [{ users: [] }] });
    expect(outcome.success ? [] : outcome.problems).toEqual(
      expect.arrayContaining([expect.objectContaining({ field: 'sites[0].spot_id' })]),
    );
    const beside = parseEmulatorState({ spot_id: 'sp_a', sites: [{ spot_id: 'sp_b' }] });
    expect(beside.success ? [] : beside.problems).toEqual([
      { field: 'spot_id', message: 'cannot stand beside sites; move it into the site it belongs to' },
    ]);
  });
});
