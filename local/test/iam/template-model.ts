/**
 * A synthesized CloudFormation template as AWS would deploy it into one fake account and region:
 * every intrinsic (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split) resolved to the
 * name or ARN AWS would assign, and the policies that decide each call (a role's identity policies,
 * the resource policy of a bucket, queue, topic, key, function or role) found by what they attach to.
 */

export const ACCOUNT = '111122223333';
export const REGION = 'eu-west-1';
export const PARTITION = 'aws';

type Json = unknown;
export interface PolicyDocument {
  readonly Version?: string;
  readonly Statement: Statement[];
}
export interface Statement {
  Sid?: string;
  Effect: 'Allow' | 'Deny';
  Principal?: Json;
  Action?: string | string[];
  NotAction?: string | string[];
  Resource?: string | string[];
  Condition?: Record<string, Record<string, string | string[]>>;
}
interface Resource {
  readonly Type: string;
  readonly Properties?: Record<string, Json>;
}

/** Attributes and Ref values per resource type, from the physical name AWS would give it. */
function physicalId(stackName: string, logicalId: string, resource: Resource): string {
  const explicit = explicitName(resource);
  if (explicit !== undefined) return explicit;
  const suffix = pseudoRandom(logicalId, 12).toUpperCase();
  const base = `${stackName}-${logicalId}`.slice(0, 40);
  return resource.Type === 'AWS::S3::Bucket' ? `${base}-${suffix}`.toLowerCase() : `${base}-${suffix}`;
}

const NAME_PROPERTY: Readonly<Record<string, string>> = {
  'AWS::S3::Bucket': 'BucketName',
  'AWS::SQS::Queue': 'QueueName',
  'AWS::DynamoDB::Table': 'TableName',
  'AWS::Lambda::Function': 'FunctionName',
  'AWS::IAM::Role': 'RoleName',
  'AWS::IAM::ManagedPolicy': 'ManagedPolicyName',
  'AWS::Logs::LogGroup': 'LogGroupName',
  'AWS::StepFunctions::StateMachine': 'StateMachineName',
  'AWS::SNS::Topic': 'TopicName',
  'AWS::SecretsManager::Secret': 'Name',
  'AWS::Events::Rule': 'Name',
  'AWS::Events::EventBus': 'Name',
};

let resolvingTemplate: TemplateModel | undefined;
function explicitName(resource: Resource): string | undefined {
  const property = NAME_PROPERTY[resource.Type];
  const value = property === undefined ? undefined : resource.Properties?.[property];
  if (value === undefined || resolvingTemplate === undefined) return undefined;
  const resolved = resolvingTemplate.resolve(value);
  return typeof resolved === 'string' ? resolved : undefined;
}

/** Deterministic hex from a seed, so names are stable across runs. */
function pseudoRandom(seed: string, length: number): string {
  let hash = 2166136261;
  let out = '';
  while (out.length < length) {
    for (const char of `${seed}${out.length}`) hash = Math.imul(hash ^ char.charCodeAt(0), 16777619) >>> 0;
    out += hash.toString(16).padStart(8, '0');
  }
  return out.slice(0, length);
}

export class TemplateModel {
  readonly resources: Readonly<Record<string, Resource>>;
  readonly stackName: string;
  readonly #names = new Map<string, string>();

  constructor(template: Record<string, Json>, stackName: string) {
    this.resources = (template.Resources ?? {}) as Record<string, Resource>;
    this.stackName = stackName;
    this.outputsRaw = (template.Outputs ?? {}) as Record<string, { Value: Json }>;
  }
  readonly outputsRaw: Record<string, { Value: Json }>;

  /** The logical ids of resources of a type. */
  ofType(type: string): string[] {
    return Object.entries(this.resources)
      .filter(([, resource]) => resource.Type === type)
      .map(([id]) => id);
  }

  properties(logicalId: string): Record<string, Json> {
    return this.resource(logicalId).Properties ?? {};
  }

  resource(logicalId: string): Resource {
    const resource = this.resources[logicalId];
    if (resource === undefined) throw new Error(`the template has no resource ${logicalId}`);
    return resource;
  }

  /** The stack's outputs, resolved. */
  outputs(): Record<string, string> {
    const outputs: Record<string, string> = {};
    for (const [name, output] of Object.entries(this.outputsRaw))
      outputs[name] = String(this.resolve(output.Value));
    return outputs;
  }

  name(logicalId: string): string {
    let name = this.#names.get(logicalId);
    if (name === undefined) {
      const previous = resolvingTemplate;
      resolvingTemplate = this;
      try {
        name = physicalId(this.stackName, logicalId, this.resource(logicalId));
      } finally {
        resolvingTemplate = previous;
      }
      this.#names.set(logicalId, name);
    }
    return name;
  }

  arn(service: string, resource: string, region = REGION, account = ACCOUNT): string {
    return `arn:${PARTITION}:${service}:${region}:${account}:${resource}`;
  }

  /** What `Ref` of a resource answers, by type. */
  ref(logicalId: string): string {
    const pseudo: Record<string, string> = {
      'AWS::AccountId': ACCOUNT,
      'AWS::Region': REGION,
      'AWS::Partition': PARTITION,
      'AWS::URLSuffix': 'amazonaws.com',
      'AWS::StackName': this.stackName,
      'AWS::StackId': this.arn(
        'cloudformation',
        `stack/${this.stackName}/0a1b2c3d-4e5f-6789-abcd-ef0123456789`,
      ),
      'AWS::NoValue': '',
    };
    const value = pseudo[logicalId];
    if (value !== undefined) return value;
    const { Type } = this.resource(logicalId);
    const name = this.name(logicalId);
    switch (Type) {
      case 'AWS::SQS::Queue':
        return `https://sqs.${REGION}.amazonaws.com/${ACCOUNT}/${name}`;
      case 'AWS::StepFunctions::StateMachine':
      case 'AWS::SNS::Topic':
      case 'AWS::SecretsManager::Secret':
      case 'AWS::IAM::ManagedPolicy':
        return this.getAtt(logicalId, 'Arn');
      case 'AWS::KMS::Key':
        return this.keyId(logicalId);
      case 'AWS::ApiGatewayV2::Api':
        return pseudoRandom(logicalId, 10);
      case 'AWS::Cognito::UserPool':
        return `${REGION}_${pseudoRandom(logicalId, 9)}`;
      default:
        return name;
    }
  }

  keyId(logicalId: string): string {
    const hex = pseudoRandom(logicalId, 32);
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
  }

  /** What `Fn::GetAtt` of a resource answers. */
  getAtt(logicalId: string, attribute: string): string {
    const { Type } = this.resource(logicalId);
    const name = this.name(logicalId);
    const key = `${Type}.${attribute}`;
    switch (key) {
      case 'AWS::S3::Bucket.Arn':
        return `arn:${PARTITION}:s3:::${name}`;
      case 'AWS::S3::Bucket.RegionalDomainName':
        return `${name}.s3.${REGION}.amazonaws.com`;
      case 'AWS::SQS::Queue.Arn':
        return this.arn('sqs', name);
      case 'AWS::SQS::Queue.QueueName':
        return name;
      case 'AWS::SQS::Queue.QueueUrl':
        return this.ref(logicalId);
      case 'AWS::DynamoDB::Table.Arn':
        return this.arn('dynamodb', `table/${name}`);
      case 'AWS::DynamoDB::Table.StreamArn':
        // A stream's label is the time it was enabled: any fixed one stands for it here.
        return this.arn('dynamodb', `table/${name}/stream/2026-01-01T00:00:00.000`);
      case 'AWS::KMS::Key.Arn':
        return this.arn('kms', `key/${this.keyId(logicalId)}`);
      case 'AWS::IAM::Role.Arn':
        return `arn:${PARTITION}:iam::${ACCOUNT}:role/${name}`;
      case 'AWS::IAM::ManagedPolicy.Arn':
      case 'AWS::IAM::ManagedPolicy.PolicyArn':
        return `arn:${PARTITION}:iam::${ACCOUNT}:policy/${name}`;
      case 'AWS::Lambda::Function.Arn':
        return this.arn('lambda', `function:${name}`);
      case 'AWS::Lambda::Url.FunctionUrl':
        return `https://${pseudoRandom(logicalId, 32)}.lambda-url.${REGION}.on.aws/`;
      case 'AWS::Logs::LogGroup.Arn':
        return this.arn('logs', `log-group:${name}:*`);
      case 'AWS::StepFunctions::StateMachine.Arn':
        return this.arn('states', `stateMachine:${name}`);
      case 'AWS::StepFunctions::StateMachine.Name':
        return name;
      case 'AWS::SNS::Topic.TopicArn':
      case 'AWS::SNS::Topic.Arn':
        return this.arn('sns', name);
      case 'AWS::SNS::Topic.TopicName':
        return name;
      case 'AWS::SecretsManager::Secret.Arn':
      case 'AWS::SecretsManager::Secret.Id':
        return this.arn('secretsmanager', `secret:${name}-${pseudoRandom(logicalId, 6)}`);
      case 'AWS::Events::Rule.Arn':
        return this.arn('events', `rule/${name}`);
      case 'AWS::Events::EventBus.Arn':
        return this.arn('events', `event-bus/${name}`);
      case 'AWS::Events::EventBus.Name':
        return name;
      case 'AWS::CloudWatch::Alarm.Arn':
        return this.arn('cloudwatch', `alarm:${name}`);
      case 'AWS::ApiGatewayV2::Api.ApiEndpoint':
        return `https://${this.ref(logicalId)}.execute-api.${REGION}.amazonaws.com`;
      case 'AWS::ApiGatewayV2::Api.ApiId':
        return this.ref(logicalId);
      case 'AWS::Cognito::UserPool.Arn':
        return this.arn('cognito-idp', `userpool/${this.ref(logicalId)}`);
      case 'AWS::Cognito::UserPool.ProviderURL':
        return `https://cognito-idp.${REGION}.amazonaws.com/${this.ref(logicalId)}`;
      default:
        throw new Error(`the resolver does not know ${key} (used by the template)`);
    }
  }

  /** Resolves every intrinsic in `value`. */
  resolve(value: Json): Json {
    if (Array.isArray(value)) return value.map((item) => this.resolve(item));
    if (typeof value !== 'object' || value === null) return value;
    const entries = Object.entries(value);
    const [first] = entries;
    if (entries.length === 1 && first !== undefined) {
      const [fn, arg] = first;
      switch (fn) {
        case 'Ref':
          return this.ref(String(arg));
        case 'Fn::GetAtt': {
          const [id, attribute] = Array.isArray(arg) ? arg : String(arg).split('.');
          return this.getAtt(String(id), String(attribute));
        }
        case 'Fn::Join': {
          const [separator, parts] = arg as [string, Json[]];
          return (this.resolve(parts) as Json[]).map(String).join(separator);
        }
        case 'Fn::Select': {
          const [index, list] = arg as [Json, Json];
          const items = this.resolve(list) as Json[];
          return items[Number(this.resolve(index))];
        }
        case 'Fn::Split': {
          const [separator, source] = arg as [string, Json];
          return String(this.resolve(source)).split(separator);
        }
        case 'Fn::Sub':
          return this.#sub(arg);
        case 'Fn::If':
        case 'Fn::ImportValue':
        case 'Fn::FindInMap':
          throw new Error(`the resolver does not handle ${fn}`);
      }
    }
    return Object.fromEntries(entries.map(([key, item]) => [key, this.resolve(item)]));
  }

  #sub(arg: Json): string {
    const [text, variables] = Array.isArray(arg)
      ? (arg as [string, Record<string, Json>])
      : [String(arg), {}];
    return text.replace(/\$\{([^}!]+)\}/g, (_, name: string) => {
      if (Object.hasOwn(variables, name)) return String(this.resolve(variables[name]));
      const [id, attribute] = name.split('.');
      if (id === undefined) return '';
      return attribute === undefined ? this.ref(id) : this.getAtt(id, attribute);
    });
  }

  /** The logical id a resolved value was made from (a name, ARN or URL), if any. */
  idOf(type: string, resolved: string): string | undefined {
    return this.ofType(type).find((id) => {
      const candidates = [this.ref(id)];
      try {
        candidates.push(this.getAtt(id, 'Arn'));
      } catch {
        // Types without an Arn attribute are matched by Ref alone.
      }
      return candidates.includes(resolved);
    });
  }

  /** A role's identity policies: attached AWS::IAM::Policy, inline Policies, template managed policies. */
  identityPolicies(roleId: string): { name: string; policy: PolicyDocument }[] {
    const roleName = this.ref(roleId);
    const policies: { name: string; policy: PolicyDocument }[] = [];
    for (const id of this.ofType('AWS::IAM::Policy')) {
      const properties = this.resolve(this.properties(id)) as {
        Roles?: string[];
        PolicyDocument: PolicyDocument;
      };
      if (properties.Roles?.includes(roleName))
        policies.push({ name: id, policy: properties.PolicyDocument });
    }
    const role = this.resolve(this.properties(roleId)) as {
      Policies?: { PolicyName: string; PolicyDocument: PolicyDocument }[];
      ManagedPolicyArns?: string[];
    };
    for (const inline of role.Policies ?? [])
      policies.push({ name: inline.PolicyName, policy: inline.PolicyDocument });
    for (const arn of role.ManagedPolicyArns ?? []) {
      const id = this.idOf('AWS::IAM::ManagedPolicy', arn);
      if (id === undefined)
        throw new Error(`${roleId} has a managed policy from outside the template: ${arn}`);
      policies.push({ name: id, policy: this.managedPolicy(id) });
    }
    for (const id of this.ofType('AWS::IAM::ManagedPolicy')) {
      const properties = this.resolve(this.properties(id)) as { Roles?: string[] };
      if (properties.Roles?.includes(roleName)) policies.push({ name: id, policy: this.managedPolicy(id) });
    }
    return policies;
  }

  managedPolicy(id: string): PolicyDocument {
    return (this.resolve(this.properties(id)) as { PolicyDocument: PolicyDocument }).PolicyDocument;
  }

  /** The resource policy that governs `arn`, if the template gives it one. */
  resourcePolicy(arn: string): PolicyDocument | undefined {
    const service = arn.split(':')[2];
    switch (service) {
      case 's3': {
        const bucket = arn.slice(`arn:${PARTITION}:s3:::`.length).split('/')[0] ?? '';
        return this.#attachedPolicy('AWS::S3::BucketPolicy', (p) => p.Bucket === bucket);
      }
      case 'sqs': {
        const url = this.#queueUrlOf(arn);
        return this.#attachedPolicy('AWS::SQS::QueuePolicy', (p) => (p.Queues as string[]).includes(url));
      }
      case 'sns':
        return this.#attachedPolicy('AWS::SNS::TopicPolicy', (p) => (p.Topics as string[]).includes(arn));
      case 'kms': {
        const id = this.ofType('AWS::KMS::Key').find((key) => this.getAtt(key, 'Arn') === arn);
        return id === undefined ? undefined : (this.resolve(this.properties(id).KeyPolicy) as PolicyDocument);
      }
      case 'lambda':
        return this.#lambdaPermissions(arn);
      case 'iam': {
        const id = this.ofType('AWS::IAM::Role').find((role) => this.getAtt(role, 'Arn') === arn);
        return id === undefined
          ? undefined
          : (this.resolve(this.properties(id).AssumeRolePolicyDocument) as PolicyDocument);
      }
      default:
        return undefined;
    }
  }

  #queueUrlOf(arn: string): string {
    const name = arn.split(':').at(-1) ?? '';
    return `https://sqs.${REGION}.amazonaws.com/${ACCOUNT}/${name}`;
  }

  #attachedPolicy(
    type: string,
    attachedTo: (properties: Record<string, Json>) => boolean,
  ): PolicyDocument | undefined {
    const statements: Statement[] = [];
    for (const id of this.ofType(type)) {
      const properties = this.resolve(this.properties(id)) as Record<string, Json> & {
        PolicyDocument: PolicyDocument;
      };
      if (attachedTo(properties)) statements.push(...properties.PolicyDocument.Statement);
    }
    return statements.length === 0 ? undefined : { Version: '2012-10-17', Statement: statements };
  }

  /** AWS::Lambda::Permission resources of a function, as the function policy Lambda builds from them. */
  #lambdaPermissions(functionArn: string): PolicyDocument | undefined {
    const statements: Statement[] = [];
    for (const id of this.ofType('AWS::Lambda::Permission')) {
      const p = this.resolve(this.properties(id)) as Record<string, string>;
      const target = p.FunctionName ?? '';
      const fnArn = target.startsWith('arn:') ? target : this.arn('lambda', `function:${target}`);
      if (fnArn !== functionArn) continue;
      const condition: Record<string, Record<string, string>> = {};
      if (p.SourceArn !== undefined) condition.ArnLike = { 'aws:SourceArn': p.SourceArn };
      if (p.SourceAccount !== undefined) condition.StringEquals = { 'aws:SourceAccount': p.SourceAccount };
      const principal = p.Principal ?? '';
      statements.push({
        Sid: id,
        Effect: 'Allow',
        Principal: principal.endsWith('.amazonaws.com') ? { Service: principal } : { AWS: principal },
        Action: p.Action ?? 'lambda:InvokeFunction',
        Resource: functionArn,
        ...(Object.keys(condition).length > 0 ? { Condition: condition } : {}),
      });
    }
    return statements.length === 0 ? undefined : { Version: '2012-10-17', Statement: statements };
  }
}
