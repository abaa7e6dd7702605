import { randomUUID } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { RequestCancelledError, SubjectUnderOtherSpellingError, SupersededRunError } from '#shared/errors';
import { resolveSubject } from '../../../../lambdas/resolve-subject/resolve-subject.ts';
import { deps, ledger, platform, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('resolveSubject', () => {
  it('stops a cancelled request without calling the platform', async () => {
    // Prepare
    const id = await requestIn();
    await ledger.update(id, { status: 'cancelled' }, ['running']);

    // Act / Assess
    await expect(resolveSubject({ request_id: id }, deps)).rejects.toBeInstanceOf(RequestCancelledError);
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('stops a denied request without calling the platform: it is never exported or erased', async () => {
    // Prepare
    const id = await requestIn();
    await ledger.deny(id, { code: 'identity_not_verified', reason: 'no ID' });

    // Act / Assess
    await expect(resolveSubject({ request_id: id }, deps)).rejects.toThrow('the request was denied');
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('does not look the subject up again once resolved (after an erasure it would be gone)', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });

    // Act / Assess
    await expect(resolveSubject({ request_id: id }, deps)).resolves.toEqual({
      found: true,
      already_completed: false,
    });
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('hashes the subject in the audit record and keeps svc_user_id in the ledger only', async () => {
    // Prepare
    const id = await requestIn();

    // Act
    await resolveSubject({ request_id: id }, deps);

    // Assess
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({
        facts: { found: true },
        subject: { primaryKey: 'subject-pk-77', svcUserId: 'svc-1' },
      }),
    );
    expect((await ledger.require(id)).svc_user_id).toBe('svc-1');
  });

  it('moves a received request to running with the subject in one ledger write', async () => {
    // Prepare
    const id = await requestIn({ status: 'received' });
    const writes = vi.spyOn(ledger, 'update');

    // Act / Assess
    try {
      await resolveSubject({ request_id: id }, deps);
      expect(writes).toHaveBeenCalledTimes(1);
    } finally {
      writes.mockRestore();
    }
    expect(await ledger.require(id)).toMatchObject({
      status: 'running',
      step: 'resolving',
      svc_user_id: 'svc-1',
    });
  });

  it('records a subject the platform does not know as running, with no id', async () => {
    // Prepare
    const id = await requestIn({ status: 'received' });
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);

    // Act / Assess
    await expect(resolveSubject({ request_id: id }, deps)).resolves.toEqual({
      found: false,
      already_completed: false,
    });
    const item = await ledger.require(id);
    expect(item).toMatchObject({ status: 'running', step: 'resolving' });
    expect(item.svc_user_id).toBeUndefined();
  });

  it.each([
    ['NFC', 'NFD', 'Zo\u00eb-42', 'Zoe\u0308-42'],
    ['NFD', 'NFC', 'Zoe\u0308-42', 'Zo\u00eb-42'],
  ])(
    'fails with its own code, never no_data, when the platform holds the key spelled in %s and the request in %s',
    async (stored, _submitted, storedKey, submittedKey) => {
      // Prepare: the platform knows the subject under one normalisation form only.
      const id = randomUUID();
      await ledger.createReceived(
        {
          request_id: id,
          type: 'erasure',
          regulation: 'gdpr',
          primary_key: submittedKey,
          received_at: '2026-11-20T00:00:00Z',
          verification: { method: 'm', verified_by: 'v', verified_at: '2026-11-20T00:00:00Z' },
        },
        'fp',
        computeDeadlines('gdpr', new Date('2026-11-20T00:00:00Z')),
      );
      platform.retrieveUser.mockImplementation(async (key: string) =>
        key === storedKey
          ? { found: true as const, svcUserId: 'svc-1', user: {} }
          : ({ found: false } as never),
      );

      // Act
      const resolving = resolveSubject({ request_id: id }, deps);

      // Assess: the error names the form found, and the request holds no subject id.
      await expect(resolving).rejects.toBeInstanceOf(SubjectUnderOtherSpellingError);
      await expect(resolving).rejects.toThrow(`under its ${stored} form`);
      await expect(resolving).rejects.not.toThrow(storedKey);
      expect((await ledger.require(id)).svc_user_id).toBeUndefined();
      expect(deps.audit.append).not.toHaveBeenCalled();
    },
  );

  it('looks an ASCII key up once: it has no other spelling', async () => {
    // Prepare
    const id = await requestIn({ status: 'received' });
    platform.retrieveUser.mockResolvedValue({ found: false } as never);

    // Act / Assess
    await expect(resolveSubject({ request_id: id }, deps)).resolves.toMatchObject({ found: false });
    expect(platform.retrieveUser).toHaveBeenCalledTimes(1);
  });

  it('stops an execution that is not the current run without calling the platform', async () => {
    // Prepare: a retry claimed run 3 while the execution of run 2 was on its way.
    const id = await requestIn({ status: 'received', executions: 3 });

    // Act / Assess
    await expect(resolveSubject({ request_id: id, execution: `${id}-retry-2` }, deps)).rejects.toBeInstanceOf(
      SupersededRunError,
    );
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('stops when the request is cancelled while the platform answers, and keeps no subject id', async () => {
    // Prepare
    const id = await requestIn({ status: 'received' });
    platform.retrieveUser.mockImplementationOnce(async () => {
      await ledger.update(id, { status: 'cancelled' }, ['received']);
      return { found: true as const, svcUserId: 'svc-1', user: {} };
    });

    // Act / Assess
    await expect(resolveSubject({ request_id: id }, deps)).rejects.toBeInstanceOf(RequestCancelledError);
    const item = await ledger.require(id);
    expect(item.status).toBe('cancelled');
    expect(item.svc_user_id).toBeUndefined();
    expect(deps.audit.append).not.toHaveBeenCalled();
  });
});
