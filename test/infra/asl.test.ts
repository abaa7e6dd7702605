import { beforeAll, describe, expect, it } from 'vitest';
import { ConfigurationError, RETRYABLE_ERRORS } from '../../lambdas/shared/errors.ts';
import { localFunctionArn, resolveStateMachine } from '../../lib/asl.ts';
import { FIXTURE_STATE_MACHINE_ID, synthesizeWorkflowFixture } from '../helpers/workflow-fixture-stack.ts';

const LAMBDA = { Type: 'AWS::Lambda::Function', Properties: {} };

function machine(properties: Record<string, unknown>) {
  return { Type: 'AWS::StepFunctions::StateMachine', Properties: properties };
}

/** A DefinitionSubstitutions placeholder, `${name}`. */
const placeholder = (name: string) => `\${${name}}`;

const SIMPLE_ASL = { StartAt: 'Only', States: { Only: { Type: 'Pass', End: true } } };

function logicalIdsOfType(template: Record<string, unknown>, type: string): string[] {
  const resources = Object.entries(Object(template.Resources));
  return resources.filter(([, resource]) => Object(resource).Type === type).map(([id]) => id);
}

function state(definition: Record<string, unknown>, name: string): Record<string, unknown> {
  return Object(Object(definition.States)[name]);
}

describe('resolveStateMachine on a synthesized CDK stack', () => {
  let template: Record<string, unknown>;

  beforeAll(() => {
    template = synthesizeWorkflowFixture();
  });

  it('turns the Fn::Join definition into plain ASL with no intrinsic left', () => {
    // Act
    const resolved = resolveStateMachine(template);

    // Assess
    expect(resolved.logicalId).toMatch(new RegExp(`^${FIXTURE_STATE_MACHINE_ID}`));
    expect(resolved.definition.StartAt).toBe('Resolve');
    expect(Object.keys(Object(resolved.definition.States)).sort()).toEqual([
      'Done',
      'Failed',
      'Found?',
      'NoData',
      'RecordFailure',
      'Resolve',
      'StartExport',
      'WaitForExport',
    ]);
    const text = JSON.stringify(resolved.definition);
    expect(text).not.toMatch(/Fn::|"Ref"/);
    expect(state(resolved.definition, 'Resolve').Resource).toBe('arn:aws:states:::lambda:invoke');
  });

  it('maps each LambdaInvoke FunctionName to the logical id of its function', () => {
    // Prepare
    const lambdaIds = logicalIdsOfType(template, 'AWS::Lambda::Function');

    // Act
    const resolved = resolveStateMachine(template);

    // Assess
    expect(lambdaIds).toHaveLength(3);
    const resolveFunctionId = lambdaIds.find((id) => id.startsWith('ResolveFunction')) ?? '';
    const functionName = Object(state(resolved.definition, 'Resolve').Parameters).FunctionName;
    expect(functionName).toBe(`arn:aws:lambda:us-east-1:000000000000:function:${resolveFunctionId}`);
    expect(resolved.functions.get(functionName)).toBe(resolveFunctionId);
    expect([...resolved.functions.values()].sort()).toEqual([...lambdaIds].sort());
    for (const [arn, logicalId] of resolved.functions) expect(arn).toBe(localFunctionArn(logicalId));
  });

  it('keeps Retry by error name, Catch with ResultPath, Choice and the SecondsPath Wait', () => {
    // Act
    const { definition } = resolveStateMachine(template);

    // Assess
    const resolve = state(definition, 'Resolve');
    expect(resolve.Retry).toContainEqual(expect.objectContaining({ ErrorEquals: [...RETRYABLE_ERRORS] }));
    expect(resolve.Catch).toEqual([
      expect.objectContaining({
        ErrorEquals: expect.arrayContaining(['PlatformAuthError']),
        ResultPath: '$.error',
      }),
    ]);
    expect(state(definition, 'Found?').Type).toBe('Choice');
    expect(state(definition, 'WaitForExport')).toMatchObject({
      Type: 'Wait',
      SecondsPath: '$.resolved.wait_seconds',
    });
  });

  it('picks the state machine named by logical id', () => {
    // Prepare
    const [id] = logicalIdsOfType(template, 'AWS::StepFunctions::StateMachine');

    // Act
    const resolved = resolveStateMachine(template, id);

    // Assess
    expect(resolved.logicalId).toBe(id);
  });
});

describe('resolveStateMachine on hand-written templates', () => {
  it('accepts a plain-string DefinitionString', () => {
    // Prepare
    const template = { Resources: { Machine: machine({ DefinitionString: JSON.stringify(SIMPLE_ASL) }) } };

    // Act
    const resolved = resolveStateMachine(template);

    // Assess
    expect(resolved.definition).toEqual(SIMPLE_ASL);
    expect(resolved.functions.size).toBe(0);
  });

  it('applies DefinitionSubstitutions, resolving tokens inside them', () => {
    // Prepare
    const asl = {
      StartAt: 'Call',
      States: {
        Call: {
          Type: 'Task',
          Resource: placeholder('CallArn'),
          Comment: `stage ${placeholder('Stage')}`,
          End: true,
        },
      },
    };
    const template = {
      Resources: {
        CallFn: LAMBDA,
        Machine: machine({
          DefinitionString: JSON.stringify(asl),
          DefinitionSubstitutions: { CallArn: { 'Fn::GetAtt': ['CallFn', 'Arn'] }, Stage: 'local' },
        }),
      },
    };

    // Act
    const resolved = resolveStateMachine(template);

    // Assess
    expect(state(resolved.definition, 'Call')).toMatchObject({
      Resource: localFunctionArn('CallFn'),
      Comment: 'stage local',
    });
    expect(resolved.functions.get(localFunctionArn('CallFn'))).toBe('CallFn');
  });

  it('fails naming a substitution the definition uses but does not define', () => {
    // Prepare
    const template = {
      Resources: {
        Machine: machine({
          DefinitionString: `{"StartAt":"A","States":{"A":{"Type":"Pass","Comment":"${placeholder('Missing')}","End":true}}}`,
          DefinitionSubstitutions: { Other: 'x' },
        }),
      },
    };

    // Act / Assess
    expect(() => resolveStateMachine(template)).toThrow(/\$\{Missing\}/);
  });

  it('resolves pseudo parameters, Refs to other resources and GetAtt strings "Id.Arn"', () => {
    // Prepare
    const template = {
      Resources: {
        CallFn: LAMBDA,
        Table: { Type: 'AWS::DynamoDB::Table' },
        Machine: machine({
          DefinitionString: {
            'Fn::Join': [
              '',
              [
                '{"StartAt":"A","States":{"A":{"Type":"Task","Resource":"',
                { 'Fn::GetAtt': 'CallFn.Arn' },
                '","Comment":"',
                {
                  'Fn::Join': [
                    '|',
                    [{ Ref: 'AWS::Partition' }, { Ref: 'AWS::Region' }, { Ref: 'AWS::AccountId' }],
                  ],
                },
                ' ',
                { Ref: 'Table' },
                ' ',
                { Ref: 'CallFn' },
                '","End":true}}}',
              ],
            ],
          },
        }),
      },
    };

    // Act
    const resolved = resolveStateMachine(template);

    // Assess
    expect(state(resolved.definition, 'A')).toMatchObject({
      Resource: localFunctionArn('CallFn'),
      Comment: 'aws|us-east-1|000000000000 Table CallFn',
    });
    expect(resolved.functions.get('CallFn')).toBe('CallFn');
  });

  it('resolves an object Definition as well as a DefinitionString', () => {
    // Prepare
    const asl = {
      StartAt: 'A',
      States: { A: { Type: 'Task', Resource: { 'Fn::GetAtt': ['CallFn', 'Arn'] }, End: true } },
    };
    const template = { Resources: { CallFn: LAMBDA, Machine: machine({ Definition: asl }) } };

    // Act
    const resolved = resolveStateMachine(template);

    // Assess
    expect(state(resolved.definition, 'A').Resource).toBe(localFunctionArn('CallFn'));
  });

  it('fails when the template has no state machine', () => {
    // Act / Assess
    expect(() => resolveStateMachine({ Resources: { CallFn: LAMBDA } })).toThrow(
      /no AWS::StepFunctions::StateMachine/,
    );
  });

  it('fails naming every candidate when several state machines exist and no id is given', () => {
    // Prepare
    const definition = { DefinitionString: JSON.stringify(SIMPLE_ASL) };
    const template = { Resources: { First: machine(definition), Second: machine(definition) } };

    // Act / Assess
    expect(() => resolveStateMachine(template)).toThrow(/2 state machines \(First, Second\)/);
    expect(resolveStateMachine(template, 'Second').logicalId).toBe('Second');
  });

  it('fails naming the requested id and the ones that exist when the id is wrong', () => {
    // Prepare
    const template = { Resources: { First: machine({ DefinitionString: JSON.stringify(SIMPLE_ASL) }) } };

    // Act / Assess
    expect(() => resolveStateMachine(template, 'Typo')).toThrow(/"Typo".*found: First/);
  });

  it('refuses a GetAtt it cannot fake, naming the resource and its type', () => {
    // Prepare
    const template = {
      Resources: {
        Queue: { Type: 'AWS::SQS::Queue' },
        Machine: machine({
          DefinitionString: { 'Fn::Join': ['', ['{"StartAt":"', { 'Fn::GetAtt': ['Queue', 'Arn'] }, '"}']] },
        }),
      },
    };

    // Act / Assess
    expect(() => resolveStateMachine(template)).toThrow(/Queue\.Arn \(AWS::SQS::Queue\)/);
  });

  it('refuses an intrinsic it does not know', () => {
    // Prepare
    const template = { Resources: { Machine: machine({ DefinitionString: { 'Fn::Sub': 'x' } }) } };

    // Act / Assess
    expect(() => resolveStateMachine(template)).toThrow(/Fn::Sub in DefinitionString is not supported/);
  });

  it('throws ConfigurationError for something that is not a template', () => {
    // Act / Assess
    expect(() => resolveStateMachine({ resources: {} })).toThrow(ConfigurationError);
  });

  it('fails when the resolved text is not ASL', () => {
    // Prepare
    const notJson = { Resources: { Machine: machine({ DefinitionString: '{"StartAt":' }) } };
    const notAsl = { Resources: { Machine: machine({ DefinitionString: '{"Comment":"x"}' }) } };

    // Act / Assess
    expect(() => resolveStateMachine(notJson)).toThrow(/not valid JSON/);
    expect(() => resolveStateMachine(notAsl)).toThrow(/not ASL/);
  });
});
