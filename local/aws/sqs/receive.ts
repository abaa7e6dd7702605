/**
 * Receiving: ReceiveMessage with long polling, the visibility timeout a receive starts, retention,
 * and the redrive of a message received too often.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { JournalRecord } from './journal.ts';
import { MAX_WAIT_SECONDS } from './limits.ts';
import { type Message, md5OfAttributes, selectAttributes, systemAttributes } from './messages.ts';
import type { Queue } from './queue.ts';
import { deadLetter, redrivePolicy } from './redrive.ts';
import type { QueueStore } from './store.ts';

/** A visibility timeout in seconds, as SQS bounds it (twelve hours at most). */
export const visibilityTimeoutSchema = z.number().int().min(0).max(43_200);

const receiveSchema = z
  .object({
    MaxNumberOfMessages: z.number().int().min(1).max(10).optional(),
    VisibilityTimeout: visibilityTimeoutSchema.optional(),
    WaitTimeSeconds: z.number().int().min(0).max(MAX_WAIT_SECONDS).optional(),
    AttributeNames: z.array(z.string()).optional(),
    MessageSystemAttributeNames: z.array(z.string()).optional(),
    MessageAttributeNames: z.array(z.string()).optional(),
  })
  .loose();

export async function receiveMessage(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const request = receiveSchema.parse(input);
  const max = request.MaxNumberOfMessages ?? 1;
  const visibility = request.VisibilityTimeout ?? queue.number('VisibilityTimeout', 30);
  const waitSeconds = request.WaitTimeSeconds ?? queue.number('ReceiveMessageWaitTimeSeconds', 0);
  const deadline = Date.now() + waitSeconds * 1000;
  let taken = await receiveNow(store, queue, max, visibility);
  while (taken.length === 0 && !store.closed && Date.now() < deadline) {
    // A send wakes the poll at once; a message whose visibility ends is seen within 100 ms.
    await queue.waitForMessage(Math.min(100, deadline - Date.now()));
    taken = await receiveNow(store, queue, max, visibility);
  }
  const systemNames = new Set([
    ...(request.AttributeNames ?? []),
    ...(request.MessageSystemAttributeNames ?? []),
  ]);
  const attributeNames = request.MessageAttributeNames ?? [];
  return { Messages: taken.map((message) => received(message, systemNames, attributeNames)) };
}

/** A received message as the answer carries it, with the attributes the request asked for. */
function received(message: Message, systemNames: ReadonlySet<string>, attributeNames: readonly string[]) {
  const attributes = selectAttributes(message.attributes, attributeNames);
  const system = systemAttributes(message, systemNames);
  return {
    MessageId: message.id,
    ReceiptHandle: message.receipt,
    Body: message.body,
    MD5OfBody: message.md5,
    ...(Object.keys(system).length > 0 ? { Attributes: system } : {}),
    ...(attributes
      ? { MessageAttributes: attributes, MD5OfMessageAttributes: md5OfAttributes(attributes) }
      : {}),
  };
}

/**
 * Takes up to `max` visible messages, in the order they were sent, and hides each for
 * `visibilitySeconds`. On the way, a message past its retention is deleted and one received
 * `maxReceiveCount` times goes to the dead-letter queue.
 */
async function receiveNow(store: QueueStore, queue: Queue, max: number, visibilitySeconds: number) {
  const now = Date.now();
  const retentionMs = queue.number('MessageRetentionPeriod', 345_600) * 1000;
  const redrive = redrivePolicy(queue.attributes.RedrivePolicy);
  const taken: Message[] = [];
  const records: JournalRecord[] = [];
  for (const message of [...queue.messages.values()]) {
    if (taken.length >= max) break;
    if (message.visibleAt > now || !message.stored) continue;
    if (now - message.sent > retentionMs) {
      queue.messages.delete(message.id);
      records.push({ op: 'del', id: message.id });
      continue;
    }
    if (redrive && message.receiveCount >= redrive.maxReceiveCount) {
      if (await deadLetter(store, queue, message, redrive.deadLetterTargetArn)) continue;
    }
    message.receiveCount += 1;
    message.firstReceive ??= now;
    message.visibleAt = now + visibilitySeconds * 1000;
    message.receipt = `${message.id}.${randomBytes(12).toString('base64url')}`;
    taken.push(message);
    records.push({ op: 'recv', id: message.id, at: now });
  }
  // Receive counts and expiries need no flush: a kill keeps what was written, and only a lost
  // power supply could undercount a receive.
  await queue.persist(records, false);
  return taken;
}
