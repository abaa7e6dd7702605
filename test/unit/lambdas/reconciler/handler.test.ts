import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Ledger } from '#shared/ledger';
import { createGateTable, createLedgerTable } from '#shared/ledger/table';
import { PlatformGate } from '#shared/platform-gate';
import { gateTableCursor, memoryCursor } from '../../../../lambdas/reconciler/cursor.ts';
import {
  makeReconcilerHandler,
  PASS_MARGIN_MS,
  type ReconcilerHandlerDeps,
  reconcilerEnvSchema,
} from '../../../../lambdas/reconciler/handler.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

const NOW = new Date('2026-12-01T12:00:00.000Z');
const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  await createGateTable(dynamo.client, 'gate');
});
afterAll(async () => {
  await dynamo.close();
});

/** The handler over an empty ledger, and the heartbeats it published. */
function handlerWith() {
  const beats: number[] = [];
  const ledger = new Ledger(dynamo.client, 'ledger', () => NOW);
  const deps: ReconcilerHandlerDeps = {
    ledger,
    audit: { append: async () => Promise.reject(new Error('no request to record')) },
    list: async () => ({ executions: [] }),
    describe: async () => 'MISSING',
    start: async () => 'started',
    clock: () => NOW,
    logger: silent,
    gate: new PlatformGate(dynamo.client, 'gate', {
      requestsPerSecond: 10,
      burst: 10,
      maxOpenExports: 5,
      outageHorizonSeconds: 3600,
    }),
    publish: () => {},
    cursor: memoryCursor(),
    maxResumes: 3,
    graceSeconds: 0,
    heartbeat: () => beats.push(1),
  };
  return { handler: makeReconcilerHandler(() => deps), beats, ledger };
}

describe('the reconciler handler', () => {
  it('publishes its heartbeat once a pass completes', async () => {
    const { handler, beats } = handlerWith();

    await handler();
    await handler();

    expect(beats).toEqual([1, 1]);
  });

  it('publishes no heartbeat for a pass that fails, so its alarm hears the silence', async () => {
    const { handler, beats, ledger } = handlerWith();
    vi.spyOn(ledger, 'openRequestsPage').mockImplementation(() => {
      throw new Error('ProvisionedThroughputExceededException');
    });

    await expect(handler()).rejects.toThrow('ProvisionedThroughputExceededException');
    expect(beats).toEqual([]);
  });

  it('spends only the remaining time of the invocation less its margin, and still beats', async () => {
    const { handler, beats } = handlerWith();

    const summary = await handler({}, { getRemainingTimeInMillis: () => PASS_MARGIN_MS });

    expect(summary).toMatchObject({ pages: 0, complete: false });
    expect(beats).toEqual([1]);
  });
});

describe('the cursor in the gate table', () => {
  it('keeps where a pass stopped, and forgets it once a pass reaches the end', async () => {
    const store = gateTableCursor(dynamo.client, 'gate');
    const stopped = {
      status: 'running' as const,
      shard: 7,
      after: { request_id: 'r', open_shard: 'running#7', due_at: 'd' },
    };

    await store.save(stopped);
    const kept = await store.load();
    await store.save(undefined);

    expect(kept).toEqual(stopped);
    expect(await store.load()).toBeUndefined();
  });
});

describe('the reconciler environment', () => {
  const env = {
    TABLE_NAME: 'ledger',
    STATE_MACHINE_ARN: 'arn:aws:states:eu-west-1:111122223333:stateMachine:svc-dsr-dev-workflow',
    METRICS_NAMESPACE: 'svc-dsr',
    METRICS_STACK: 'svc-dsr-dev',
    AUDIT_BUCKET: 'audit',
    GATE_TABLE_NAME: 'gate',
  };

  it('takes half the Step Functions quotas when the stack sets no share, and the share it sets', () => {
    // Assess
    expect(reconcilerEnvSchema.parse(env).SFN_QUOTA_SHARE).toBe(0.5);
    expect(reconcilerEnvSchema.parse({ ...env, SFN_QUOTA_SHARE: '0.25' }).SFN_QUOTA_SHARE).toBe(0.25);
  });

  it('refuses a share of none, or of more than the whole quota', () => {
    // Assess
    expect(reconcilerEnvSchema.safeParse({ ...env, SFN_QUOTA_SHARE: '0' }).success).toBe(false);
    expect(reconcilerEnvSchema.safeParse({ ...env, SFN_QUOTA_SHARE: '1.5' }).success).toBe(false);
  });
});
