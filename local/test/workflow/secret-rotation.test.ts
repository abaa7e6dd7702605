import { afterEach, describe, expect, it } from 'vitest';
import { emulatorControl } from '#local/emulator/server';
import { type Harness, requestFor, startHarness, TEST_EXPORT_TOKEN, TEST_SSO_TOKEN } from './harness.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const STALE_SSO_TOKEN = 'stale-sso-token-0c41d9';
const secrets = {
  ssoAccessToken: STALE_SSO_TOKEN,
  exportToken: TEST_EXPORT_TOKEN,
  auditHmacKey: 'a-local-audit-key-of-at-least-32-chars',
};

function retrieveAnswers(h: Harness): (number | null)[] {
  return emulatorControl(h.emulator)
    .calls()
    .filter((call) => call.method === 'GET' && call.path.startsWith('/sso/'))
    .map((call) => call.status);
}

describe('a platform token rotated while requests are in flight', () => {
  it('succeeds after one refresh of the cached secret when the platform refuses the cached token (the emulator answers 403)', async () => {
    // The functions cached the old token; the rotation lands as their first call reaches the platform.
    let rotated = false;
    const h = await startHarness({
      secrets,
      fetch: (real) => async (input, init) => {
        if (!rotated) {
          rotated = true;
          harness?.workflow.rotateSecret('ssoAccessToken', TEST_SSO_TOKEN);
        }
        return real(input, init);
      },
    });
    harness = h;
    const request = requestFor('u-alice');

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'exported',
    });
    // One refusal of the stale token, then the fresh one: no Step Functions retry was needed.
    expect(retrieveAnswers(h).slice(0, 2)).toEqual([403, 200]);
  });

  it('fails as platform_auth when the secret still holds the refused token', async () => {
    harness = await startHarness({ secrets });
    const request = requestFor('u-alice');

    const results = await submitAndSettle(harness, request);

    expect(results.get(request.request_id)).toMatchObject({ status: 'FAILED', error: 'PlatformAuthError' });
    expect(await harness.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'failed',
      error: { code: 'platform_auth' },
    });
    expect(retrieveAnswers(harness)).toEqual([403]);
  });
});
