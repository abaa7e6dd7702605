/**
 * Look-alike keys, as a user meets them: erasures submitted with the CLI to a serving local mode
 * for `u-pаul28` (Cyrillic а), `u-bοb29` (Greek ο) and `u-еve30` (Cyrillic е), while the emulator
 * holds the Latin spellings. Each fails with subject_under_other_spelling, never completed/no_data,
 * and the users stay: no DELETE in the emulator's call log. `submit --dry-run` warns of each key.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { readLocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

const TWINS = [
  { lookAlike: 'u-p\u0430ul28', latin: 'u-paul28' },
  { lookAlike: 'u-b\u03bfb29', latin: 'u-bob29' },
  { lookAlike: 'u-\u0435ve30', latin: 'u-eve30' },
] as const;

let workdir: string;
let dataDir: string;
let server: ServingLocal;
let platformUrl: string;

const target = () => ['--target', 'local', '--data-dir', dataDir];

const requests = TWINS.map(({ lookAlike }) => {
  const at = new Date(Date.now() - 3600 * 1000).toISOString();
  return {
    request_id: randomUUID(),
    type: 'erasure',
    regulation: 'gdpr',
    primary_key: lookAlike,
    received_at: at,
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: at },
  };
});

async function platform(method: string, path: string, body?: unknown): Promise<unknown> {
  const response = await fetch(`${platformUrl}${path}`, {
    method,
    ...(body === undefined
      ? {}
      : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });
  expect(response.status, `${method} ${path}`).toBe(200);
  return response.json();
}

const statusSchema = z.looseObject({
  status: z.string(),
  outcome: z.string().nullish(),
  error: z.object({ code: z.string(), message: z.string() }).nullish(),
  intake_warnings: z.array(z.string()).nullish(),
});

async function untilEnded(requestId: string): Promise<z.infer<typeof statusSchema>> {
  for (let attempt = 0; attempt < 240; attempt += 1) {
    const result = await runCli(['status', requestId, '--json', ...target()]);
    if (result.code === 0) {
      const item = statusSchema.parse(JSON.parse(result.stdout));
      if (['completed', 'failed', 'rejected', 'cancelled', 'denied'].includes(item.status)) return item;
    }
    await delay(500);
  }
  throw new Error(`request ${requestId} never ended: ${server.stderr()}`);
}

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-lookalike-'));
  dataDir = join(workdir, 'data');
  server = await serveLocal(dataDir);
  const endpoints = await readLocalEndpoints(dataDir);
  platformUrl = endpoints.platform.url;
  await platform('POST', '/_emulator/state', {
    spot_id: endpoints.platform.spot_id,
    users: TWINS.map(({ latin }, index) => ({ primary_key: latin, user_name: `twin_${index}_user` })),
  });
  await platform('DELETE', '/_emulator/calls');
}, 120_000);

afterAll(async () => {
  if (server) await killServer(server, 'SIGTERM');
  if (workdir) await rm(workdir, { recursive: true, force: true });
});

describe('erasures for look-alike keys on a serving local mode', () => {
  it('warns of each key on submit --dry-run, counts the lines valid and prints no key', async () => {
    // Prepare
    const file = join(workdir, 'dry.jsonl');
    await writeFile(file, `${requests.map((request) => JSON.stringify(request)).join('\n')}\n`);

    // Act
    const result = await runCli(['submit', '--file', file, '--dry-run', ...target()]);

    // Assess
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('dry run: 3 valid, 0 bad lines of 3; nothing was sent');
    requests.forEach((request, index) => {
      expect(result.stderr).toContain(
        `line ${index + 1} (request ${request.request_id}): warning primary_key_mixed_scripts: primary_key mixes letters of more than one script`,
      );
    });
    for (const { lookAlike } of TWINS) expect(`${result.stdout}${result.stderr}`).not.toContain(lookAlike);
  });

  it('fails each with subject_under_other_spelling, never no_data, and erases nobody', async () => {
    // Prepare
    const file = join(workdir, 'erasures.jsonl');
    await writeFile(file, `${requests.map((request) => JSON.stringify(request)).join('\n')}\n`);

    // Act
    const submitted = await runCli(['submit', '--file', file, ...target()]);
    expect(submitted.code, submitted.stderr).toBe(0);
    const ended = await Promise.all(requests.map((request) => untilEnded(request.request_id)));

    // Assess: failed with the other-spelling code, naming the Latin-only form, never the key.
    for (const item of ended) {
      expect(item).toMatchObject({
        status: 'failed',
        error: {
          code: 'subject_under_other_spelling',
          message: expect.stringContaining('under its Latin-only form'),
        },
        intake_warnings: ['primary_key_mixed_scripts'],
      });
      expect(item.outcome ?? null).toBeNull();
      for (const { lookAlike, latin } of TWINS) {
        expect(item.error?.message).not.toContain(lookAlike);
        expect(item.error?.message).not.toContain(latin);
      }
    }
    const page = await runCli(['status', requests[0]?.request_id ?? '', ...target()]);
    expect(page.stdout).toMatch(/warning\s+primary_key_mixed_scripts: /);
    expect(page.stdout).toMatch(/error\s+subject_under_other_spelling: /);
    expect(page.stdout).not.toContain(TWINS[0].lookAlike);

    // The users are still on the platform, and no DELETE reached it.
    for (const { latin } of TWINS) {
      await platform('GET', `/_emulator/users/${encodeURIComponent(latin)}`);
    }
    const calls = z
      .object({ calls: z.array(z.object({ method: z.string(), path: z.string() })) })
      .parse(await platform('GET', '/_emulator/calls'));
    expect(calls.calls.filter((call) => call.method === 'DELETE')).toEqual([]);
    expect(
      calls.calls.filter((call) => call.method === 'GET' && call.path.startsWith('/sso/v1/user/')).length,
    ).toBe(2 * TWINS.length);
  }, 180_000);
});
