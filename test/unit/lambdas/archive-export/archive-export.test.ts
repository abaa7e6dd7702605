import { describe, expect, it, vi } from 'vitest';
import { InvalidArchiveError, LedgerStateError } from '#shared/errors';
import { archiveExport, archiveKey } from '../../../../lambdas/archive-export/archive-export.ts';
import { archived, deps, EXPORT_PENDING, ledger, platform, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('archiveExport', () => {
  it('copies, verifies and records the archive in one ledger write', async () => {
    // Prepare
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_id: 'exp-1',
      export_status: 'completed',
      export_attempts: 1,
      step: 'archiving',
    });
    platform.exportStatus.mockResolvedValueOnce({
      status: 'completed',
      link: new URL('https://cdn.example.com/x.zip'),
    } as never);
    const writes = vi.spyOn(ledger, 'update');

    // Act / Assess
    try {
      await expect(archiveExport({ request_id: id }, deps)).resolves.toEqual({
        key: archiveKey(id, 1),
        bytes: 10,
        sha256: 'ab'.repeat(32),
        entries: 4,
      });
      expect(writes).toHaveBeenCalledTimes(1);
    } finally {
      writes.mockRestore();
    }
    expect(deps.archive.verify).toHaveBeenCalledWith(archiveKey(id, 1), {
      bytes: 10,
      sha256: 'ab'.repeat(32),
    });
    expect((await ledger.require(id)).archive).toMatchObject({ key: archiveKey(id, 1), entries: 4 });
  });

  it('records nothing when the stored zip fails verification', async () => {
    // Prepare
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_id: 'exp-1',
      export_status: 'completed',
      export_attempts: 1,
    });
    platform.exportStatus.mockResolvedValueOnce({
      status: 'completed',
      link: new URL('https://cdn.example.com/x.zip'),
    } as never);
    vi.mocked(deps.archive.verify).mockRejectedValueOnce(new InvalidArchiveError('profile.json is missing'));

    // Act / Assess
    await expect(archiveExport({ request_id: id }, deps)).rejects.toBeInstanceOf(InvalidArchiveError);
    expect((await ledger.require(id)).archive).toBeUndefined();
  });

  it('refuses to archive an export that has not completed', async () => {
    // Prepare
    const id = await requestIn(EXPORT_PENDING);

    // Act / Assess
    await expect(archiveExport({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
    expect(deps.archive.copy).not.toHaveBeenCalled();
  });

  it('returns the recorded archive without downloading again', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived });

    // Act / Assess
    await expect(archiveExport({ request_id: id }, deps)).resolves.toEqual({
      key: 'k',
      bytes: 10,
      sha256: 'ab',
      entries: 4,
    });
    expect(platform.exportStatus).not.toHaveBeenCalled();
  });
});
