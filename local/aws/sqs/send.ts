/**
 * Sending: SendMessage and SendMessageBatch. A message counts as sent only once its record is on the
 * disk, and a send wakes the long polls waiting on its queue.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { sendRecord } from './journal.ts';
import { MAX_BODY_BYTES } from './limits.ts';
import { bodyProblem, type Message, md5, md5OfAttributes, messageAttributesSchema } from './messages.ts';
import { type BatchFailure, batchEntries, batchFailure, SqsFailure } from './protocol.ts';
import type { Queue } from './queue.ts';
import type { QueueStore } from './store.ts';

const sendEntrySchema = z
  .object({
    Id: z.string(),
    MessageBody: z.string(),
    DelaySeconds: z.number().int().min(0).max(900).optional(),
    MessageAttributes: messageAttributesSchema.optional(),
  })
  .loose();
type SendEntry = z.infer<typeof sendEntrySchema>;

export async function sendMessage(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const entry = sendEntrySchema.omit({ Id: true }).parse(input);
  const { successful, failed } = await send(queue, [{ ...entry, Id: '0' }]);
  const [problem] = failed;
  if (problem !== undefined) throw new SqsFailure(problem.Code, problem.Message);
  const [{ Id: _id, ...sent } = { Id: '', MessageId: '', MD5OfMessageBody: '' }] = successful;
  return sent;
}

export async function sendMessageBatch(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const entries = batchEntries(input, sendEntrySchema);
  const { successful, failed } = await send(queue, entries);
  return { Successful: successful, Failed: failed };
}

/** Sends the entries whose bodies SQS would take; the others fail alone. */
async function send(queue: Queue, entries: readonly SendEntry[]) {
  const now = Date.now();
  const maxBytes = queue.number('MaximumMessageSize', MAX_BODY_BYTES);
  const accepted: { entry: SendEntry; message: Message }[] = [];
  const failed: BatchFailure[] = [];
  for (const entry of entries) {
    const problem = bodyProblem(entry.MessageBody, maxBytes);
    if (problem !== undefined) {
      failed.push(batchFailure(entry.Id, problem.code, problem.message));
      continue;
    }
    const delay = entry.DelaySeconds ?? queue.number('DelaySeconds', 0);
    accepted.push({ entry, message: newMessage(entry, now, delay) });
  }
  await storeSent(
    queue,
    accepted.map(({ message }) => message),
  );
  return {
    failed,
    successful: accepted.map(({ entry, message }) => ({
      Id: entry.Id,
      MessageId: message.id,
      MD5OfMessageBody: message.md5,
      ...(message.attributes && Object.keys(message.attributes).length > 0
        ? { MD5OfMessageAttributes: md5OfAttributes(message.attributes) }
        : {}),
    })),
  };
}

function newMessage(entry: SendEntry, now: number, delaySeconds: number): Message {
  return {
    id: randomUUID(),
    body: entry.MessageBody,
    md5: md5(entry.MessageBody),
    attributes: entry.MessageAttributes,
    sent: now,
    visibleAt: now + delaySeconds * 1000,
    receiveCount: 0,
    firstReceive: undefined,
    receipt: undefined,
    stored: false,
  };
}

/**
 * On the disk first: a message counts as sent only once it would survive a kill. The map changes
 * before the journal, so a compaction's snapshot never misses a written record.
 */
async function storeSent(queue: Queue, messages: readonly Message[]): Promise<void> {
  for (const message of messages) queue.messages.set(message.id, message);
  try {
    await queue.persist(messages.map(sendRecord), true);
  } catch (error) {
    for (const message of messages) queue.messages.delete(message.id);
    throw error;
  }
  for (const message of messages) message.stored = true;
  queue.notify();
}
