import { afterEach, describe, expect, it } from 'vitest';
import { emulatorControl } from '#local/emulator/server';
import { subjectHash } from '../../../lambdas/shared/audit.ts';
import { computeDeadlines } from '../../../lambdas/shared/deadlines.ts';
import { noticesDue } from '../../../lambdas/shared/ledger/index.ts';
import { type Harness, requestFor, startHarness, TEST_EXPORT_TOKEN, TEST_SSO_TOKEN } from './harness.ts';
import { submitAndSettle } from './submit.ts';

const HMAC_KEY = 'correction-test-hmac-key-0123456789abcdef';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function start(options: Parameters<typeof startHarness>[0] = {}): Promise<Harness> {
  harness = await startHarness({
    secrets: { ssoAccessToken: TEST_SSO_TOKEN, exportToken: TEST_EXPORT_TOKEN, auditHmacKey: HMAC_KEY },
    ...options,
  });
  return harness;
}

function correctionFor(primaryKey: string, corrections: Record<string, string>) {
  return requestFor(primaryKey, {
    type: 'correction',
    regulation: 'ccpa',
    verification: {
      method: 'account_login',
      verified_by: 'privacy-team',
      verified_at: '2026-11-20T09:05:00Z',
    },
    corrections,
  });
}

/** The user as retrieve-user (endpoint 3) answers it. */
async function platformUser(h: Harness, primaryKey: string): Promise<Record<string, unknown>> {
  const answer = await fetch(`${h.emulator.url}/sso/v1/user/${primaryKey}`, {
    headers: { 'x-svc-sso-access-token': TEST_SSO_TOKEN },
  });
  const body = (await answer.json()) as { user: Record<string, unknown> };
  return body.user;
}

/** Everything the run left outside the platform and the ledger's value slot: state, logs, records. */
async function leftBehind(
  h: Harness,
  requestId: string,
  results: Awaited<ReturnType<typeof submitAndSettle>>,
) {
  const item = await h.workflow.ledger.require(requestId);
  const records = await h.workflow.audit.list(requestId);
  return {
    item,
    records,
    text: [
      JSON.stringify(item),
      JSON.stringify(records),
      JSON.stringify(results.get(requestId)?.events ?? []),
      JSON.stringify(results.get(requestId)?.output ?? null),
      ...h.logs,
    ].join('\n'),
  };
}

const hashOf = (value: string) => subjectHash(HMAC_KEY, 'profile_value', value);

describe('a correction request', () => {
  it('corrects several fields: the platform shows the new values, every other field unchanged, and no value is kept in clear', async () => {
    const h = await start();
    const before = await platformUser(h, 'u-alice');
    const corrections = {
      display_name: 'Alice Q. Walker',
      email: 'alice.walker@example.net',
      location: 'Coimbra, Portugal',
      bio: 'Reads the regional pages.',
    };
    const request = correctionFor('u-alice', corrections);

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    const after = await platformUser(h, 'u-alice');
    // A corrected e-mail is sent as unverified; every field not corrected is as it was.
    expect(after).toEqual({ ...before, ...corrections, email_verified: false });
    const { item, records, text } = await leftBehind(h, request.request_id, results);
    expect(item).toMatchObject({
      status: 'completed',
      outcome: 'corrected',
      correction_fields: ['display_name', 'email', 'location', 'bio'],
      correction: { outcome: 'corrected', altered: [], attempts: 1 },
    });
    expect(item.correction_values).toBeUndefined();
    // The deadlines of an access request (CCPA: 45 days, receipt confirmation), and a response owed.
    const deadlines = computeDeadlines('ccpa', new Date(request.received_at));
    expect(item).toMatchObject({ due_at: deadlines.due_at, confirm_by: deadlines.confirm_by });
    expect(noticesDue(item, new Date()).map((notice) => notice.kind)).toEqual(['receipt', 'response']);
    for (const value of [...Object.values(corrections), 'Alice Walker', 'alice@example.com', 'Lisbon']) {
      expect(text.includes(value) ? value : null).toBeNull();
    }
    // The records hold, per field, keyed hashes of the old, requested and new values.
    const beforeRecord = records.find((record) => record.action === 'profile_read_before_correction');
    const corrected = records.find((record) => record.action === 'subject_corrected');
    expect(beforeRecord?.facts).toMatchObject({
      display_name_old: hashOf('Alice Walker'),
      email_old: hashOf('alice@example.com'),
      location_old: hashOf('Lisbon'),
    });
    expect(corrected?.facts).toMatchObject({
      outcome: 'corrected',
      email_new: hashOf('alice.walker@example.net'),
      email_requested: hashOf('alice.walker@example.net'),
      email_matched: true,
      email_verified_after: false,
      bio_matched: true,
    });
    expect(await h.workflow.audit.verify(request.request_id)).toMatchObject({ ok: true });
  });

  it('ends corrected_with_changes when the user_name is taken, recording the name the platform gave', async () => {
    const h = await start();
    // bruno.m is taken by another user.
    const request = correctionFor('u-alice', { user_name: 'bruno.m' });

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    const given = String((await platformUser(h, 'u-alice')).user_name);
    expect(given).toMatch(/^bruno\.m[a-z0-9]{4}$/);
    const { item, records } = await leftBehind(h, request.request_id, results);
    expect(item).toMatchObject({
      outcome: 'corrected_with_changes',
      correction: { outcome: 'corrected_with_changes', altered: ['user_name'] },
    });
    expect(records.find((record) => record.action === 'subject_corrected')?.facts).toMatchObject({
      user_name_requested: hashOf('bruno.m'),
      user_name_new: hashOf(given),
      user_name_matched: false,
      user_name_altered_by_platform: true,
    });
  });

  it('ends no_data for a user the platform does not have, and sends no update', async () => {
    const h = await start();
    const request = correctionFor('u-nobody', { display_name: 'Nobody' });

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'no_data',
    });
    expect((await h.workflow.ledger.require(request.request_id)).correction_values).toBeUndefined();
    const updates = emulatorControl(h.emulator)
      .calls()
      .filter((call) => call.path.startsWith('/sso/v1/update-user'));
    expect(updates).toEqual([]);
  });
});

describe('a profile changed by someone else while it is corrected', () => {
  /**
   * Another writer's change lands between the step's read and its re-read (sent through
   * register-user, which changes only what it is sent): `times` re-reads find it.
   */
  function concurrentWriter(h: () => Harness, times: number) {
    let reads = 0;
    let changes = 0;
    return (real: typeof fetch): typeof fetch =>
      async (input, init) => {
        const url = new URL(input instanceof Request ? input.url : String(input));
        if (url.pathname === '/sso/v1/user/u-alice' && (init?.method ?? 'GET') === 'GET') {
          reads += 1;
          // Read 1 is ResolveSubject's; then CorrectSubject reads, updates and re-reads: reads 3, 5...
          if (reads >= 3 && reads % 2 === 1 && changes < times) {
            changes += 1;
            const query = new URLSearchParams({
              access_token: TEST_SSO_TOKEN,
              code_a: `other-writer-${changes}`,
              primary_key: 'u-alice',
              location: `Elsewhere ${changes}`,
            });
            await real(`${h().emulator.url}/sso/v1/register-user?${query}`);
          }
        }
        return real(input, init);
      };
  }

  it('is caught by the re-read and corrected again from a fresh read, keeping the other change', async () => {
    const h = await start({ fetch: concurrentWriter(() => h, 1) });
    const request = correctionFor('u-alice', { display_name: 'Alice Q. Walker' });

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(await platformUser(h, 'u-alice')).toMatchObject({
      display_name: 'Alice Q. Walker',
      location: 'Elsewhere 1',
    });
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      outcome: 'corrected',
      correction: { attempts: 2 },
    });
  });

  it('fails with its own code when the re-read finds it changed again', async () => {
    const h = await start({ fetch: concurrentWriter(() => h, 2) });
    const request = correctionFor('u-alice', { display_name: 'Alice Q. Walker' });

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('FAILED');
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'failed', error: { code: 'profile_changed_concurrently' } });
    expect(item.error?.message).toContain('fields that differ from what was sent: location');
    expect(item.error?.message).not.toContain('Elsewhere');
    // A failed request is owed an answer: its values stay for an operator's retry.
    expect(item.correction_values).toEqual({ display_name: 'Alice Q. Walker' });
  });
});
