/**
 * The state machine's direct service integrations, against the local stand-ins: DynamoDB UpdateItem
 * (the ledger write of the failure path) and SQS SendMessage (the export-slot waiters' queue).
 * Errors carry the names Step Functions gives them (`DynamoDB.<exception>`, `SQS.<exception>`),
 * so Retry and Catch match as in AWS. The calls are the state machine's, which the IAM proof
 * derives from the definition; they run as the local runtime.
 */
import { type AttributeValue, type DynamoDBClient, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { z } from 'zod';
import { CALLERS, runAsCaller } from '#shared/call-recorder';
import type { LocalIntegration } from './sfn-runner.ts';

/** The resource of Step Functions' direct DynamoDB UpdateItem integration. */
export const DYNAMODB_UPDATE_ITEM = 'arn:aws:states:::dynamodb:updateItem';

const attributeValue = z.custom<AttributeValue>(
  (value) => typeof value === 'object' && value !== null && Object.keys(value).length === 1,
  'expected a DynamoDB attribute value such as {"S": "text"}',
);
const updateItemParametersSchema = z.strictObject({
  TableName: z.string().min(1),
  Key: z.record(z.string(), attributeValue),
  UpdateExpression: z.string().optional(),
  ConditionExpression: z.string().optional(),
  ExpressionAttributeNames: z.record(z.string(), z.string()).optional(),
  ExpressionAttributeValues: z.record(z.string(), attributeValue).optional(),
});

/** The logical ids of the template's resources of one type. */
function resourcesOfType(template: Record<string, unknown>, type: string): Set<string> {
  const resources = z.record(z.string(), z.looseObject({ Type: z.string() })).parse(template.Resources ?? {});
  return new Set(
    Object.entries(resources)
      .filter(([, resource]) => resource.Type === type)
      .map(([logicalId]) => logicalId),
  );
}

/** The state machine's direct UpdateItem: the template's table (a Ref, its logical id once resolved) is the local `table`. */
export function dynamoUpdateItem(
  client: DynamoDBClient,
  template: Record<string, unknown>,
  table: string,
): LocalIntegration {
  const tables = resourcesOfType(template, 'AWS::DynamoDB::Table');
  return async (parameters) => {
    const parsed = updateItemParametersSchema.safeParse(parameters);
    if (!parsed.success) {
      throw Object.assign(new Error(`dynamodb:updateItem: ${z.prettifyError(parsed.error)}`), {
        name: 'States.Runtime',
      });
    }
    const { TableName, ...rest } = parsed.data;
    try {
      await runAsCaller(CALLERS.localRuntime, () =>
        client.send(
          new UpdateItemCommand({
            ...rest,
            TableName: tables.has(TableName) ? table : TableName,
          }),
        ),
      );
      return {};
    } catch (error) {
      const name = error instanceof Error ? error.name : 'Error';
      const message = error instanceof Error ? error.message : String(error);
      throw Object.assign(new Error(message), { name: `DynamoDB.${name}` });
    }
  };
}

/** The resource of Step Functions' SQS SendMessage integration. */
export const SQS_SEND_MESSAGE = 'arn:aws:states:::sqs:sendMessage';

const sendMessageParametersSchema = z.looseObject({
  QueueUrl: z.string().min(1),
  MessageBody: z.unknown().refine((body) => body !== undefined, 'MessageBody is required'),
  DelaySeconds: z.number().int().min(0).max(900).optional(),
});

/**
 * The state machine's SendMessage: a template queue (a Ref, its logical id once resolved) is the
 * local queue `queueUrls` gives for its construct id (the logical id without CDK's hash). A JSON
 * MessageBody is sent as its text, as Step Functions sends it.
 */
export function sqsSendMessage(
  client: SQSClient,
  template: Record<string, unknown>,
  queueUrls: Readonly<Record<string, string>>,
): LocalIntegration {
  const queues = resourcesOfType(template, 'AWS::SQS::Queue');
  const local = (queue: string) => {
    if (!queues.has(queue)) return queue;
    const url = queueUrls[queue.replace(/[0-9A-F]{8}$/, '')];
    if (url === undefined) {
      throw Object.assign(new Error(`sqs:sendMessage: the template queue ${queue} has no local queue`), {
        name: 'States.Runtime',
      });
    }
    return url;
  };
  return async (parameters) => {
    const parsed = sendMessageParametersSchema.safeParse(parameters);
    if (!parsed.success) {
      throw Object.assign(new Error(`sqs:sendMessage: ${z.prettifyError(parsed.error)}`), {
        name: 'States.Runtime',
      });
    }
    const { QueueUrl, MessageBody, DelaySeconds } = parsed.data;
    try {
      const answer = await runAsCaller(CALLERS.localRuntime, () =>
        client.send(
          new SendMessageCommand({
            QueueUrl: local(QueueUrl),
            MessageBody: typeof MessageBody === 'string' ? MessageBody : JSON.stringify(MessageBody),
            ...(DelaySeconds === undefined ? {} : { DelaySeconds }),
          }),
        ),
      );
      return { MessageId: answer.MessageId, MD5OfMessageBody: answer.MD5OfMessageBody };
    } catch (error) {
      if (error instanceof Error && error.name === 'States.Runtime') throw error;
      const name = error instanceof Error ? error.name : 'Error';
      const message = error instanceof Error ? error.message : String(error);
      throw Object.assign(new Error(message), { name: `SQS.${name}` });
    }
  };
}
