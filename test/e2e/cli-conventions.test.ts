/**
 * The CLI as people and scripts use it, run as processes against one serving local mode: pipes
 * that close, conflicts at submit time, untrusted text, and the hints it prints.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CLI, killServer, runCli, type ServingLocal, serveLocal } from '../helpers/cli.ts';

let workdir: string;
let dataDir: string;
let server: ServingLocal | undefined;

const target = () => ['--target', 'local', '--data-dir', dataDir];

function request(primaryKey: string, overrides: Record<string, unknown> = {}) {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: new Date(Date.now() - 24 * 3600 * 1000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
    ...overrides,
  };
}

/** The first request's three export attempts fail (see the faults file); the second completes. */
const failing = request('u-alice', { reference: 'T-1' });
const completing = request('u-bruno', { reference: 'T-2' });

async function statusOf(requestId: string): Promise<string | undefined> {
  const result = await runCli(['status', requestId, '--json', ...target()]);
  if (result.code !== 0) return undefined;
  return z.object({ status: z.string() }).parse(JSON.parse(result.stdout)).status;
}

async function untilStatus(requestId: string, status: string): Promise<void> {
  for (let attempt = 0; attempt < 240; attempt += 1) {
    if ((await statusOf(requestId)) === status) return;
    await delay(250);
  }
  throw new Error(`request ${requestId} never became ${status}`);
}

/**
 * Runs `svc-dsr <args>` with its stdout on a real pipe to `reader` (a shell command), as
 * `svc-dsr ... | head -1` would, and answers the CLI's own exit code and stderr.
 */
function piped(args: readonly string[], reader: string): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'bash',
      ['-c', `"$0" "$@" | ${reader}; exit "\${PIPESTATUS[0]}"`, process.execPath, CLI, ...args],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`svc-dsr ${args.join(' ')} | ${reader} did not finish; stderr: ${stderr}`));
    }, 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stderr });
    });
  });
}

/** A reader that takes one line and goes away. */
const ONE_LINE = 'head -1 >/dev/null';
/** A reader that goes away before the CLI has written anything (it takes a second to start). */
const GONE = '(exec 0<&-)';

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-conventions-'));
  dataDir = join(workdir, 'data');
  const faults = join(workdir, 'faults.json');
  await writeFile(faults, JSON.stringify({ export_outcomes: ['failed', 'failed', 'failed'] }));
  server = await serveLocal(dataDir, ['--faults', faults]);
  const first = join(workdir, 'first.jsonl');
  await writeFile(first, `${JSON.stringify(failing)}\n`);
  expect((await runCli(['submit', '--file', first, ...target()])).code).toBe(0);
  await untilStatus(failing.request_id, 'failed');
  const second = join(workdir, 'second.jsonl');
  await writeFile(second, `${JSON.stringify(completing)}\n`);
  expect((await runCli(['submit', '--file', second, ...target()])).code).toBe(0);
  await untilStatus(completing.request_id, 'completed');
}, 240_000);

afterAll(async () => {
  if (server !== undefined) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

describe('a reader that goes away', () => {
  it('stops submit quietly with exit 0 when head takes one line of a long output', async () => {
    const file = join(workdir, 'many-bad.jsonl');
    const bad = Array.from({ length: 3000 }, () => JSON.stringify({ request_id: randomUUID(), type: 'x' }));
    await writeFile(file, `${bad.join('\n')}\n`);
    const result = await piped(['submit', '--file', file, '--dry-run', '--json'], ONE_LINE);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
  }, 60_000);

  it.each([
    ['list', ['list', '--status', 'failed,completed']],
    ['list --json', ['list', '--status', 'completed', '--json']],
    ['report', ['report']],
    ['report --json', ['report', '--json']],
    ['status', ['status', failing.request_id]],
  ])(
    'stops %s quietly with exit 0 when its reader has closed the pipe',
    async (_name, args) => {
      const result = await piped([...args, ...target()], GONE);
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
    },
    60_000,
  );
});
