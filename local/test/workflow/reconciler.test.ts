import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SFNClient, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalMode, startLocalMode } from '#local/local-mode';
import { runCli } from '../../../test/helpers/cli.ts';
import { reconcileUntilActedOn } from '../helpers/reconcile.ts';
import { request as observedRequest } from '../iam/observe.ts';

const request = (primaryKey: string) => observedRequest(randomUUID(), 'access', primaryKey);

let dataDir: string;
let mode: LocalMode;
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-reconciler-'));
  mode = await startLocalMode({
    dataDir,
    // The first two exports fail for good (one attempt each); every later one completes.
    faults: { export_outcomes: ['failed', 'failed'], export_ready_after_polls: 1 },
    env: { EXPORT_MAX_ATTEMPTS: '1' },
    waitMs: 1500,
  });
}, 120_000);
afterAll(async () => {
  await mode?.close();
  await rm(dataDir, { recursive: true, force: true });
});

/** Leaves the request `running` in the ledger with its execution gone (aborted, as a crash or a timeout would). */
async function strand(id: string): Promise<void> {
  for (let tries = 0; (await mode.workflow.ledger.require(id)).step !== 'exporting'; tries++) {
    if (tries > 200) throw new Error('the request never reached its export');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  const sfn = new SFNClient({
    region: mode.aws.region,
    endpoint: mode.shim.endpoint,
    credentials: mode.aws.credentials,
  });
  await sfn.send(
    new StopExecutionCommand({
      executionArn: `${mode.shim.stateMachineArn.replace(':stateMachine:', ':execution:')}:${id}`,
    }),
  );
  sfn.destroy();
  await mode.idle();
}

const cli = (...args: string[]) => runCli([...args, '--data-dir', dataDir], { timeoutMs: 120_000 });

describe('svc-dsr retry in bulk, as a CLI process', () => {
  it('lists the failed requests with the code on --dry-run, then retries them all to completion', async () => {
    const failing = [request('u-alice'), request('u-bruno')];
    await mode.submit(failing.map((body) => JSON.stringify(body)));
    await mode.idle();
    for (const { request_id } of failing) {
      expect(await mode.workflow.ledger.require(request_id)).toMatchObject({
        status: 'failed',
        error: { code: 'export_failed' },
      });
    }

    const dryRun = await cli('retry', '--status', 'failed', '--code', 'export_failed', '--dry-run', '--json');

    expect(dryRun.code).toBe(0);
    const planned = JSON.parse(dryRun.stdout) as { dry_run: boolean; requests: { request_id: string }[] };
    expect(planned.dry_run).toBe(true);
    expect(planned.requests.map((item) => item.request_id).sort()).toEqual(
      failing.map((item) => item.request_id).sort(),
    );
    for (const { request_id } of failing) {
      expect((await mode.workflow.ledger.require(request_id)).status).toBe('failed');
    }
    const other = await cli('retry', '--status', 'failed', '--code', 'platform_auth', '--dry-run');
    expect(other.code).toBe(0);
    expect(other.stdout).toContain('would retry 0 request(s) failed with code platform_auth');

    const retried = await cli('retry', '--status', 'failed', '--code', 'export_failed');

    expect(retried.code).toBe(0);
    await mode.idle();
    for (const { request_id } of failing) {
      expect(await mode.workflow.ledger.require(request_id)).toMatchObject({
        status: 'completed',
        outcome: 'exported',
        executions: 2,
      });
    }
  }, 180_000);
});

describe('a request left running without an execution', () => {
  it('is resumed by the reconciler and completes', async () => {
    const stuck = request('u-chloe');
    await mode.submit([JSON.stringify(stuck)]);
    await strand(stuck.request_id);
    expect((await mode.workflow.ledger.require(stuck.request_id)).status).toBe('running');

    const summary = await reconcileUntilActedOn(mode, stuck.request_id);

    expect(summary.resumed).toEqual([stuck.request_id]);
    await mode.idle();
    expect(await mode.workflow.ledger.require(stuck.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'exported',
      executions: 2,
      resumes: 1,
    });
  }, 60_000);

  it('is retried by svc-dsr retry <request_id>', async () => {
    const stuck = request('u-dan');
    await mode.submit([JSON.stringify(stuck)]);
    await strand(stuck.request_id);

    const retried = await cli('retry', stuck.request_id);

    expect(retried.code).toBe(0);
    expect(retried.stdout).toContain(`${stuck.request_id}-retry-2`);
    await mode.idle();
    expect(await mode.workflow.ledger.require(stuck.request_id)).toMatchObject({
      status: 'completed',
      outcome: 'exported',
    });
  }, 120_000);
});
