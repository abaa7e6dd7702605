import { describe, expect, it, vi } from 'vitest';
import { LedgerStateError, RequestCancelledError } from '#shared/errors';
import { recordOutcome } from '../../../../lambdas/record-outcome/record-outcome.ts';
import { archived, deps, ledger, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('recordOutcome', () => {
  it('refuses to record an erasure that was not verified', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived }, 'erasure');

    // Act / Assess
    await expect(recordOutcome({ request_id: id, outcome: 'erased' }, deps)).rejects.toBeInstanceOf(
      LedgerStateError,
    );
    expect((await ledger.require(id)).status).toBe('running');
  });

  it("closes an erased request's chain saying what the platform keeps", async () => {
    // Prepare
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 204, at: '2026-11-21T11:00:00Z' },
        erasure_verification: { platform_answer: 'not_found', at: '2026-11-21T11:01:00Z' },
      },
      'erasure',
    );

    // Act
    await recordOutcome({ request_id: id, outcome: 'erased' }, deps);

    // Assess
    expect(deps.audit.append).toHaveBeenLastCalledWith(
      id,
      expect.objectContaining({
        action: 'request_completed',
        facts: expect.objectContaining({
          outcome: 'erased',
          platform_keeps: 'comments',
          comments_relinked_to: 'random_guest_user',
        }),
        final: true,
      }),
    );
  });

  it('reports a cancellation rather than the missing evidence', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' }, 'erasure');
    await ledger.update(id, { status: 'cancelled' }, ['running']);

    // Act / Assess
    await expect(recordOutcome({ request_id: id, outcome: 'erased' }, deps)).rejects.toBeInstanceOf(
      RequestCancelledError,
    );
    expect((await ledger.require(id)).status).toBe('cancelled');
  });

  it('writes the final audit record with the on-time fact, reading the ledger only through its write', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived });
    const reads = vi.spyOn(ledger, 'get');

    // Act
    await recordOutcome({ request_id: id, outcome: 'exported' }, deps);

    // Assess
    expect(reads).not.toHaveBeenCalled();
    reads.mockRestore();
    expect(await ledger.require(id)).toMatchObject({ status: 'completed', outcome: 'exported' });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ final: true, facts: expect.objectContaining({ on_time: true }) }),
    );
  });

  it('writes the final audit record on a re-run after the ledger write, with the facts it kept', async () => {
    // Prepare: a first run completed the request in the ledger, then its audit append failed.
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived });
    vi.mocked(deps.audit.append).mockRejectedValueOnce(new Error('S3 is not answering'));
    await expect(recordOutcome({ request_id: id, outcome: 'exported' }, deps)).rejects.toThrow('S3');
    const completed = await ledger.require(id);
    expect(completed).toMatchObject({ status: 'completed', outcome: 'exported' });

    // Act / Assess: the re-run, months later.
    const later = { ...deps, clock: () => new Date('2027-06-01T00:00:00Z') };
    await expect(recordOutcome({ request_id: id, outcome: 'exported' }, later)).resolves.toEqual({
      status: 'completed',
      outcome: 'exported',
    });

    expect(deps.audit.append).toHaveBeenCalledTimes(2);
    expect(deps.audit.append).toHaveBeenLastCalledWith(id, {
      eventId: 'RecordOutcome',
      step: 'RecordOutcome',
      action: 'request_completed',
      facts: {
        outcome: 'exported',
        completed_at: completed.completed_at,
        due_at: completed.due_at,
        on_time: true,
        archive_sha256: 'ab',
      },
      final: true,
    });
    expect((await ledger.require(id)).completed_at).toBe(completed.completed_at);
  });
});
