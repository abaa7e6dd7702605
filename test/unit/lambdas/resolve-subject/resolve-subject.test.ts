import { randomUUID } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { RequestCancelledError, SubjectUnderOtherSpellingError, SupersededRunError } from '#shared/errors';
import {
  MAX_OTHER_SPELLING_LOOKUPS,
  resolveSubject,
} from '../../../../lambdas/resolve-subject/resolve-subject.ts';
import { deps, ledger, platform, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

/** A received erasure for `primaryKey`. */
async function erasureFor(primaryKey: string): Promise<string> {
  const id = randomUUID();
  await ledger.createReceived(
    {
      request_id: id,
      type: 'erasure',
      regulation: 'gdpr',
      primary_key: primaryKey,
      received_at: '2026-11-20T00:00:00Z',
      verification: { method: 'm', verified_by: 'v', verified_at: '2026-11-20T00:00:00Z' },
    },
    'fp',
    computeDeadlines('gdpr', new Date('2026-11-20T00:00:00Z')),
  );
  return id;
}

/** The platform knows one user, under `storedKey`. */
function platformHolds(storedKey: string): void {
  platform.retrieveUser.mockImplementation(async (key: string) =>
    key === storedKey ? { found: true as const, svcUserId: 'svc-1', user: {} } : ({ found: false } as never),
  );
}

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

  it.each([
    ['a Cyrillic а', 'u-p\u0430ul28', 'u-paul28'],
    ['a Greek ο', 'u-b\u03bfb29', 'u-bob29'],
    ['a Cyrillic е', 'u-\u0435ve30', 'u-eve30'],
  ])(
    'fails with subject_under_other_spelling, never no_data, for a key with %s when the platform holds its Latin twin',
    async (_lookAlike, submittedKey, storedKey) => {
      // Prepare
      const id = await erasureFor(submittedKey);
      platformHolds(storedKey);

      // Act
      const resolving = resolveSubject({ request_id: id }, deps);

      // Assess: the error names the form found, never the spelling, and nothing is resolved.
      await expect(resolving).rejects.toBeInstanceOf(SubjectUnderOtherSpellingError);
      await expect(resolving).rejects.toThrow('under its Latin-only form');
      await expect(resolving).rejects.not.toThrow(storedKey);
      await expect(resolving).rejects.not.toThrow(submittedKey);
      expect((await ledger.require(id)).svc_user_id).toBeUndefined();
      expect(deps.audit.append).not.toHaveBeenCalled();
      // The key as submitted, then its Latin-only form: its normalisation forms are the key itself.
      expect(platform.retrieveUser.mock.calls.map(([key]) => key)).toEqual([submittedKey, storedKey]);
    },
  );

  it('fails with subject_under_other_spelling when the platform holds the confusable skeleton of a whole-script look-alike', async () => {
    // Prepare: Cyrillic р о е, one script, and a platform user "poe" in Latin.
    const id = await erasureFor('\u0440\u043e\u0435');
    platformHolds('poe');

    // Act
    const resolving = resolveSubject({ request_id: id }, deps);

    // Assess
    await expect(resolving).rejects.toBeInstanceOf(SubjectUnderOtherSpellingError);
    await expect(resolving).rejects.toThrow('under its confusable skeleton');
    await expect(resolving).rejects.not.toThrow('poe');
    expect((await ledger.require(id)).svc_user_id).toBeUndefined();
  });

  it('ends as not found only when no look-alike spelling is known either, each spelling looked up once', async () => {
    // Prepare: a mixed-script key the platform knows under no spelling.
    const id = await erasureFor('u-p\u0430ul28');
    platform.retrieveUser.mockResolvedValue({ found: false } as never);

    // Act / Assess
    await expect(resolveSubject({ request_id: id }, deps)).resolves.toEqual({
      found: false,
      already_completed: false,
    });
    expect(platform.retrieveUser.mock.calls.map(([key]) => key)).toEqual(['u-p\u0430ul28', 'u-paul28']);
  });

  it(`makes at most ${MAX_OTHER_SPELLING_LOOKUPS} extra look-ups however many spellings a key has`, async () => {
    // Prepare: a key in no normalisation form (é precomposed and decomposed, a ligature), with
    // letters of three scripts, so every kind of other spelling applies.
    const key = '\u00e9e\u0301\ufb01-\u0440\u0430\u0441-\u03bf\u03bf';
    const id = await erasureFor(key);
    platform.retrieveUser.mockResolvedValue({ found: false } as never);

    // Act
    await expect(resolveSubject({ request_id: id }, deps)).resolves.toMatchObject({ found: false });

    // Assess: the key, its four normalisation forms, and look-alikes, each once and within the bound.
    const keys = platform.retrieveUser.mock.calls.map(([looked]) => looked);
    expect(keys[0]).toBe(key);
    expect(keys.slice(1, 5)).toEqual(['NFC', 'NFD', 'NFKC', 'NFKD'].map((form) => key.normalize(form)));
    expect(keys.length).toBeGreaterThan(5);
    expect(keys.length).toBeLessThanOrEqual(1 + MAX_OTHER_SPELLING_LOOKUPS);
    expect(new Set(keys).size).toBe(keys.length);
  });

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
