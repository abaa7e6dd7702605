import { describe, expect, it, vi } from 'vitest';
import {
  PlatformNotFoundError,
  PlatformThrottledError,
  RequestCancelledError,
  SubjectNotFoundError,
} from '#shared/errors';
import { checkExport } from '../../../../lambdas/check-export/check-export.ts';
import { deps, EXPORT_PENDING, ledger, platform, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('checkExport', () => {
  it('ends as no data when the export is unknown because the subject was erased', async () => {
    // Prepare
    const id = await requestIn(EXPORT_PENDING);
    platform.exportStatus.mockRejectedValueOnce(new PlatformNotFoundError('exportStatus: unknown export'));
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);

    // Act / Assess
    await expect(checkExport({ request_id: id, waited: 30 }, deps)).rejects.toBeInstanceOf(
      SubjectNotFoundError,
    );
  });

  it('waits at least as long as a throttling platform asked, capped by the schedule', async () => {
    // Prepare
    const id = await requestIn(EXPORT_PENDING);
    platform.exportStatus.mockRejectedValueOnce(new PlatformThrottledError('slow', 90));

    // Act
    const state = await checkExport({ request_id: id, waited: 30 }, deps);

    // Assess
    expect(state).toMatchObject({ status: 'pending', wait_seconds: 90, polls: 1, waited_seconds: 30 });
  });

  it('grows the wait with the time waited in all (doubling at 100%) up to the cap', async () => {
    // Prepare
    const id = await requestIn(EXPORT_PENDING);
    const waits = [];
    let waited = 30;

    // Act: each poll after a Wait as long as the one before asked for.
    for (let poll = 0; poll < 4; poll += 1) {
      waited = (await checkExport({ request_id: id, waited }, deps)).wait_seconds;
      waits.push(waited);
    }

    // Assess
    expect(waits).toEqual([60, 120, 120, 120]);
  });

  it('waits up to a fifth longer than the schedule, never shorter, by the random source', async () => {
    // Prepare
    const waits = [];

    // Act
    for (const random of [0, 0.5, 0.999]) {
      const id = await requestIn(EXPORT_PENDING);
      waits.push(
        (await checkExport({ request_id: id, waited: 30 }, { ...deps, random: () => random })).wait_seconds,
      );
    }

    // Assess
    expect(waits).toEqual([60, 66, 72]);
  });

  it('records a failed export so StartExport can begin the next attempt', async () => {
    // Prepare
    const id = await requestIn({ ...EXPORT_PENDING, step: 'exporting' });
    platform.exportStatus.mockResolvedValueOnce({ status: 'failed' } as never);

    // Act / Assess
    expect((await checkExport({ request_id: id, waited: 30 }, deps)).status).toBe('failed');
    expect(await ledger.require(id)).toMatchObject({ export_status: 'failed', step: 'exporting' });
  });

  it('moves the request on to archiving when the export completes, in one write and no read', async () => {
    // Prepare
    const id = await requestIn({ ...EXPORT_PENDING, step: 'exporting' });
    platform.exportStatus.mockResolvedValueOnce({
      status: 'completed',
      link: new URL('https://cdn.example.com/x.zip'),
    } as never);
    const reads = vi.spyOn(ledger, 'get');
    const writes = vi.spyOn(ledger, 'countPoll');

    // Act / Assess
    try {
      await expect(checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps)).resolves.toEqual({
        export_id: 'exp-1',
        attempt: 1,
        status: 'completed',
        polls: 1,
        waited_seconds: 30,
        wait_seconds: 0,
      });
      expect(reads).not.toHaveBeenCalled();
      expect(writes).toHaveBeenCalledTimes(1);
    } finally {
      reads.mockRestore();
      writes.mockRestore();
    }
    expect(await ledger.require(id)).toMatchObject({
      export_status: 'completed',
      step: 'archiving',
      export_polls: 1,
      export_waited_seconds: 30,
    });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ action: 'export_completed' }),
    );
  });

  it('counts pending polls and the seconds waited in the ledger across calls', async () => {
    // Prepare
    const id = await requestIn({ ...EXPORT_PENDING, export_waited_seconds: 100 });
    await checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps);

    // Act
    const second = await checkExport({ request_id: id, waited: 60, export_id: 'exp-1' }, deps);

    // Assess
    expect(second).toMatchObject({ status: 'pending', polls: 2, waited_seconds: 190 });
    expect(await ledger.require(id)).toMatchObject({ export_polls: 2, export_waited_seconds: 190 });
  });

  it('stops a request cancelled between polls and counts nothing', async () => {
    // Prepare
    const id = await requestIn(EXPORT_PENDING);
    await ledger.update(id, { status: 'cancelled' }, ['running']);

    // Act / Assess
    await expect(
      checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps),
    ).rejects.toBeInstanceOf(RequestCancelledError);
    expect((await ledger.require(id)).export_polls).toBe(0);
  });

  it.each(['completed', 'failed'] as const)(
    'answers %s without counting again when the ledger already ended the export (a re-run)',
    async (ended) => {
      // Prepare
      const id = await requestIn({
        svc_user_id: 'svc-1',
        export_id: 'exp-1',
        export_status: ended,
        export_attempts: 1,
        export_polls: 3,
        export_waited_seconds: 90,
      });

      // Act / Assess
      await expect(checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps)).resolves.toEqual({
        export_id: 'exp-1',
        attempt: 1,
        status: ended,
        polls: 3,
        waited_seconds: 90,
        wait_seconds: 0,
      });
      expect(await ledger.require(id)).toMatchObject({ export_polls: 3, export_waited_seconds: 90 });
      expect(deps.audit.append).not.toHaveBeenCalled();
    },
  );

  it('refuses to count a poll of an export that is not the one under way', async () => {
    // Prepare
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_id: 'exp-2',
      export_status: 'pending',
      export_attempts: 2,
    });

    // Act / Assess
    await expect(checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps)).rejects.toThrow(
      'another export under way',
    );
    expect((await ledger.require(id)).export_polls).toBe(0);
  });

  it('reads the export from the ledger when the execution sends none (an older definition)', async () => {
    // Prepare
    const id = await requestIn(EXPORT_PENDING);

    // Act / Assess
    await expect(checkExport({ request_id: id, waited: 30 }, deps)).resolves.toMatchObject({
      export_id: 'exp-1',
      status: 'pending',
      polls: 1,
    });
    expect(platform.exportStatus).toHaveBeenCalledWith('exp-1');
  });
});
