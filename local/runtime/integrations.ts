/**
 * The state machine's direct service integrations, against the local stand-ins: DynamoDB UpdateItem
 * (the ledger write of the failure path) and the AWS SDK's DynamoDB UpdateItem (an export-slot
 * waiter's token, in the gate table). Errors carry the names Step Functions gives them
 * (`DynamoDB.<exception>`, `DynamoDb.<exception>`),
 * so Retry and Catch match as in AWS. The calls are the state machine's, which the IAM proof
 * derives from the definition; they run as the local runtime.
 */
import { type AttributeValue, type DynamoDBClient, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { z } from 'zod';
import { CALLERS, runAsCaller } from '../../lambdas/shared/call-recorder.ts';
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

/** The resource of Step Functions' AWS SDK integration for DynamoDB UpdateItem (without `.waitForTaskToken`). */
export const SDK_DYNAMODB_UPDATE_ITEM = 'arn:aws:states:::aws-sdk:dynamodb:updateItem';

/**
 * The state machine's UpdateItem through the AWS SDK integration (the export-slot waiter's token):
 * a template table (a Ref, its logical id once resolved) is the local table `tables` gives for its
 * construct id (the logical id without CDK's hash). Errors are named `DynamoDb.<exception>`, as
 * Step Functions names an AWS SDK integration's.
 */
export function sdkDynamoUpdateItem(
  client: DynamoDBClient,
  template: Record<string, unknown>,
  tables: Readonly<Record<string, string>>,
): LocalIntegration {
  const templateTables = resourcesOfType(template, 'AWS::DynamoDB::Table');
  const local = (table: string) => {
    if (!templateTables.has(table)) return table;
    const name = tables[table.replace(/[0-9A-F]{8}$/, '')];
    if (name === undefined) {
      throw Object.assign(new Error(`dynamodb:updateItem: the template table ${table} has no local table`), {
        name: 'States.Runtime',
      });
    }
    return name;
  };
  return async (parameters) => {
    const parsed = updateItemParametersSchema.safeParse(parameters);
    if (!parsed.success) {
      throw Object.assign(new Error(`dynamodb:updateItem: ${z.prettifyError(parsed.error)}`), {
        name: 'States.Runtime',
      });
    }
    const { TableName, ...rest } = parsed.data;
    const table = local(TableName);
    try {
      await runAsCaller(CALLERS.localRuntime, () =>
        client.send(new UpdateItemCommand({ ...rest, TableName: table })),
      );
      return {};
    } catch (error) {
      const name = error instanceof Error ? error.name : 'Error';
      const message = error instanceof Error ? error.message : String(error);
      throw Object.assign(new Error(message), { name: `DynamoDb.${name}` });
    }
  };
}
