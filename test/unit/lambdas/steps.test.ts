import { createHash, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import yazl from 'yazl';
import { computeDeadlines } from '#shared/deadlines';
import {
  AuditChainClosedError,
  ErasureNotVerifiedError,
  ExportFailedError,
  ExportStartUncertainError,
  ExportStartUnconfirmedError,
  InvalidArchiveError,
  LedgerStateError,
  PlatformNotFoundError,
  PlatformThrottledError,
  PlatformUnavailableError,
  RequestCancelledError,
  StepInputError,
  SubjectNotFoundError,
  SubjectUnderOtherSpellingError,
  SupersededRunError,
} from '#shared/errors';
import { Ledger, type LedgerPatch } from '#shared/ledger';
import { createGateTable, createLedgerTable } from '#shared/ledger/table';
import { PlatformGate } from '#shared/platform-gate';
import type { StepDeps } from '#shared/step-deps';
import { exportSlotWaitSeconds, makeStepHandler, outageWaitSeconds } from '#shared/step-handler';
import { archiveExport, archiveKey } from '../../../lambdas/archive-export/archive-export.ts';
import { buildSubjectPackage, packageKey } from '../../../lambdas/build-package/build-package.ts';
import { checkExport } from '../../../lambdas/check-export/check-export.ts';
import { eraseSubject } from '../../../lambdas/erase-subject/erase-subject.ts';
import { recordFailure } from '../../../lambdas/record-failure/record-failure.ts';
import { recordOutcome } from '../../../lambdas/record-outcome/record-outcome.ts';
import { resolveSubject, resolveSubjectStep } from '../../../lambdas/resolve-subject/resolve-subject.ts';
import { startExport, startExportStep } from '../../../lambdas/start-export/start-export.ts';
import { verifyErasure } from '../../../lambdas/verify-erasure/verify-erasure.ts';
import { jsonLogger } from '../../../local/runtime/workflow.ts';
import { startDynamo } from '../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let ledger: Ledger;

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'steps');
  ledger = new Ledger(dynamo.client, 'steps');
  await createGateTable(dynamo.client, 'gate');
});

/** A gate of its own for each test, on the shared table under a fresh name, with room for every call. */
async function freshGate(settings: Partial<ConstructorParameters<typeof PlatformGate>[2]> = {}) {
  const table = `gate-${randomUUID()}`;
  await createGateTable(dynamo.client, table);
  return new PlatformGate(dynamo.client, table, {
    requestsPerSecond: 1_000,
    burst: 1_000,
    maxOpenExports: 100,
    outageHorizonSeconds: 3_600,
    ...settings,
  });
}
afterAll(async () => {
  await dynamo.close();
});

function fakePlatform() {
  return {
    retrieveUser: vi.fn(async (_primaryKey: string) => ({
      found: true as const,
      svcUserId: 'svc-1',
      user: {},
    })),
    updateUser: vi.fn(async (_primaryKey: string) => ({ found: true })),
    deleteUser: vi.fn(async (_primaryKey: string) => ({ outcome: 'deleted' as const, status: 200 })),
    startExport: vi.fn(async (_svcUserId: string) => ({ exportId: 'exp-1' })),
    exportStatus: vi.fn(async (_exportId: string) => ({ status: 'pending' as const, reported: 'pending' })),
    userActivity: vi.fn(async (_svcUserId: string, page: { count: number; offset: number }) => ({
      cursor: { offset: page.offset, count: 0, has_next: false },
      items: [],
      users: {},
    })),
  };
}

let platform: ReturnType<typeof fakePlatform>;
let deps: StepDeps;
let sleeps: number[];

beforeEach(async () => {
  platform = fakePlatform();
  sleeps = [];
  deps = {
    ledger,
    audit: { append: vi.fn(async () => ({}) as never) },
    platform,
    gate: await freshGate(),
    archive: {
      copy: vi.fn(async () => ({ bytes: 10, sha256: 'ab'.repeat(32) })),
      verify: vi.fn(async () => ({ entries: 4 })),
      remove: vi.fn(async () => 1),
      read: vi.fn(async () => Readable.from([Buffer.alloc(0)])),
      storePackage: vi.fn(async () => ({})),
    },
    schedule: { initialSeconds: 30, maxSeconds: 120, budgetSeconds: 600, growthPercent: 100 },
    exportMaxAttempts: 2,
    retryAfterCapSeconds: 5,
    clock: () => new Date('2026-11-21T12:00:00Z'),
    sleep: async (ms) => {
      sleeps.push(ms);
    },
    // No jitter unless a test asks for it: waits are the schedule's.
    random: () => 0,
    logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
  };
});

/** A request in the ledger, moved to `patch` (status running unless said otherwise). */
/** A resolved subject whose first export is started and still pending. */
const EXPORT_PENDING: LedgerPatch = {
  svc_user_id: 'svc-1',
  export_id: 'exp-1',
  export_status: 'pending',
  export_attempts: 1,
};

async function requestIn(patch: LedgerPatch = {}, type: 'access' | 'erasure' = 'access'): Promise<string> {
  const id = randomUUID();
  await ledger.createReceived(
    {
      request_id: id,
      type,
      regulation: 'gdpr',
      primary_key: 'subject-pk-77',
      received_at: '2026-11-20T00:00:00Z',
      verification: { method: 'm', verified_by: 'v', verified_at: '2026-11-20T00:00:00Z' },
    },
    'fp',
    computeDeadlines('gdpr', new Date('2026-11-20T00:00:00Z')),
  );
  await ledger.update(id, { status: 'running', ...patch }, ['received']);
  return id;
}

const archived = { key: 'k', bytes: 10, sha256: 'ab', entries: 4, verified_at: '2026-11-21T00:00:00Z' };

describe('makeStepHandler', () => {
  it('rejects input that does not match the step contract', async () => {
    const handler = makeStepHandler(resolveSubjectStep, () => deps);
    await expect(handler({ request_id: 'not-a-uuid' })).rejects.toBeInstanceOf(StepInputError);
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('honours a Retry-After under the cap once, then succeeds', async () => {
    const id = await requestIn();
    platform.retrieveUser.mockRejectedValueOnce(new PlatformThrottledError('slow down', 3));
    const handler = makeStepHandler(resolveSubjectStep, () => deps);
    await expect(handler({ request_id: id })).resolves.toEqual({ found: true, already_completed: false });
    expect(sleeps).toEqual([3000]);
    expect(platform.retrieveUser).toHaveBeenCalledTimes(2);
  });

  it('hands a Retry-After over the cap back to Step Functions without sleeping', async () => {
    const id = await requestIn();
    platform.retrieveUser.mockRejectedValueOnce(new PlatformThrottledError('slow down', 60));
    const handler = makeStepHandler(resolveSubjectStep, () => deps);
    await expect(handler({ request_id: id })).rejects.toBeInstanceOf(PlatformThrottledError);
    expect(sleeps).toEqual([]);
  });
});

describe('resolveSubject', () => {
  it('stops a cancelled request without calling the platform', async () => {
    const id = await requestIn();
    await ledger.update(id, { status: 'cancelled' }, ['running']);
    await expect(resolveSubject({ request_id: id }, deps)).rejects.toBeInstanceOf(RequestCancelledError);
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('stops a denied request without calling the platform: it is never exported or erased', async () => {
    const id = await requestIn();
    await ledger.deny(id, { code: 'identity_not_verified', reason: 'no ID' });
    await expect(resolveSubject({ request_id: id }, deps)).rejects.toThrow('the request was denied');
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('does not look the subject up again once resolved (after an erasure it would be gone)', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
    await expect(resolveSubject({ request_id: id }, deps)).resolves.toEqual({
      found: true,
      already_completed: false,
    });
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('hashes the subject in the audit record and keeps svc_user_id in the ledger only', async () => {
    const id = await requestIn();
    await resolveSubject({ request_id: id }, deps);
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
    const id = await requestIn({ status: 'received' });
    const writes = vi.spyOn(ledger, 'update');
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
    const id = await requestIn({ status: 'received' });
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);
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
    const id = await requestIn({ status: 'received' });
    platform.retrieveUser.mockResolvedValue({ found: false } as never);
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
    const id = await requestIn({ status: 'received' });
    platform.retrieveUser.mockImplementationOnce(async () => {
      await ledger.update(id, { status: 'cancelled' }, ['received']);
      return { found: true as const, svcUserId: 'svc-1', user: {} };
    });
    await expect(resolveSubject({ request_id: id }, deps)).rejects.toBeInstanceOf(RequestCancelledError);
    const item = await ledger.require(id);
    expect(item.status).toBe('cancelled');
    expect(item.svc_user_id).toBeUndefined();
    expect(deps.audit.append).not.toHaveBeenCalled();
  });
});

describe('startExport', () => {
  it('waits for a free export slot without counting an attempt or calling the platform', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
    const gate = await freshGate({ maxOpenExports: 1 });
    await gate.acquireExport('another-request');
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate, random: () => 1 }));

    const answer = await handler({ request_id: id });

    // The first wait for a slot: 2 s grown by half, 3 s with the jitter at its top; a Step Functions Wait.
    expect(answer).toEqual({ platform_wait: { reason: 'exports', seconds: 3, slot: true } });
    expect(platform.startExport).not.toHaveBeenCalled();
    expect(await ledger.require(id)).toMatchObject({ export_attempts: 0, platform_waits: 1 });

    await gate.releaseExport('another-request');
    expect(await handler({ request_id: id })).toMatchObject({ status: 'pending', attempt: 1 });
    expect(Object.keys(await gate.exportHolders())).toEqual([id]);
  });

  it('grows the wait for an export slot from the waits for a slot alone, not from the waits for rate before them', async () => {
    // Ten waits for rate slots on the way here: counted all together, the first wait for an export
    // slot would last 2 s x 1.25^11, about 23 s, and sleep through the slots freed meanwhile.
    const id = await requestIn({ svc_user_id: 'svc-1', platform_waits: 10 });
    const gate = await freshGate({ maxOpenExports: 1 });
    await gate.acquireExport('another-request');
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate, random: () => 1 }));

    expect(await handler({ request_id: id })).toEqual({
      platform_wait: { reason: 'exports', seconds: 3, slot: true },
    });
    expect(await handler({ request_id: id })).toEqual({
      platform_wait: { reason: 'exports', seconds: 4, slot: true },
    });
    expect(await ledger.require(id)).toMatchObject({ platform_waits: 12, export_slot_waits: 2 });
  });

  it('grows the wait for an export slot by a quarter each time, with jitter, up to sixteen hours', () => {
    const waits = Array.from({ length: 60 }, (_, index) => exportSlotWaitSeconds(index + 1, () => 1));
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
    const id = await requestIn({ svc_user_id: 'svc-1' });
    const gate = await freshGate({ maxOpenExports: 1 });
    await gate.acquireExport('another-request');
    const lines: string[] = [];
    const logger = jsonLogger((line) => lines.push(line));
    const handler = makeStepHandler(startExportStep, () => ({ ...deps, gate, logger }));

    await handler({ request_id: id });

    expect(lines.map((line) => JSON.parse(line))).toContainEqual(
      expect.objectContaining({ message: 'platform call waits', request_id: id, step: 'StartExport' }),
    );
  });

  it('waits out an open circuit for what the gate asks, stretched at random so the held executions spread', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
    const gate = await freshGate();
    // Five failures in a row from any function open the circuit for its first cool-down, 1 s.
    for (let failure = 0; failure < 5; failure++) await gate.report('down');
    const answerWith = (random: number) =>
      makeStepHandler(startExportStep, () => ({ ...deps, gate, random: () => random }))({ request_id: id });

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
    const id = await requestIn({ svc_user_id: 'svc-1', export_attempts: 2, export_status: 'failed' });
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(ExportFailedError);
    expect(platform.startExport).not.toHaveBeenCalled();
  });

  it('resumes the export under way instead of starting a second one', async () => {
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_attempts: 1,
      export_id: 'exp-9',
      export_status: 'pending',
    });
    const state = await startExport({ request_id: id }, deps);
    expect(state).toMatchObject({ export_id: 'exp-9', attempt: 1, status: 'pending' });
    expect(platform.startExport).not.toHaveBeenCalled();
  });

  it('counts an uncertain start as a spent attempt and rethrows', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
    platform.startExport.mockRejectedValueOnce(new ExportStartUncertainError('answered 503'));
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
    const id = await requestIn();
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
  });

  it('does not count a start that never reached the platform or was turned away', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
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

  it('marks the start in flight before the POST', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
    let during: unknown;
    platform.startExport.mockImplementationOnce(async () => {
      during = await ledger.require(id);
      return { exportId: 'exp-9' };
    });
    await startExport({ request_id: id }, deps);
    expect(during).toMatchObject({
      export_attempts: 1,
      export_status: 'starting',
      export_start: 'in_flight',
    });
  });

  it('records a start interrupted in flight as an uncertain, counted attempt before the next one', async () => {
    // A process killed with the POST out left the start in flight.
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_attempts: 1,
      export_status: 'starting',
      export_start: 'in_flight',
    });
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
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_attempts: 2,
      export_status: 'starting',
      export_start: 'in_flight',
    });
    const error = await startExport({ request_id: id }, deps).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ExportStartUnconfirmedError);
    expect(String(error)).toContain(
      '2 start(s) may have reached the platform and the last start was interrupted before the platform answered',
    );
    expect(platform.startExport).not.toHaveBeenCalled();
    expect(await ledger.require(id)).toMatchObject({ export_start: 'interrupted', export_status: 'failed' });
  });

  it('ends as no data when the export start finds the subject erased since it was resolved', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
    platform.startExport.mockRejectedValueOnce(new PlatformNotFoundError('startExport: unknown user'));
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(SubjectNotFoundError);
    expect(await ledger.require(id)).toMatchObject({ export_attempts: 0, export_start: 'refused' });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ eventId: 'StartExport:subject_not_found', action: 'subject_not_found' }),
    );
  });

  it('keeps a not-found start an error when the subject is still there', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' });
    platform.startExport.mockRejectedValueOnce(new PlatformNotFoundError('startExport: unknown user'));
    await expect(startExport({ request_id: id }, deps)).rejects.toBeInstanceOf(PlatformNotFoundError);
  });
});

describe('checkExport', () => {
  it('ends as no data when the export is unknown because the subject was erased', async () => {
    const id = await requestIn(EXPORT_PENDING);
    platform.exportStatus.mockRejectedValueOnce(new PlatformNotFoundError('exportStatus: unknown export'));
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);
    await expect(checkExport({ request_id: id, waited: 30 }, deps)).rejects.toBeInstanceOf(
      SubjectNotFoundError,
    );
  });

  it('waits at least as long as a throttling platform asked, capped by the schedule', async () => {
    const id = await requestIn(EXPORT_PENDING);
    platform.exportStatus.mockRejectedValueOnce(new PlatformThrottledError('slow', 90));
    const state = await checkExport({ request_id: id, waited: 30 }, deps);
    expect(state).toMatchObject({ status: 'pending', wait_seconds: 90, polls: 1, waited_seconds: 30 });
  });

  it('doubles the wait up to the cap', async () => {
    const id = await requestIn(EXPORT_PENDING);
    const waits = [];
    for (let poll = 0; poll < 4; poll += 1)
      waits.push((await checkExport({ request_id: id, waited: 10 }, deps)).wait_seconds);
    expect(waits).toEqual([60, 120, 120, 120]);
  });

  it('waits up to a fifth longer than the schedule, never shorter, by the random source', async () => {
    const waits = [];
    for (const random of [0, 0.5, 0.999]) {
      const id = await requestIn(EXPORT_PENDING);
      waits.push(
        (await checkExport({ request_id: id, waited: 10 }, { ...deps, random: () => random })).wait_seconds,
      );
    }
    expect(waits).toEqual([60, 66, 72]);
  });

  it('records a failed export so StartExport can begin the next attempt', async () => {
    const id = await requestIn({ ...EXPORT_PENDING, step: 'exporting' });
    platform.exportStatus.mockResolvedValueOnce({ status: 'failed' } as never);
    expect((await checkExport({ request_id: id, waited: 30 }, deps)).status).toBe('failed');
    expect(await ledger.require(id)).toMatchObject({ export_status: 'failed', step: 'exporting' });
  });

  it('moves the request on to archiving when the export completes, in one write and no read', async () => {
    const id = await requestIn({ ...EXPORT_PENDING, step: 'exporting' });
    platform.exportStatus.mockResolvedValueOnce({
      status: 'completed',
      link: new URL('https://cdn.example.com/x.zip'),
    } as never);
    const reads = vi.spyOn(ledger, 'get');
    const writes = vi.spyOn(ledger, 'countPoll');
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
    const id = await requestIn({ ...EXPORT_PENDING, export_waited_seconds: 100 });
    await checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps);
    const second = await checkExport({ request_id: id, waited: 60, export_id: 'exp-1' }, deps);
    expect(second).toMatchObject({ status: 'pending', polls: 2, waited_seconds: 190 });
    expect(await ledger.require(id)).toMatchObject({ export_polls: 2, export_waited_seconds: 190 });
  });

  it('stops a request cancelled between polls and counts nothing', async () => {
    const id = await requestIn(EXPORT_PENDING);
    await ledger.update(id, { status: 'cancelled' }, ['running']);
    await expect(
      checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps),
    ).rejects.toBeInstanceOf(RequestCancelledError);
    expect((await ledger.require(id)).export_polls).toBe(0);
  });

  it.each(['completed', 'failed'] as const)(
    'answers %s without counting again when the ledger already ended the export (a re-run)',
    async (ended) => {
      const id = await requestIn({
        svc_user_id: 'svc-1',
        export_id: 'exp-1',
        export_status: ended,
        export_attempts: 1,
        export_polls: 3,
        export_waited_seconds: 90,
      });
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
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_id: 'exp-2',
      export_status: 'pending',
      export_attempts: 2,
    });
    await expect(checkExport({ request_id: id, waited: 30, export_id: 'exp-1' }, deps)).rejects.toThrow(
      'another export under way',
    );
    expect((await ledger.require(id)).export_polls).toBe(0);
  });

  it('reads the export from the ledger when the execution sends none (an older definition)', async () => {
    const id = await requestIn(EXPORT_PENDING);
    await expect(checkExport({ request_id: id, waited: 30 }, deps)).resolves.toMatchObject({
      export_id: 'exp-1',
      status: 'pending',
      polls: 1,
    });
    expect(platform.exportStatus).toHaveBeenCalledWith('exp-1');
  });
});

describe('archiveExport', () => {
  it('copies, verifies and records the archive in one ledger write', async () => {
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
    await expect(archiveExport({ request_id: id }, deps)).rejects.toBeInstanceOf(InvalidArchiveError);
    expect((await ledger.require(id)).archive).toBeUndefined();
  });

  it('refuses to archive an export that has not completed', async () => {
    const id = await requestIn(EXPORT_PENDING);
    await expect(archiveExport({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
    expect(deps.archive.copy).not.toHaveBeenCalled();
  });

  it('returns the recorded archive without downloading again', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived });
    await expect(archiveExport({ request_id: id }, deps)).resolves.toEqual({
      key: 'k',
      bytes: 10,
      sha256: 'ab',
      entries: 4,
    });
    expect(platform.exportStatus).not.toHaveBeenCalled();
  });
});

describe('eraseSubject', () => {
  it('refuses to delete before a verified archive exists', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1' }, 'erasure');
    await expect(eraseSubject({ request_id: id }, deps)).rejects.toThrow('no verified archive');
    expect(platform.deleteUser).not.toHaveBeenCalled();
  });

  it('never deletes twice', async () => {
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 200, at: 'x' },
      },
      'erasure',
    );
    await expect(eraseSubject({ request_id: id }, deps)).resolves.toEqual({ outcome: 'deleted' });
    expect(platform.deleteUser).not.toHaveBeenCalled();
  });

  it('records a resumed erasure whose subject is gone as deleted by its own DELETE, without deleting again', async () => {
    // A first attempt marked the step `erasing`, sent the DELETE, and stopped before recording it.
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, step: 'erasing' }, 'erasure');
    platform.retrieveUser.mockResolvedValueOnce({ found: false } as never);

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
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, step: 'erasing' }, 'erasure');

    await expect(eraseSubject({ request_id: id }, deps)).resolves.toEqual({ outcome: 'deleted' });

    expect(platform.retrieveUser).toHaveBeenCalledTimes(1);
    expect(platform.deleteUser).toHaveBeenCalledTimes(1);
  });

  it('deletes without a look first on a first attempt', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived }, 'erasure');

    await expect(eraseSubject({ request_id: id }, deps)).resolves.toEqual({ outcome: 'deleted' });

    expect(platform.retrieveUser).not.toHaveBeenCalled();
    expect(platform.deleteUser).toHaveBeenCalledTimes(1);
  });

  it('marks erasing before the DELETE and records the deletion with the verifying step', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, step: 'archiving' }, 'erasure');
    platform.deleteUser.mockImplementationOnce(async () => {
      expect((await ledger.require(id)).step).toBe('erasing');
      return { outcome: 'deleted' as const, status: 200 };
    });

    await eraseSubject({ request_id: id }, deps);

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
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived, executions: 2 }, 'erasure');
    await expect(eraseSubject({ request_id: id, execution: `${id}-retry-2` }, deps)).resolves.toEqual({
      outcome: 'deleted',
    });
    expect(platform.deleteUser).toHaveBeenCalledTimes(1);
  });

  it('refuses to erase for an access request', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived }, 'access');
    await expect(eraseSubject({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
  });
});

describe('verifyErasure', () => {
  it('keeps the not-found answer as evidence in one ledger write', async () => {
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
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 200, at: 'x' },
      },
      'erasure',
    );
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

describe('recordOutcome', () => {
  it('refuses to record an erasure that was not verified', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived }, 'erasure');
    await expect(recordOutcome({ request_id: id, outcome: 'erased' }, deps)).rejects.toBeInstanceOf(
      LedgerStateError,
    );
    expect((await ledger.require(id)).status).toBe('running');
  });

  it("closes an erased request's chain saying what the platform keeps", async () => {
    const id = await requestIn(
      {
        svc_user_id: 'svc-1',
        archive: archived,
        erasure: { outcome: 'deleted', platform_status: 204, at: '2026-11-21T11:00:00Z' },
        erasure_verification: { platform_answer: 'not_found', at: '2026-11-21T11:01:00Z' },
      },
      'erasure',
    );
    await recordOutcome({ request_id: id, outcome: 'erased' }, deps);
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
    const id = await requestIn({ svc_user_id: 'svc-1' }, 'erasure');
    await ledger.update(id, { status: 'cancelled' }, ['running']);
    await expect(recordOutcome({ request_id: id, outcome: 'erased' }, deps)).rejects.toBeInstanceOf(
      RequestCancelledError,
    );
    expect((await ledger.require(id)).status).toBe('cancelled');
  });

  it('writes the final audit record with the on-time fact, reading the ledger only through its write', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived });
    const reads = vi.spyOn(ledger, 'get');
    await recordOutcome({ request_id: id, outcome: 'exported' }, deps);
    expect(reads).not.toHaveBeenCalled();
    reads.mockRestore();
    expect(await ledger.require(id)).toMatchObject({ status: 'completed', outcome: 'exported' });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ final: true, facts: expect.objectContaining({ on_time: true }) }),
    );
  });

  it('writes the final audit record on a re-run after the ledger write, with the facts it kept', async () => {
    // A first run completed the request in the ledger, then its audit append failed.
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived });
    vi.mocked(deps.audit.append).mockRejectedValueOnce(new Error('S3 is not answering'));
    await expect(recordOutcome({ request_id: id, outcome: 'exported' }, deps)).rejects.toThrow('S3');
    const completed = await ledger.require(id);
    expect(completed).toMatchObject({ status: 'completed', outcome: 'exported' });

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

describe('recordFailure', () => {
  it('keeps the slot of an export still open on the platform, and gives back one whose export never began', async () => {
    const open = await requestIn(EXPORT_PENDING);
    const none = await requestIn({ svc_user_id: 'svc-2' });
    const gate = await freshGate();
    deps = { ...deps, gate };
    for (const id of [open, none]) await gate.acquireExport(id);

    for (const id of [open, none]) {
      await recordFailure({ request_id: id, error: { Error: 'ExportTimeoutError', Cause: 'slow' } }, deps);
    }

    // The platform counts the pending export until it ends: the reconciler drains it, then frees the slot.
    expect(Object.keys(await gate.exportHolders())).toEqual([open]);
  });

  it('records the code and a message scrubbed of identifiers', async () => {
    const id = await requestIn({ svc_user_id: 'svc-1-long' });
    const cause = JSON.stringify({
      errorType: 'X',
      errorMessage: 'lookup of subject-pk-77 / svc-1-long failed at https://x.test/a?access_token=zzz',
    });
    await recordFailure({ request_id: id, error: { Error: 'PlatformRejectedError', Cause: cause } }, deps);
    const item = await ledger.require(id);
    expect(item.status).toBe('failed');
    expect(item.error?.code).toBe('platform_rejected');
    expect(item.error?.message).not.toMatch(/subject-pk-77|svc-1-long|access_token=zzz|x\.test/);
  });

  it('ends the chain with a final record of the failure, and takes a chain already closed as recorded', async () => {
    const id = await requestIn();
    await recordFailure({ request_id: id, error: { Error: 'ExportFailedError', Cause: 'failed' } }, deps);
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
    const id = await requestIn();
    await recordFailure(
      { request_id: id, error: { Error: 'ExportTimedOutError', Cause: 'waited too long' } },
      deps,
    );
    await recordFailure(
      { request_id: id, error: { Error: 'States.Timeout', Cause: 'the execution timed out' } },
      deps,
    );
    const item = await ledger.require(id);
    expect(item.status).toBe('failed');
    expect(item.error).toEqual({ code: 'export_timed_out', message: 'waited too long' });
    expect(item.later_errors).toEqual([
      { code: 'states_timeout', message: 'the execution timed out', at: expect.any(String) },
    ]);
  });

  it('leaves a request denied while it ran denied, and ends the execution as ended meanwhile', async () => {
    const id = await requestIn();
    await ledger.deny(id, { code: 'identity_not_verified', reason: 'no ID' });
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
    const id = await requestIn();
    await ledger.update(id, { status: 'cancelled' }, ['running']);
    await expect(
      recordFailure({ request_id: id, error: { Error: 'RequestCancelledError', Cause: '' } }, deps),
    ).resolves.toEqual({ status: 'cancelled', code: 'request_cancelled' });
    expect((await ledger.require(id)).status).toBe('cancelled');
  });
});

describe('buildSubjectPackage', () => {
  /** A zip of the four export files, as the archive bucket holds it. */
  async function exportZip(): Promise<Buffer> {
    const zip = new yazl.ZipFile();
    const files = {
      'dislikes.json': [],
      'likes.json': ['c-9'],
      'messages.json': [
        {
          id: 'c-1',
          conversation_id: 'conv-1',
          parent_comment_id: null,
          written_at: 1_704_103_200,
          content: [{ id: 'x', text: 'hello', type: 'text' }],
          published: true,
        },
      ],
      'profile.json': { user_id: 'svc-1', roles: [], basic: { user_name: 'subject_77' } },
    };
    for (const [name, value] of Object.entries(files))
      zip.addBuffer(Buffer.from(JSON.stringify(value)), name);
    zip.end();
    const chunks: Buffer[] = [];
    for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
    return Buffer.concat(chunks);
  }

  async function archivedAccess(patch: LedgerPatch = {}): Promise<string> {
    return requestIn({ ...EXPORT_PENDING, export_status: 'completed', archive: archived, ...patch });
  }

  it('builds from the verified archive, stores the package and records it once, with a leap-second receipt time', async () => {
    const id = await archivedAccess({ received_at: '2016-12-31t23:59:60z' });
    vi.mocked(deps.archive.read).mockResolvedValue(Readable.from([await exportZip()]));
    const stored: Buffer[] = [];
    vi.mocked(deps.archive.storePackage).mockImplementation(async (_key, body) => {
      const chunks: Uint8Array[] = [];
      for await (const chunk of body) chunks.push(chunk);
      stored.push(Buffer.concat(chunks));
      return { versionId: 'v-1' };
    });

    const output = await buildSubjectPackage({ request_id: id }, deps);

    expect(deps.archive.read).toHaveBeenCalledWith('k', { bytes: 10, sha256: 'ab' });
    expect(stored).toHaveLength(1);
    expect(output).toEqual({
      key: packageKey(id),
      bytes: stored[0]?.length,
      sha256: createHash('sha256')
        .update(stored[0] ?? '')
        .digest('hex'),
      conversation_details: 'complete',
    });
    const item = await ledger.require(id);
    expect(item.subject_package).toMatchObject({
      key: packageKey(id),
      version_id: 'v-1',
      file_name: 'your-data-2026-11-21.zip',
    });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ eventId: 'BuildPackage', action: 'subject_package_built' }),
    );

    // A second run answers from the ledger.
    await expect(buildSubjectPackage({ request_id: id }, deps)).resolves.toEqual(output);
    expect(stored).toHaveLength(1);
    expect(deps.archive.read).toHaveBeenCalledTimes(1);
  });

  it('refuses an erasure request: it gets no subject package', async () => {
    const id = await requestIn({ ...EXPORT_PENDING, archive: archived }, 'erasure');
    await expect(buildSubjectPackage({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
    expect(deps.archive.read).not.toHaveBeenCalled();
  });

  it('stores nothing when the archive no longer matches the ledger', async () => {
    const id = await archivedAccess();
    vi.mocked(deps.archive.read).mockRejectedValue(new InvalidArchiveError('no longer matches the ledger'));

    await expect(buildSubjectPackage({ request_id: id }, deps)).rejects.toBeInstanceOf(InvalidArchiveError);

    expect(deps.archive.storePackage).not.toHaveBeenCalled();
    expect((await ledger.require(id)).subject_package).toBeUndefined();
  });

  it('removes the package it stored when the request was cancelled meanwhile', async () => {
    const id = await archivedAccess();
    vi.mocked(deps.archive.read).mockResolvedValue(Readable.from([await exportZip()]));
    vi.mocked(deps.archive.storePackage).mockImplementation(async (_key, body) => {
      for await (const _chunk of body) {
        // The whole package is read, as S3 would.
      }
      await ledger.cancel(id, { reason: 'subject withdrew the request' });
      return {};
    });

    await expect(buildSubjectPackage({ request_id: id }, deps)).rejects.toBeInstanceOf(RequestCancelledError);

    expect(deps.archive.remove).toHaveBeenCalledWith(packageKey(id));
    expect((await ledger.require(id)).subject_package).toBeUndefined();
  });
});
