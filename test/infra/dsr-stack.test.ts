import { App } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { DsrStack } from '../../lib/dsr-stack.ts';

function synth(): Template {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  return Template.fromStack(new DsrStack(app, 'Test'));
}

describe('DsrStack queues', () => {
  it('encrypts every queue with the customer-managed key', () => {
    const template = synth();
    const queues = template.findResources('AWS::SQS::Queue');
    expect(Object.keys(queues)).toHaveLength(3);
    for (const queue of Object.values(queues)) {
      expect(queue.Properties.KmsMasterKeyId).toEqual({
        'Fn::GetAtt': [expect.stringMatching(/^DataKey/), 'Arn'],
      });
    }
    template.hasResourceProperties('AWS::KMS::Key', { EnableKeyRotation: true });
  });

  it('sends intake messages to the dead-letter queue after five receives', () => {
    synth().hasResourceProperties('AWS::SQS::Queue', {
      RedrivePolicy: { deadLetterTargetArn: Match.anyValue(), maxReceiveCount: 5 },
    });
  });

  it('keeps dead letters and quarantined messages for 14 days', () => {
    const queues = synth().findResources('AWS::SQS::Queue', {
      Properties: { MessageRetentionPeriod: 14 * 24 * 3600 },
    });
    expect(Object.keys(queues)).toHaveLength(2);
  });

  it('refuses non-TLS access to every queue', () => {
    const policies = synth().findResources('AWS::SQS::QueuePolicy');
    expect(Object.keys(policies)).toHaveLength(3);
    for (const policy of Object.values(policies)) {
      expect(policy.Properties.PolicyDocument.Statement).toContainEqual(
        expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
      );
    }
  });
});
