/**
 * Judged requests sent to the intake queue, the same for `svc-dsr submit` and the API: batches of
 * ten with SendMessageBatch, a few at once, one more try for what SQS could not take, and the
 * rest reported as not attempted once the queue has failed twice.
 */
import {
  SendMessageBatchCommand,
  type SendMessageBatchCommandOutput,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { ValidLine } from './submission.ts';

/** Where requests go: the intake queue, and a client that sends to it. */
export interface IntakeTarget {
  readonly sqs: Pick<SQSClient, 'send'>;
  readonly queueUrl: string;
}

/** A line the queue took. */
export interface SentLine {
  readonly line: number;
  readonly request_id: string;
}

/** A valid line SQS did not take (after one retry), or not attempted after the queue kept failing. */
export interface FailedLine {
  readonly line: number;
  readonly request_id: string;
  readonly code: string;
  readonly message: string;
}

const BATCH_SIZE = 10;
const PARALLEL_BATCHES = 4;

export async function sendAll(
  target: IntakeTarget,
  valid: readonly ValidLine[],
  progress: (done: number) => void = () => {},
): Promise<{ sent: SentLine[]; failed: FailedLine[] }> {
  const batches: ValidLine[][] = [];
  for (let start = 0; start < valid.length; start += BATCH_SIZE) {
    batches.push(valid.slice(start, start + BATCH_SIZE));
  }
  const sent: SentLine[] = [];
  const failed: FailedLine[] = [];
  let next = 0;
  let done = 0;
  let stopped: string | undefined;

  const worker = async () => {
    for (;;) {
      const batch = batches[next];
      next += 1;
      if (batch === undefined) return;
      if (stopped !== undefined) {
        for (const entry of batch) {
          failed.push({
            line: entry.line,
            request_id: entry.request.request_id,
            code: 'not_attempted',
            message: stopped,
          });
        }
        continue;
      }
      const outcome = await sendBatch(target, batch);
      sent.push(...outcome.sent);
      failed.push(...outcome.failed);
      if (outcome.unreachable !== undefined) {
        stopped ??= `not sent after the queue failed twice (${outcome.unreachable}); submit the file again once it works: lines already sent count as duplicates`;
      }
      done += batch.length;
      progress(done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_BATCHES, batches.length) }, worker));
  sent.sort((a, b) => a.line - b.line);
  failed.sort((a, b) => a.line - b.line);
  return { sent, failed };
}

/** One batch, and one more try for the entries SQS could not take (not for those it refused as malformed). */
async function sendBatch(
  target: IntakeTarget,
  batch: readonly ValidLine[],
): Promise<{ sent: SentLine[]; failed: FailedLine[]; unreachable?: string }> {
  const byId = new Map(batch.map((entry) => [`line-${entry.line}`, entry]));
  const sent: SentLine[] = [];
  const failed: FailedLine[] = [];
  let pending = [...byId.keys()];
  for (let attempt = 1; attempt <= 2 && pending.length > 0; attempt += 1) {
    const entries: SendMessageBatchRequestEntry[] = pending.map((id) => ({
      Id: id,
      MessageBody: byId.get(id)?.body ?? '',
    }));
    let answer: SendMessageBatchCommandOutput;
    try {
      answer = await target.sqs.send(
        new SendMessageBatchCommand({ QueueUrl: target.queueUrl, Entries: entries }),
      );
    } catch (error) {
      if (attempt === 2) {
        const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
        for (const id of pending) {
          const entry = byId.get(id);
          if (entry)
            failed.push({
              line: entry.line,
              request_id: entry.request.request_id,
              code: 'send_failed',
              message: reason,
            });
        }
        return { sent, failed, unreachable: reason };
      }
      continue;
    }
    const succeeded = new Set((answer.Successful ?? []).map((entry) => entry.Id));
    const refused = new Map((answer.Failed ?? []).map((entry) => [entry.Id, entry]));
    const retry: string[] = [];
    for (const id of pending) {
      const entry = byId.get(id);
      if (entry === undefined) continue;
      if (succeeded.has(id)) {
        sent.push({ line: entry.line, request_id: entry.request.request_id });
        continue;
      }
      const failure = refused.get(id);
      // A sender fault (a malformed entry) fails the same way twice; anything else may pass on retry.
      if (attempt === 2 || failure?.SenderFault === true) {
        failed.push({
          line: entry.line,
          request_id: entry.request.request_id,
          code: failure?.Code ?? 'no_answer',
          message: failure?.Message ?? 'SQS did not report this entry as sent',
        });
      } else retry.push(id);
    }
    pending = retry;
  }
  return { sent, failed };
}
