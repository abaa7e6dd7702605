import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { exited, runCli, spawnCli } from '../../../test/helpers/cli.ts';

const connectionLine = z.strictObject({
  url: z.string().regex(/^http:\/\/127\.0\.0\.1:\d+$/),
  spot_id: z.string(),
  sso_access_token: z.string(),
  export_token: z.string(),
});

describe('svc-dsr emulator', () => {
  it('prints its connection line first, serves the platform API, and stops cleanly on SIGTERM', async () => {
    const { child, firstLine } = await spawnCli([
      'emulator',
      '--port',
      '0',
      '--state',
      'local/emulator/sample-state.json',
      '--sso-token',
      'cli-sso-token-1234',
      '--spot-id',
      'sp_cli',
    ]);
    try {
      const connection = connectionLine.parse(JSON.parse(firstLine));
      expect(connection).toMatchObject({ spot_id: 'sp_cli', sso_access_token: 'cli-sso-token-1234' });
      const response = await fetch(`${connection.url}/sso/v1/user/u-alice`, {
        headers: { 'x-svc-sso-access-token': 'cli-sso-token-1234' },
      });
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ success: true, user: { primary_key: 'u-alice' } });
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited(child)).toBe(0);
  });

  it('serves every site of a multi-site state file and lists each in its connection line', async () => {
    const path = join(tmpdir(), `svc-dsr-sites-state-${process.pid}.json`);
    await writeFile(
      path,
      JSON.stringify({
        sites: [
          { spot_id: 'sp_one', sso_access_token: 'cli-sso-one-5678', users: [{ primary_key: 'u-1' }] },
          { spot_id: 'sp_two', sso_access_token: 'cli-sso-two-9012', users: [{ primary_key: 'u-2' }] },
        ],
      }),
    );
    const { child, firstLine } = await spawnCli(['emulator', '--port', '0', '--state', path]);
    try {
      const connection = connectionLine
        .extend({
          sites: z.array(
            z.strictObject({ spot_id: z.string(), sso_access_token: z.string(), export_token: z.string() }),
          ),
        })
        .parse(JSON.parse(firstLine));
      expect(connection.spot_id).toBe('sp_one');
      expect(connection.sites.map((site) => site.spot_id)).toEqual(['sp_one', 'sp_two']);
      const own = await fetch(`${connection.url}/sso/v1/user/u-2`, {
        headers: { 'x-svc-sso-access-token': 'cli-sso-two-9012' },
      });
      expect(own.status).toBe(200);
      const other = await fetch(`${connection.url}/sso/v1/user/u-2`, {
        headers: { 'x-svc-sso-access-token': 'cli-sso-one-5678' },
      });
      expect(other.status).toBe(404);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited(child)).toBe(0);
  });

  it('refuses a bad port with exit code 2 and says what to pass', async () => {
    const result = await runCli(['emulator', '--port', 'eighty']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--port: must be a number');
    expect(result.stdout).toBe('');
  });

  it('refuses an invalid state file naming the field and the rule', async () => {
    const path = join(tmpdir(), `svc-dsr-bad-state-${process.pid}.json`);
    await writeFile(path, JSON.stringify({ users: [{ primary_key: 'u-1', user_name: 'ab' }] }));
    const result = await runCli(['emulator', '--state', path]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('users[0].user_name');
    expect(result.stderr).toContain(path);
  });

  it('refuses an unknown fault kind in the fault profile', async () => {
    const path = join(tmpdir(), `svc-dsr-bad-faults-${process.pid}.json`);
    await writeFile(path, JSON.stringify({ errors: ['418'] }));
    const result = await runCli(['emulator', '--faults', path]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('errors');
  });

  it('shows help with an example', async () => {
    const result = await runCli(['emulator', '--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('Example:');
    expect(result.stdout).toContain('--faults <file>');
  });
});
