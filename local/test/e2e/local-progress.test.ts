import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CLI,
  killServer,
  runCli,
  runProcess,
  type ServingLocal,
  serveLocal,
} from '../../../test/helpers/cli.ts';

let workdir: string;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-progress-'));
});

afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;

function request(primaryKey: string) {
  const receivedAt = new Date(Date.now() - 3600 * 1000).toISOString();
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: receivedAt,
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: receivedAt },
  };
}

describe('svc-dsr local --requests', () => {
  it('prints plain progress lines to stderr when it is not a terminal, the last one at the true total', async () => {
    const requests = ['u-alice', 'u-bruno', 'u-chloe', 'u-nobody', 'u-alice', 'u-bruno'].map(request);
    const lines = [
      ...requests.map((line) => JSON.stringify(line)),
      '',
      'not json',
      JSON.stringify(requests[0]),
    ];
    const file = join(workdir, 'requests.jsonl');
    await writeFile(file, `${lines.join('\n')}\n`);

    const run = await runCli(['local', '--requests', file, '--data-dir', join(workdir, 'run')], {
      timeoutMs: 180_000,
    });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).not.toContain('\r');
    expect(run.stderr).not.toContain('\u001b');
    const said = run.stderr.trimEnd().split('\n');
    expect(said[0]).toMatch(/^svc-dsr local: starting in /);
    const progress = said.filter((line) => line.includes('requests settled'));
    // Six requests, the invalid line and the repeated one: eight lines that are not blank.
    expect(progress.at(-1)).toMatch(/^8\/8 requests settled in \d+ s$/);
    for (const line of progress.slice(0, -1)) expect(line).toMatch(/^\d+\/8 requests settled \(/);
  }, 200_000);
});

describe('svc-dsr local --requests as submit --file reads', () => {
  it('takes a JSON array on standard input, one request per element, and refuses a broken document with a hint', async () => {
    const requests = ['u-alice', 'u-bruno'].map(request);

    const run = await runProcess(
      process.execPath,
      [CLI, 'local', '--requests', '-', '--json', '--data-dir', join(workdir, 'stdin')],
      { input: JSON.stringify(requests, null, 2), timeoutMs: 180_000 },
    );

    expect(run.code, run.stderr).toBe(0);
    const summary = JSON.parse(run.stdout) as { counts: Record<string, number> };
    expect(summary.counts).toMatchObject({ completed: 2 });
    const file = join(workdir, 'broken.json');
    await writeFile(file, '[{"request_id": ');
    const broken = await runCli(['local', '--requests', file, '--data-dir', join(workdir, 'broken')]);
    expect(broken.code).toBe(2);
    expect(broken.stderr).toContain(`--requests: ${file} is not one JSON document`);
  }, 200_000);
});

describe('svc-dsr local --serve', () => {
  let server: ServingLocal | undefined;

  afterAll(async () => {
    if (server) await killServer(server, 'SIGTERM');
  });

  it('says it is starting at once, when it is ready, and one line per status change without identifiers', async () => {
    const dataDir = join(workdir, 'serve');
    server = await serveLocal(dataDir);
    const atReady = server.stderr();
    expect(atReady).toMatch(/^svc-dsr local: starting in /);
    expect(atReady).toMatch(/serving: .*ready in \d+ s/);

    const one = request('u-chloe');
    const file = join(workdir, 'one.jsonl');
    await writeFile(file, `${JSON.stringify(one)}\n`);
    const submitted = await runCli(['submit', '--file', file, '--target', 'local', '--data-dir', dataDir]);
    expect(submitted.code, submitted.stderr).toBe(0);
    for (let attempt = 0; !server.stderr().includes('-> completed'); attempt += 1) {
      if (attempt > 240) throw new Error(`no completion line: ${server.stderr()}`);
      await delay(250);
    }
    const changes = server
      .stderr()
      .slice(atReady.length)
      .split('\n')
      .filter((line) => line.includes(' -> '));
    expect(changes[0]).toMatch(/^svc-dsr local: \d\d:\d\d:\d\d access\/gdpr request: new -> received$/);
    expect(changes.at(-1)).toMatch(/access\/gdpr request: running -> completed \(exported\)$/);
    for (const line of changes) {
      expect(line).not.toMatch(UUID);
      expect(line).not.toContain('u-chloe');
    }
  }, 200_000);
});
