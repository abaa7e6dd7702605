import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { stackNameForStage } from '../../lib/config.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

/** The properties that give a resource of each type a name unique in the account and region. */
const PHYSICAL_NAME_PROPERTIES: Readonly<Record<string, readonly string[]>> = {
  'AWS::S3::Bucket': ['BucketName'],
  'AWS::DynamoDB::Table': ['TableName'],
  'AWS::SQS::Queue': ['QueueName'],
  'AWS::Logs::LogGroup': ['LogGroupName'],
  'AWS::KMS::Alias': ['AliasName'],
  'AWS::SecretsManager::Secret': ['Name'],
  'AWS::StepFunctions::StateMachine': ['StateMachineName'],
  'AWS::Lambda::Function': ['FunctionName'],
  'AWS::SNS::Topic': ['TopicName'],
  'AWS::CloudWatch::Alarm': ['AlarmName'],
  'AWS::IAM::Role': ['RoleName'],
  'AWS::IAM::ManagedPolicy': ['ManagedPolicyName'],
  'AWS::Events::Rule': ['Name'],
  'AWS::Events::EventBus': ['Name'],
  'AWS::Cognito::UserPool': ['UserPoolName'],
};

/**
 * Types whose resources have no account-wide name: their names (an inline policy's PolicyName) are
 * scoped to their parent, or they have none. A type in neither list fails the test, so a new kind
 * of resource gets looked at.
 */
const UNNAMED_TYPES = new Set([
  'AWS::IAM::Policy',
  'AWS::KMS::Key',
  'AWS::SQS::QueuePolicy',
  'AWS::S3::BucketPolicy',
  'AWS::SNS::TopicPolicy',
  'AWS::SNS::Subscription',
  'AWS::Lambda::EventSourceMapping',
  'AWS::Lambda::Permission',
  // A function URL's address is chosen by Lambda.
  'AWS::Lambda::Url',
  // A user pool's clients and groups are named within it; an HTTP API's name need not be unique,
  // and its stage, routes, integration and authorizers are named within it.
  'AWS::Cognito::UserPoolClient',
  'AWS::Cognito::UserPoolGroup',
  'AWS::ApiGatewayV2::Api',
  'AWS::ApiGatewayV2::Stage',
  'AWS::ApiGatewayV2::Route',
  'AWS::ApiGatewayV2::Integration',
  'AWS::ApiGatewayV2::Authorizer',
]);

interface Named {
  readonly resource: string;
  readonly type: string;
  readonly retained: boolean;
  readonly property: string;
  readonly value: unknown;
}

/** Both stages in one app, as one `cdk synth` would build them. */
function synthStages(...stages: string[]): CfnObject[] {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stacks = stages.map(
    (stage) => new DsrStack(app, stackNameForStage(stage), { config: { ...productionConfig, stage } }),
  );
  return stacks.map((stack) => Template.fromStack(stack).toJSON());
}

function namesOf(template: CfnObject): Named[] {
  const resources = template.Resources as Record<string, CfnObject>;
  const named: Named[] = [];
  for (const [
    resource,
    { Type: type, Properties: properties, DeletionPolicy, UpdateReplacePolicy },
  ] of Object.entries(resources)) {
    const nameProperties = PHYSICAL_NAME_PROPERTIES[type];
    if (nameProperties === undefined) {
      expect({ resource, type, known: UNNAMED_TYPES.has(type) }).toEqual({ resource, type, known: true });
      continue;
    }
    const retained = DeletionPolicy === 'Retain' || UpdateReplacePolicy === 'Retain';
    for (const property of nameProperties) {
      const value = properties?.[property];
      if (value !== undefined) named.push({ resource, type, retained, property, value });
    }
  }
  return named;
}

/** True when the value refers to something new on every stack creation (the stack id's GUID). */
function uniquePerCreation(value: unknown): boolean {
  return JSON.stringify(value).includes('"AWS::StackId"');
}

/** The name as text, intrinsics shown as `{...}` so two stacks' names can be compared. */
function render(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map(render).join(',');
  const join = (value as CfnObject)?.['Fn::Join'];
  if (Array.isArray(join)) return (join[1] as unknown[]).map(render).join(String(join[0]));
  return `{${JSON.stringify(value)}}`;
}

describe('physical names', () => {
  const [dev, prod] = synthStages('dev', 'prod') as [CfnObject, CfnObject];

  it('gives no retained resource a name that a stack created again after cdk destroy would collide with', () => {
    // Assess
    const fixed = namesOf(dev).filter((name) => name.retained && !uniquePerCreation(name.value));

    expect(fixed).toEqual([]);
  });

  it('names the workflow log group under /aws/vendedlogs/states/ with the stack name and its creation GUID', () => {
    // Assess
    const logGroups = namesOf(dev).filter((name) => name.type === 'AWS::Logs::LogGroup');

    expect(logGroups.map((name) => render(name.value))).toEqual([
      `/aws/vendedlogs/states/svc-dsr-dev-workflow-{${JSON.stringify({
        'Fn::Select': [2, { 'Fn::Split': ['/', { Ref: 'AWS::StackId' }] }],
      })}}`,
    ]);
  });

  it('catches a retained resource with a literal name', () => {
    // Prepare
    const retainedLiteral: CfnObject = {
      Resources: {
        Kept: { Type: 'AWS::SQS::Queue', DeletionPolicy: 'Retain', Properties: { QueueName: 'fixed' } },
      },
    };

    // Act / Assess
    expect(
      namesOf(retainedLiteral).filter((name) => name.retained && !uniquePerCreation(name.value)),
    ).toEqual([
      { resource: 'Kept', type: 'AWS::SQS::Queue', retained: true, property: 'QueueName', value: 'fixed' },
    ]);
  });

  it('shares no physical name between two stages synthesized in one app, and derives every name from the stack name', () => {
    // Assess
    const devNames = namesOf(dev).map((name) => render(name.value));
    const prodNames = namesOf(prod).map((name) => render(name.value));

    expect(devNames.filter((name) => prodNames.includes(name))).toEqual([]);
    for (const name of devNames) expect(name).toContain('svc-dsr-dev');
    for (const name of prodNames) expect(name).toContain('svc-dsr-prod');
  });
});

describe('stackNameForStage', () => {
  it('names the stack svc-dsr-<stage>', () => {
    // Act / Assess
    expect(stackNameForStage('dev')).toBe('svc-dsr-dev');
    expect(stackNameForStage('prod-eu')).toBe('svc-dsr-prod-eu');
  });
});
