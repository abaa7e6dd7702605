import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CLI, runProcess } from '../../../test/helpers/cli.ts';

const summarySchema = z.looseObject({
  requests: z.array(
    z.looseObject({ request_id: z.string(), status: z.string(), outcome: z.string().nullable() }),
  ),
  quarantined: z.array(z.looseObject({ line: z.number(), reason: z.string() })),
});

function request(method: string) {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: 'u-alice',
    received_at: '2026-11-20T09:00:00Z',
    verification: { method, verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
  };
}

let workdir: string;
beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-local-config-'));
});
afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

describe('svc-dsr local with the stack configuration of cdk.json', () => {
  it('runs the verification gate the configuration names, not the default one', async () => {
    // Prepare: a project whose stack knows only id_document; email_link is a default method.
    await writeFile(
      join(workdir, 'cdk.json'),
      JSON.stringify({
        app: 'node --import tsx bin/app.ts',
        context: {
          'svc-dsr': {
            verification: { methods: { id_document: { acceptedFor: ['access'] } }, maxAgeDays: 30 },
          },
        },
      }),
    );
    const byEmail = request('email_link');
    const byDocument = request('id_document');
    const file = join(workdir, 'requests.jsonl');
    await writeFile(file, `${JSON.stringify(byEmail)}\n${JSON.stringify(byDocument)}\n`);

    // Act
    const result = await runProcess(
      process.execPath,
      [CLI, 'local', '--requests', file, '--json', '--data-dir', join(workdir, 'data')],
      { cwd: workdir, timeoutMs: 200_000 },
    );

    // Assess
    expect(result.stderr).toContain(`stack configuration from ${join(workdir, 'cdk.json')}`);
    const summary = summarySchema.parse(JSON.parse(result.stdout));
    const byId = new Map(summary.requests.map((item) => [item.request_id, item]));
    expect(byId.get(byEmail.request_id)).toMatchObject({ status: 'rejected' });
    expect(summary.quarantined.map((entry) => entry.reason).join('\n')).toContain(
      'this stack knows id_document',
    );
    expect(byId.get(byDocument.request_id)).toMatchObject({ status: 'completed', outcome: 'exported' });
  }, 240_000);
});

describe('svc-dsr local with sites in --config and a state file of several sites', () => {
  it('runs a request over every configured site, the subject found on one, and refuses a site not configured', async () => {
    // Prepare: two sites; the subject has an account on east only
    const dir = join(workdir, 'sites');
    const config = join(workdir, 'sites-config.json');
    await writeFile(
      config,
      JSON.stringify({
        sites: [
          { id: 'east', name: 'East Edition', spotId: 'sp_east' },
          { id: 'west', name: 'West Edition', spotId: 'sp_west' },
        ],
      }),
    );
    const account = (spotId: string, users: string[]) => ({
      spot_id: spotId,
      conversations: [{ id: `conv-${spotId}`, url: `https://${spotId}.example.com/a`, title: 'A' }],
      users: users.map((key) => ({ primary_key: key, user_name: `${key}_${spotId}` })),
      comments: [],
      votes: [],
    });
    const state = join(workdir, 'sites-state.json');
    await writeFile(
      state,
      JSON.stringify({ sites: [account('sp_east', ['u-alice']), account('sp_west', ['u-bob'])] }),
    );
    const everywhere = request('email_link');
    const unknownSite = { ...request('email_link'), sites: ['east', 'north'] };
    const file = join(workdir, 'sites-requests.jsonl');
    await writeFile(file, `${JSON.stringify(everywhere)}\n${JSON.stringify(unknownSite)}\n`);

    // Act
    const result = await runProcess(
      process.execPath,
      [
        CLI,
        'local',
        '--config',
        config,
        '--platform-state',
        state,
        '--requests',
        file,
        '--json',
        '--data-dir',
        dir,
      ],
      { cwd: workdir, timeoutMs: 200_000 },
    );

    // Assess
    const summary = summarySchema.parse(JSON.parse(result.stdout));
    const byId = new Map(summary.requests.map((item) => [item.request_id, item]));
    expect(byId.get(everywhere.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'exported',
      sites: 'exported on 1 (east); no data on 1 (west)',
    });
    expect(byId.get(unknownSite.request_id)).toMatchObject({ status: 'rejected' });
    expect(summary.quarantined.map((entry) => entry.reason).join('\n')).toContain(
      'sites: "north" is not a site of this stack; the sites are "east", "west"',
    );

    // Act again: the same data dir without --config, from a folder with no cdk.json
    const again = request('email_link');
    const againFile = join(workdir, 'sites-again.jsonl');
    await writeFile(againFile, `${JSON.stringify(again)}\n`);
    const empty = await mkdtemp(join(tmpdir(), 'svc-dsr-no-config-'));
    const second = await runProcess(
      process.execPath,
      [CLI, 'local', '--requests', againFile, '--json', '--data-dir', dir],
      { cwd: empty, timeoutMs: 200_000 },
    );
    await rm(empty, { recursive: true, force: true });

    // Assess: the data dir kept its sites
    expect(second.stderr).toContain('stack configuration kept in the data dir');
    expect(summarySchema.parse(JSON.parse(second.stdout)).requests).toEqual([
      expect.objectContaining({
        request_id: again.request_id,
        sites: 'exported on 1 (east); no data on 1 (west)',
      }),
    ]);
  }, 240_000);
});
