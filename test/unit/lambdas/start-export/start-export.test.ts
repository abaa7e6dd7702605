import { describe, expect, it, vi } from 'vitest';
import {
  AuditChainClosedError,
  ExportFailedError,
  ExportStartUncertainError,
  ExportStartUnconfirmedError,
  LedgerStateError,
  PlatformExportsFullError,
  PlatformNotFoundError,
  PlatformThrottledError,
  PlatformUnavailableError,
  SubjectNotFoundError,
} from '#shared/errors';
import type { StepLogger } from '#shared/step-deps';
import { exportSlotWaitSeconds, makeStepHandler, outageWaitSeconds } from '#shared/step-handler';
import { startExport, startExportStep } from '../../../../lambdas/start-export/start-export.ts';
import { deps, freshGate, ledger, platform, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('startExport', () => {
  it('waits for a free export slot without counting an attempt or calling the platform', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    const gate = await freshGate({ maxOpenExports: 1 });
    await gate.acquireExport('another-request');
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate, random: () => 1 }));

    // Act
    const answer = await handler({ request_id: id });

    // Assess
    // The first wait for a slot: 2 s grown by half, 3 s with the jitter at its top; a Step Functions Wait.
    expect(answer).toEqual({ platform_wait: { reason: 'exports', seconds: 3, slot: true } });
    expect(platform.startExport).not.toHaveBeenCalled();
    expect(await ledger.require(id)).toMatchObject({ export_attempts: 0, platform_waits: 1 });

    // Prepare: the other request gives its slot back.
    await gate.releaseExport('another-request');

    // Act / Assess
    expect(await handler({ request_id: id })).toMatchObject({ status: 'pending', attempt: 1 });
    expect(Object.keys(await gate.exportHolders())).toEqual([id]);
  });

  it('grows the wait for an export slot from the waits for a slot alone, not from the waits for rate before them', async () => {
    // Prepare
    // Ten waits for rate slots on the way here: counted all together, the first wait for an export
    // slot would last 2 s x 1.25^11, about 23 s, and sleep through the slots freed meanwhile.
    const id = await requestIn({ svc_user_id: 'svc-1', platform_waits: 10 });
    const gate = await freshGate({ maxOpenExports: 1 });
    await gate.acquireExport('another-request');
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate, random: () => 1 }));

    // Act / Assess
    expect(await handler({ request_id: id })).toEqual({
      platform_wait: { reason: 'exports', seconds: 3, slot: true },
    });
    expect(await handler({ request_id: id })).toEqual({
      platform_wait: { reason: 'exports', seconds: 4, slot: true },
    });
    expect(await ledger.require(id)).toMatchObject({ platform_waits: 12, export_slot_waits: 2 });
  });

  it('grows the wait for an export slot by a quarter each time, with jitter, up to sixteen hours', () => {
    // Act
    const waits = Array.from({ length: 60 }, (_, index) => exportSlotWaitSeconds(index + 1, () => 1));

    // Assess
    expect(waits.slice(0, 6)).toEqual([3, 4, 4, 5, 7, 8]);
    // A quarter, not a half: the last requests of a drain sleep past a freed slot by a quarter of
    // their wait so far, not half of it (the mass-drop bench's tail, 127 s with halves, 20 s now).
    for (let index = 1; index < waits.length; index += 1) {
      expect(waits[index]).toBeLessThanOrEqual(Math.ceil((waits[index - 1] ?? 0) * 1.25) + 1);
    }
    expect(exportSlotWaitSeconds(34, () => 1)).toBeGreaterThan(3600);
    expect(exportSlotWaitSeconds(46, () => 1)).toBeLessThan(16 * 3600);
    expect(exportSlotWaitSeconds(47, () => 1)).toBe(16 * 3600);
    expect(exportSlotWaitSeconds(500, () => 1)).toBe(16 * 3600);
    // The jitter takes at most a fifth off: a long wait stays long, so its history stays short.
    expect(exportSlotWaitSeconds(500, () => 0)).toBe(0.8 * 16 * 3600);
  });

  it("logs through a child of the function's logger that carries the request id and the step", async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    const gate = await freshGate({ maxOpenExports: 1 });
    await gate.acquireExport('another-request');
    const records: Record<string, unknown>[] = [];
    const logger = recordingLogger(records);
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate, logger }));

    // Act
    await handler({ request_id: id });

    // Assess
    expect(records).toContainEqual(
      expect.objectContaining({ message: 'platform call waits', request_id: id, step: 'StartExport' }),
    );
  });

  it('waits out an open circuit for what the gate asks, stretched at random so the held executions spread', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    // The gate's clock stands still: the circuit stays open however slowly the machine runs.
    const stoppedAt = Date.now();
    const gate = await freshGate({}, { now: () => stoppedAt });
    // Five failures in a row from any function open the circuit for its first cool-down, 1 s.
    for (let failure = 0; failure < 5; failure++) await gate.report('down');
    const answerWith = (random: number) =>
      makeStepHandler(startExportStep, () => ({ ...deps, gate, random: () => random }))({ request_id: id });

    // Act / Assess
    expect(await answerWith(0)).toEqual({ platform_wait: { reason: 'outage', seconds: 1 } });
    expect(await answerWith(1)).toEqual({ platform_wait: { reason: 'outage', seconds: 2 } });
    expect(platform.startExport).not.toHaveBeenCalled();
    expect(outageWaitSeconds(600, () => 0.5)).toBe(750);
  });

  it('waits again however many times the execution has waited: no export starts without its slot', async () => {
    // Prepare: a request that has waited hundreds of times, and every slot taken.
    const id = await requestIn({ svc_user_id: 'svc-1', platform_waits: 5_000, export_slot_waits: 4_000 });
    const gate = await freshGate({ maxOpenExports: 1 });
    await gate.acquireExport('another-request');
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate }));

    // Act
    const answer = await handler({ request_id: id });

    // Assess: a wait of at most the longest, and no call to the platform.
    expect(answer).toMatchObject({ platform_wait: { reason: 'exports', slot: true } });
    expect(platform.startExport).not.toHaveBeenCalled();
    expect(Object.keys(await gate.exportHolders())).toEqual(['another-request']);
  });

  it('refuses an attempt past the limit without calling the platform', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', export_attempts: 2, export_status: 'failed' });

    // Act / Assess
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(ExportFailedError);
    expect(platform.startExport).not.toHaveBeenCalled();
  });

  it('resumes the export under way instead of starting a second one', async () => {
    // Prepare
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_attempts: 1,
      export_id: 'exp-9',
      export_status: 'pending',
    });

    // Act
    const state = await startExport({ request_id: id }, deps);

    // Assess
    expect(state).toMatchObject({ export_id: 'exp-9', attempt: 1, status: 'pending' });
    expect(platform.startExport).not.toHaveBeenCalled();
  });

  it('counts an uncertain start as a spent attempt and rethrows', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    platform.startExport.mockRejectedValueOnce(new ExportStartUncertainError('answered 503'));

    // Act / Assess
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(ExportStartUncertainError);
    expect(await ledger.require(id)).toMatchObject({ export_attempts: 1, export_status: 'failed' });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ action: 'export_start_uncertain' }),
    );
  });

  it('records the export it started although a denial ended the request while the POST was out', async () => {
    // Prepare: the denial lands while the platform creates the export.
    const id = await requestIn({ svc_user_id: 'svc-1' });
    platform.startExport.mockImplementationOnce(async () => {
      await ledger.deny(id, { code: 'identity_not_verified', reason: 'no ID' });
      return { exportId: 'exp-late' };
    });
    const appended: { chain: string; action: string }[] = [];
    deps.audit.append = vi.fn(async (chain: string, event: { action: string }) => {
      // The denial closed the request's own chain with its final record.
      if (!chain.includes('.')) throw new AuditChainClosedError('closed by request_denied');
      appended.push({ chain, action: event.action });
      return {} as never;
    }) as never;

    // Act
    const starting = startExport({ request_id: id }, deps);

    // Assess: the step fails (the request is denied), and the export is on record in the effects chain.
    await expect(starting).rejects.toBeInstanceOf(LedgerStateError);
    expect(appended).toEqual([{ chain: `${id}.effects`, action: 'export_started' }]);
  });

  it('refuses to start before the subject is resolved', async () => {
    // Prepare
    const id = await requestIn();

    // Act / Assess
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
  });

  it('does not count a start that never reached the platform or was turned away', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });

    // Act / Assess
    for (const refusal of [
      new PlatformUnavailableError('connection refused', undefined),
      new PlatformThrottledError('429', 2),
      new PlatformUnavailableError('503', 503),
    ]) {
      platform.startExport.mockRejectedValueOnce(refusal);
      await expect(startExport({ request_id: id }, deps)).rejects.toBe(refusal);
    }
    expect(await ledger.require(id)).toMatchObject({
      export_attempts: 0,
      export_start: 'refused',
      export_starts_refused: 3,
    });
    expect(await ledger.require(id)).not.toHaveProperty('export_status');

    // The limit (2 here) is still whole: two real attempts follow.
    await expect(startExport({ request_id: id }, deps)).resolves.toMatchObject({ attempt: 1 });
    expect(await ledger.require(id)).toMatchObject({
      export_attempts: 1,
      export_start: 'accepted',
      export_status: 'pending',
    });
  });

  it('gives the slot back to no waiter and waits for one when the platform has too many exports open', async () => {
    // Prepare: the gate lets three exports open, another request holds one, and the platform is full.
    const id = await requestIn({ svc_user_id: 'svc-1' });
    const gate = await freshGate({ maxOpenExports: 3 });
    await gate.acquireExport('another-request');
    const counted: [string, number][] = [];
    const handler = makeStepHandler(startExportStep, () => ({
      ...deps,
      gate,
      random: () => 1,
      countMetric: (name: string, value: number) => counted.push([name, value]),
    }));
    platform.startExport.mockRejectedValueOnce(new PlatformExportsFullError('429 too_many_open_exports', 1));

    // Act
    const answer = await handler({ request_id: id });

    // Assess: a wait for a slot, as when the gate's own cap is full; no attempt counted.
    expect(answer).toEqual({ platform_wait: { reason: 'exports', seconds: 3, slot: true } });
    expect(await ledger.require(id)).toMatchObject({
      export_attempts: 0,
      export_start: 'refused',
      export_starts_refused: 1,
      export_slot_waits: 1,
    });
    expect(counted).toEqual([['PlatformExportRefusals', 1]]);
    // The slot is back, the cap lowered to the one slot the other request holds.
    const slots = await gate.exportSlots();
    expect(Object.keys(slots.holders)).toEqual(['another-request']);
    expect(slots).toMatchObject({ learned_cap: 1, refusals: 1 });
    await expect(gate.acquireExport('newcomer')).rejects.toMatchObject({ reason: 'exports' });

    // Act: the other request's export is downloaded, its slot given back; the request runs again.
    await gate.releaseExport('another-request');
    platform.startExport.mockResolvedValueOnce({ exportId: 'exp-9' });
    const started = await handler({ request_id: id });

    // Assess
    expect(started).toMatchObject({ status: 'pending', attempt: 1, export_id: 'exp-9' });
    expect(Object.keys(await gate.exportHolders())).toEqual([id]);
    expect(platform.startExport).toHaveBeenCalledTimes(2);
  });

  it('fails no request for the platform being full: each refusal is another wait, never a retry of the POST', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    const gate = await freshGate({ maxOpenExports: 3 });
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate, random: () => 1 }));
    platform.startExport.mockRejectedValue(new PlatformExportsFullError('429 too_many_open_exports', 1));

    // Act
    const answers = [];
    for (let run = 0; run < 3; run += 1) answers.push(await handler({ request_id: id }));

    // Assess: one POST per run, each answered with a wait, the cap held at one slot.
    for (const answer of answers) {
      expect(answer).toMatchObject({ platform_wait: { reason: 'exports', slot: true } });
    }
    expect(platform.startExport).toHaveBeenCalledTimes(3);
    expect(await gate.exportSlots()).toMatchObject({ holders: {}, learned_cap: 1, refusals: 3 });
    expect(await ledger.require(id)).toMatchObject({ export_attempts: 0, export_starts_refused: 3 });
  });

  it('marks the start in flight before the POST', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    let during: unknown;
    platform.startExport.mockImplementationOnce(async () => {
      during = await ledger.require(id);
      return { exportId: 'exp-9' };
    });

    // Act
    await startExport({ request_id: id }, deps);

    // Assess
    expect(during).toMatchObject({
      export_attempts: 1,
      export_status: 'starting',
      export_start: 'in_flight',
    });
  });

  it('records a start interrupted in flight as an uncertain, counted attempt before the next one', async () => {
    // Prepare
    // A process killed with the POST out left the start in flight.
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_attempts: 1,
      export_status: 'starting',
      export_start: 'in_flight',
    });

    // Act / Assess
    await expect(startExport({ request_id: id }, deps)).resolves.toMatchObject({ attempt: 2 });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({
        eventId: 'StartExport:attempt-1',
        action: 'export_start_uncertain',
        facts: { attempt: 1, cause: 'interrupted' },
      }),
    );
    expect(await ledger.require(id)).toMatchObject({ export_attempts: 2, export_start: 'accepted' });
  });

  it('says how the attempts went when the limit is reached after an interrupted start', async () => {
    // Prepare
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_attempts: 2,
      export_status: 'starting',
      export_start: 'in_flight',
    });

    // Act
    const error = await startExport({ request_id: id }, deps).catch((caught: unknown) => caught);

    // Assess
    expect(error).toBeInstanceOf(ExportStartUnconfirmedError);
    expect(String(error)).toContain(
      '2 start(s) may have reached the platform and the last start was interrupted before the platform answered',
    );
    expect(platform.startExport).not.toHaveBeenCalled();
    expect(await ledger.require(id)).toMatchObject({ export_start: 'interrupted', export_status: 'failed' });
  });

  it('ends as no data when the export start finds the subject erased since it was resolved', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    platform.startExport.mockRejectedValueOnce(new PlatformNotFoundError('startExport: unknown user'));
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);

    // Act / Assess
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(SubjectNotFoundError);
    expect(await ledger.require(id)).toMatchObject({ export_attempts: 0, export_start: 'refused' });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ eventId: 'StartExport:subject_not_found', action: 'subject_not_found' }),
    );
  });

  it('keeps a not-found start an error when the subject is still there', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1' });
    platform.startExport.mockRejectedValueOnce(new PlatformNotFoundError('startExport: unknown user'));

    // Act / Assess
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(PlatformNotFoundError);
  });
});

/** A StepLogger that keeps each line as an object: its message, its children's keys, its attributes. */
function recordingLogger(records: Record<string, unknown>[], keys: Record<string, unknown> = {}): StepLogger {
  const log = (message: string, attributes?: Record<string, unknown>) => {
    records.push({ message, ...keys, ...attributes });
  };
  return {
    info: log,
    warn: log,
    error: log,
    debug: log,
    child: (more) => recordingLogger(records, { ...keys, ...more }),
  };
}
