import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { emulatorControl, startEmulator } from '#local/emulator/server';
import { CLI, runCli } from '../../../test/helpers/cli.ts';

/**
 * Hostile and awkward input, run as a user would: one `svc-dsr local --requests` run, then the
 * operator commands against the same data dir served by `svc-dsr local --serve`.
 */

const summarySchema = z.object({
  requests: z.array(
    z.object({
      request_id: z.string(),
      status: z.string(),
      outcome: z.string().nullable(),
      error: z.object({ code: z.string(), message: z.string() }).nullable(),
    }),
  ),
  quarantined: z.array(z.object({ line: z.number(), reason: z.string() })),
  duplicates: z.array(z.object({ request_id: z.string(), line: z.number() })),
  conflicts: z.array(z.object({ request_id: z.string(), line: z.number() })),
});
type Summary = z.infer<typeof summarySchema>;

/** Platform users whose primary_key is awkward in a URL path, in a queue message or on a terminal. */
const KEYS = {
  dot: '.',
  dotdot: '..',
  slash: 'a/b',
  encodedDot: '%2e',
  question: '?',
  hash: '#',
  nonAscii: 'usér-名前',
  emoji: 'fan-😀',
  ambiguous: 'u-ambiguous',
  twin: 'u-twin',
} as const;

function request(
  primaryKey: string,
  type: 'access' | 'erasure',
  overrides: Record<string, unknown> = {},
): Record<string, unknown> & { request_id: string } {
  return {
    request_id: randomUUID(),
    type,
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    ...overrides,
  };
}

const requests = {
  dot: request(KEYS.dot, 'erasure'),
  dotdot: request(KEYS.dotdot, 'erasure'),
  slash: request(KEYS.slash, 'erasure'),
  encodedDot: request(KEYS.encodedDot, 'erasure'),
  question: request(KEYS.question, 'access'),
  hash: request(KEYS.hash, 'erasure'),
  nonAscii: request(KEYS.nonAscii, 'erasure'),
  emoji: request(KEYS.emoji, 'erasure'),
  twin: request(KEYS.twin, 'access'),
  rfc3339: request('u-rfc', 'access', {
    received_at: '2016-12-31t23:59:60z',
    verification: { method: 'id_document', verified_by: 'privacy-team', verified_at: '2026-11-20t09:05:00Z' },
  }),
  emailMethod: request('u-method', 'access', {
    verification: {
      method: 'jane@example.com',
      verified_by: 'privacy-team',
      verified_at: '2026-11-20T09:05:00Z',
    },
  }),
  urlMethod: request('u-method', 'access', {
    verification: {
      method: 'https://idp.example.com/check',
      verified_by: 'privacy-team',
      verified_at: '2026-11-20T09:05:00Z',
    },
  }),
  c1: request('u-c1', 'access'),
  future: request('u-future', 'access', { received_at: new Date(Date.now() + 3_600_000).toISOString() }),
  wrongType: request('u-type', 'access', { primary_key: 42 }),
  escapes: request('u-escapes', 'access', { 'x\u001b[2J\u001b]8;;https://evil.example\u0007': 1 }),
};

/** The file's lines, each named so the assertions can find it. */
const lines: [string, string][] = [
  // A byte-order mark, as some editors write, on the first line: stripped as `submit` strips it.
  ['dot', `\uFEFF${JSON.stringify(requests.dot)}`],
  ['dotdot', JSON.stringify(requests.dotdot)],
  ['slash', JSON.stringify(requests.slash)],
  ['encodedDot', JSON.stringify(requests.encodedDot)],
  ['question', JSON.stringify(requests.question)],
  ['hash', JSON.stringify(requests.hash)],
  ['nonAscii', JSON.stringify(requests.nonAscii)],
  ['emoji', JSON.stringify(requests.emoji)],
  ['twin', JSON.stringify(requests.twin)],
  ['twinUpper', JSON.stringify({ ...requests.twin, request_id: requests.twin.request_id.toUpperCase() })],
  [
    'ambiguous',
    JSON.stringify(request(KEYS.ambiguous, 'access')).replace(
      '"type":"access"',
      '"type":"access","type":"erasure"',
    ),
  ],
  ['nested', `{"request_id":"${randomUUID()}","reference":${'['.repeat(5000)}${']'.repeat(5000)}}`],
  ['rfc3339', JSON.stringify(requests.rfc3339)],
  ['emailMethod', JSON.stringify(requests.emailMethod)],
  ['urlMethod', JSON.stringify(requests.urlMethod)],
  ['c1', JSON.stringify(requests.c1).replace('"u-c1"', '"u-\\u0085c1"')],
  ['future', JSON.stringify(requests.future)],
  ['wrongType', JSON.stringify(requests.wrongType)],
  ['escapes', JSON.stringify(requests.escapes)],
];
const lineOf = (name: string) => lines.findIndex(([key]) => key === name) + 1;

let workdir: string;
let dataDir: string;
let summary: Summary;
let exitCode: number | null;
let server: ChildProcess | undefined;

const target = () => ['--target', 'local', '--data-dir', dataDir];
const byId = (id: string) => summary.requests.find((item) => item.request_id === id);

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-hostile-'));
  dataDir = join(workdir, 'data');
  const state = join(workdir, 'platform.json');
  await writeFile(
    state,
    JSON.stringify({
      spot_id: 'sp_hostile',
      conversations: [],
      users: [...Object.values(KEYS), 'u-rfc', 'a', 'b', 'user'].map((primaryKey, index) => ({
        primary_key: primaryKey,
        user_name: `hostile_${index}x`,
      })),
      comments: [],
      votes: [],
    }),
  );
  const file = join(workdir, 'requests.jsonl');
  await writeFile(file, `${lines.map(([, line]) => line).join('\n')}\n`);
  const result = await runCli(
    ['local', '--requests', file, '--json', '--data-dir', dataDir, '--platform-state', state],
    { timeoutMs: 200_000 },
  );
  exitCode = result.code;
  summary = summarySchema.parse(JSON.parse(result.stdout));
}, 240_000);

afterAll(async () => {
  if (server && server.exitCode === null) {
    server.kill('SIGTERM');
    await new Promise((resolve) => server?.once('exit', resolve));
  }
  await rm(workdir, { recursive: true, force: true });
});

describe('svc-dsr local --requests with hostile input', () => {
  it('runs every request to a terminal status', () => {
    expect(exitCode).toBe(0);
  });

  it('fails an erasure whose primary_key is "." or ".." with a terminal error, never no_data', async () => {
    for (const id of [requests.dot.request_id, requests.dotdot.request_id]) {
      expect(byId(id)).toMatchObject({
        status: 'failed',
        outcome: null,
        error: { code: 'unaddressable_id', message: expect.stringContaining('"." or ".."') },
      });
    }
  });

  it('erases or exports exactly the user whose primary_key holds /, %2e, ?, #, non-ASCII text or an emoji', async () => {
    for (const key of ['slash', 'encodedDot', 'hash', 'nonAscii', 'emoji'] as const) {
      expect(byId(requests[key].request_id), key).toMatchObject({ status: 'completed', outcome: 'erased' });
    }
    expect(byId(requests.question.request_id)).toMatchObject({ status: 'completed', outcome: 'exported' });
    const platform = await startEmulator({ persistPath: join(dataDir, 'platform.json') });
    try {
      const control = emulatorControl(platform);
      for (const erased of [KEYS.slash, KEYS.encodedDot, KEYS.hash, KEYS.nonAscii, KEYS.emoji]) {
        expect(control.user(erased), erased).toBeUndefined();
      }
      // Still on the platform: the unaddressable ones, the ambiguous one and the paths a wrong
      // decoding would have reached.
      for (const kept of [KEYS.dot, KEYS.dotdot, KEYS.question, KEYS.ambiguous, 'a', 'b', 'user']) {
        expect(control.user(kept), kept).toBeDefined();
      }
      // One export per completed request (the upper-case twin started none) and one DELETE per erasure.
      const calls = control.calls();
      expect(calls.filter((call) => call.method === 'POST' && call.path === '/gdpr/export')).toHaveLength(8);
      expect(calls.filter((call) => call.method === 'DELETE')).toHaveLength(5);
    } finally {
      await platform.close();
    }
  });

  it('treats the same request with its id in upper case as a duplicate', () => {
    expect(summary.duplicates).toEqual([{ request_id: requests.twin.request_id, line: lineOf('twinUpper') }]);
    expect(summary.requests.filter((item) => item.request_id === requests.twin.request_id)).toHaveLength(1);
    expect(summary.requests.map((item) => item.request_id)).not.toContain(
      requests.twin.request_id.toUpperCase(),
    );
  });

  it('quarantines a message with a repeated key, naming the key, and erases nobody', () => {
    expect(summary.quarantined).toContainEqual({
      line: lineOf('ambiguous'),
      reason: expect.stringContaining('repeats the key "type" in one object'),
    });
  });

  it('quarantines about 10 KB of nested arrays with its reason', () => {
    expect(summary.quarantined).toContainEqual({
      line: lineOf('nested'),
      reason: 'message body is nested more than 32 levels deep',
    });
  });

  it('rejects an e-mail or a URL as verification.method up front: nothing is left as received', () => {
    for (const id of [requests.emailMethod.request_id, requests.urlMethod.request_id]) {
      expect(byId(id)).toMatchObject({
        status: 'rejected',
        error: {
          code: 'rejected',
          message: expect.stringContaining('verification.method: must name the method'),
        },
      });
    }
  });

  it('accepts a BOM on the first line, a lower-case t/z and a leap second', () => {
    expect(byId(requests.dot.request_id)).toBeDefined();
    expect(summary.quarantined.map((entry) => entry.line)).not.toContain(1);
    expect(byId(requests.rfc3339.request_id)).toMatchObject({ status: 'completed', outcome: 'exported' });
  });

  it('rejects a C1 control character, a future received_at, and says what a wrong-typed field should be', () => {
    expect(byId(requests.c1.request_id)?.error?.message).toContain('primary_key: must be well-formed text');
    expect(byId(requests.future.request_id)?.error?.message).toContain('received_at: is in the future');
    expect(byId(requests.wrongType.request_id)?.error?.message).toBe(
      'primary_key: must be a string, got a number',
    );
  });
});

describe('operator commands on the same data dir, run as processes', () => {
  beforeAll(async () => {
    server = spawn(process.execPath, [CLI, 'local', '--serve', '--data-dir', dataDir], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    server.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    for (let attempt = 0; !stderr.includes('serving:'); attempt += 1) {
      if (attempt > 240 || server.exitCode !== null) throw new Error(`local mode did not serve: ${stderr}`);
      await delay(250);
    }
  }, 120_000);

  it('finds a request by its id in upper case, in status, cancel and retry', async () => {
    const upper = requests.twin.request_id.toUpperCase();
    const status = await runCli(['status', upper, '--json', ...target()]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({
      request_id: requests.twin.request_id,
      duplicates: 1,
    });
    const cancel = await runCli(['cancel', upper, '--reason', 'test', ...target()]);
    expect(cancel.code).toBe(1);
    expect(cancel.stderr).toContain(`request ${requests.twin.request_id} is completed`);
    const retry = await runCli(['retry', requests.dot.request_id.toUpperCase(), ...target()]);
    expect(retry.code).toBe(0);
    expect(retry.stdout).toContain(`${requests.dot.request_id}-retry-`);
  }, 60_000);

  it('submits the same request again in upper case as a duplicate, not a second export', async () => {
    const file = join(workdir, 'again.jsonl');
    await writeFile(
      file,
      `${JSON.stringify({ ...requests.question, request_id: requests.question.request_id.toUpperCase() })}\n`,
    );
    expect((await runCli(['submit', '--file', file, ...target()])).code).toBe(0);
    let duplicates = 0;
    for (let attempt = 0; attempt < 60 && duplicates === 0; attempt += 1) {
      const status = await runCli(['status', requests.question.request_id, '--json', ...target()]);
      duplicates = z.object({ duplicates: z.number() }).parse(JSON.parse(status.stdout)).duplicates;
      if (duplicates === 0) await delay(250);
    }
    expect(duplicates).toBe(1);
  }, 60_000);

  it('refuses a line with a repeated key in submit, naming the key, and sends nothing', async () => {
    const file = join(workdir, 'ambiguous.jsonl');
    await writeFile(file, `${lines[lineOf('ambiguous') - 1]?.[1]}\n`);
    const result = await runCli(['submit', '--file', file, ...target()]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('line 1: repeats the key "type" in one object');
  });

  it('prints escape sequences from the ledger escaped, never raw', async () => {
    const status = await runCli(['status', requests.escapes.request_id, ...target()]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain('\\x1b[2J\\x1b]8;;');
    expect(status.stdout).not.toContain('\u001b');
    expect(status.stdout).not.toContain('\u0007');
    const list = await runCli(['list', '--status', 'rejected', ...target()]);
    expect(list.code).toBe(0);
    expect(list.stdout).not.toContain('\u001b');
  }, 60_000);
});
