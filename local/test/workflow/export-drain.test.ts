import { SFNClient } from '@aws-sdk/client-sfn';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it } from 'vitest';
import { platformStatsSchema } from '#local/emulator/limits';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { runCancel } from '../../../bin/cli/commands/cancel.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { inProcessOperator } from '../../../bin/cli/operator-client.ts';
import { sfnStarter } from '../../../lambdas/intake/aws.ts';
import { sfnLister, sfnLookup } from '../../../lambdas/reconciler/aws.ts';
import { memoryCursor } from '../../../lambdas/reconciler/cursor.ts';
import { reconcile } from '../../../lambdas/reconciler/reconciler.ts';
import { sideChainOf } from '../../../lambdas/shared/audit.ts';
import { type Harness, requestFor, startHarness, usersState } from './harness.ts';

let harness: Harness | undefined;
let sfn: SFNClient | undefined;
afterEach(async () => {
  sfn?.destroy();
  await harness?.close();
  harness = undefined;
});

const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('an export left open by a request cancelled mid-export', () => {
  it('keeps its slot until it is drained, and the next request is exported without a 429', async () => {
    // Prepare: one export open at a time, and exports that stay pending for a few polls.
    const h = await startHarness({
      state: usersState(2),
      faults: {
        rate_limit: { requests_per_second: 50, burst: 50, max_open_exports: 1 },
        export_ready_after_polls: 6,
      },
    });
    harness = h;
    const client = new SFNClient({
      region: 'us-east-1',
      endpoint: h.workflow.shim.endpoint,
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    });
    sfn = client;
    const { stateMachineArn } = h.workflow.shim;
    const pass = () =>
      reconcile(
        {
          ledger: h.workflow.ledger,
          audit: h.workflow.audit,
          list: sfnLister(client, stateMachineArn),
          describe: sfnLookup(client, stateMachineArn),
          start: sfnStarter(client, stateMachineArn),
          clock: () => new Date(),
          logger: silent,
          gate: h.workflow.gate,
          drain: h.workflow.exportDrain,
          publish: () => {},
          cursor: memoryCursor(),
        },
        { maxResumes: 3, graceSeconds: 0 },
      );
    const first = requestFor('u-0', { type: 'access' });
    const next = requestFor('u-1', { type: 'access' });
    const send = (request: { request_id: string }) =>
      h.workflow.sqs.send(
        new SendMessageCommand({
          QueueUrl: h.workflow.queueUrls.intake,
          MessageBody: JSON.stringify(request),
        }),
      );

    // Act: the first request's export starts, the operator cancels it, the next request arrives,
    // and the reconciler runs on its schedule meanwhile.
    await send(first);
    await h.poller.drain();
    await until('the first export is under way', async () => {
      const item = await h.workflow.ledger.get(first.request_id);
      return item?.export_status === 'pending';
    });
    const cancelled = await runCancel(
      {
        operatorFunction: inProcessOperator(
          {
            ledger: h.workflow.ledger,
            sfn: client,
            s3: h.workflow.s3,
            names: {
              ArchiveBucketName: LOCAL_NAMES.archiveBucket,
              AuditBucketName: LOCAL_NAMES.auditBucket,
              StateMachineArn: stateMachineArn,
            },
            clock: () => new Date(),
          },
          async () => 'local-user:operator',
        ),
      },
      { requestId: first.request_id, reason: 'withdrawn by the subject' },
      collectingIo(),
    );
    expect(cancelled.exitCode).toBe(0);
    await send(next);
    await h.poller.drain();
    let settled = false;
    const results = h.workflow.settled().finally(() => {
      settled = true;
    });
    while (!settled) {
      await pass();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }

    // Assess: the next request was exported and completed; the platform never refused an export;
    // the cancelled request's export was downloaded to nowhere, on record in its effects chain.
    expect((await results).get(next.request_id)?.status).toBe('SUCCEEDED');
    expect(await h.workflow.ledger.require(next.request_id)).toMatchObject({ status: 'completed' });
    expect(await h.workflow.ledger.require(first.request_id)).toMatchObject({ status: 'cancelled' });
    const stats = platformStatsSchema.parse(await h.control('GET', 'stats'));
    expect(stats.throttled.open_exports).toBe(0);
    expect(stats.max_open_exports).toBeLessThanOrEqual(1);
    const effects = await h.workflow.audit.list(sideChainOf('effects', first.request_id));
    expect(effects.map((record) => record.action)).toContain('export_drained');
    expect(Object.keys(await h.workflow.gate.exportHolders())).toEqual([]);
  });
});
