import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { emulatorControl, startEmulator } from '#local/emulator/server';
import { CLI, runCli } from '../../../test/helpers/cli.ts';

const summarySchema = z.strictObject({
  requests: z.array(
    z.strictObject({
      request_id: z.string(),
      status: z.string(),
      outcome: z.string().nullable(),
      error: z.strictObject({ code: z.string(), message: z.string() }).nullable(),
      archive: z
        .strictObject({ key: z.string(), path: z.string(), bytes: z.number(), sha256: z.string() })
        .nullable(),
    }),
  ),
  quarantined: z.array(z.strictObject({ line: z.number(), reason: z.string() })),
  duplicates: z.array(z.strictObject({ request_id: z.string(), line: z.number() })),
  conflicts: z.array(z.strictObject({ request_id: z.string(), line: z.number() })),
  counts: z.strictObject({
    completed: z.number(),
    failed: z.number(),
    rejected: z.number(),
    cancelled: z.number(),
    denied: z.number(),
  }),
});

function request(primaryKey: string, type: 'access' | 'erasure', id = randomUUID()) {
  return {
    request_id: id,
    type,
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
  };
}

let workdir: string;
beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-local-'));
});
afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

describe('svc-dsr local --requests --json', () => {
  it('runs every line to a terminal status and reports each kind of line', async () => {
    const access = request('u-alice', 'access');
    const erasure = request('u-bruno', 'erasure');
    const unknown = request('u-nobody', 'access');
    const invalid = { ...request('u-chloe', 'access'), type: 'delete' };
    const lines = [
      JSON.stringify(access),
      JSON.stringify(erasure),
      JSON.stringify(unknown),
      '{not json',
      JSON.stringify(invalid),
      JSON.stringify(access),
      JSON.stringify({ ...access, type: 'erasure' }),
    ];
    const file = join(workdir, 'requests.jsonl');
    await writeFile(file, `${lines.join('\n')}\n`);
    const dataDir = join(workdir, 'run');

    const result = await runCli(['local', '--requests', file, '--json', '--data-dir', dataDir], {
      timeoutMs: 200_000,
    });

    expect(result.code).toBe(0);
    const summary = summarySchema.parse(JSON.parse(result.stdout));
    const byId = new Map(summary.requests.map((item) => [item.request_id, item]));
    expect(byId.get(access.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'exported',
      error: null,
    });
    expect(byId.get(erasure.request_id)).toMatchObject({ status: 'completed', outcome: 'erased' });
    expect(byId.get(unknown.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'no_data',
      archive: null,
    });
    expect(byId.get(invalid.request_id)).toMatchObject({ status: 'rejected', error: { code: 'rejected' } });
    expect(summary.quarantined.map((entry) => entry.line).sort()).toEqual([4, 5]);
    expect(summary.duplicates).toEqual([{ request_id: access.request_id, line: 6 }]);
    expect(summary.conflicts).toEqual([{ request_id: access.request_id, line: 7 }]);
    expect(summary.counts).toEqual({ completed: 3, failed: 0, rejected: 1, cancelled: 0, denied: 0 });
    const archive = byId.get(access.request_id)?.archive;
    if (!archive) throw new Error('no archive');
    const bytes = await readFile(archive.path);
    expect(bytes.length).toBe(archive.bytes);
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(archive.sha256);
    for (const secret of ['u-alice', 'u-bruno', 'u-nobody']) expect(result.stdout).not.toContain(secret);
  }, 240_000);
});

describe('svc-dsr local after being killed mid-flight', () => {
  it('completes every request on the next start without a second export or deletion', async () => {
    const requests = [
      request('u-alice', 'erasure'),
      request('u-bruno', 'access'),
      request('u-chloe', 'erasure'),
      request('u-dan', 'access'),
    ];
    const file = join(workdir, 'restart.jsonl');
    await writeFile(file, `${requests.map((item) => JSON.stringify(item)).join('\n')}\n`);
    const dataDir = join(workdir, 'restart');

    // Waits slow enough that the first run is surely mid-flight when it is killed 1.5 s after its
    // requests are in, however fast the machine: each execution waits twice for its export.
    const first = spawn(
      process.execPath,
      [CLI, 'local', '--requests', file, '--data-dir', dataDir, '--wait-ms', '1500'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let firstErr = '';
    first.stderr.on('data', (chunk: Buffer) => {
      firstErr += chunk.toString();
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the first run never started its requests: ${firstErr}`)),
        60_000,
      );
      first.stderr.on('data', () => {
        if (firstErr.includes('submitted')) {
          clearTimeout(timer);
          setTimeout(resolve, 1500);
        }
      });
    });
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    const records = await Promise.all(
      (await readdir(join(dataDir, 'executions')))
        .filter((name) => name.endsWith('.json'))
        .map(async (name) =>
          z
            .object({ status: z.string() })
            .parse(JSON.parse(await readFile(join(dataDir, 'executions', name), 'utf8'))),
        ),
    );
    // The kill really was mid-flight: some executions were still running.
    expect(records.filter((record) => record.status === 'RUNNING').length).toBeGreaterThan(0);

    const second = await runCli(['local', '--requests', file, '--json', '--data-dir', dataDir], {
      timeoutMs: 200_000,
    });

    expect(second.code).toBe(0);
    const summary = summarySchema.parse(JSON.parse(second.stdout));
    expect(summary.requests.map((item) => item.status)).toEqual([
      'completed',
      'completed',
      'completed',
      'completed',
    ]);
    expect(summary.duplicates).toHaveLength(4);
    const platform = await startEmulator({ persistPath: join(dataDir, 'platform.json') });
    try {
      const calls = emulatorControl(platform).calls();
      expect(calls.filter((call) => call.method === 'POST' && call.path === '/gdpr/export')).toHaveLength(4);
      expect(calls.filter((call) => call.method === 'DELETE')).toHaveLength(2);
    } finally {
      await platform.close();
    }
  }, 240_000);
});

describe('npm start', () => {
  it('runs the sample requests to an outcome table and exits 0', async () => {
    const dataDir = join(workdir, 'demo');
    const result = await runCli(['start', '--data-dir', dataDir], { timeoutMs: 110_000 });
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/4 completed, 0 failed, 1 rejected, 0 cancelled/);
    expect(result.stdout).toContain('corrected');
    expect(result.stdout).not.toContain('Chloé Dubois');
    expect(result.stdout).toContain('exported');
    expect(result.stdout).toContain('erased');
    expect(result.stdout).toContain('no_data');
    // Two sites: the subject of the erasure has an account on news only, alice on both.
    expect(result.stdout).toContain('two sites: Demo News (news');
    expect(result.stdout).toMatch(/ erased +erased on 1 \(news\); no data on 1 \(forum\)/);
    expect(result.stdout).toMatch(/ exported +exported on 2 \(news, forum\)/);
    expect(result.stdout).toMatch(/ no_data +no data on 2 \(news, forum\)/);
    expect(result.stdout).toContain(`${dataDir}/executions`);
    // It points at something a person can open: the list command, for the same data dir.
    expect(result.stdout).toContain(`npx svc-dsr local --serve --data-dir ${dataDir}\n`);
    expect(result.stdout).toContain(
      `npx svc-dsr list --status completed,failed,rejected --data-dir ${dataDir}\n`,
    );
  }, 120_000);

  it('refuses an unreadable requests file with exit code 2', async () => {
    const result = await runCli([
      'local',
      '--requests',
      join(workdir, 'missing.jsonl'),
      '--data-dir',
      join(workdir, 'x'),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--requests');
  }, 60_000);
});
