/**
 * The IAM proof: every AWS call svc-dsr was seen to make, plus every call AWS services make on the
 * stack's behalf, evaluated with a real IAM policy engine (@cloud-copilot/iam-simulate) against the
 * synthesized template's identity policies, key policies and resource policies.
 */
import { runUnsafeSimulation } from '@cloud-copilot/iam-simulate';
import type { RecordedCall } from '../../../lambdas/shared/call-recorder.ts';
import {
  ACCOUNT,
  PARTITION,
  type PolicyDocument,
  REGION,
  type Statement,
  type TemplateModel,
} from './template-model.ts';

/** One authorisation AWS performs. */
export interface Authorisation {
  /** Who, as the code or the service names it: a function, `CLI`, or a service's own name. */
  readonly caller: string;
  /** The role's logical id, or a service principal (`states.amazonaws.com`). */
  readonly principal:
    | { readonly roleId: string }
    | { readonly service: string }
    /** A person's role outside the stack with this managed policy of the stack attached (the operator). */
    | { readonly managedPolicyId: string };
  readonly action: string;
  readonly resource: string;
  readonly context: Readonly<Record<string, string>>;
  /** Why it happens: the SDK call it was observed as, or the service behaviour it models. */
  readonly reason: string;
}

/** A call that the policies do not allow. */
export interface Denial {
  readonly authorisation: Authorisation;
  readonly result: string;
  readonly message: string;
}

/** How the calls observed against local stand-ins map onto the deployed stack. */
export interface Deployment {
  readonly model: TemplateModel;
  /** Caller name -> the logical id of the role it runs as (or of the managed policy a person's role has). */
  readonly roles: Readonly<Record<string, Authorisation['principal']>>;
  /** A local resource name (bucket, table, queue name, state machine ARN, secret id) -> the deployed one. */
  readonly names: ReadonlyMap<string, string>;
}

const SECURE = { 'aws:SecureTransport': 'true' } as const;

/** The role a privacy-team member works with, outside the stack, with the stack's operator policy attached. */
export const OPERATOR_ROLE_ARN = `arn:${PARTITION}:iam::${ACCOUNT}:role/privacy-operator`;

/** The authorisations behind the observed calls, with the KMS use each implies on the deployed resources. */
export function observedAuthorisations(
  calls: readonly RecordedCall[],
  deployment: Deployment,
): Authorisation[] {
  const out: Authorisation[] = [];
  for (const call of calls) {
    const principal = deployment.roles[call.caller];
    if (principal === undefined) {
      throw new Error(
        `a ${call.action} call was made by "${call.caller}", which runs as no role of the stack: wrap the code that makes it in runAsCaller()`,
      );
    }
    const resource = deployedArn(call, deployment);
    const base = { caller: call.caller, principal } as const;
    out.push({
      ...base,
      action: call.action,
      resource,
      context: { ...SECURE, ...call.context },
      reason: `${call.operation} (observed)`,
    });
    for (const kms of impliedKeyUse(call, resource, deployment.model)) {
      out.push({ ...base, ...kms, reason: `${call.operation} on ${resource} (the service's key use)` });
    }
  }
  return dedupe(out);
}

/** The deployed ARN of the resource a call names. */
function deployedArn(call: RecordedCall, { names, model }: Deployment): string {
  const deployed = (local: string) => {
    const name = names.get(local);
    if (name === undefined) {
      throw new Error(`${call.caller}'s ${call.action} names "${local}", which the stack does not deploy`);
    }
    return name;
  };
  const r = call.resource;
  switch (r.kind) {
    case 's3-bucket':
      return `arn:${PARTITION}:s3:::${deployed(r.bucket)}`;
    case 's3-object':
      return `arn:${PARTITION}:s3:::${deployed(r.bucket)}/${r.key}`;
    case 'dynamodb-table':
      return model.arn('dynamodb', `table/${deployed(r.table)}${r.index ? `/index/${r.index}` : ''}`);
    case 'sqs-queue':
      return model.arn('sqs', deployed(r.queue));
    case 'states-machine':
      return deployed(r.arn);
    case 'states-execution': {
      const [, , , , , , machine, execution] = r.arn.split(':');
      const machineArn = [...names.entries()].find(([local]) =>
        local.endsWith(`:stateMachine:${machine}`),
      )?.[1];
      if (machineArn === undefined)
        throw new Error(`${call.action} names an execution of an unknown machine`);
      const deployedMachine = machineArn.split(':').at(-1);
      return model.arn('states', `execution:${deployedMachine}:${execution}`);
    }
    case 'secret':
      return deployed(r.id);
    case 'event-bus':
      return r.bus.startsWith('arn:') ? r.bus : model.arn('events', `event-bus/${deployed(r.bus)}`);
    case 'lambda-function':
      return deployed(r.name);
    case 'any':
      return '*';
  }
}

/** Which KMS key encrypts a deployed resource, from the template. */
export function keyOf(
  model: TemplateModel,
  resourceArn: string,
): { keyArn: string; bucketKey: boolean } | undefined {
  const keyArn = (value: unknown) => {
    const text = String(model.resolve(value));
    if (text.startsWith('arn:')) return text;
    const id = model.ofType('AWS::KMS::Key').find((key) => model.keyId(key) === text);
    return id === undefined ? text : model.getAtt(id, 'Arn');
  };
  const service = resourceArn.split(':')[2];
  const find = (type: string, arnOf: (id: string) => string) =>
    model.ofType(type).find((id) => resourceArn === arnOf(id) || resourceArn.startsWith(`${arnOf(id)}/`));
  switch (service) {
    case 's3': {
      const id = find('AWS::S3::Bucket', (bucket) => model.getAtt(bucket, 'Arn'));
      const rule = (
        model.properties(id ?? '') as {
          BucketEncryption?: {
            ServerSideEncryptionConfiguration: {
              ServerSideEncryptionByDefault: { SSEAlgorithm: string; KMSMasterKeyID?: unknown };
              BucketKeyEnabled?: boolean;
            }[];
          };
        }
      ).BucketEncryption?.ServerSideEncryptionConfiguration[0];
      if (id === undefined || rule?.ServerSideEncryptionByDefault.KMSMasterKeyID === undefined)
        return undefined;
      return {
        keyArn: keyArn(rule.ServerSideEncryptionByDefault.KMSMasterKeyID),
        bucketKey: rule.BucketKeyEnabled === true,
      };
    }
    case 'sqs': {
      const id = find('AWS::SQS::Queue', (queue) => model.getAtt(queue, 'Arn'));
      const key = id === undefined ? undefined : model.properties(id).KmsMasterKeyId;
      return key === undefined ? undefined : { keyArn: keyArn(key), bucketKey: false };
    }
    case 'dynamodb': {
      const id = find('AWS::DynamoDB::Table', (table) => model.getAtt(table, 'Arn'));
      const sse =
        id === undefined
          ? undefined
          : (model.properties(id).SSESpecification as { KMSMasterKeyId?: unknown } | undefined);
      return sse?.KMSMasterKeyId === undefined
        ? undefined
        : { keyArn: keyArn(sse.KMSMasterKeyId), bucketKey: false };
    }
    case 'secretsmanager': {
      const id = find('AWS::SecretsManager::Secret', (secret) => model.getAtt(secret, 'Arn'));
      const key = id === undefined ? undefined : model.properties(id).KmsKeyId;
      return key === undefined ? undefined : { keyArn: keyArn(key), bucketKey: false };
    }
    case 'states': {
      const id = model.ofType('AWS::StepFunctions::StateMachine').find((machine) => {
        const arn = model.getAtt(machine, 'Arn');
        const name = arn.split(':').at(-1);
        return resourceArn === arn || resourceArn.includes(`:execution:${name}:`);
      });
      const config =
        id === undefined
          ? undefined
          : (model.properties(id).EncryptionConfiguration as { KmsKeyId?: unknown } | undefined);
      return config?.KmsKeyId === undefined
        ? undefined
        : { keyArn: keyArn(config.KmsKeyId), bucketKey: false };
    }
    default:
      return undefined;
  }
}

type KeyUse = Pick<Authorisation, 'action' | 'resource' | 'context'>;

const S3_ENCRYPTS = new Set(['PutObject', 'CreateMultipartUpload', 'UploadPart', 'CopyObject']);
const S3_DECRYPTS = new Set(['GetObject', 'UploadPart', 'CompleteMultipartUpload']);
const DYNAMO_WRITES = new Set([
  'PutItem',
  'UpdateItem',
  'DeleteItem',
  'BatchWriteItem',
  'TransactWriteItems',
]);

/** The KMS calls a service makes with the caller's permissions when the resource is encrypted. */
export function impliedKeyUse(call: RecordedCall, resourceArn: string, model: TemplateModel): KeyUse[] {
  const key = keyOf(model, resourceArn);
  if (key === undefined) return [];
  const service = resourceArn.split(':')[2] ?? '';
  const via = (name: string) => ({
    'kms:ViaService': `${name}.${REGION}.amazonaws.com`,
    'kms:CallerAccount': ACCOUNT,
    ...SECURE,
  });
  const use = (actions: string[], context: Record<string, string>): KeyUse[] =>
    actions.map((action) => ({ action, resource: key.keyArn, context }));
  switch (service) {
    case 's3': {
      const bucketArn = resourceArn.split('/')[0] ?? resourceArn;
      const requestedKey = call.context['s3:x-amz-server-side-encryption-aws-kms-key-id'];
      if (requestedKey !== undefined && requestedKey !== key.keyArn) {
        return [{ action: 'kms:GenerateDataKey', resource: requestedKey, context: via('s3') }];
      }
      const context = {
        ...via('s3'),
        'kms:EncryptionContext:aws:s3:arn': key.bucketKey ? bucketArn : resourceArn,
      };
      return use(
        [
          ...(S3_ENCRYPTS.has(call.operation) ? ['kms:GenerateDataKey'] : []),
          ...(S3_DECRYPTS.has(call.operation) ? ['kms:Decrypt'] : []),
        ],
        context,
      );
    }
    case 'sqs': {
      const context = { ...via('sqs'), 'kms:EncryptionContext:aws:sqs:arn': resourceArn };
      if (call.action === 'sqs:SendMessage') return use(['kms:GenerateDataKey', 'kms:Decrypt'], context);
      if (call.action === 'sqs:ReceiveMessage') return use(['kms:Decrypt'], context);
      return [];
    }
    case 'dynamodb': {
      // As AWS documents the key policy for DynamoDB: reads need Decrypt and DescribeKey, writes also
      // Encrypt and GenerateDataKey, each through DynamoDB.
      const table = resourceArn.split('/')[1] ?? '';
      const context = { ...via('dynamodb'), 'kms:EncryptionContext:aws:dynamodb:tableName': table };
      const writes = DYNAMO_WRITES.has(call.operation);
      return use(
        ['kms:Decrypt', 'kms:DescribeKey', ...(writes ? ['kms:Encrypt', 'kms:GenerateDataKey'] : [])],
        context,
      );
    }
    case 'secretsmanager':
      return use(['kms:Decrypt'], {
        ...via('secretsmanager'),
        'kms:EncryptionContext:SecretARN': resourceArn,
      });
    case 'states': {
      const machine = resourceArn.includes(':execution:')
        ? resourceArn.replace(':execution:', ':stateMachine:').split(':').slice(0, 7).join(':')
        : resourceArn;
      const context = { ...via('states'), 'kms:EncryptionContext:aws:states:stateMachineArn': machine };
      if (call.action === 'states:StartExecution') return use(['kms:GenerateDataKey'], context);
      if (call.action === 'states:DescribeExecution' || call.action === 'states:GetExecutionHistory') {
        return use(['kms:Decrypt'], context);
      }
      return [];
    }
    default:
      return [];
  }
}

function dedupe(authorisations: Authorisation[]): Authorisation[] {
  const seen = new Map<string, Authorisation>();
  for (const a of authorisations) {
    const key = JSON.stringify([
      a.caller,
      a.principal,
      a.action,
      a.resource,
      Object.entries(a.context).sort(),
    ]);
    if (!seen.has(key)) seen.set(key, a);
  }
  return [...seen.values()];
}

/** Evaluates one authorisation against the template's policies. */
export function evaluate(model: TemplateModel, authorisation: Authorisation): string {
  return simulate(model, authorisation).result;
}

function simulate(model: TemplateModel, a: Authorisation) {
  const principalArn =
    'roleId' in a.principal
      ? model.getAtt(a.principal.roleId, 'Arn')
      : 'service' in a.principal
        ? a.principal.service
        : OPERATOR_ROLE_ARN;
  const identityPolicies =
    'roleId' in a.principal
      ? model.identityPolicies(a.principal.roleId)
      : 'managedPolicyId' in a.principal
        ? [{ name: a.principal.managedPolicyId, policy: model.managedPolicy(a.principal.managedPolicyId) }]
        : [];
  const resourcePolicy = model.resourcePolicy(a.resource);
  const contextVariables: Record<string, string> = {
    'aws:PrincipalAccount': ACCOUNT,
    ...('service' in a.principal ? {} : { 'aws:PrincipalArn': principalArn }),
    ...a.context,
  };
  const result = runUnsafeSimulation(
    {
      request: {
        principal: principalArn,
        action: a.action,
        resource: { resource: a.resource, accountId: ACCOUNT },
        contextVariables,
      },
      identityPolicies: identityPolicies.map(({ name, policy }) => ({ name, policy })),
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      ...(resourcePolicy
        ? {
            resourcePolicy: {
              __validated: true,
              policyDocument: resourcePolicy,
              metadata: { name: 'resource-policy' },
            },
          }
        : {}),
    },
    {},
  );
  return { result: String(result), identityPolicies, resourcePolicy, principalArn };
}

/**
 * The reads of stored objects `principal` is allowed, of those asked: an S3 read (`s3:GetObject`,
 * or `s3:GetObjectVersion` of a recorded version) counts only with the `kms:Decrypt` S3 makes with
 * the same principal's permission for an SSE-KMS object. Answers `<action> on <object>` for each.
 */
export function allowedReads(
  model: TemplateModel,
  caller: string,
  principal: Authorisation['principal'],
  objectArns: readonly string[],
): string[] {
  const allowed: string[] = [];
  for (const object of objectArns) {
    const key = keyOf(model, object);
    const decrypt: Authorisation | undefined =
      key === undefined
        ? undefined
        : {
            caller,
            principal,
            action: 'kms:Decrypt',
            resource: key.keyArn,
            context: {
              'kms:ViaService': `s3.${REGION}.amazonaws.com`,
              'kms:CallerAccount': ACCOUNT,
              'kms:EncryptionContext:aws:s3:arn': key.bucketKey ? (object.split('/')[0] ?? object) : object,
              ...SECURE,
            },
            reason: `S3 decrypts ${object} for its reader`,
          };
    for (const action of ['s3:GetObject', 's3:GetObjectVersion']) {
      const read = {
        caller,
        principal,
        action,
        resource: object,
        context: SECURE,
        reason: 'a read of the object',
      };
      if (evaluate(model, read) !== 'Allowed') continue;
      if (decrypt !== undefined && evaluate(model, decrypt) !== 'Allowed') continue;
      allowed.push(`${action} on ${object}`);
    }
  }
  return allowed;
}

/** Every authorisation the policies refuse, with a message that names the call and what was evaluated. */
export function denials(model: TemplateModel, authorisations: readonly Authorisation[]): Denial[] {
  const found: Denial[] = [];
  for (const a of authorisations) {
    const { result, identityPolicies, resourcePolicy, principalArn } = simulate(model, a);
    if (result === 'Allowed') continue;
    const service = a.action.split(':')[0] ?? '';
    const relevant = (statements: Statement[]) =>
      statements.filter((s) =>
        [s.Action ?? s.NotAction ?? []]
          .flat()
          .some((action) => action === '*' || action.startsWith(`${service}:`)),
      );
    const evaluated = [
      ...identityPolicies.flatMap(({ name, policy }) =>
        relevant(policy.Statement).map((s) => `  identity ${name}: ${JSON.stringify(s)}`),
      ),
      ...relevant(resourcePolicy?.Statement ?? []).map((s) => `  resource policy: ${JSON.stringify(s)}`),
    ];
    found.push({
      authorisation: a,
      result,
      message: [
        `${result}: ${a.caller} (${principalArn}) ${a.action} on ${a.resource}`,
        `  because: ${a.reason}`,
        `  context: ${JSON.stringify(a.context)}`,
        'statements evaluated:',
        ...(evaluated.length > 0 ? evaluated : ['  (none mention this service)']),
      ].join('\n'),
    });
  }
  return found;
}

/** A granted action no authorisation of its role uses. */
export interface UnusedGrant {
  readonly role: string;
  readonly action: string;
  /** The resource of the grant, as the policy names it. */
  readonly resource: string;
}

/** Per role (and operator policy), the actions its identity policies grant that no authorisation uses. */
export function unusedGrants(
  model: TemplateModel,
  roles: Readonly<Record<string, Authorisation['principal']>>,
  authorisations: readonly Authorisation[],
): UnusedGrant[] {
  const unused: UnusedGrant[] = [];
  const seen = new Set<string>();
  for (const [caller, principal] of Object.entries(roles)) {
    const key = JSON.stringify(principal);
    if ('service' in principal || seen.has(key)) continue;
    seen.add(key);
    const used = authorisations.filter((a) => JSON.stringify(a.principal) === key);
    const policies =
      'roleId' in principal
        ? model.identityPolicies(principal.roleId)
        : [{ policy: model.managedPolicy(principal.managedPolicyId) }];
    const statements = policies.flatMap(({ policy }) =>
      policy.Statement.filter((st) => st.Effect === 'Allow'),
    );
    for (const statement of statements) {
      for (const resource of [statement.Resource ?? '*'].flat()) {
        const resourcePattern = globPattern(resource);
        for (const action of [statement.Action ?? []].flat()) {
          const actionPattern = globPattern(action);
          const usedHere = used.some((a) => actionPattern.test(a.action) && resourcePattern.test(a.resource));
          if (!usedHere) unused.push({ role: caller, action, resource });
        }
      }
    }
  }
  return unused;
}

/** An IAM wildcard (`*`, `?`) as a case-insensitive pattern of the whole string. */
function globPattern(glob: string): RegExp {
  const escaped = glob
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${escaped}$`, 'i');
}

/** A copy of the template with `action` removed from every statement of the resources `where` picks. */
export function withoutGrant(
  template: Record<string, unknown>,
  where: (logicalId: string, resource: { Type: string }) => boolean,
  action: string,
): Record<string, unknown> {
  const copy = structuredClone(template) as {
    Resources: Record<string, { Type: string; Properties: Record<string, unknown> }>;
  };
  let removed = 0;
  for (const [id, resource] of Object.entries(copy.Resources)) {
    if (!where(id, resource)) continue;
    const documents = [resource.Properties.PolicyDocument, resource.Properties.KeyPolicy].filter(
      (doc): doc is PolicyDocument => doc !== undefined,
    );
    for (const doc of documents) {
      for (const statement of doc.Statement) {
        if (statement.Effect !== 'Allow' || statement.Action === undefined) continue;
        const actions = [statement.Action].flat();
        const kept = actions.filter((a) => a !== action);
        removed += actions.length - kept.length;
        statement.Action = kept;
      }
      doc.Statement.splice(
        0,
        doc.Statement.length,
        ...doc.Statement.filter((s) => [s.Action ?? ['x']].flat().length > 0),
      );
    }
  }
  if (removed === 0) throw new Error(`no statement of the chosen resources grants ${action}`);
  return copy;
}
