/**
 * The API as a person reaches it from `svc-dsr local --serve`: the address and one-time sign-in
 * codes it prints, a code traded once for a token of its role, and the daily tasks over HTTP.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { killServer, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

let workdir: string;
let server: ServingLocal;
let api: string;
/** The privacy team's token, from the first test's sign-in. */
let jane = '';
const codes = new Map<string, string[]>();

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-api-serve-'));
  server = await serveLocal(join(workdir, 'data'));
  for (let attempt = 0; !server.stderr().includes('trade one for a token'); attempt++) {
    if (attempt > 80) throw new Error(`no sign-in codes printed: ${server.stderr()}`);
    await delay(250);
  }
  const text = server.stderr();
  api = /the API at (http:\/\/127\.0\.0\.1:\d+)/.exec(text)?.[1] ?? '';
  for (const [, role, code] of text.matchAll(/^ {2}(privacy-team|auditor): (\S+)$/gm)) {
    codes.set(role ?? '', [...(codes.get(role ?? '') ?? []), code ?? '']);
  }
}, 120_000);

afterAll(async () => {
  await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

async function call(method: string, path: string, token?: string, body?: unknown) {
  const answer = await fetch(`${api}${path}`, {
    method,
    headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await answer.text();
  return { status: answer.status, text, json: JSON.parse(text) as Record<string, unknown> };
}

describe('the API of a serving local mode', () => {
  it('signs a person in once per code, with the role the code was printed for', async () => {
    // Prepare
    const code = codes.get('privacy-team')?.[0] ?? '';

    // Act
    const first = await call('POST', '/local/sign-in', undefined, { code, username: 'jane' });
    const again = await call('POST', '/local/sign-in', undefined, { code, username: 'mallory' });
    const made = await call('POST', '/local/sign-in', undefined, { code: 'made-up', username: 'mallory' });

    // Assess
    expect(api).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(first.status).toBe(200);
    expect(first.json).toMatchObject({ role: 'privacy-team', token: expect.any(String) });
    jane = String(first.json.token);
    expect([again.status, made.status]).toEqual([401, 401]);
  });

  it("takes a request, follows it to its end and records a notice under the person's name; an auditor reads but may not act", async () => {
    // Prepare
    const code = codes.get('auditor')?.[0] ?? '';
    const avery = String(
      (await call('POST', '/local/sign-in', undefined, { code, username: 'avery' })).json.token,
    );
    const id = randomUUID();
    const request = {
      request_id: id,
      type: 'access',
      regulation: 'gdpr',
      primary_key: 'u-alice',
      received_at: new Date(Date.now() - 3_600_000).toISOString(),
      verification: {
        method: 'email_link',
        verified_by: 'privacy-team',
        verified_at: new Date().toISOString(),
      },
    };

    // Act
    const submitted = await call('POST', '/requests', jane, request);
    let status = '';
    for (let attempt = 0; attempt < 120 && status !== 'completed'; attempt++) {
      await delay(500);
      status = String(
        ((await call('GET', `/requests/${id}`, jane)).json.request as { status?: string } | undefined)
          ?.status,
      );
    }
    const notice = await call('POST', `/requests/${id}/notice`, jane, {
      kind: 'response',
      notice: { channel: 'email', at: new Date().toISOString() },
    });
    const refused = await call('POST', `/requests/${id}/cancel`, avery, { reason: 'test' });
    const timeline = await call('GET', `/requests/${id}/timeline`, avery);

    // Assess
    expect(submitted.status).toBe(202);
    expect(status).toBe('completed');
    expect(notice.status).toBe(200);
    expect(refused.status).toBe(403);
    expect(timeline.text).toContain('"operator":"console:jane (sub local-jane)"');
    expect(timeline.text).not.toContain('u-alice');
  }, 90_000);
});
