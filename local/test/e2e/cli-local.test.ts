import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CLI, runCli } from '../../../test/helpers/cli.ts';

let workdir: string;
let dataDir: string;
let server: ChildProcess;

const target = () => ['--target', 'local', '--data-dir', dataDir];

function request(primaryKey: string, type: 'access' | 'erasure') {
  return {
    request_id: randomUUID(),
    type,
    regulation: 'ccpa',
    primary_key: primaryKey,
    received_at: new Date(Date.now() - 24 * 3600 * 1000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
  };
}

async function statusOf(requestId: string): Promise<{ status: string; outcome?: string | null }> {
  const result = await runCli(['status', requestId, '--json', ...target()]);
  return z
    .looseObject({ status: z.string(), outcome: z.string().nullish() })
    .parse(JSON.parse(result.stdout));
}

/** The request ids `svc-dsr list --status <status>` prints. */
async function listed(status: string): Promise<string[]> {
  const result = await runCli(['list', '--status', status, '--json', ...target()]);
  expect(result.code).toBe(0);
  return z
    .object({ requests: z.array(z.object({ request_id: z.string() })) })
    .parse(JSON.parse(result.stdout))
    .requests.map((request) => request.request_id);
}

async function untilTerminal(requestId: string): Promise<{ status: string; outcome?: string | null }> {
  for (let attempt = 0; attempt < 120; attempt += 1) {
    const current = await statusOf(requestId).catch(() => undefined);
    if (current && ['completed', 'failed', 'rejected', 'cancelled', 'denied'].includes(current.status))
      return current;
    await delay(500);
  }
  throw new Error(`request ${requestId} never reached a terminal status`);
}

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-cli-local-'));
  dataDir = join(workdir, 'data');
  const faults = join(workdir, 'faults.json');
  // The first request's three export attempts fail; everything after succeeds.
  await writeFile(faults, JSON.stringify({ export_outcomes: ['failed', 'failed', 'failed'] }));
  server = spawn(process.execPath, [CLI, 'local', '--serve', '--data-dir', dataDir, '--faults', faults], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  server.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  for (let attempt = 0; !stderr.includes('serving:'); attempt += 1) {
    if (attempt > 240 || server.exitCode !== null)
      throw new Error(`local mode did not start serving: ${stderr}`);
    await delay(250);
  }
}, 120_000);

afterAll(async () => {
  if (server && server.exitCode === null) {
    server.kill('SIGTERM');
    await new Promise((resolve) => server.once('exit', resolve));
  }
  await rm(workdir, { recursive: true, force: true });
});

describe('the CLI against a serving local mode', () => {
  const failing = request('u-alice', 'access');
  const erasure = request('u-bruno', 'erasure');

  it('submits, follows a failed request, retries it to success, and serves the rest', async () => {
    const file = join(workdir, 'first.jsonl');
    await writeFile(file, `${JSON.stringify(failing)}\n`);
    const submitted = await runCli(['submit', '--file', file, ...target()]);
    expect(submitted.code).toBe(0);
    expect(submitted.stdout).toContain(failing.request_id);
    expect(submitted.stdout).not.toContain('u-alice');

    expect(await untilTerminal(failing.request_id)).toMatchObject({ status: 'failed' });
    const failedStatus = await runCli(['status', failing.request_id, ...target()]);
    expect(failedStatus.stdout).toContain('export_failed');
    // A failed request is still owed an answer: the open index lists it until it completes.
    expect(await listed('failed')).toContain(failing.request_id);

    const retried = await runCli(['retry', failing.request_id, ...target()]);
    expect(retried.code).toBe(0);
    expect(await untilTerminal(failing.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'exported',
    });

    const second = join(workdir, 'second.jsonl');
    await writeFile(second, `${JSON.stringify(erasure)}\n`);
    expect((await runCli(['submit', '--file', second, ...target()])).code).toBe(0);
    expect(await untilTerminal(erasure.request_id)).toMatchObject({ status: 'completed', outcome: 'erased' });
  }, 240_000);

  it('lists completed requests, and no longer lists them as open', async () => {
    const completed = await listed('completed');
    expect(completed).toContain(failing.request_id);
    expect(completed).toContain(erasure.request_id);
    for (const status of ['received', 'running', 'failed']) {
      const open = await listed(status);
      expect(open).not.toContain(failing.request_id);
      expect(open).not.toContain(erasure.request_id);
    }
  }, 60_000);

  it('verifies the archive and the audit chain', async () => {
    const verified = await runCli(['verify', failing.request_id, '--json', ...target()]);
    expect(verified.code).toBe(0);
  }, 60_000);

  it('packages the subject package, or with --raw the archive, to files whose SHA-256 match the ledger', async () => {
    const status = JSON.parse((await runCli(['status', failing.request_id, '--json', ...target()])).stdout);
    for (const [flags, sha256] of [
      [[], status.subject_package.sha256],
      [['--raw'], status.archive.sha256],
    ] as const) {
      const out = join(workdir, `package${flags.join('')}.zip`);
      const packaged = await runCli(['package', failing.request_id, ...flags, '--out', out, ...target()]);
      expect(packaged.code).toBe(0);
      const bytes = await readFile(out);
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(sha256);
      expect((await stat(out)).mode & 0o077).toBe(0);
    }
    expect(status.subject_package.sha256).not.toBe(status.archive.sha256);
  }, 60_000);

  it('hands over a short-lived link that downloads the archive', async () => {
    const linked = await runCli([
      'package',
      failing.request_id,
      '--expires-in',
      '600',
      '--json',
      ...target(),
    ]);
    expect(linked.code).toBe(0);
    const { url, sha256, expires_at } = z
      .object({ url: z.url(), sha256: z.string(), expires_at: z.string() })
      .parse(JSON.parse(linked.stdout));
    expect(new URL(url).searchParams.get('X-Amz-Expires')).toBe('600');
    expect(Date.parse(expires_at) - Date.now()).toBeLessThanOrEqual(600_000);
    const bytes = Buffer.from(await (await fetch(url)).arrayBuffer());
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(sha256);
    // The operator function recorded each hand-out, the two copies and this link, before answering.
    const verified = await runCli(['verify', failing.request_id, '--json', ...target()]);
    expect(verified.code, verified.stderr).toBe(0);
    const packages = z
      .object({ side_chains: z.array(z.object({ kind: z.string(), records: z.number() })) })
      .parse(JSON.parse(verified.stdout))
      .side_chains.find((chain) => chain.kind === 'packages');
    expect(packages?.records).toBe(3);
  }, 60_000);

  it('reports the CCPA metrics', async () => {
    const report = await runCli(['report', '--format', 'json', ...target()]);
    expect(report.code).toBe(0);
    const text = report.stdout;
    expect(text).toContain(failing.request_id);
    expect(text).not.toContain('u-alice');
  }, 60_000);

  it('refuses to cancel a request whose erasure is done, with exit code 1', async () => {
    const cancelled = await runCli(['cancel', erasure.request_id, '--reason', 'withdrawn', ...target()]);
    expect(cancelled.code).toBe(1);
    expect(cancelled.stderr.length).toBeGreaterThan(0);
  }, 60_000);

  it('denies a request verified by "none" at intake, and refuses to deny one that has ended (exit 1)', async () => {
    const unverified = {
      ...request('u-carla', 'erasure'),
      verification: { method: 'none', verified_by: 'privacy-team', verified_at: new Date().toISOString() },
    };
    const file = join(workdir, 'unverified.jsonl');
    await writeFile(file, `${JSON.stringify(unverified)}\n`);
    expect((await runCli(['submit', '--file', file, ...target()])).code).toBe(0);
    expect(await untilTerminal(unverified.request_id)).toMatchObject({ status: 'denied' });
    const status = await runCli(['status', unverified.request_id, ...target()]);
    expect(status.stdout).toContain('identity_not_verified');
    expect(status.stdout).not.toContain('u-carla');
    expect(status.stdout).toMatch(/denial notice\s+DUE by/);
    const notice = await runCli([
      'notice',
      unverified.request_id,
      '--kind',
      'denial',
      '--channel',
      'letter',
      ...target(),
    ]);
    expect(notice.code, notice.stderr).toBe(0);
    const after = await runCli(['status', unverified.request_id, ...target()]);
    expect(after.stdout).toMatch(/denial notice\s+given \S+ by letter/);

    const denied = await runCli([
      'deny',
      erasure.request_id,
      '--reason-code',
      'identity_not_verified',
      '--reason',
      'too late',
      ...target(),
    ]);
    expect(denied.code).toBe(1);
    expect(denied.stderr).toContain('is completed; only received, running or failed requests can be denied');
  }, 60_000);
});
