/**
 * What a receipt handle lets a consumer do with a message it received: delete it (answered once the
 * delete is on the disk) or change how long it stays hidden, one at a time or in a batch.
 */
import { z } from 'zod';
import type { JournalRecord } from './journal.ts';
import type { Message } from './messages.ts';
import { batchEntries, eachEntry, SqsFailure } from './protocol.ts';
import type { Queue } from './queue.ts';
import { visibilityTimeoutSchema } from './receive.ts';
import type { QueueStore } from './store.ts';

export async function deleteMessage(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const { ReceiptHandle } = z.object({ ReceiptHandle: z.string() }).loose().parse(input);
  await deleteMessages(queue, [ReceiptHandle]);
  return {};
}

export async function deleteMessageBatch(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const entries = batchEntries(input, z.object({ Id: z.string(), ReceiptHandle: z.string() }));
  const { passed, failed } = eachEntry(entries, (entry) => byReceipt(queue, entry.ReceiptHandle));
  await deleteMessages(
    queue,
    passed.map((entry) => entry.ReceiptHandle),
  );
  return { Successful: passed.map((entry) => ({ Id: entry.Id })), Failed: failed };
}

export function changeMessageVisibility(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const { ReceiptHandle, VisibilityTimeout } = z
    .object({ ReceiptHandle: z.string(), VisibilityTimeout: visibilityTimeoutSchema })
    .loose()
    .parse(input);
  changeVisibility(queue, ReceiptHandle, VisibilityTimeout);
  return {};
}

export function changeMessageVisibilityBatch(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const entries = batchEntries(
    input,
    z.object({ Id: z.string(), ReceiptHandle: z.string(), VisibilityTimeout: visibilityTimeoutSchema }),
  );
  const { passed, failed } = eachEntry(entries, (entry) =>
    changeVisibility(queue, entry.ReceiptHandle, entry.VisibilityTimeout),
  );
  return { Successful: passed.map((entry) => ({ Id: entry.Id })), Failed: failed };
}

/** The in-flight message a receipt handle names, or a failure SQS would give. */
function byReceipt(queue: Queue, receipt: string): Message | undefined {
  const id = receipt.split('.')[0] ?? '';
  if (!/^[0-9a-f-]{36}$/.test(id)) {
    throw new SqsFailure('ReceiptHandleIsInvalid', `The receipt handle "${receipt}" is not valid.`);
  }
  return queue.messages.get(id);
}

async function deleteMessages(queue: Queue, receipts: readonly string[]): Promise<void> {
  const gone: JournalRecord[] = [];
  for (const receipt of receipts) {
    const message = byReceipt(queue, receipt);
    if (message === undefined) continue;
    queue.messages.delete(message.id);
    gone.push({ op: 'del', id: message.id });
  }
  // Answered once on the disk: a deleted message never comes back after a restart.
  await queue.persist(gone, true);
}

function changeVisibility(queue: Queue, receipt: string, seconds: number): void {
  const message = byReceipt(queue, receipt);
  if (message === undefined || message.receipt === undefined || message.visibleAt <= Date.now()) {
    throw new SqsFailure(
      'MessageNotInflight',
      'The message referred to is not in flight.',
      'AWS.SimpleQueueService.MessageNotInflight',
    );
  }
  message.visibleAt = Date.now() + seconds * 1000;
  if (seconds === 0) queue.notify();
}
