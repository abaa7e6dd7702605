/**
 * The API through HTTP on loopback, as the privacy team's console and other systems reach it:
 * tokens signed for the data dir, roles from their groups, actions on the operator's own code
 * path, recorded under the signed-in person's name.
 */
import { SFNClient } from '@aws-sdk/client-sfn';
import { afterEach, describe, expect, it } from 'vitest';
import { localOperatorDeps } from '#local/runtime/operator-endpoint';
import { type ApiEndpoint, localToken, startApiEndpoint } from '../../runtime/api-endpoint.ts';
import { jsonLogger } from '../../runtime/workflow.ts';
import { type Harness, requestFor, startHarness } from './harness.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
let api: ApiEndpoint | undefined;
let sfn: SFNClient | undefined;
afterEach(async () => {
  await api?.close();
  sfn?.destroy();
  await harness?.close();
  harness = undefined;
  api = undefined;
  sfn = undefined;
});

const KEY = new Uint8Array(32).fill(7);
const jane = {
  username: 'jane',
  subject: '5f3c1a2b-0000-4000-8000-00000000aaaa',
  groups: ['privacy-team'] as const,
};
const avery = {
  username: 'avery',
  subject: '9d8e7f6a-0000-4000-8000-00000000bbbb',
  groups: ['auditor'] as const,
};

/** A completed access request, and the API over its ledger; every log line the API writes kept. */
async function served() {
  harness = await startHarness();
  const h = harness;
  const request = requestFor('u-alice');
  await submitAndSettle(h, request);
  sfn = new SFNClient({
    region: h.aws.region,
    endpoint: h.workflow.shim.endpoint,
    credentials: h.aws.credentials,
  });
  const logs: string[] = [];
  api = await startApiEndpoint(
    { ...localOperatorDeps(h.workflow, sfn), logger: jsonLogger((line) => logs.push(line)) },
    KEY,
  );
  const url = api.url;
  const call = async (
    method: string,
    path: string,
    token: string | undefined,
    body?: unknown,
  ): Promise<{ status: number; headers: Headers; json: Record<string, unknown> }> => {
    const answer = await fetch(`${url}${path}`, {
      method,
      headers: {
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return {
      status: answer.status,
      headers: answer.headers,
      json: (await answer.json()) as Record<string, unknown>,
    };
  };
  return { h, id: request.request_id, logs, call };
}

const response = { kind: 'response', notice: { channel: 'email', at: '2026-11-25T10:00:00Z' } };

describe('the API for the privacy team and auditors', () => {
  it("lets an auditor read a request without its subject's key, and refuses every action with 403", async () => {
    // Prepare
    const { id, call, h } = await served();
    const token = await localToken(KEY, avery);

    // Act
    const read = await call('GET', `/requests/${id}`, token);
    const actions = await Promise.all(
      (
        [
          ['cancel', { reason: 'withdrawn' }],
          ['deny', { reason_code: 'other', reason: 'x' }],
          ['extend', { reason: 'complex', notice: response.notice }],
          ['retry', {}],
          ['notice', response],
        ] as const
      ).map(([action, body]) => call('POST', `/requests/${id}/${action}`, token, body)),
    );

    // Assess
    expect(read.status).toBe(200);
    expect(read.headers.get('cache-control')).toBe('no-store');
    expect(read.json.request).toMatchObject({ request_id: id, status: 'completed', outcome: 'exported' });
    expect(read.json.request).not.toHaveProperty('primary_key');
    expect(actions.map((answer) => answer.status)).toEqual([403, 403, 403, 403, 403]);
    expect(actions[0]?.json).toEqual({
      error: {
        code: 'forbidden',
        message: expect.stringContaining('is for privacy-team; your groups give auditor'),
      },
    });
    expect((await h.workflow.ledger.require(id)).notice_response).toBeUndefined();
  });

  it("records the privacy team's action under the signed-in person's name, and refuses what the ledger's rules refuse", async () => {
    // Prepare
    const { id, call, h, logs } = await served();
    const token = await localToken(KEY, jane);

    // Act
    const read = await call('GET', `/requests/${id}`, token);
    const recorded = await call('POST', `/requests/${id}/notice`, token, response);
    const cancelled = await call('POST', `/requests/${id}/cancel`, token, { reason: 'withdrawn' });

    // Assess
    expect(read.json.request).toMatchObject({ primary_key: 'u-alice' });
    expect(recorded.status).toBe(200);
    expect((await h.workflow.ledger.require(id)).notice_response).toMatchObject({ channel: 'email' });
    const notices = await h.workflow.audit.list(`${id}.notices`);
    expect(notices.at(-1)?.facts.operator).toBe(`console:jane (sub ${jane.subject})`);
    expect(cancelled.status).toBe(409);
    expect(cancelled.json.error).toMatchObject({
      code: expect.any(String),
      message: expect.stringContaining('completed'),
    });
    // Nothing the API logged holds the subject's key.
    expect(logs.join('\n')).not.toContain('u-alice');
  });

  it('answers 401 without a token, with an expired one or one signed by another key, and 400 for a body it does not take', async () => {
    // Prepare
    const { id, call } = await served();
    const expired = await localToken(KEY, jane, -10);
    const foreign = await localToken(new Uint8Array(32).fill(9), jane);
    const token = await localToken(KEY, jane);

    // Act
    const answers = await Promise.all([
      call('GET', `/requests/${id}`, undefined),
      call('GET', `/requests/${id}`, expired),
      call('GET', `/requests/${id}`, foreign),
    ]);
    const unknownField = await call('POST', `/requests/${id}/cancel`, token, {
      reason: 'x',
      operator: 'someone-else',
    });
    const byKey = await call('GET', '/requests/u-alice', token);
    const noRoute = await call('GET', '/subjects', token);
    const wrongMethod = await call('POST', `/requests/${id}`, token, {});
    const tooLarge = await call('POST', `/requests/${id}/cancel`, token, { reason: 'x'.repeat(20_000) });

    // Assess
    expect(answers.map((answer) => answer.status)).toEqual([401, 401, 401]);
    expect(unknownField.status).toBe(400);
    expect(byKey.status).toBe(400);
    expect(JSON.stringify(byKey.json)).not.toContain('u-alice');
    expect([noRoute.status, wrongMethod.status, tooLarge.status]).toEqual([404, 405, 413]);
    expect(noRoute.json).toEqual({
      error: { code: 'not_found', message: expect.stringContaining('docs/openapi.json') },
    });
  });
});
