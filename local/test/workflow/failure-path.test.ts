import { afterEach, describe, expect, it } from 'vitest';
import { memoryCursor } from '../../../lambdas/reconciler/cursor.ts';
import { reconcile } from '../../../lambdas/reconciler/reconciler.ts';
import { type Harness, requestFor, startHarness } from './harness.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** A Lambda that Lambda itself refuses to run, every time: the error Step Functions then reports. */
const throttledLambda = () => async () => {
  throw Object.assign(new Error('Rate Exceeded.'), { name: 'Lambda.TooManyRequestsException' });
};

const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };

/** One reconciler pass over the harness's ledger: every execution of the harness has ended. */
function reconcileHarness(h: Harness, maxResumes: number) {
  return reconcile(
    {
      ledger: h.workflow.ledger,
      audit: h.workflow.audit,
      list: async () => ({ executions: [] }),
      describe: async (name) => (h.workflow.executions.find(name) ? 'FAILED' : 'MISSING'),
      start: async () => 'started',
      clock: () => new Date(),
      logger: silent,
      gate: h.workflow.gate,
      publish: () => {},
      cursor: memoryCursor(),
    },
    { maxResumes, graceSeconds: 0 },
  );
}

/** The request's audit chain as `svc-dsr verify --all` sees it: whole, and whether it ends in a final record. */
async function chainOf(h: Harness, requestId: string) {
  const verified = await h.workflow.audit.verify(requestId);
  const records = await h.workflow.audit.list(requestId);
  return { ok: verified.ok, final: verified.ok && verified.final, last: records.at(-1) };
}

describe('a RecordFailure that cannot run', () => {
  it('still ends the request failed in the ledger when its Lambda is throttled for good', async () => {
    let invocations = 0;
    harness = await startHarness({
      faults: { export_failure_rate: 1 },
      env: { EXPORT_MAX_ATTEMPTS: '1' },
      stepOverrides: {
        RecordFailure: () => async () => {
          invocations += 1;
          return throttledLambda()();
        },
      },
    });
    const request = requestFor('u-bruno');

    const results = await submitAndSettle(harness, request);

    expect(results.get(request.request_id)).toMatchObject({ status: 'FAILED', error: 'ExportFailedError' });
    // The first attempt and every retry of the 6-hour horizon, then the state machine's own write.
    expect(invocations).toBe(13);
    const item = await harness.workflow.ledger.require(request.request_id);
    expect(item.status).toBe('failed');
    expect(item.error?.code).toBe('record_failure_failed');
    expect(item.error?.message).toContain('ExportFailedError');
    expect(item.error?.message).toContain('Lambda.TooManyRequestsException');
  });

  it('has its final record written by the reconciler after the state machine recorded the failure itself', async () => {
    harness = await startHarness({
      faults: { export_failure_rate: 1 },
      env: { EXPORT_MAX_ATTEMPTS: '1' },
      stepOverrides: { RecordFailure: throttledLambda },
    });
    const request = requestFor('u-bruno');
    await submitAndSettle(harness, request);
    expect((await chainOf(harness, request.request_id)).final).toBe(false);

    const summary = await reconcileHarness(harness, 3);

    expect(summary.reindexed).toBe(1);
    const chain = await chainOf(harness, request.request_id);
    expect(chain).toMatchObject({ ok: true, final: true });
    expect(chain.last).toMatchObject({
      step: 'Reconciler',
      action: 'request_failed',
      facts: { code: 'record_failure_failed' },
    });
    const item = await harness.workflow.ledger.require(request.request_id);
    expect(item.audit_head).toBe(chain.last?.hash);
    // A second pass finds nothing more to do, and writes nothing twice.
    await reconcileHarness(harness, 3);
    expect((await harness.workflow.audit.list(request.request_id)).length).toBe((chain.last?.seq ?? 0) + 1);
  });

  it('is closed with a final record when the reconciler records a stranded request failed', async () => {
    // RecordFailure and the state machine's own write both fail: the request stays running with
    // its execution ended, as a crash would leave it.
    harness = await startHarness({
      faults: { export_failure_rate: 1 },
      env: { EXPORT_MAX_ATTEMPTS: '1' },
      stepOverrides: { RecordFailure: throttledLambda },
      dynamoIntegration: () => async () => {
        throw Object.assign(new Error('access denied'), { name: 'DynamoDB.AmazonDynamoDBException' });
      },
    });
    const request = requestFor('u-bruno');
    await submitAndSettle(harness, request);
    expect((await harness.workflow.ledger.require(request.request_id)).status).toBe('running');

    const summary = await reconcileHarness(harness, 0);

    expect(summary.stranded).toEqual([request.request_id]);
    const chain = await chainOf(harness, request.request_id);
    expect(chain).toMatchObject({ ok: true, final: true });
    expect(chain.last).toMatchObject({
      step: 'Reconciler',
      action: 'request_failed',
      facts: { code: 'stranded' },
    });
  });

  it('retries the throttled DynamoDB write of the last resort', async () => {
    let throttles = 0;
    harness = await startHarness({
      faults: { export_failure_rate: 1 },
      env: { EXPORT_MAX_ATTEMPTS: '1' },
      stepOverrides: { RecordFailure: throttledLambda },
      dynamoIntegration: (real) => async (parameters) => {
        if (throttles < 2) {
          throttles += 1;
          throw Object.assign(new Error('throughput exceeded'), {
            name: 'DynamoDB.ProvisionedThroughputExceededException',
          });
        }
        return real(parameters);
      },
    });
    const request = requestFor('u-bruno');

    await submitAndSettle(harness, request);

    expect(throttles).toBe(2);
    const item = await harness.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'failed', error: { code: 'record_failure_failed' } });
  });

  it('records an outcome that could not be recorded as record_outcome_failed, for an operator to retry', async () => {
    harness = await startHarness({ stepOverrides: { RecordOutcome: throttledLambda } });
    const request = requestFor('u-alice');

    const results = await submitAndSettle(harness, request);

    expect(results.get(request.request_id)).toMatchObject({ status: 'FAILED', error: 'RecordOutcomeFailed' });
    const item = await harness.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'failed', error: { code: 'record_outcome_failed' } });
    expect(item.archive).toBeDefined();
  });
});

describe('an intake that fails unexpectedly', () => {
  it('closes the request it rejects with a final record after its intake record', async () => {
    harness = await startHarness({
      intakeStarter: async () => {
        throw new TypeError('a defect nobody foresaw');
      },
    });
    const request = requestFor('u-alice');

    await submitAndSettle(harness, request);

    expect(await harness.workflow.ledger.require(request.request_id)).toMatchObject({ status: 'rejected' });
    const chain = await chainOf(harness, request.request_id);
    expect(chain).toMatchObject({ ok: true, final: true });
    expect(chain.last).toMatchObject({
      seq: 1,
      step: 'Intake',
      action: 'request_rejected',
      facts: { cause: 'intake_failed', error: 'TypeError' },
    });
  });
});
