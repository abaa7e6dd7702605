import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DiskSqs, startDiskSqs } from '#local/aws/sqs/server';

let sqs: DiskSqs;
let queueUrl: string;

/** One query-protocol call, form-encoded as aws-cli 2.x and the older SDKs send it. */
async function query(params: Record<string, string>): Promise<{ status: number; body: string }> {
  const answer = await fetch(sqs.endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' },
    body: new URLSearchParams({ ...params, Version: '2012-11-05' }).toString(),
  });
  return { status: answer.status, body: await answer.text() };
}

/** Every text of the elements named `name`, in order. */
function texts(xml: string, name: string): string[] {
  return [...xml.matchAll(new RegExp(`<${name}>([^<]*)</${name}>`, 'g'))].map((match) =>
    (match[1] ?? '')
      .replaceAll('&lt;', '<')
      .replaceAll('&gt;', '>')
      .replaceAll('&quot;', '"')
      .replaceAll('&apos;', "'")
      .replaceAll('&amp;', '&'),
  );
}

beforeAll(async () => {
  sqs = await startDiskSqs();
  const created = await query({
    Action: 'CreateQueue',
    QueueName: 'intake',
    'Attribute.1.Name': 'VisibilityTimeout',
    'Attribute.1.Value': '7',
  });
  queueUrl = texts(created.body, 'QueueUrl')[0] ?? '';
});

afterAll(async () => {
  await sqs.close();
});

describe('the SQS query protocol', () => {
  it('creates a queue with attributes and lists them as Attribute name and value pairs', async () => {
    // Act
    const answer = await query({
      Action: 'GetQueueAttributes',
      QueueUrl: queueUrl,
      'AttributeName.1': 'All',
    });

    // Assess
    expect(answer.status).toBe(200);
    expect(answer.body).toContain('<GetQueueAttributesResponse');
    expect(answer.body).toContain('<Attribute><Name>VisibilityTimeout</Name><Value>7</Value></Attribute>');
    expect(queueUrl).toMatch(/\/000000000000\/intake$/);
  });

  it('sends a message with an attribute and receives it back as XML, body and attribute intact', async () => {
    // Prepare
    const body = '{"request_id":"r-1","note":"<é 😀 &>"}';
    const sent = await query({
      Action: 'SendMessage',
      QueueUrl: queueUrl,
      MessageBody: body,
      'MessageAttribute.1.Name': 'source',
      'MessageAttribute.1.Value.DataType': 'String',
      'MessageAttribute.1.Value.StringValue': 'cli',
    });

    // Act
    const received = await query({
      Action: 'ReceiveMessage',
      QueueUrl: queueUrl,
      MaxNumberOfMessages: '10',
      'AttributeName.1': 'All',
      'MessageAttributeName.1': 'All',
    });

    // Assess
    expect(sent.status).toBe(200);
    expect(texts(sent.body, 'MessageId')).toHaveLength(1);
    expect(texts(received.body, 'Body')).toEqual([body]);
    expect(texts(received.body, 'MessageId')).toEqual(texts(sent.body, 'MessageId'));
    expect(received.body).toMatch(
      /<MessageAttribute><Name>source<\/Name><Value>(<StringValue>cli<\/StringValue>|<DataType>String<\/DataType>){2}<\/Value><\/MessageAttribute>/,
    );
    expect(received.body).toContain(
      '<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>',
    );
    const [handle = ''] = texts(received.body, 'ReceiptHandle');
    const deleted = await query({
      Action: 'DeleteMessageBatch',
      QueueUrl: queueUrl,
      'DeleteMessageBatchRequestEntry.1.Id': 'one',
      'DeleteMessageBatchRequestEntry.1.ReceiptHandle': handle,
    });
    expect(texts(deleted.body, 'Id')).toEqual(['one']);
    expect(deleted.body).toContain(
      '<DeleteMessageBatchResultEntry><Id>one</Id></DeleteMessageBatchResultEntry>',
    );
  });

  it('sends a batch, one SendMessageBatchResultEntry per message', async () => {
    // Act
    const answer = await query({
      Action: 'SendMessageBatch',
      QueueUrl: queueUrl,
      'SendMessageBatchRequestEntry.1.Id': 'a',
      'SendMessageBatchRequestEntry.1.MessageBody': 'one',
      'SendMessageBatchRequestEntry.2.Id': 'b',
      'SendMessageBatchRequestEntry.2.MessageBody': 'two',
      'SendMessageBatchRequestEntry.2.DelaySeconds': '0',
    });

    // Assess
    expect(answer.status).toBe(200);
    expect(texts(answer.body, 'Id')).toEqual(['a', 'b']);
    expect(answer.body.match(/<SendMessageBatchResultEntry>/g)).toHaveLength(2);
  });

  it('answers errors as an ErrorResponse with the query error code', async () => {
    // Act
    const missing = await query({ Action: 'GetQueueUrl', QueueName: 'nope' });
    const unknown = await query({ Action: 'Frobnicate' });

    // Assess
    expect(missing.status).toBe(400);
    expect(texts(missing.body, 'Code')).toEqual(['AWS.SimpleQueueService.NonExistentQueue']);
    expect(texts(missing.body, 'Type')).toEqual(['Sender']);
    expect(texts(unknown.body, 'Code')).toEqual(['InvalidAction']);
  });
});
