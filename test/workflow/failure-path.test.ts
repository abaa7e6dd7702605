import { afterEach, describe, expect, it } from 'vitest';
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
