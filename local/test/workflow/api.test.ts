/**
 * The API through HTTP on loopback, as the privacy team's console and other systems reach it:
 * tokens signed for the data dir, roles from their groups, actions on the operator's own code
 * path, recorded under the signed-in person's name.
 */
import { createHash, randomUUID } from 'node:crypto';
import { UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { afterEach, describe, expect, it } from 'vitest';
import { handleApiEvent } from '../../../lambdas/api/api.ts';
import { reportOf } from '../../../lambdas/api/evidence.ts';
import {
  manifestsAnswerSchema,
  reportAnswerSchema,
  verifyAnswerSchema,
} from '../../../lambdas/api/schemas.ts';
import { writeDailyManifests } from '../../../lambdas/shared/audit-manifest.ts';
import { computeDeadlines } from '../../../lambdas/shared/deadlines.ts';
import {
  type ApiEndpoint,
  LOCAL_ACCOUNT_ID,
  localApiDeps,
  localToken,
  startApiEndpoint,
} from '../../runtime/api-endpoint.ts';
import { jsonLogger, LOCAL_NAMES } from '../../runtime/workflow.ts';
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

/** The API over a harness's ledger; every log line the API writes kept. */
async function serve(h: Harness, limits?: { calls: number; windowSeconds: number }) {
  sfn = new SFNClient({
    region: h.aws.region,
    endpoint: h.workflow.shim.endpoint,
    credentials: h.aws.credentials,
  });
  const logs: string[] = [];
  api = await startApiEndpoint(
    localApiDeps(
      h.workflow,
      sfn,
      jsonLogger((line) => logs.push(line)),
      limits,
    ),
    KEY,
  );
  const url = api.url;
  const call = async (
    method: string,
    path: string,
    token: string | undefined,
    body?: unknown,
  ): Promise<{ status: number; headers: Headers; json: Record<string, unknown>; text: string }> => {
    const answer = await fetch(`${url}${path}`, {
      method,
      headers: {
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await answer.text();
    return {
      status: answer.status,
      headers: answer.headers,
      json: JSON.parse(text) as Record<string, unknown>,
      text,
    };
  };
  return { logs, call };
}

/** The API's deps over a harness, for calling its handler and functions without HTTP. */
function directDeps(h: Harness) {
  sfn = new SFNClient({
    region: h.aws.region,
    endpoint: h.workflow.shim.endpoint,
    credentials: h.aws.credentials,
  });
  return localApiDeps(
    h.workflow,
    sfn,
    jsonLogger(() => {}),
  );
}

/** A completed access request, and the API over its ledger. */
async function served() {
  harness = await startHarness();
  const h = harness;
  const request = requestFor('u-alice');
  await submitAndSettle(h, request);
  return { h, id: request.request_id, ...(await serve(h)) };
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

const CSV_HEADER =
  'request_id,type,regulation,primary_key,received_at,verification.method,verification.verified_by,verification.verified_at';
const csvLine = (id: string, key: string) =>
  `${id},access,gdpr,${key},2026-11-20T09:00:00Z,email_link,privacy-team,2026-11-20T09:05:00Z`;

describe("the privacy team's daily tasks through the API alone", () => {
  it('submits, lists, opens, extends, denies, retries, records a notice and hands out a package, each on record under the person', async () => {
    // Prepare: every export fails once, so the requests wait in the open list for a person.
    harness = await startHarness({ faults: { export_failure_rate: 1 }, env: { EXPORT_MAX_ATTEMPTS: '1' } });
    const h = harness;
    const { call, logs } = await serve(h);
    const token = await localToken(KEY, jane);
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    const batch = {
      format: 'csv',
      content: [CSV_HEADER, csvLine(a, 'u-alice'), csvLine(b, 'u-bruno'), `${randomUUID()},access,gdpr`].join(
        '\n',
      ),
    };

    // Act: a batch judged before anything is sent, then sent; one request by form.
    const verdicts = await call('POST', '/requests/batch', token, { ...batch, dry_run: true });
    const heldBack = await h.workflow.ledger.get(a);
    const sentBatch = await call('POST', '/requests/batch', token, batch);
    const one = await call('POST', '/requests', token, { ...requestFor('u-chloe'), request_id: c });
    await h.poller.drain();
    await h.workflow.settled();
    const listed = await call('GET', '/requests?status=failed&type=access&limit=2', token);
    const rest = await call(
      'GET',
      `/requests?status=failed&type=access&limit=2&cursor=${String(listed.json.next)}`,
      token,
    );
    const opened = await call('GET', `/requests/${a}`, token);
    const extended = await call('POST', `/requests/${a}/extend`, token, {
      reason: 'complex request',
      notice: { channel: 'email', at: '2026-11-25T10:00:00Z' },
    });
    const denied = await call('POST', `/requests/${b}/deny`, token, {
      reason_code: 'other',
      reason: 'duplicate of a',
    });
    await h.control('PUT', 'faults', { export_failure_rate: 0 });
    const retried = await call('POST', `/requests/${c}/retry`, token, { reason: 'platform fixed' });
    await h.workflow.settled();
    const notice = await call('POST', `/requests/${c}/notice`, token, response);
    const handed = await call('POST', `/requests/${c}/package`, token, {
      expires_in: 600,
      reason: 'to the subject',
    });
    const result = handed.json.result as { url: string; sha256: string; bytes: number };
    const download = Buffer.from(await (await fetch(result.url)).arrayBuffer());
    const timeline = await call('GET', `/requests/${c}/timeline`, token);

    // Assess
    expect(verdicts.status).toBe(200);
    expect(verdicts.json).toMatchObject({ dry_run: true, lines: 3, valid: 2, sent: [] });
    expect(verdicts.json.bad_lines).toMatchObject([{ line: 4, request_id: null }]);
    expect(heldBack).toBeUndefined();
    expect(sentBatch.json).toMatchObject({ dry_run: false, valid: 2 });
    expect((sentBatch.json.sent as { request_id: string }[]).map((line) => line.request_id).sort()).toEqual(
      [a, b].sort(),
    );
    expect(one.status).toBe(202);
    const operator = `console:jane (sub ${jane.subject})`;
    expect((await h.workflow.ledger.require(a)).submitted_by).toBe(operator);
    expect((await h.workflow.ledger.require(c)).submitted_by).toBe(operator);
    const page = listed.json.requests as { request_id: string; due_at: string; masked_key: string }[];
    const masks = new Map(
      [...page, ...(rest.json.requests as typeof page)].map((r) => [r.request_id, r.masked_key]),
    );
    expect([masks.get(a), masks.get(b), masks.get(c)]).toEqual(['u•••e', 'u•••o', 'u•••e']);
    const next = rest.json.requests as { request_id: string }[];
    expect(page).toHaveLength(2);
    expect(new Set([...page, ...next].map((request) => request.request_id))).toEqual(new Set([a, b, c]));
    expect(rest.json.next).toBeNull();
    expect(opened.json.request).toMatchObject({ status: 'failed', primary_key: 'u-alice' });
    expect([extended.status, denied.status, retried.status, notice.status, handed.status]).toEqual([
      200, 200, 200, 200, 200,
    ]);
    expect((await h.workflow.ledger.require(a)).extended).toBe(true);
    expect((await h.workflow.ledger.require(b)).status).toBe('denied');
    expect((await h.workflow.ledger.require(c)).status).toBe('completed');
    expect(createHash('sha256').update(download).digest('hex')).toBe(result.sha256);
    expect(download.length).toBe(result.bytes);
    const chains = timeline.json.chains as {
      kind: string;
      state: { ok: boolean; matches_ledger: boolean };
      records: { action: string; facts: Record<string, unknown> }[];
    }[];
    expect(chains.map((chain) => chain.kind).sort()).toEqual(['notices', 'packages', 'request']);
    expect(chains.every((chain) => chain.state.ok && chain.state.matches_ledger)).toBe(true);
    const actedBy = chains
      .flatMap((chain) => chain.records)
      .filter((record) => record.facts.operator === operator);
    expect(actedBy.length).toBeGreaterThanOrEqual(3);
    const own = [...(await h.workflow.audit.list(a)), ...(await h.workflow.audit.list(b))];
    expect(own.filter((record) => record.facts.operator === operator).length).toBeGreaterThanOrEqual(2);
    // No answer but a request's own detail holds a primary_key; no log line holds one or the link.
    const keys = ['u-alice', 'u-bruno', 'u-chloe'];
    for (const answer of [
      verdicts,
      sentBatch,
      one,
      listed,
      rest,
      extended,
      denied,
      retried,
      notice,
      timeline,
    ]) {
      for (const key of keys) expect(answer.text).not.toContain(key);
    }
    for (const key of [...keys, result.url, new URL(result.url).search])
      expect(logs.join('\n')).not.toContain(key);
  });

  it('gives an auditor lists and timelines but no submission and no package', async () => {
    // Prepare
    const { id, call } = await served();
    const token = await localToken(KEY, avery);

    // Act
    const list = await call('GET', '/requests', token);
    const timeline = await call('GET', `/requests/${id}/timeline`, token);
    const writes = await Promise.all([
      call('POST', '/requests', token, requestFor('u-bruno')),
      call('POST', '/requests/batch', token, {
        format: 'jsonl',
        content: JSON.stringify(requestFor('u-bruno')),
      }),
      call('POST', `/requests/${id}/package`, token, { expires_in: 600 }),
    ]);

    // Assess
    expect(list.status).toBe(200);
    expect(timeline.status).toBe(200);
    expect(writes.map((answer) => answer.status)).toEqual([403, 403, 403]);
    expect(JSON.stringify(writes)).not.toContain('https://');
  });

  it('counts the open requests by status and those due by a date, for the privacy team and an auditor alike', async () => {
    // Prepare: the served request has completed; three more are received, one of them due sooner
    const { h, call } = await served();
    const received = ['2026-11-20T09:00:00Z', '2026-11-21T09:00:00Z', '2026-10-01T09:00:00Z'];
    for (const [index, at] of received.entries()) {
      const request = {
        ...requestFor(`u-count-${index}`),
        type: 'access' as const,
        regulation: 'gdpr' as const,
        received_at: at,
      };
      await h.workflow.ledger.createReceived(
        request,
        `fp-count-${index}`,
        computeDeadlines('gdpr', new Date(at)),
      );
    }
    const dueTo = computeDeadlines('gdpr', new Date('2026-10-01T09:00:00Z')).due_at;

    // Act
    const mine = await call(
      'GET',
      `/requests/counts?due_to=${encodeURIComponent(dueTo)}`,
      await localToken(KEY, jane),
    );
    const theirs = await call('GET', '/requests/counts', await localToken(KEY, avery));
    const bad = await call('GET', '/requests/counts?due_to=tomorrow', await localToken(KEY, jane));

    // Assess
    expect(mine.json).toEqual({ by_status: { received: 3, running: 0, failed: 0 }, due_to: dueTo, due: 1 });
    expect(theirs.json).toEqual({
      by_status: { received: 3, running: 0, failed: 0 },
      due_to: null,
      due: null,
    });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ message: expect.stringContaining('due_to') });
  });

  it('refuses a subject identifier in a query, an unknown filter, and a cursor made for other filters', async () => {
    // Prepare
    const { call } = await served();
    const token = await localToken(KEY, jane);

    // Act
    const byKey = await call('GET', '/requests?primary_key=u-alice', token);
    const unknown = await call('GET', '/requests?colour=red', token);
    const badStatus = await call('GET', '/requests?status=completed', token);
    const first = await call('GET', '/requests?limit=1', token);
    const foreign = await call(
      'GET',
      `/requests?status=failed&cursor=${encodeURIComponent(String(first.json.next ?? 'x'))}`,
      token,
    );

    // Assess
    expect([byKey.status, unknown.status, badStatus.status, foreign.status]).toEqual([400, 400, 400, 400]);
    expect(byKey.text).not.toContain('u-alice');
    expect(unknown.json.error).toMatchObject({
      message: expect.stringContaining('colour is not a parameter'),
    });
  });
});

describe('the API under abuse and for machine clients', () => {
  it("answers 429 once a person has used their share, and keeps another person's", async () => {
    // Prepare
    harness = await startHarness();
    const { call } = await serve(harness, { calls: 3, windowSeconds: 3600 });
    const [mine, theirs] = [await localToken(KEY, jane), await localToken(KEY, avery)];

    // Act
    const answers = [];
    for (let index = 0; index < 4; index++) answers.push(await call('GET', '/requests', mine));
    const other = await call('GET', '/requests', theirs);

    // Assess
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200, 429]);
    expect(answers[3]?.json.error).toMatchObject({ code: 'throttled' });
    expect(other.status).toBe(200);
  });

  it('admits every call a page makes at once at the start of a window, up to the share and no further', async () => {
    // Prepare
    harness = await startHarness();
    const { call } = await serve(harness, { calls: 8, windowSeconds: 3600 });
    const mine = await localToken(KEY, jane);

    // Act: a page opening makes several calls together, the first of them starts the window
    const first = await Promise.all(Array.from({ length: 5 }, () => call('GET', '/requests', mine)));
    const more = await Promise.all(Array.from({ length: 5 }, () => call('GET', '/requests', mine)));

    // Assess
    expect(first.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200]);
    expect(more.filter((answer) => answer.status === 200)).toHaveLength(3);
    expect(more.filter((answer) => answer.status === 429)).toHaveLength(2);
  });

  it('acts for a SigV4 caller of the account on the /iam routes, on record as that machine, and refuses one of another account', async () => {
    // Prepare
    harness = await startHarness();
    const h = harness;
    const request = requestFor('u-alice');
    await submitAndSettle(h, request);
    const deps = directDeps(h);
    const event = (accountId: string, path: string, body: unknown) => ({
      rawPath: `/iam${path}`,
      body: JSON.stringify(body),
      requestContext: {
        http: { method: 'POST' },
        authorizer: { iam: { userArn: `arn:aws:sts::${accountId}:assumed-role/ticketing/run-7`, accountId } },
      },
    });

    // Act
    const ours = await handleApiEvent(
      deps,
      event(LOCAL_ACCOUNT_ID, `/requests/${request.request_id}/notice`, response),
    );
    const foreign = await handleApiEvent(
      deps,
      event('999999999999', `/requests/${request.request_id}/notice`, response),
    );
    const unsigned = await handleApiEvent(deps, {
      ...event(LOCAL_ACCOUNT_ID, '/requests', {}),
      requestContext: { http: { method: 'GET' } },
    });

    // Assess
    expect(ours.statusCode).toBe(200);
    const notices = await h.workflow.audit.list(`${request.request_id}.notices`);
    expect(notices.at(-1)?.facts.operator).toBe(
      `machine:arn:aws:sts::${LOCAL_ACCOUNT_ID}:assumed-role/ticketing/run-7`,
    );
    expect([foreign.statusCode, unsigned.statusCode]).toEqual([403, 403]);
  });
});

describe('the report and verification through the API', () => {
  it('gives the privacy team and an auditor the report and a verified request, with no subject identifier', async () => {
    // Prepare
    const { id, call, logs } = await served();
    const tokens = [await localToken(KEY, jane), await localToken(KEY, avery)];

    // Act
    const answers = [];
    for (const token of tokens) {
      answers.push(await call('GET', '/report?regulation=gdpr', token));
      answers.push(await call('GET', `/requests/${id}/verify`, token));
    }

    // Assess
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200, 200]);
    const [report, verified] = [answers[0]?.json, answers[1]?.json];
    const parsed = reportAnswerSchema.parse(report);
    expect(parsed.records.map((record) => [record.request_id, record.response_category])).toEqual([
      [id, 'complied'],
    ]);
    expect(parsed.metrics.find((metric) => metric.type === 'access')).toMatchObject({
      received: 1,
      complied: 1,
    });
    expect(parsed.refused).toEqual([]);
    expect(verifyAnswerSchema.parse(verified)).toMatchObject({
      request_id: id,
      ok: true,
      archive: { status: 'match' },
      audit: { ok: true, final: true },
    });
    expect(verified).not.toHaveProperty('audit.chain');
    for (const answer of answers) expect(answer.text).not.toContain('u-alice');
    expect(logs.join('\n')).not.toContain('u-alice');
  });

  it('leaves out of the report, and fails the verification of, a request whose ledger was edited after its records were locked', async () => {
    // Prepare: the ledger's receipt moved a year back, which its intake record contradicts.
    const { h, id, call } = await served();
    await h.workflow.dynamo.send(
      new UpdateItemCommand({
        TableName: LOCAL_NAMES.table,
        Key: { request_id: { S: id } },
        UpdateExpression: 'SET received_at = :at',
        ExpressionAttributeValues: { ':at': { S: '2025-01-02T00:00:00.000Z' } },
      }),
    );
    const token = await localToken(KEY, avery);

    // Act
    const report = await call('GET', '/report', token);
    const verified = await call('GET', `/requests/${id}/verify`, token);

    // Assess
    const parsed = reportAnswerSchema.parse(report.json);
    expect(parsed.records).toEqual([]);
    expect(parsed.refused.map((refusal) => refusal.request_id)).toEqual([id]);
    expect(parsed.refused[0]?.findings.map((finding) => finding.check)).toContain('ledger_mismatch');
    expect(verified.json).toMatchObject({ ok: false });
    expect((verified.json.findings as { check: string }[]).map((finding) => finding.check)).toContain(
      'ledger_mismatch',
    );
  });

  it('refuses a range it cannot read and says so when a report does not fit in a call', async () => {
    // Prepare
    const { h, call } = await served();
    const token = await localToken(KEY, jane);
    const deps = directDeps(h);

    // Act
    const badDate = await call('GET', '/report?from=2026-13-01', token);
    const reversed = await call('GET', '/report?from=2026-12-01&to=2026-11-01', token);
    const unknownZone = await call('GET', '/report?time_zone=Mars%2FOlympus', token);
    const late = reportOf(deps, {}, 0);

    // Assess
    expect([badDate.status, reversed.status, unknownZone.status]).toEqual([400, 400, 400]);
    expect(String((badDate.json.error as { message: string }).message)).toContain('from');
    expect(String((reversed.json.error as { message: string }).message)).toContain('from is after to');
    await expect(late).rejects.toMatchObject({ statusCode: 503, code: 'too_long' });
    await expect(late).rejects.toThrow('svc-dsr report');
  });
});

describe('the manifests through the API', () => {
  it("gives an auditor each day's manifest chained to the day before, and says when one does not hold", async () => {
    // Prepare: the day's manifest written once the day has settled, then a forged one for the next day.
    const { h, id, call } = await served();
    const tomorrow = new Date(Date.now() + 26 * 3600 * 1000);
    const [day] = await writeDailyManifests({
      s3: h.workflow.s3,
      bucket: LOCAL_NAMES.auditBucket,
      clock: () => tomorrow,
    });
    const token = await localToken(KEY, avery);
    const listed = await call('GET', '/manifests', token);
    const whole = await call('GET', `/manifests?day=${day}`, token);
    const next = tomorrow.toISOString().slice(0, 10);
    await h.workflow.s3.send(
      new PutObjectCommand({
        Bucket: LOCAL_NAMES.auditBucket,
        Key: `manifests/${next}.json`,
        Body: JSON.stringify({
          schema: 'svc-dsr.manifest/2',
          day: next,
          written_at: tomorrow.toISOString(),
          records: [],
          prev_hash: null,
          hash: `sha256:${'0'.repeat(64)}`,
        }),
      }),
    );

    // Act
    const forged = await call('GET', '/manifests', token);
    const missing = await call('GET', '/manifests?day=2020-01-01', token);

    // Assess
    const parsed = manifestsAnswerSchema.parse(listed.json);
    expect(parsed).toMatchObject({ ok: true, problem: null });
    expect(parsed.manifests.map((manifest) => manifest.day)).toEqual([day]);
    const manifest = manifestsAnswerSchema.parse(whole.json).manifest;
    expect(
      manifest?.schema === 'svc-dsr.manifest/2' && manifest.records.some((record) => record.chain === id),
    ).toBe(true);
    expect(forged.json).toMatchObject({ ok: false });
    expect(String(forged.json.problem)).toContain(next);
    expect(missing.status).toBe(404);
  });
});
