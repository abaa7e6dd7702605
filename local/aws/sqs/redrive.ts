/**
 * Redrive: a queue's RedrivePolicy, and the move of a message received too often to its dead-letter
 * queue, written there before it is deleted here.
 */
import { z } from 'zod';
import { sendRecord } from './journal.ts';
import type { Message } from './messages.ts';
import type { Queue } from './queue.ts';
import type { QueueStore } from './store.ts';

const redriveSchema = z.object({
  deadLetterTargetArn: z.string(),
  maxReceiveCount: z.coerce.number().int().min(1),
});

/** The queue's redrive policy; none when it has none, or one SQS would not have accepted. */
export function redrivePolicy(text: string | undefined) {
  if (text === undefined || text === '') return undefined;
  const parsed = redriveSchema.safeParse(JSON.parse(text));
  return parsed.success ? parsed.data : undefined;
}

/** Moves the message to the dead-letter queue: there first, then gone from here. False when that queue does not exist. */
export async function deadLetter(
  store: QueueStore,
  queue: Queue,
  message: Message,
  targetArn: string,
): Promise<boolean> {
  const target = store.byArn(targetArn);
  if (target === undefined) return false;
  const moved: Message = { ...message, visibleAt: 0, receipt: undefined, stored: false };
  queue.messages.delete(message.id);
  target.messages.set(moved.id, moved);
  await target.persist([sendRecord(moved)], true);
  moved.stored = true;
  target.notify();
  await queue.persist([{ op: 'del', id: message.id }], true);
  return true;
}
