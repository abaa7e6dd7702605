/**
 * The operations on queues themselves: create, find by name, list, read and set attributes (with
 * the approximate counts SQS reports), and purge.
 */
import { z } from 'zod';
import type { QueueStore } from './store.ts';

export function createQueue(store: QueueStore, input: unknown) {
  const { QueueName, Attributes = {} } = z
    .object({ QueueName: z.string(), Attributes: z.record(z.string(), z.string()).optional() })
    .parse(input);
  return { QueueUrl: store.create(QueueName, Attributes) };
}

export function getQueueUrl(store: QueueStore, input: unknown) {
  const { QueueName } = z.object({ QueueName: z.string() }).parse(input);
  return { QueueUrl: store.url(store.queueOf({ QueueUrl: store.url(QueueName) }).name) };
}

export function listQueues(store: QueueStore, input: unknown) {
  const { QueueNamePrefix = '' } = z.object({ QueueNamePrefix: z.string().optional() }).loose().parse(input);
  return {
    QueueUrls: store
      .names()
      .filter((name) => name.startsWith(QueueNamePrefix))
      .map((name) => store.url(name)),
  };
}

export function getQueueAttributes(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const { AttributeNames = ['All'] } = z
    .object({ AttributeNames: z.array(z.string()).optional() })
    .loose()
    .parse(input);
  const now = Date.now();
  const messages = [...queue.messages.values()];
  const all: Record<string, string> = {
    ...queue.attributes,
    QueueArn: store.arn(queue.name),
    CreatedTimestamp: String(Math.floor(queue.created / 1000)),
    LastModifiedTimestamp: String(Math.floor(queue.created / 1000)),
    ApproximateNumberOfMessages: String(messages.filter((m) => m.visibleAt <= now).length),
    ApproximateNumberOfMessagesNotVisible: String(
      messages.filter((m) => m.visibleAt > now && m.receipt !== undefined).length,
    ),
    ApproximateNumberOfMessagesDelayed: String(
      messages.filter((m) => m.visibleAt > now && m.receipt === undefined).length,
    ),
  };
  const wanted = AttributeNames.includes('All') ? Object.keys(all) : AttributeNames;
  return {
    Attributes: Object.fromEntries(wanted.filter((name) => name in all).map((name) => [name, all[name]])),
  };
}

export function setQueueAttributes(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  const { Attributes } = z
    .object({ Attributes: z.record(z.string(), z.string()) })
    .loose()
    .parse(input);
  store.setAttributes(queue, Attributes);
  return {};
}

export async function purgeQueue(store: QueueStore, input: unknown) {
  const queue = store.queueOf(input);
  queue.messages.clear();
  await queue.persist([{ op: 'purge' }], true);
  return {};
}
