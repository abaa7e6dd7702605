import { describe, expect, it, vi } from 'vitest';
import { LedgerStateError, SupersededRunError } from '#shared/errors';
import { eraseSubject } from '../../../../lambdas/erase-subject/erase-subject.ts';
import { archived, deps, ledger, platform, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('eraseSubject', () => {
  it('refuses to delete before a verified archive exists', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' }, 'erasure');

    // Act / Assess
    await expect(eraseSubject({ request_id: id }, deps)).rejects.toThrow('no verified archive');
    expect(platform.deleteUser).not.toHaveBeenCalled();
  });

  it('never deletes twice', async () => {
    // Prepare
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 200, at: 'x' },
      },
      'erasure',
    );

    // Act / Assess
    await expect(eraseSubject({ request_id: id }, deps)).resolves.toEqual({ outcome: 'deleted' });
    expect(platform.deleteUser).not.toHaveBeenCalled();
  });

  it('records a resumed erasure whose subject is gone as deleted by its own DELETE, without deleting again', async () => {
    // Prepare
    // A first attempt marked the step `erasing`, sent the DELETE, and stopped before recording it.
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, step: 'erasing' }, 'erasure');
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);

    // Act / Assess
    await expect(eraseSubject({ request_id: id }, deps)).resolves.toEqual({ outcome: 'deleted' });

    expect(platform.deleteUser).not.toHaveBeenCalled();
    expect(await ledger.require(id)).toMatchObject({
      erasure: { outcome: 'deleted', platform_status: 404, evidence: 'not_found_after_interrupted_delete' },
    });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({
        action: 'subject_deleted',
        facts: {
          platform_status: 404,
          evidence: 'not_found_after_interrupted_delete',
          // What "erased" leaves: the subject's comments, under a random guest user.
          platform_keeps: 'comments',
          comments_relinked_to: 'random_guest_user',
        },
      }),
    );
  });

  it('deletes on a resumed erasure whose subject is still there', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, step: 'erasing' }, 'erasure');

    // Act / Assess
    await expect(eraseSubject({ request_id: id }, deps)).resolves.toEqual({ outcome: 'deleted' });

    expect(platform.retrieveUser).toHaveBeenCalledTimes(1);
    expect(platform.deleteUser).toHaveBeenCalledTimes(1);
  });

  it('deletes without a look first on a first attempt', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived }, 'erasure');

    // Act / Assess
    await expect(eraseSubject({ request_id: id }, deps)).resolves.toEqual({ outcome: 'deleted' });

    expect(platform.retrieveUser).not.toHaveBeenCalled();
    expect(platform.deleteUser).toHaveBeenCalledTimes(1);
  });

  it('marks erasing before the DELETE and records the deletion with the verifying step', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, step: 'archiving' }, 'erasure');
    platform.deleteUser.mockImplementationOnce(async () => {
      expect((await ledger.require(id)).step).toBe('erasing');
      return { outcome: 'deleted' as const, status: 200 };
    });

    // Act
    await eraseSubject({ request_id: id }, deps);

    // Assess
    expect(platform.deleteUser).toHaveBeenCalledTimes(1);
    expect(await ledger.require(id)).toMatchObject({
      step: 'verifying',
      erasure: { outcome: 'deleted', platform_status: 200 },
    });
  });

  it('sends no DELETE from an execution whose run was superseded while it read the request', async () => {
    // Prepare: the execution of run 2 reads the request; a retry claims run 3 before the mark.
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, executions: 2 }, 'erasure');
    const require = ledger.require.bind(ledger);
    const spy = vi.spyOn(ledger, 'require').mockImplementationOnce(async (requestId) => {
      const item = await require(requestId);
      await ledger.update(id, { executions: 3 }, ['running']);
      return item;
    });

    // Act
    const erasing = eraseSubject({ request_id: id, execution: `${id}-retry-2` }, deps);

    // Assess: the conditional mark refused it, so the platform got no DELETE.
    await expect(erasing).rejects.toBeInstanceOf(SupersededRunError);
    spy.mockRestore();
    expect(platform.deleteUser).not.toHaveBeenCalled();
    expect((await ledger.require(id)).step).not.toBe('erasing');
  });

  it('deletes from the current run', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, executions: 2 }, 'erasure');

    // Act / Assess
    await expect(eraseSubject({ request_id: id, execution: `${id}-retry-2` }, deps)).resolves.toEqual({
      outcome: 'deleted',
    });
    expect(platform.deleteUser).toHaveBeenCalledTimes(1);
  });

  it('refuses to erase for an access request', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived }, 'access');

    // Act / Assess
    await expect(eraseSubject({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
  });
});
