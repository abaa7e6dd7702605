import { ExecutionAlreadyExists, SFNClient, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { sfnStarter, sqsQuarantine } from '../../../../lambdas/intake/aws.ts';

const sfnMock = mockClient(SFNClient);
const sqsMock = mockClient(SQSClient);

beforeEach(() => {
  sfnMock.reset();
  sqsMock.reset();
});

describe('sfnStarter', () => {
  it('starts the execution named by the request id with the state-safe input', async () => {
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec' });
    const start = sfnStarter(new SFNClient({}), 'arn:sm');
    const input = {
      request_id: '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f',
      type: 'access',
      regulation: 'gdpr',
    } as const;
    await expect(start(input.request_id, input)).resolves.toBe('started');
    expect(sfnMock).toHaveReceivedCommandWith(StartExecutionCommand, {
      stateMachineArn: 'arn:sm',
      name: input.request_id,
      input: JSON.stringify(input),
    });
  });

  it('treats an existing execution of that name as already started', async () => {
    sfnMock
      .on(StartExecutionCommand)
      .rejects(new ExecutionAlreadyExists({ message: 'exists', $metadata: {} }));
    const start = sfnStarter(new SFNClient({}), 'arn:sm');
    await expect(start('id', { request_id: 'id', type: 'access', regulation: 'gdpr' })).resolves.toBe(
      'already_exists',
    );
  });

  it('lets other failures through so the message returns to the queue', async () => {
    sfnMock.on(StartExecutionCommand).rejects(new Error('throttled'));
    const start = sfnStarter(new SFNClient({}), 'arn:sm');
    await expect(start('id', { request_id: 'id', type: 'access', regulation: 'gdpr' })).rejects.toThrow(
      'throttled',
    );
  });
});

describe('sqsQuarantine', () => {
  it('keeps the original body with the reason and request id as attributes', async () => {
    sqsMock.on(SendMessageCommand).resolves({});
    await sqsQuarantine(new SQSClient({}), 'https://q')('{"bad":1}', 'invalid request: type', 'req-1');
    expect(sqsMock).toHaveReceivedCommandWith(SendMessageCommand, {
      QueueUrl: 'https://q',
      MessageBody: '{"bad":1}',
      MessageAttributes: {
        reason: { DataType: 'String', StringValue: 'invalid request: type' },
        request_id: { DataType: 'String', StringValue: 'req-1' },
      },
    });
  });
});
