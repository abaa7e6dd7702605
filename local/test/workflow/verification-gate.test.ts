import { afterEach, describe, expect, it } from 'vitest';
import { emulatorControl } from '#local/emulator/server';
import { type Harness, requestFor, startHarness } from './harness.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** The platform calls that export or erase a subject: none may happen for a request the gate refuses. */
function exportsAndErasures(h: Harness) {
  return emulatorControl(h.emulator)
    .calls()
    .filter(
      (call) =>
        (call.method === 'POST' && call.path.startsWith('/gdpr/export')) ||
        (call.method === 'DELETE' && call.path.startsWith('/sso/v1/user/')),
    );
}

function verifiedBy(method: string, verifiedAt = '2026-11-20T09:05:00Z') {
  return { method, verified_by: 'privacy-team', verified_at: verifiedAt };
}

describe('the verification gate in local mode', () => {
  it('never exports or erases a subject whose request was not verified by a method on the default list', async () => {
    // Prepare: the default configuration; existing subjects, so a request let through would run.
    const h = await startHarness();
    harness = h;
    const unknown = {
      pending: requestFor('u-alice', { verification: verifiedBy('pending') }),
      notVerified: requestFor('u-bruno', { type: 'erasure', verification: verifiedBy('not_verified') }),
      idCheckFailed: requestFor('u-alice', { type: 'erasure', verification: verifiedBy('id_check_failed') }),
      cyrillic: requestFor('u-bruno', { type: 'erasure', verification: verifiedBy('\u0435mail_link') }),
    };
    const denied = {
      noneLookAlike: requestFor('u-alice', { type: 'erasure', verification: verifiedBy('n\u043ene') }),
      noneInvisible: requestFor('u-bruno', { type: 'erasure', verification: verifiedBy('none\u200d') }),
      yearOld: requestFor('u-alice', {
        type: 'erasure',
        verification: verifiedBy('email_link', '2025-11-20T09:00:00Z'),
      }),
    };

    // Act
    const executions = await submitAndSettle(h, ...Object.values(unknown), ...Object.values(denied));

    // Assess: nothing ran, nothing was exported or erased; each is recorded as the gate judged it.
    expect(executions.size).toBe(0);
    expect(exportsAndErasures(h)).toEqual([]);
    for (const request of Object.values(unknown)) {
      expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
        status: 'rejected',
        executions: 0,
        rejection_errors: [
          expect.stringContaining(
            'this stack knows account_login, authorized_agent, email_link, id_document',
          ),
        ],
      });
    }
    for (const request of Object.values(denied)) {
      expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
        status: 'denied',
        executions: 0,
        denial: { code: 'identity_not_verified' },
      });
    }
  }, 60_000);

  it('denies a request verified by "pending" when the configuration names it for no request type', async () => {
    // Prepare: the stack's own list, which knows "pending" and accepts it for nothing.
    const h = await startHarness({
      config: {
        verification: {
          methods: { id_document: { acceptedFor: ['access', 'erasure'] }, pending: { acceptedFor: [] } },
        },
      },
    });
    harness = h;
    const pendingAccess = requestFor('u-alice', { verification: verifiedBy('Pending') });
    const pendingErasure = requestFor('u-bruno', { type: 'erasure', verification: verifiedBy('pending') });
    // A default method this stack does not name.
    const emailLink = requestFor('u-alice', { verification: verifiedBy('email_link') });

    // Act
    const executions = await submitAndSettle(h, pendingAccess, pendingErasure, emailLink);

    // Assess
    expect(executions.size).toBe(0);
    expect(exportsAndErasures(h)).toEqual([]);
    for (const request of [pendingAccess, pendingErasure]) {
      expect(await h.workflow.ledger.require(request.request_id)).toMatchObject({
        status: 'denied',
        executions: 0,
        denial: {
          code: 'identity_not_verified',
          reason: expect.stringMatching(
            /verification method "pending" is not accepted for (access|erasure) requests/,
          ),
        },
      });
    }
    expect(await h.workflow.ledger.require(emailLink.request_id)).toMatchObject({
      status: 'rejected',
      rejection_errors: [expect.stringContaining('this stack knows id_document, pending')],
    });
  }, 60_000);
});
