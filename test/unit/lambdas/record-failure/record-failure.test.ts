import { describe, expect, it, vi } from 'vitest';
import { AuditChainClosedError } from '#shared/errors';
import { recordFailure } from '../../../../lambdas/record-failure/record-failure.ts';
import { deps, EXPORT_PENDING, freshGate, ledger, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('recordFailure', () => {
  it('keeps the slot of an export still open on the platform, and gives back one whose export never began', async () => {
    // Prepare
    const open = await requestIn(EXPORT_PENDING);
    const none = await requestIn({ svc_user_id: 'svc-2' });
    const gate = await freshGate();
    for (const id of [open, none]) await gate.acquireExport(id);

    // Act
    for (const id of [open, none]) {
      await recordFailure(
        { request_id: id, error: { Error: 'ExportTimeoutError', Cause: 'slow' } },
        { ...deps, gate },
      );
    }

    // Assess
    // The platform counts the pending export until it ends: the reconciler drains it, then frees the slot.
    expect(Object.keys(await gate.exportHolders())).toEqual([open]);
  });

  it('records the code and a message scrubbed of identifiers', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1-long' });
    const cause = JSON.stringify({
      errorType: 'X',
      errorMessage: 'lookup of subject-pk-77 / svc-1-long failed at https://x.test/a?access_token=zzz',
    });

    // Act
    await recordFailure({ request_id: id, error: { Error: 'PlatformRejectedError', Cause: cause } }, deps);

    // Assess
    const item = await ledger.require(id);
    expect(item.status).toBe('failed');
    expect(item.error?.code).toBe('platform_rejected');
    expect(item.error?.message).not.toMatch(/subject-pk-77|svc-1-long|access_token=zzz|x\.test/);
  });

  it('ends the chain with a final record of the failure, and takes a chain already closed as recorded', async () => {
    // Prepare
    const id = await requestIn();

    // Act
    await recordFailure({ request_id: id, error: { Error: 'ExportFailedError', Cause: 'failed' } }, deps);

    // Assess
    expect(deps.audit.append).toHaveBeenLastCalledWith(
      id,
      expect.objectContaining({ action: 'request_failed', final: true }),
    );
    vi.mocked(deps.audit.append).mockRejectedValueOnce(new AuditChainClosedError('closed'));
    await expect(
      recordFailure({ request_id: id, error: { Error: 'States.Timeout', Cause: 'again' } }, deps),
    ).resolves.toEqual({ status: 'failed', code: 'states_timeout' });
  });

  it('keeps the first failure when a redriven execution fails again, and lists the later one', async () => {
    // Prepare
    const id = await requestIn();
    await recordFailure(
      { request_id: id, error: { Error: 'ExportTimedOutError', Cause: 'waited too long' } },
      deps,
    );

    // Act
    await recordFailure(
      { request_id: id, error: { Error: 'States.Timeout', Cause: 'the execution timed out' } },
      deps,
    );

    // Assess
    const item = await ledger.require(id);
    expect(item.status).toBe('failed');
    expect(item.error).toEqual({ code: 'export_timed_out', message: 'waited too long' });
    expect(item.later_errors).toEqual([
      { code: 'states_timeout', message: 'the execution timed out', at: expect.any(String) },
    ]);
  });

  it('leaves a request denied while it ran denied, and ends the execution as ended meanwhile', async () => {
    // Prepare
    const id = await requestIn();
    await ledger.deny(id, { code: 'identity_not_verified', reason: 'no ID' });

    // Act / Assess
    await expect(
      recordFailure(
        { request_id: id, error: { Error: 'LedgerStateError', Cause: 'the request was denied' } },
        deps,
      ),
    ).resolves.toEqual({ status: 'completed', code: 'request_denied' });
    const item = await ledger.require(id);
    expect(item.status).toBe('denied');
    expect(item.error).toBeUndefined();
  });

  it('records nothing for an execution that is no longer the current run', async () => {
    // Prepare: run 2 failed while a retry had started run 3.
    const id = await requestIn({ executions: 3 });

    // Act
    const ended = await recordFailure(
      { request_id: id, execution: `${id}-retry-2`, error: { Error: 'PlatformRejectedError', Cause: 'x' } },
      deps,
    );

    // Assess
    expect(ended).toEqual({ status: 'superseded', code: 'superseded_run' });
    expect((await ledger.require(id)).status).toBe('running');
    expect(deps.audit.append).not.toHaveBeenCalled();
  });

  it('confirms a cancellation instead of recording a failure', async () => {
    // Prepare
    const id = await requestIn();
    await ledger.update(id, { status: 'cancelled' }, ['running']);

    // Act / Assess
    await expect(
      recordFailure({ request_id: id, error: { Error: 'RequestCancelledError', Cause: '' } }, deps),
    ).resolves.toEqual({ status: 'cancelled', code: 'request_cancelled' });
    expect((await ledger.require(id)).status).toBe('cancelled');
  });
});
