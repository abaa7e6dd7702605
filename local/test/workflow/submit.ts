import { SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import type { ExecutionResult } from '#local/runtime/sfn-runner';
import type { Harness } from './harness.ts';

/** Sends requests through the intake queue, lets intake consume them, and waits for every execution. */
export async function submitAndSettle(
  h: Harness,
  ...bodies: unknown[]
): Promise<Map<string, ExecutionResult>> {
  await h.workflow.sqs.send(
    new SendMessageBatchCommand({
      QueueUrl: h.workflow.queueUrls.intake,
      Entries: bodies.map((body, index) => ({
        Id: String(index),
        MessageBody: typeof body === 'string' ? body : JSON.stringify(body),
      })),
    }),
  );
  await h.poller.drain();
  return h.workflow.settled();
}
