import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type DiskSqs, startDiskSqs } from '#local/aws/sqs/server';
import { ExportWaiters } from '#shared/export-waiters';

let root: string;
let server: DiskSqs;
let sqs: SQSClient;
let queueUrl: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'svc-dsr-waiters-'));
  server = await startDiskSqs({ root });
  sqs = new SQSClient({
    region: 'us-east-1',
    endpoint: server.endpoint,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  const created = await sqs.send(new CreateQueueCommand({ QueueName: 'waiters' }));
  queueUrl = created.QueueUrl ?? '';
});

afterEach(async () => {
  sqs.destroy();
  await server.close();
  await rm(root, { recursive: true, force: true });
});

/** A waiter's message, as the state machine sends it. */
const wait = (token: string, waitSeconds: number, requestId = `request-of-${token}`) =>
  sqs.send(
    new SendMessageCommand({
      QueueUrl: queueUrl,
      MessageBody: JSON.stringify({ token, request_id: requestId, wait_seconds: waitSeconds }),
    }),
  );

/** Messages left in the queue, visible or taken. */
async function left(): Promise<number> {
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return (
    Number(Attributes?.ApproximateNumberOfMessages) +
    Number(Attributes?.ApproximateNumberOfMessagesNotVisible)
  );
}

function named(name: string): Error {
  return Object.assign(new Error(name), { name });
}

function waiters(succeed: (token: string) => Promise<void>, options: { now?: () => number } = {}) {
  const warnings: string[] = [];
  const queue = new ExportWaiters(sqs, queueUrl, succeed, {
    logger: {
      warn: (message, attributes) => warnings.push(`${message} ${JSON.stringify(attributes ?? {})}`),
    },
    ...options,
  });
  return { queue, warnings };
}

describe('ExportWaiters', () => {
  it('gives the oldest waiting request, and answers its token once asked, deleting its message', async () => {
    await wait('token-a', 60, 'request-a');
    await wait('token-b', 60, 'request-b');
    const answered: string[] = [];
    const { queue } = waiters(async (token) => {
      answered.push(token);
    });

    const first = await queue.take();
    expect(first?.requestId).toBe('request-a');
    // Taken, not yet answered: hidden from other releasers, still in the queue.
    expect(answered).toEqual([]);
    expect(await left()).toBe(2);
    await expect(first?.answer()).resolves.toBe('woken');
    expect(answered).toEqual(['token-a']);
    expect(await left()).toBe(1);
    const second = await queue.take();
    expect(second?.requestId).toBe('request-b');
    await expect(second?.answer()).resolves.toBe('woken');
    expect(await left()).toBe(0);
  });

  it('leaves the waiters after the one taken to the next release at once, not after a visibility timeout', async () => {
    await wait('token-a', 60, 'request-a');
    await wait('token-b', 60, 'request-b');
    await wait('token-c', 60, 'request-c');
    const { queue } = waiters(async () => {});

    // Two releases at once: each takes its own waiter, oldest first.
    expect((await queue.take())?.requestId).toBe('request-a');
    expect((await queue.take())?.requestId).toBe('request-b');
    expect((await queue.take())?.requestId).toBe('request-c');
    await expect(queue.take()).resolves.toBeUndefined();
  });

  it('looks past a long run of stale messages, as waiters that timed out leave behind', async () => {
    for (let stale = 0; stale < 25; stale++) await wait(`token-stale-${stale}`, 5);
    await wait('token-live', 3600, 'request-live');
    const { queue } = waiters(async () => {}, { now: () => Date.now() + 60_000 });

    expect((await queue.take())?.requestId).toBe('request-live');
    expect(await left()).toBe(1);
  });

  it('gives no one when no one waits', async () => {
    const { queue } = waiters(async () => {});
    await expect(queue.take()).resolves.toBeUndefined();
  });

  it('deletes waiters past their wait, and unreadable messages, on the way to a live one', async () => {
    await wait('token-old', 5);
    await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'not a waiter' }));
    await sqs.send(
      new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify({ token: 'no request id' }) }),
    );
    await wait('token-live', 3600, 'request-live');
    // A minute on: the 5 s waiter has timed out; the hour-long one still waits.
    const { queue, warnings } = waiters(async () => {}, { now: () => Date.now() + 60_000 });

    const waiter = await queue.take();
    expect(waiter?.requestId).toBe('request-live');
    expect(await left()).toBe(1);
    expect(warnings.filter((line) => line.includes('not one was dropped'))).toHaveLength(2);
    expect(warnings.join('\n')).not.toContain('no request id');
  });

  it('tells a waiter that timed out from one whose execution has ended, and deletes both messages', async () => {
    await wait('token-timed-out', 60);
    await wait('token-ended', 60);
    await wait('token-never', 60);
    const { queue } = waiters(async (token) => {
      if (token === 'token-timed-out') throw named('TaskTimedOut');
      if (token === 'token-ended') throw named('TaskDoesNotExist');
      throw named('InvalidToken');
    });

    await expect((await queue.take())?.answer()).resolves.toBe('timed_out');
    await expect((await queue.take())?.answer()).resolves.toBe('ended');
    await expect((await queue.take())?.answer()).resolves.toBe('ended');
    expect(await left()).toBe(0);
  });

  it('never throws: a throttled SendTaskSuccess keeps the message for later, logged without the token', async () => {
    await wait('token-secret-value', 60);
    const { queue, warnings } = waiters(async () => {
      throw named('ThrottlingException');
    });

    await expect((await queue.take())?.answer()).resolves.toBe('unanswered');
    // The message stays (hidden for its visibility timeout), so the waiter may still be answered.
    expect(await left()).toBe(1);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('ThrottlingException');
    expect(warnings[0]).not.toContain('token-secret-value');
  });

  it('never throws when the queue itself cannot be read: there is no one to give', async () => {
    const warnings: string[] = [];
    const broken = new ExportWaiters(sqs, `${queueUrl}-missing`, async () => {}, {
      logger: { warn: (message) => warnings.push(message) },
    });
    await expect(broken.take()).resolves.toBeUndefined();
    expect(warnings).toHaveLength(1);
  });
});
