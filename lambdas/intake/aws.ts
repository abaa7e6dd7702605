// Intake's AWS side: the SQS quarantine queue and starting Step Functions executions.
import { ExecutionAlreadyExists, type SFNClient, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { IntakeDeps } from './intake.ts';

/** Quarantine on SQS: the original body, with the reason (and request id) as message attributes. */
export function sqsQuarantine(sqs: SQSClient, queueUrl: string): IntakeDeps['quarantine'] {
  return async (body, reason, requestId) => {
    await sqs.send(
      new SendMessageCommand({
        QueueUrl: queueUrl,
        MessageBody: body,
        MessageAttributes: {
          reason: { DataType: 'String', StringValue: reason.slice(0, 1024) },
          ...(requestId ? { request_id: { DataType: 'String', StringValue: requestId } } : {}),
        },
      }),
    );
  };
}

/** StartExecution named by the request id; an existing execution of that name is fine. */
export function sfnStarter(sfn: SFNClient, stateMachineArn: string): IntakeDeps['startExecution'] {
  return async (name, input) => {
    try {
      await sfn.send(new StartExecutionCommand({ stateMachineArn, name, input: JSON.stringify(input) }));
      return 'started';
    } catch (error) {
      if (
        error instanceof ExecutionAlreadyExists ||
        (error instanceof Error && error.name === 'ExecutionAlreadyExists')
      ) {
        return 'already_exists';
      }
      throw error;
    }
  };
}
