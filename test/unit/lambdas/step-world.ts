import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, beforeEach, vi } from 'vitest';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger, type LedgerPatch } from '#shared/ledger';
import { createGateTable, createLedgerTable } from '#shared/ledger/table';
import { PlatformGate } from '#shared/platform-gate';
import type { StepDeps } from '#shared/step-deps';
import { startDynamo } from '../../helpers/dynamo.ts';

// What the step-domain tests share: one dynalite ledger per test file, and for each test a fake
// platform, a fresh gate and step dependencies over them. The bindings below are live: a test file
// calls useStepWorld() once and reads them after its hooks have run.

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
export let ledger: Ledger;
export let platform: ReturnType<typeof fakePlatform>;
export let deps: StepDeps;
/** The milliseconds each `deps.sleep` was asked for, in order. */
export let sleeps: number[];

/** Registers the hooks that build the world: the ledger once per file, the rest before each test. */
export function useStepWorld(): void {
  beforeAll(async () => {
    dynamo = await startDynamo();
    await createLedgerTable(dynamo.client, 'steps');
    ledger = new Ledger(dynamo.client, 'steps');
    await createGateTable(dynamo.client, 'gate');
  });

  afterAll(async () => {
    await dynamo.close();
  });

  beforeEach(async () => {
    platform = fakePlatform();
    sleeps = [];
    deps = {
      ledger,
      audit: { append: vi.fn(async () => ({}) as never) },
      platform,
      gate: await freshGate(),
      archive: {
        copy: vi.fn(async () => ({
          kind: 'copied' as const,
          copied: { bytes: 10, sha256: 'ab'.repeat(32) },
        })),
        verify: vi.fn(async () => ({ entries: 4 })),
        verifyContinued: vi.fn(async () => ({ entries: 4, sha256: 'cd'.repeat(32) })),
        abandonUpload: vi.fn(async () => {}),
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
}

/** A gate of its own for each test, on the shared table under a fresh name, with room for every call. */
export async function freshGate(
  settings: Partial<ConstructorParameters<typeof PlatformGate>[2]> = {},
  options: ConstructorParameters<typeof PlatformGate>[3] = {},
) {
  const table = `gate-${randomUUID()}`;
  await createGateTable(dynamo.client, table);
  return new PlatformGate(
    dynamo.client,
    table,
    {
      requestsPerSecond: 1_000,
      burst: 1_000,
      maxOpenExports: 100,
      outageHorizonSeconds: 3_600,
      ...settings,
    },
    options,
  );
}

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

/** A resolved subject whose first export is started and still pending. */
export const EXPORT_PENDING: LedgerPatch = {
  svc_user_id: 'svc-1',
  export_id: 'exp-1',
  export_status: 'pending',
  export_attempts: 1,
};

/** A request in the ledger, moved to `patch` (status running unless said otherwise). */
export async function requestIn(
  patch: LedgerPatch = {},
  type: 'access' | 'erasure' = 'access',
): Promise<string> {
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

/** A verified archive as the ledger records it. */
export const archived = {
  key: 'k',
  bytes: 10,
  sha256: 'ab',
  entries: 4,
  verified_at: '2026-11-21T00:00:00Z',
};
