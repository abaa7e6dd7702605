import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it } from 'vitest';
import { type Harness, requestFor, startHarness } from './harness.ts';

let harness: Harness | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function run(h: Harness, request: { request_id: string }) {
  await h.workflow.sqs.send(
    new SendMessageCommand({ QueueUrl: h.workflow.queueUrls.intake, MessageBody: JSON.stringify(request) }),
  );
  await h.poller.drain();
  return (await h.workflow.settled()).get(request.request_id);
}

describe('the workflow with local AWS calls throttled (startHarness({ awsFaults }))', () => {
  it('completes an erasure while a tenth of the DynamoDB, S3 and SQS calls are throttled', async () => {
    // Prepare
    harness = await startHarness({
      awsFaults: { seed: 5, throttle_rate: 0.1, services: ['dynamodb', 's3', 'sqs'] },
    });
    const request = requestFor('u-alice', { type: 'erasure' });

    // Act
    const result = await run(harness, request);

    // Assess
    expect(result?.status, JSON.stringify({ error: result?.error, cause: result?.cause })).toBe('SUCCEEDED');
    const item = await harness.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'erased' });
  });

  it('fails a Lambda task throttled on every invoke with Lambda.TooManyRequestsException', async () => {
    // Prepare
    harness = await startHarness({ awsFaults: { seed: 1, throttle_rate: 1, services: ['lambda'] } });
    const request = requestFor('u-alice');

    // Act
    const result = await run(harness, request);

    // Assess
    expect(result).toMatchObject({ status: 'FAILED' });
    const errors = (result?.events ?? []).flatMap(
      (event) => JSON.stringify(event).match(/Lambda\.TooManyRequestsException/g) ?? [],
    );
    expect(errors.length).toBeGreaterThan(0);
  });
});
