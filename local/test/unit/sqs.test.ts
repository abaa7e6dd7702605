import { appendFile, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type DiskSqs, startDiskSqs } from '#local/aws/sqs/server';

let root: string;
const running: { server: DiskSqs; client: SQSClient }[] = [];

async function start(): Promise<SQSClient> {
  const server = await startDiskSqs({ root });
  const client = new SQSClient({
    region: 'us-east-1',
    endpoint: server.endpoint,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  running.push({ server, client });
  return client;
}

/** Stops the running server, as a restart of local mode would, and starts a new one on the same root. */
async function restart(): Promise<SQSClient> {
  for (const { server, client } of running.splice(0)) {
    client.destroy();
    await server.close();
  }
  return start();
}

async function queueUrl(sqs: SQSClient, name: string): Promise<string> {
  const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: name }));
  if (QueueUrl === undefined) throw new Error(`no URL for ${name}`);
  return QueueUrl;
}

async function count(sqs: SQSClient, QueueUrl: string | undefined): Promise<number> {
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }),
  );
  return Number(Attributes?.ApproximateNumberOfMessages);
}

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'svc-dsr-sqs-disk-'));
});

afterEach(async () => {
  for (const { server, client } of running.splice(0)) {
    client.destroy();
    await server.close();
  }
  await rm(root, { recursive: true, force: true });
});

describe('startDiskSqs with a root', () => {
  it('keeps every message it acknowledged across a restart, bodies intact (the SDK checks each MD5)', async () => {
    // Prepare
    let sqs = await start();
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'intake' }));
    const bodies = Array.from({ length: 25 }, (_, index) => `{"line":${index},"name":"😀 ${index}"}`);

    // Act
    for (let start = 0; start < bodies.length; start += 10) {
      await sqs.send(
        new SendMessageBatchCommand({
          QueueUrl,
          Entries: bodies
            .slice(start, start + 10)
            .map((body, index) => ({ Id: String(index), MessageBody: body })),
        }),
      );
    }
    sqs = await restart();
    const received: string[] = [];
    for (let batch = 0; batch < 5; batch += 1) {
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({ QueueUrl: await queueUrl(sqs, 'intake'), MaxNumberOfMessages: 10 }),
      );
      received.push(...Messages.map((message) => message.Body ?? ''));
    }

    // Assess
    expect(received.sort()).toEqual([...bodies].sort());
  });

  it('never brings back a deleted message, and makes a received one visible again after a restart', async () => {
    // Prepare
    let sqs = await start();
    const { QueueUrl } = await sqs.send(
      new CreateQueueCommand({ QueueName: 'work', Attributes: { VisibilityTimeout: '600' } }),
    );
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl,
        Entries: ['deleted', 'in-flight', 'waiting'].map((body) => ({ Id: body, MessageBody: body })),
      }),
    );
    const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 2 }));
    const deleted = Messages.find((message) => message.Body === 'deleted');
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl,
        Entries: [{ Id: '1', ReceiptHandle: deleted?.ReceiptHandle }],
      }),
    );
    expect(await count(sqs, QueueUrl)).toBe(1);

    // Act
    sqs = await restart();
    const after = await sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ['All'] }),
    );

    // Assess
    const byBody = new Map((after.Messages ?? []).map((message) => [message.Body, message]));
    expect([...byBody.keys()].sort()).toEqual(['in-flight', 'waiting']);
    expect(byBody.get('in-flight')?.Attributes?.ApproximateReceiveCount).toBe('2');
    expect(byBody.get('waiting')?.Attributes?.ApproximateReceiveCount).toBe('1');
  });

  it("blanks a deleted or purged message's body in the journal at once, and keeps the others whole across a restart", async () => {
    // Prepare: bodies as intake gets them, with escapes and characters of several bytes
    let sqs = await start();
    const { QueueUrl } = await sqs.send(
      new CreateQueueCommand({ QueueName: 'keys', Attributes: { VisibilityTimeout: '600' } }),
    );
    const body = (key: string) => JSON.stringify({ primary_key: key, note: 'quote " backslash \\ tab \t' });
    const keys = ['u-deleted-one-😀', 'u-deleted-two-é', 'u-kept-ü'];
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl,
        Entries: keys.map((key, index) => ({ Id: String(index), MessageBody: body(key) })),
      }),
    );
    const { Messages = [] } = await sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10 }),
    );
    const receiptOf = (key: string) => Messages.find((message) => message.Body === body(key))?.ReceiptHandle;
    const journal = () => readFile(join(root, 'keys', 'journal.jsonl'), 'utf8');

    // Act
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl,
        Entries: [
          { Id: 'a', ReceiptHandle: receiptOf('u-deleted-one-😀') },
          { Id: 'b', ReceiptHandle: receiptOf('u-deleted-two-é') },
        ],
      }),
    );
    const afterDelete = await journal();

    // Assess: gone from the file as soon as the delete is answered, the kept one still there
    expect(afterDelete).not.toContain('u-deleted-one');
    expect(afterDelete).not.toContain('u-deleted-two');
    expect(afterDelete).toContain('u-kept-ü');
    sqs = await restart();
    const after = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10 }));
    expect((after.Messages ?? []).map((message) => message.Body)).toEqual([body('u-kept-ü')]);

    // Act: a purge ends the kept one too
    await sqs.send(new PurgeQueueCommand({ QueueUrl }));
    // Assess
    expect(await journal()).not.toContain('u-kept');
  });

  it('keeps what the dead-letter queue holds, and counts receives from before a restart toward the redrive', async () => {
    // Prepare
    let sqs = await start();
    const { QueueUrl: dlqUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'dlq' }));
    const { Attributes } = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: dlqUrl, AttributeNames: ['QueueArn'] }),
    );
    const { QueueUrl } = await sqs.send(
      new CreateQueueCommand({
        QueueName: 'source',
        Attributes: {
          VisibilityTimeout: '0',
          RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes?.QueueArn, maxReceiveCount: 2 }),
        },
      }),
    );
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'poison-1' }));
    for (let attempt = 0; attempt < 3; attempt += 1) await sqs.send(new ReceiveMessageCommand({ QueueUrl }));
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'poison-2' }));
    await sqs.send(new ReceiveMessageCommand({ QueueUrl }));
    await sqs.send(new ReceiveMessageCommand({ QueueUrl }));

    // Act
    sqs = await restart();
    const third = await sqs.send(new ReceiveMessageCommand({ QueueUrl }));
    const dead = await sqs.send(new ReceiveMessageCommand({ QueueUrl: dlqUrl, MaxNumberOfMessages: 10 }));

    // Assess: poison-1 was in the DLQ before the restart; poison-2's third receive moves it there
    expect(third.Messages ?? []).toHaveLength(0);
    expect((dead.Messages ?? []).map((message) => message.Body).sort()).toEqual(['poison-1', 'poison-2']);
  });

  it('keeps message attributes and answers their MD5 as SQS computes it', async () => {
    // Prepare
    let sqs = await start();
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'quarantine' }));
    const sent = await sqs.send(
      new SendMessageCommand({
        QueueUrl,
        MessageBody: 'not json',
        MessageAttributes: { reason: { DataType: 'String', StringValue: 'not_json' } },
      }),
    );

    // Act
    sqs = await restart();
    const { Messages = [] } = await sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MessageAttributeNames: ['All'] }),
    );

    // Assess: the same digest on the send and after the restart
    expect(Messages[0]?.MessageAttributes?.reason?.StringValue).toBe('not_json');
    expect(Messages[0]?.MD5OfMessageAttributes).toBe(sent.MD5OfMessageAttributes);
    expect(sent.MD5OfMessageAttributes).toMatch(/^[0-9a-f]{32}$/);
  });

  it('compacts the journal at start to the live messages only, and clears what a cut-short compaction left', async () => {
    // Prepare
    let sqs = await start();
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'compact' }));
    for (let index = 0; index < 5; index += 1) {
      await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: `m-${index}` }));
    }
    const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 4 }));
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl,
        Entries: Messages.map((message, index) => ({
          Id: String(index),
          ReceiptHandle: message.ReceiptHandle,
        })),
      }),
    );

    // A compaction that a kill cut short leaves its temporary file behind
    await writeFile(join(root, 'compact', 'journal.jsonl.0badf00d.tmp'), '{"op":"send"');

    // Act
    sqs = await restart();

    // Assess
    const journal = await readFile(join(root, 'compact', 'journal.jsonl'), 'utf8');
    expect(journal.trim().split('\n')).toHaveLength(1);
    expect(await readdir(join(root, 'compact'))).toEqual(['journal.jsonl', 'queue.json']);
    expect(await count(sqs, QueueUrl)).toBe(1);
  });

  it('ignores a last journal line cut short by a kill, and names a damaged journal otherwise', async () => {
    // Prepare
    let sqs = await start();
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'torn' }));
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'kept' }));
    for (const { server, client } of running.splice(0)) {
      client.destroy();
      await server.close();
    }
    const journal = join(root, 'torn', 'journal.jsonl');
    await appendFile(journal, '{"op":"send","id":"cut-sh');

    // Act
    sqs = await start();

    // Assess
    expect(await count(sqs, QueueUrl)).toBe(1);
    for (const { server, client } of running.splice(0)) {
      client.destroy();
      await server.close();
    }
    await appendFile(journal, 'not a record\n{"op":"purge"}\n');
    await expect(startDiskSqs({ root })).rejects.toThrow(/journal.*torn.*damaged at line 2/);
  });

  it('answers SQS errors the SDK recognises, and empties a queue on PurgeQueue for good', async () => {
    // Prepare
    let sqs = await start();
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'purged' }));
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'gone' }));

    // Act
    await sqs.send(new PurgeQueueCommand({ QueueUrl }));
    sqs = await restart();

    // Assess
    expect(await count(sqs, QueueUrl)).toBe(0);
    await expect(sqs.send(new GetQueueUrlCommand({ QueueName: 'missing' }))).rejects.toMatchObject({
      name: 'QueueDoesNotExist',
    });
    await expect(
      sqs.send(
        new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle: 'nonsense', VisibilityTimeout: 0 }),
      ),
    ).rejects.toMatchObject({ name: 'ReceiptHandleIsInvalid' });
  });
});
