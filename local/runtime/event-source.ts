/**
 * The SQS event source mapping, locally: polls the intake queue and hands each batch to the intake
 * handler, deleting what it accepted and leaving its failures for redelivery.
 */
import { DeleteMessageBatchCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { CALLERS, runAsCaller } from '../../lambdas/shared/call-recorder.ts';

/** What the poller does with a batch: the Lambda handler of an SQS event source mapping. */
export type SqsBatchHandler = (event: SQSEvent) => Promise<SQSBatchResponse>;

/**
 * The local stand-in for Lambda's SQS event source mapping: receive a batch, invoke the handler,
 * delete what succeeded. Failed messages become visible again and reach the DLQ after the queue's
 * maxReceiveCount, as in AWS.
 */
export class SqsPoller {
  constructor(
    private readonly sqs: SQSClient,
    private readonly queueUrl: string,
    private readonly handler: SqsBatchHandler,
    private readonly options: { batchSize?: number; waitTimeSeconds?: number; queueArn?: string } = {},
  ) {}

  /** Receives and handles one batch; returns how many messages it received. */
  pollOnce(waitTimeSeconds = this.options.waitTimeSeconds ?? 0): Promise<number> {
    // The event source mapping's own calls run with the intake function's role.
    return runAsCaller(CALLERS.intakeEventSource, () => this.#poll(waitTimeSeconds));
  }

  async #poll(waitTimeSeconds: number): Promise<number> {
    const { Messages = [] } = await this.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: this.queueUrl,
        MaxNumberOfMessages: this.options.batchSize ?? 10,
        WaitTimeSeconds: waitTimeSeconds,
        MessageSystemAttributeNames: ['All'],
        MessageAttributeNames: ['All'],
      }),
    );
    if (Messages.length === 0) return 0;
    const records: SQSRecord[] = Messages.map((message) => ({
      messageId: message.MessageId ?? '',
      receiptHandle: message.ReceiptHandle ?? '',
      body: message.Body ?? '',
      attributes: {
        ApproximateReceiveCount: message.Attributes?.ApproximateReceiveCount ?? '1',
        SentTimestamp: message.Attributes?.SentTimestamp ?? String(Date.now()),
        SenderId: message.Attributes?.SenderId ?? 'local',
        ApproximateFirstReceiveTimestamp:
          message.Attributes?.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
      },
      messageAttributes: {},
      md5OfBody: message.MD5OfBody ?? '',
      eventSource: 'aws:sqs',
      eventSourceARN: this.options.queueArn ?? 'arn:aws:sqs:us-east-1:000000000000:local',
      awsRegion: 'us-east-1',
    }));
    const response = await this.handler({ Records: records });
    const failed = new Set(response.batchItemFailures.map((failure) => failure.itemIdentifier));
    const done = records.filter((record) => !failed.has(record.messageId));
    if (done.length > 0) {
      await this.sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: done.map((record, index) => ({ Id: String(index), ReceiptHandle: record.receiptHandle })),
        }),
      );
    }
    return records.length;
  }

  /** Polls until the queue answers empty once. */
  async drain(): Promise<number> {
    let total = 0;
    for (let received = await this.pollOnce(0); received > 0; received = await this.pollOnce(0))
      total += received;
    return total;
  }
}

/**
 * Polls the intake queue until the returned function is called, and runs each scheduled task (the
 * reconciler, the deadline sweep) every `every` ms; an error goes to `onError` and the loop goes on
 * after a second.
 */
export function pollWithSchedule(
  poller: SqsPoller,
  schedule: readonly { readonly every: number; readonly run: () => Promise<unknown> }[],
  onError: (error: unknown) => void,
): () => Promise<void> {
  let stopped = false;
  const ranAt = schedule.map(() => Date.now());
  const loop = (async () => {
    while (!stopped) {
      try {
        for (const [index, task] of schedule.entries()) {
          if (Date.now() - (ranAt[index] ?? 0) < task.every) continue;
          ranAt[index] = Date.now();
          await task.run();
        }
        await poller.pollOnce(1);
      } catch (error) {
        onError(error);
        await new Promise((resolveDelay) => setTimeout(resolveDelay, 1000));
      }
    }
  })();
  return async () => {
    stopped = true;
    await loop;
  };
}
