import { describe, expect, it, vi } from 'vitest';
import { ErasureNotVerifiedError } from '#shared/errors';
import { verifyErasure } from '../../../../lambdas/verify-erasure/verify-erasure.ts';
import { archived, deps, ledger, platform, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('verifyErasure', () => {
  it('keeps the not-found answer as evidence in one ledger write', async () => {
    // Prepare
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 200, at: 'x' },
        step: 'verifying',
      },
      'erasure',
    );
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);
    const writes = vi.spyOn(ledger, 'update');

    // Act / Assess
    try {
      await expect(verifyErasure({ request_id: id }, deps)).resolves.toEqual({ verified: true });
      expect(writes).toHaveBeenCalledTimes(1);
    } finally {
      writes.mockRestore();
    }
    expect((await ledger.require(id)).erasure_verification).toEqual({
      platform_answer: 'not_found',
      at: '2026-11-21T12:00:00.000Z',
    });
  });

  it('fails when the platform still knows the subject', async () => {
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
    await expect(verifyErasure({ request_id: id }, deps)).rejects.toBeInstanceOf(ErasureNotVerifiedError);
    expect((await ledger.require(id)).erasure_verification).toBeUndefined();
    expect(deps.archive.remove).not.toHaveBeenCalled();
  });

  it('deletes the archive once the erasure is verified when the stack keeps it 0 days, and says so', async () => {
    // Prepare
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 200, at: 'x' },
      },
      'erasure',
    );
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);
    // Act
    await verifyErasure({ request_id: id }, { ...deps, erasureArchiveKeepDays: 0 });
    // Assess
    expect(deps.archive.remove).toHaveBeenCalledWith(archived.key);
    expect(await ledger.require(id)).toMatchObject({
      archive: archived,
      archive_deleted_at: '2026-11-21T12:00:00.000Z',
    });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({
        action: 'erasure_verified',
        facts: { platform_answer: 'not_found', archive_deleted: true, archive_versions_deleted: 1 },
      }),
    );
  });

  it.each([30, undefined])('keeps the archive when the stack keeps it %s days', async (days) => {
    // Prepare
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 200, at: 'x' },
      },
      'erasure',
    );
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);
    // Act
    await verifyErasure(
      { request_id: id },
      days === undefined ? deps : { ...deps, erasureArchiveKeepDays: days },
    );
    // Assess
    expect(deps.archive.remove).not.toHaveBeenCalled();
    expect((await ledger.require(id)).archive_deleted_at).toBeUndefined();
  });
});
