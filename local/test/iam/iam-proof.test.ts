import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_STATE_MACHINE_ARN, RECONCILER_CALLER } from '#local/local-mode';
import { API_CALLER } from '#local/runtime/api-endpoint';
import { OPERATOR_CALLER } from '#local/runtime/operator-endpoint';
import { EVENTS_DIR, LOCAL_EVENT_BUS, STATUS_EVENTS_CALLER } from '#local/runtime/status-events';
import { LOCAL_NAMES, LOCAL_SECRET_IDS } from '#local/runtime/workflow';
import { OPERATOR_FUNCTION_NAME } from '../../../bin/cli/operator-client.ts';
import { CALLERS, type RecordedCall } from '../../../lambdas/shared/call-recorder.ts';
import { STATUS_CHANGED, statusChangedDetailSchema } from '../../../lambdas/status-events/status-events.ts';
import { STEP_DIRECTORIES, type StepName } from '../../../lambdas/steps.ts';
import { AUDIT_OBJECT_WRITES, DsrStack } from '../../../lib/dsr-stack.ts';
import { productionConfig } from '../../../test/infra/fixtures.ts';
import { ACKNOWLEDGED_UNUSED_GRANTS } from './acknowledged-grants.ts';
import { observeCalls } from './observe.ts';
import {
  type Authorisation,
  allowedReads,
  type Deployment,
  denials,
  evaluate,
  observedAuthorisations,
  unusedGrants,
  withoutGrant,
} from './proof.ts';
import { serviceAuthorisations } from './service-calls.ts';
import { TemplateModel } from './template-model.ts';

const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
const stack = new DsrStack(app, 'svc-dsr-proof', { config: productionConfig });
const template = Template.fromStack(stack).toJSON();
const logicalId = (construct: iam.IRole | iam.ManagedPolicy | dynamodb.Table | sqs.Queue) =>
  stack.getLogicalId((construct.node.defaultChild ?? construct) as never);

const roleOf = (
  name: StepName | 'Intake' | 'DeadlineSweep' | 'Reconciler' | 'StatusEvents' | 'Operator' | 'Api',
) => ({
  roleId: logicalId(stack.functions[name].role),
});
const operatorFunctionId = stack.getLogicalId(stack.functions.Operator.function.node.defaultChild as never);
const roles: Deployment['roles'] = {
  ...Object.fromEntries(Object.keys(STEP_DIRECTORIES).map((step) => [step, roleOf(step as StepName)])),
  Intake: roleOf('Intake'),
  [CALLERS.intakeEventSource]: roleOf('Intake'),
  DeadlineSweep: roleOf('DeadlineSweep'),
  [RECONCILER_CALLER]: roleOf('Reconciler'),
  [STATUS_EVENTS_CALLER]: roleOf('StatusEvents'),
  [OPERATOR_CALLER]: roleOf('Operator'),
  [API_CALLER]: roleOf('Api'),
  [CALLERS.cli]: { managedPolicyId: logicalId(stack.operatorPolicy) },
};

function deploymentOf(templateJson: Record<string, unknown>): Deployment {
  const model = new TemplateModel(templateJson, Stack.of(stack).stackName);
  const outputs = model.outputs();
  const queueName = (url: string | undefined) => url?.split('/').at(-1) ?? '';
  const names = new Map<string, string>([
    [LOCAL_NAMES.table, outputs.LedgerTableName ?? ''],
    [LOCAL_NAMES.gateTable, model.name(logicalId(stack.platformGate))],
    [LOCAL_NAMES.archiveBucket, outputs.ArchiveBucketName ?? ''],
    [LOCAL_NAMES.auditBucket, outputs.AuditBucketName ?? ''],
    [LOCAL_NAMES.intakeQueue, queueName(outputs.IntakeQueueUrl)],
    [LOCAL_NAMES.quarantineQueue, queueName(outputs.QuarantineQueueUrl)],
    [LOCAL_NAMES.intakeDeadLetterQueue, queueName(outputs.IntakeDeadLetterQueueUrl)],
    [LOCAL_STATE_MACHINE_ARN, outputs.StateMachineArn ?? ''],
    [LOCAL_SECRET_IDS.ssoAccessToken, outputs.SsoTokenSecretArn ?? ''],
    [LOCAL_SECRET_IDS.exportToken, outputs.ExportTokenSecretArn ?? ''],
    [LOCAL_SECRET_IDS.auditHmacKey, outputs.AuditKeySecretArn ?? ''],
    [LOCAL_EVENT_BUS, outputs.EventBusArn?.split(':event-bus/')[1] ?? ''],
    [OPERATOR_FUNCTION_NAME, model.getAtt(operatorFunctionId, 'Arn')],
  ]);
  return { model, roles, names };
}

/** Every authorisation of one deployment: what the code was seen to do, and what AWS does for the stack. */
function authorisationsOf(deployment: Deployment, calls: readonly RecordedCall[]): Authorisation[] {
  const ofTheProduct = calls.filter((call) => call.caller !== CALLERS.localRuntime);
  return [...observedAuthorisations(ofTheProduct, deployment), ...serviceAuthorisations(deployment.model)];
}

let dataDir: string;
let calls: RecordedCall[];
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-iam-'));
  calls = await observeCalls(dataDir);
}, 600_000);
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

describe('the IAM proof', () => {
  it('observes the calls of every function and of the CLI', () => {
    const callers = new Set(calls.map((call) => call.caller));
    for (const caller of Object.keys(roles))
      expect(callers, `no call was observed from ${caller}`).toContain(caller);
    expect(callers).not.toContain('unscoped');
  });

  it('allows every observed call and every call AWS makes for the stack', () => {
    const deployment = deploymentOf(template);
    const refused = denials(deployment.model, authorisationsOf(deployment, calls));
    expect(refused.map((denial) => denial.message).join('\n\n')).toBe('');
  });

  it('grants no action that no call uses, unless acknowledged with its reason', () => {
    const deployment = deploymentOf(template);
    const unused = unusedGrants(deployment.model, roles, authorisationsOf(deployment, calls)).filter(
      ({ role, action }) =>
        !ACKNOWLEDGED_UNUSED_GRANTS.some((ack) => ack.role === role && ack.action === action),
    );
    expect(unused).toEqual([]);
  });
});

describe('the status events the proof observed', () => {
  it('follow the documented schema and carry no identifier of the scenario', async () => {
    const dir = join(dataDir, EVENTS_DIR);
    const lines = (await Promise.all((await readdir(dir)).map((file) => readFile(join(dir, file), 'utf8'))))
      .join('')
      .split('\n')
      .filter(Boolean);
    const events = lines.map((line) => JSON.parse(line) as { 'detail-type': string; detail: unknown });
    expect(events.length).toBeGreaterThan(0);
    for (const event of events) {
      expect(event['detail-type']).toBe(STATUS_CHANGED);
      statusChangedDetailSchema.parse(event.detail);
    }
    const statuses = new Set(events.map((event) => statusChangedDetailSchema.parse(event.detail).status));
    expect([...statuses].sort()).toEqual([
      'cancelled',
      'completed',
      'denied',
      'failed',
      'received',
      'rejected',
      'running',
    ]);
    // The scenario's subjects are u-alice, u-bruno, u-chloe, u-dan and u-nobody-here; its verifier privacy-team.
    expect(lines.join('\n')).not.toMatch(/u-(alice|bruno|chloe|dan|nobody)|privacy-team/);
  });
});

describe('the IAM proof, proven', () => {
  const stepRole = (step: StepName) => (id: string) => id === policyIdOf(stack.functions[step].policy);
  const policyIdOf = (policy: iam.Policy) => stack.getLogicalId(policy.node.defaultChild as never);
  const keyPolicyOf = (id: string, resource: { Type: string }) =>
    resource.Type === 'AWS::KMS::Key' && id === stack.getLogicalId(stack.key.node.defaultChild as never);
  const cases: {
    grant: string;
    from: (id: string, resource: { Type: string }) => boolean;
    action: string;
    names: RegExp;
  }[] = [
    {
      grant: "RecordOutcome's audit PutObject",
      from: stepRole('RecordOutcome'),
      action: 's3:PutObject',
      names: /RecordOutcome .* s3:PutObject on arn:aws:s3:::.*auditbucket.*\/audit\//,
    },
    {
      grant: "the state machine role's KMS permission",
      from: (id) =>
        id === policyIdOf(stack.workflow.stateMachine.role.node.tryFindChild('DefaultPolicy') as iam.Policy),
      action: 'kms:GenerateDataKey',
      names: /StepFunctions.* kms:GenerateDataKey on arn:aws:kms:/,
    },
    {
      grant: "the state machine role's UpdateItem of the export-slot waiters",
      from: (id) =>
        id === policyIdOf(stack.workflow.stateMachine.role.node.tryFindChild('DefaultPolicy') as iam.Policy),
      action: 'dynamodb:UpdateItem',
      names: /StepFunctions.* dynamodb:UpdateItem on arn:aws:dynamodb:.*PlatformGate/,
    },
    {
      grant: "the intake event source's decrypt",
      from: (id) => id === policyIdOf(stack.functions.Intake.policy),
      action: 'kms:Decrypt',
      names: /EventSource.* kms:Decrypt on arn:aws:kms:.*\n.*\n.*aws:sqs:arn/,
    },
    {
      grant: "the key policy's account root",
      from: keyPolicyOf,
      action: 'kms:*',
      names: /kms:GenerateDataKey on arn:aws:kms:/,
    },
    {
      grant: "the status events' PutEvents on the bus",
      from: (id) => id === policyIdOf(stack.functions.StatusEvents.policy),
      action: 'events:PutEvents',
      names: /StatusEvents .* events:PutEvents on arn:aws:events:.*:event-bus\/svc-dsr-proof-status-events/,
    },
    {
      grant: "the status events' stream reads",
      from: (id) => id === policyIdOf(stack.functions.StatusEvents.policy),
      action: 'dynamodb:GetRecords',
      names: /EventSource.* dynamodb:GetRecords on arn:aws:dynamodb:.*\/stream\//,
    },
    {
      grant: "the operator function's StopExecution",
      from: (id) => id === policyIdOf(stack.functions.Operator.policy),
      action: 'states:StopExecution',
      names: /Operator .* states:StopExecution on arn:aws:states:.*:execution:/,
    },
    {
      grant: "the API function's send to the intake queue",
      from: (id) => id === policyIdOf(stack.functions.Api.policy),
      action: 'sqs:SendMessage',
      names: /Api .* sqs:SendMessage on arn:aws:sqs:/,
    },
    {
      grant: "the API function's count of a person's calls in the gate table",
      from: (id) => id === policyIdOf(stack.functions.Api.policy),
      action: 'dynamodb:UpdateItem',
      names: /Api .* dynamodb:UpdateItem on arn:aws:dynamodb:.*PlatformGate/,
    },
    {
      grant: "the operator function's read of archive objects",
      from: (id) => id === policyIdOf(stack.functions.Operator.policy),
      action: 's3:GetObject',
      names: /Operator .* s3:GetObject on arn:aws:s3:::.*archivebucket.*\/exports\//,
    },
    {
      grant: "the operator policy's InvokeFunctionUrl",
      from: (id) => id === logicalId(stack.operatorPolicy),
      action: 'lambda:InvokeFunctionUrl',
      names: /CLI .* lambda:InvokeFunctionUrl on arn:aws:lambda:.*:function:/,
    },
  ];
  for (const { grant, from, action, names } of cases) {
    it(`fails, naming the call, without ${grant}`, () => {
      const broken = deploymentOf(withoutGrant(template, from, action));
      const refused = denials(broken.model, authorisationsOf(broken, calls)).map((denial) => denial.message);
      expect(refused.length).toBeGreaterThan(0);
      expect(refused.join('\n\n')).toMatch(names);
    });
  }

  it("fails when the state machine's KMS condition names a machine without its name", () => {
    const broken = structuredClone(template) as {
      Resources: Record<string, { Type: string; Properties: Record<string, unknown> }>;
    };
    const machine = Object.values(broken.Resources).find(
      (r) => r.Type === 'AWS::StepFunctions::StateMachine',
    );
    if (machine === undefined) throw new Error('no state machine');
    delete machine.Properties.StateMachineName;
    const deployment = deploymentOf(broken);
    const refused = denials(deployment.model, authorisationsOf(deployment, calls)).map(
      (denial) => denial.message,
    );
    expect(refused.join('\n')).toMatch(/StepFunctions.* kms:(GenerateDataKey|Decrypt) on arn:aws:kms:/);
  });
});

describe('who may change a request', () => {
  const model = new TemplateModel(template, Stack.of(stack).stackName);
  const outputs = model.outputs();
  const ledgerArn = model.arn('dynamodb', `table/${outputs.LedgerTableName ?? ''}`);
  const auditRecord = `arn:aws:s3:::${outputs.AuditBucketName ?? ''}/audit/0b7f6d0e-0000-4000-8000-000000000002/000000.json`;
  const operatorFunctionArn = model.getAtt(operatorFunctionId, 'Arn');
  const person = { managedPolicyId: logicalId(stack.operatorPolicy) } as const;
  const asPerson = (
    action: string,
    resource: string,
    context: Record<string, string> = {},
  ): Authorisation => ({
    caller: CALLERS.cli,
    principal: person,
    action,
    resource,
    context: { 'aws:SecureTransport': 'true', ...context },
    reason: 'the privacy team, outside the CLI',
  });

  it("refuses the privacy team's policy every write to the ledger and the audit bucket, and the workflow's own calls", () => {
    const writes = [
      ...['UpdateItem', 'PutItem', 'DeleteItem', 'BatchWriteItem', 'TransactWriteItems'].map((op) =>
        asPerson(`dynamodb:${op}`, ledgerArn),
      ),
      ...AUDIT_OBJECT_WRITES.map((action) => asPerson(action, auditRecord)),
      asPerson('s3:PutObject', auditRecord, { 's3:if-none-match': '*' }),
      asPerson('s3:DeleteObject', `arn:aws:s3:::${outputs.ArchiveBucketName ?? ''}/exports/x/attempt-1.zip`),
      asPerson('states:StartExecution', outputs.StateMachineArn ?? ''),
      asPerson(
        'states:StopExecution',
        `${(outputs.StateMachineArn ?? '').replace(':stateMachine:', ':execution:')}:x`,
      ),
    ];
    for (const write of writes)
      expect(evaluate(model, write), `${write.action} on ${write.resource}`).not.toBe('Allowed');
  });

  it('allows the privacy team to reach the operator function through its IAM-authenticated URL only', () => {
    expect(
      evaluate(
        model,
        asPerson('lambda:InvokeFunctionUrl', operatorFunctionArn, {
          'lambda:FunctionUrlAuthType': 'AWS_IAM',
        }),
      ),
    ).toBe('Allowed');
    expect(
      evaluate(
        model,
        asPerson('lambda:InvokeFunction', operatorFunctionArn, { 'lambda:InvokedViaFunctionUrl': 'true' }),
      ),
    ).toBe('Allowed');
    // A direct Invoke carries an event the caller writes, a forged principal with it: refused.
    expect(evaluate(model, asPerson('lambda:InvokeFunction', operatorFunctionArn))).not.toBe('Allowed');
    expect(
      evaluate(
        model,
        asPerson('lambda:InvokeFunctionUrl', operatorFunctionArn, { 'lambda:FunctionUrlAuthType': 'NONE' }),
      ),
    ).not.toBe('Allowed');
    // No other function of the stack.
    const intakeArn = model.getAtt(
      stack.getLogicalId(stack.functions.Intake.function.node.defaultChild as never),
      'Arn',
    );
    expect(
      evaluate(
        model,
        asPerson('lambda:InvokeFunctionUrl', intakeArn, { 'lambda:FunctionUrlAuthType': 'AWS_IAM' }),
      ),
    ).not.toBe('Allowed');
  });

  it('gives the operator function a URL with AWS_IAM auth, which is how it learns who calls', () => {
    const urls = model.ofType('AWS::Lambda::Url');
    expect(urls).toHaveLength(1);
    expect(model.properties(urls[0] ?? '')).toMatchObject({ AuthType: 'AWS_IAM' });
  });

  it('refuses audit object writes to a role that allows itself everything, but not to the record writers', () => {
    // Prepare: the privacy team's policy as an administrator's, allowed every S3 action anywhere.
    const broadened = structuredClone(template) as {
      Resources: Record<string, { Properties: { PolicyDocument: { Statement: unknown[] } } }>;
    };
    broadened.Resources[logicalId(stack.operatorPolicy)]?.Properties.PolicyDocument.Statement.push({
      Effect: 'Allow',
      Action: 's3:*',
      Resource: '*',
    });
    const admin = new TemplateModel(broadened, Stack.of(stack).stackName);
    // Act + Assess
    for (const action of AUDIT_OBJECT_WRITES) {
      expect(evaluate(admin, asPerson(action, auditRecord)), action).toBe('ExplicitlyDenied');
    }
    expect(evaluate(admin, asPerson('s3:GetObject', auditRecord))).toBe('Allowed');
    const writer = (name: 'Operator' | 'RecordOutcome' | 'Intake') => ({
      caller: name,
      principal: roleOf(name),
      action: 's3:PutObject',
      resource: auditRecord,
      context: { 'aws:SecureTransport': 'true', 's3:if-none-match': '*' },
      reason: 'a record writer appends a record',
    });
    for (const name of ['Operator', 'RecordOutcome', 'Intake'] as const) {
      expect(evaluate(model, writer(name)), name).toBe('Allowed');
    }
  });
});

describe('who may read an archive', () => {
  const model = new TemplateModel(template, Stack.of(stack).stackName);
  const outputs = model.outputs();
  const requestId = '0b7f6d0e-0000-4000-8000-000000000002';
  const archiveObjects = [
    `arn:aws:s3:::${outputs.ArchiveBucketName ?? ''}/exports/${requestId}/attempt-1.zip`,
    `arn:aws:s3:::${outputs.ArchiveBucketName ?? ''}/exports/${requestId}/subject-package.zip`,
  ];
  const person = { managedPolicyId: logicalId(stack.operatorPolicy) } as const;
  /** The template with `statement` added to the privacy team's policy. */
  const withPersonStatement = (statement: Record<string, unknown>) => {
    const broken = structuredClone(template) as {
      Resources: Record<string, { Properties: { PolicyDocument: { Statement: unknown[] } } }>;
    };
    broken.Resources[logicalId(stack.operatorPolicy)]?.Properties.PolicyDocument.Statement.push(statement);
    return new TemplateModel(broken, Stack.of(stack).stackName);
  };

  it("refuses the privacy team's policy every read of an archive or a subject package", () => {
    expect(allowedReads(model, CALLERS.cli, person, archiveObjects)).toEqual([]);
    // The audit records it reads for verify stay readable.
    const auditRecord = `arn:aws:s3:::${outputs.AuditBucketName ?? ''}/audit/${requestId}/000000.json`;
    expect(allowedReads(model, CALLERS.cli, person, [auditRecord])).toEqual([
      `s3:GetObject on ${auditRecord}`,
    ]);
  });

  it('allows the operator function to read both, version by version, with the key', () => {
    expect(allowedReads(model, OPERATOR_CALLER, roleOf('Operator'), archiveObjects)).toEqual(
      archiveObjects.flatMap((object) => [`s3:GetObject on ${object}`, `s3:GetObjectVersion on ${object}`]),
    );
  });

  it("catches a privacy team's policy given the archive read back", () => {
    // The statement the policy had before packages went through the operator function.
    const readBack = withPersonStatement({
      Effect: 'Allow',
      Action: 's3:GetObject',
      Resource: `arn:aws:s3:::${outputs.ArchiveBucketName ?? ''}/exports/*`,
    });
    expect(allowedReads(readBack, CALLERS.cli, person, archiveObjects)).toEqual(
      archiveObjects.map((object) => `s3:GetObject on ${object}`),
    );
    // And a broader one, on every bucket.
    const everywhere = withPersonStatement({ Effect: 'Allow', Action: 's3:Get*', Resource: '*' });
    expect(allowedReads(everywhere, CALLERS.cli, person, archiveObjects)).toHaveLength(4);
  });
});
