// Lambda's 4 KB environment limit, measured at synth with every resource name at its longest.
import { CfnResource, type Stack } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';

/**
 * Lambda refuses a function whose environment variables take more than 4 KB, measured as their
 * JSON ({"NAME":"value",...}, as its error quotes it), at deploy time, after CloudFormation has
 * put the names of the stack's resources in. Synth measures with every name at its longest.
 */
export const LAMBDA_ENVIRONMENT_LIMIT_BYTES = 4096;

/**
 * The longest of what a name or ARN is built from, for any account. Regions: the longest names
 * today are 14 characters (`ap-southeast-7`, `us-isob-east-1`, `eusc-de-east-1`); 16 leaves room.
 * Partitions: `aws-us-gov`. DNS suffixes: `amazonaws.com.cn`.
 */
export const LONGEST = {
  region: 16,
  partition: 'aws-us-gov'.length,
  dnsSuffix: 'amazonaws.com.cn'.length,
  account: 12,
  /** The random part CloudFormation appends to a name it generates (12 or 13 characters). */
  generatedSuffix: 13,
  /** The random part Secrets Manager appends to a secret's name in its ARN (`-` and 6 characters). */
  secretArnSuffix: 7,
  uuid: 36,
} as const;

/** Service limits on the names CloudFormation generates, which cut a longer generated name. */
const NAME_LIMITS: Readonly<Record<string, number>> = {
  'AWS::DynamoDB::Table': 255,
  'AWS::SQS::Queue': 80,
  'AWS::S3::Bucket': 63,
  'AWS::SecretsManager::Secret': 512,
};

/** One function's environment at its longest. */
export interface EnvironmentBudget {
  /** The function's path in the construct tree. */
  readonly path: string;
  readonly bytes: number;
  /** The variables by size, largest first. */
  readonly largest: readonly { readonly name: string; readonly bytes: number }[];
}

/** A value at its longest resolves to no string this model knows: the model needs the new kind. */
export class EnvironmentBudgetError extends Error {
  override readonly name = 'EnvironmentBudgetError';
}

/**
 * The environment of every Lambda function in `stack`, with each CloudFormation reference replaced
 * by the longest value it can take: generated names as stack name, logical id and random suffix
 * (cut at the service's limit), ARNs and URLs with the longest partition, region, account and DNS
 * suffix.
 */
export function environmentBudgets(stack: Stack): EnvironmentBudget[] {
  const resources = new Map<string, CfnResource>();
  for (const construct of stack.node.findAll()) {
    if (construct instanceof CfnResource) resources.set(stack.resolve(construct.logicalId), construct);
  }
  const budgets: EnvironmentBudget[] = [];
  for (const construct of stack.node.findAll()) {
    if (!(construct instanceof lambda.CfnFunction)) continue;
    const environment = stack.resolve(construct.environment) as
      | { variables?: Record<string, unknown> }
      | undefined;
    const longest: Record<string, string> = {};
    for (const [name, value] of Object.entries(environment?.variables ?? {})) {
      longest[name] = 'x'.repeat(
        longestLength(value, { stack, resources, where: `${construct.node.path} ${name}` }),
      );
    }
    budgets.push({
      path: construct.node.path,
      bytes: Buffer.byteLength(JSON.stringify(longest)),
      largest: Object.entries(longest)
        .map(([name, value]) => ({ name, bytes: Buffer.byteLength(JSON.stringify({ [name]: value })) - 2 }))
        .sort((a, b) => b.bytes - a.bytes),
    });
  }
  return budgets;
}

/** Synth errors, one per function whose environment may pass the limit: which, its size, the limit and the fix. */
export function environmentBudgetErrors(stack: Stack): string[] {
  return environmentBudgets(stack)
    .filter((budget) => budget.bytes > LAMBDA_ENVIRONMENT_LIMIT_BYTES)
    .map(
      (budget) =>
        `svc-dsr: the environment of ${budget.path} may take ${budget.bytes.toLocaleString('en-US')} bytes once CloudFormation puts in the resource names (each at its longest), ` +
        `above the ${LAMBDA_ENVIRONMENT_LIMIT_BYTES.toLocaleString('en-US')} bytes Lambda allows (largest: ${budget.largest
          .slice(0, 3)
          .map((entry) => `${entry.name} ${entry.bytes}`)
          .join(', ')}). ` +
        'Fix: shorten the settings it carries (the cdk.json values in the largest variables), or a shorter stage name; a variable the function does not need should not be bound.',
    );
}

interface Scope {
  readonly stack: Stack;
  readonly resources: ReadonlyMap<string, CfnResource>;
  readonly where: string;
}

/** The UTF-8 length of `value` (a resolved template value) at its longest, as it stands in JSON. */
function longestLength(value: unknown, scope: Scope): number {
  if (typeof value === 'string') return Buffer.byteLength(JSON.stringify(value)) - 2;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value).length;
  if (value === null || typeof value !== 'object') return unknownKind(value, scope);
  const entries = Object.entries(value);
  const [intrinsic, argument] = entries[0] ?? [];
  if (entries.length !== 1 || intrinsic === undefined) return unknownKind(value, scope);
  if (intrinsic === 'Ref' && typeof argument === 'string') return longestRef(argument, scope);
  if (intrinsic === 'Fn::GetAtt' && Array.isArray(argument)) {
    return longestAttribute(String(argument[0]), String(argument[1]), scope);
  }
  if (intrinsic === 'Fn::Join' && Array.isArray(argument) && Array.isArray(argument[1])) {
    const parts = argument[1] as unknown[];
    const separator = longestLength(argument[0], scope);
    return (
      parts.reduce<number>((sum, part) => sum + longestLength(part, scope), 0) +
      separator * Math.max(0, parts.length - 1)
    );
  }
  return unknownKind(value, scope);
}

function longestRef(target: string, scope: Scope): number {
  switch (target) {
    case 'AWS::Region':
      return LONGEST.region;
    case 'AWS::AccountId':
      return LONGEST.account;
    case 'AWS::Partition':
      return LONGEST.partition;
    case 'AWS::URLSuffix':
      return LONGEST.dnsSuffix;
    case 'AWS::StackName':
      return scope.stack.stackName.length;
  }
  const resource = scope.resources.get(target);
  if (resource === undefined) return unknownKind({ Ref: target }, scope);
  switch (resource.cfnResourceType) {
    case 'AWS::DynamoDB::Table':
    case 'AWS::S3::Bucket':
      return generatedName(target, resource, scope);
    case 'AWS::SQS::Queue':
      // https://sqs.<region>.<suffix>/<account>/<name>
      return (
        'https://sqs.'.length +
        LONGEST.region +
        1 +
        LONGEST.dnsSuffix +
        1 +
        LONGEST.account +
        1 +
        generatedName(target, resource, scope)
      );
    case 'AWS::SecretsManager::Secret':
      return (
        arn('secretsmanager', `secret:${'x'.repeat(generatedName(target, resource, scope))}`) +
        LONGEST.secretArnSuffix
      );
    case 'AWS::StepFunctions::StateMachine':
      return arn('states', `stateMachine:${'x'.repeat(explicitName(resource, 'stateMachineName', scope))}`);
  }
  return unknownKind({ Ref: target }, scope);
}

function longestAttribute(target: string, attribute: string, scope: Scope): number {
  const resource = scope.resources.get(target);
  if (resource === undefined) return unknownKind({ 'Fn::GetAtt': [target, attribute] }, scope);
  const type = resource.cfnResourceType;
  if (type === 'AWS::KMS::Key' && attribute === 'Arn') return arn('kms', `key/${'x'.repeat(LONGEST.uuid)}`);
  if (type === 'AWS::SQS::Queue' && attribute === 'Arn') {
    return arn('sqs', 'x'.repeat(generatedName(target, resource, scope)));
  }
  if (type === 'AWS::SQS::Queue' && attribute === 'QueueName') return generatedName(target, resource, scope);
  if (type === 'AWS::DynamoDB::Table' && attribute === 'Arn') {
    return arn('dynamodb', `table/${'x'.repeat(generatedName(target, resource, scope))}`);
  }
  if (type === 'AWS::Events::EventBus' && attribute === 'Arn') {
    return arn('events', `event-bus/${'x'.repeat(explicitName(resource, 'name', scope))}`);
  }
  return unknownKind({ 'Fn::GetAtt': [target, attribute] }, scope);
}

/** `arn:<partition>:<service>:<region>:<account>:<resource>` at its longest. */
function arn(service: string, resource: string): number {
  return `arn::${service}:::${resource}`.length + LONGEST.partition + LONGEST.region + LONGEST.account;
}

/** A name CloudFormation generates: `<stack>-<logical id>-<random>`, cut at the service's limit. */
function generatedName(logicalId: string, resource: CfnResource, scope: Scope): number {
  const limit = NAME_LIMITS[resource.cfnResourceType] ?? Number.POSITIVE_INFINITY;
  const given = explicitNameOrUndefined(resource, scope);
  if (given !== undefined) return given;
  // Some kinds (secrets) leave the stack's name out; counting it keeps the bound.
  return Math.min(limit, scope.stack.stackName.length + 1 + logicalId.length + 1 + LONGEST.generatedSuffix);
}

/** A name the template gives the resource itself (a state machine's, a bus's). */
function explicitName(resource: CfnResource, property: string, scope: Scope): number {
  const value = scope.stack.resolve(Reflect.get(resource, property));
  if (value === undefined) return unknownKind({ [property]: 'generated' }, scope);
  return longestLength(value, scope);
}

/** The name property of the resource kinds whose name CloudFormation generates when none is given. */
const NAME_PROPERTIES: Readonly<Record<string, string>> = {
  'AWS::DynamoDB::Table': 'tableName',
  'AWS::SQS::Queue': 'queueName',
  'AWS::S3::Bucket': 'bucketName',
  'AWS::SecretsManager::Secret': 'name',
};

function explicitNameOrUndefined(resource: CfnResource, scope: Scope): number | undefined {
  const property = NAME_PROPERTIES[resource.cfnResourceType];
  const value = property === undefined ? undefined : scope.stack.resolve(Reflect.get(resource, property));
  return value === undefined ? undefined : longestLength(value, scope);
}

function unknownKind(value: unknown, scope: Scope): never {
  throw new EnvironmentBudgetError(
    `svc-dsr: ${scope.where} holds ${JSON.stringify(value)}, whose longest value lib/environment-budget.ts cannot tell; add its kind there`,
  );
}
