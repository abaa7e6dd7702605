import { fileURLToPath } from 'node:url';
import { App, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { describe, expect, it } from 'vitest';
import { DsrFunction } from '../../lib/dsr-function.ts';
import type { CfnObject } from './fixtures.ts';

const entry = fileURLToPath(new URL('../../lambdas/deadline-sweep/handler.ts', import.meta.url));

function withFunction(): { stack: Stack; fn: DsrFunction } {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new Stack(app, 'Test');
  return { stack, fn: new DsrFunction(stack, 'Fn', { entry }) };
}

function statements(stack: Stack): CfnObject[] {
  const policies = Object.values(Template.fromStack(stack).findResources('AWS::IAM::Policy'));
  return policies.flatMap((policy) => policy.Properties.PolicyDocument.Statement);
}
const actions = (list: CfnObject[]) => list.flatMap((statement) => [statement.Action].flat());

describe('DsrFunction', () => {
  it('has only its log stream, X-Ray and nothing else before anything is bound', () => {
    // Act
    const { stack } = withFunction();

    // Assess
    expect(actions(statements(stack)).sort()).toEqual(
      [
        'logs:CreateLogStream',
        'logs:PutLogEvents',
        'xray:PutTelemetryRecords',
        'xray:PutTraceSegments',
      ].sort(),
    );
    Template.fromStack(stack).hasResourceProperties('AWS::Logs::LogGroup', { RetentionInDays: 365 });
  });

  it('refuses a second, different value for the same variable', () => {
    // Prepare
    const { fn } = withFunction();
    fn.bindEnvironment('TABLE_NAME', 'one');

    // Act / Assess
    expect(() => fn.bindEnvironment('TABLE_NAME', 'two')).toThrow(
      'TABLE_NAME is already set to a different value',
    );
    expect(() => fn.bindEnvironment('TABLE_NAME', 'one')).not.toThrow();
  });

  it('binds a queue for sending with the key use SQS needs, and none for an unencrypted queue', () => {
    // Prepare
    const { stack, fn } = withFunction();
    const key = new kms.Key(stack, 'Key');

    // Act
    fn.bindQueue(new sqs.Queue(stack, 'Encrypted', { encryptionMasterKey: key }), 'send', 'OUT_QUEUE_URL');
    fn.bindQueue(
      new sqs.Queue(stack, 'Plain', { encryption: sqs.QueueEncryption.SQS_MANAGED }),
      'send',
      'OTHER_QUEUE_URL',
    );

    // Assess
    const all = statements(stack);
    expect(actions(all).filter((action) => action === 'sqs:SendMessage')).toHaveLength(2);
    const keyUse = all.filter((statement) =>
      actions([statement]).some((action) => action.startsWith('kms:')),
    );
    expect(keyUse).toHaveLength(1);
    expect(JSON.stringify(keyUse[0]?.Condition)).toContain('sqs.');
    Template.fromStack(stack).hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: { OUT_QUEUE_URL: { Ref: Match.stringLikeRegexp('^Encrypted') } } },
    });
  });

  it('binds an archive bucket for reading with GetObject and ListBucket only', () => {
    // Prepare
    const { stack, fn } = withFunction();
    const key = new kms.Key(stack, 'Key');

    // Act
    fn.bindArchiveBucket(new s3.Bucket(stack, 'Bucket', { encryptionKey: key }), 'read');

    // Assess
    const granted = actions(statements(stack)).filter((action) => /^(s3|kms):/.test(action));
    expect(granted.sort()).toEqual(['kms:Decrypt', 's3:GetObject', 's3:ListBucket']);
  });
});
