import { describe, expect, it } from 'vitest';
import { ACCOUNT, REGION, TemplateModel } from './template-model.ts';

const template = {
  Resources: {
    Bucket: { Type: 'AWS::S3::Bucket', Properties: {} },
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a CloudFormation Fn::Sub, not a JavaScript template
    Named: { Type: 'AWS::SQS::Queue', Properties: { QueueName: { 'Fn::Sub': '${AWS::StackName}-intake' } } },
    Key: { Type: 'AWS::KMS::Key', Properties: { KeyPolicy: { Statement: [] } } },
    Machine: {
      Type: 'AWS::StepFunctions::StateMachine',
      Properties: { StateMachineName: 'svc-dsr-dev-workflow' },
    },
    Policy: {
      Type: 'AWS::S3::BucketPolicy',
      Properties: {
        Bucket: { Ref: 'Bucket' },
        PolicyDocument: {
          Statement: [
            {
              Effect: 'Deny',
              Principal: { AWS: '*' },
              Action: 's3:*',
              Resource: { 'Fn::Join': ['', [{ 'Fn::GetAtt': ['Bucket', 'Arn'] }, '/*']] },
              Condition: { Bool: { 'aws:SecureTransport': 'false' } },
            },
          ],
        },
      },
    },
  },
  Outputs: {
    QueueUrl: { Value: { Ref: 'Named' } },
    Guid: { Value: { 'Fn::Select': [2, { 'Fn::Split': ['/', { Ref: 'AWS::StackId' }] }] } },
  },
};

describe('the template model', () => {
  const model = new TemplateModel(template, 'svc-dsr-dev');

  it('resolves Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select and Fn::Split as AWS would name the resources', () => {
    const bucket = model.ref('Bucket');
    expect(bucket).toMatch(/^svc-dsr-dev-bucket-[0-9a-f]{12}$/);
    expect(model.getAtt('Bucket', 'Arn')).toBe(`arn:aws:s3:::${bucket}`);
    expect(model.outputs().QueueUrl).toBe(
      `https://sqs.${REGION}.amazonaws.com/${ACCOUNT}/svc-dsr-dev-intake`,
    );
    expect(model.getAtt('Machine', 'Arn')).toBe(
      `arn:aws:states:${REGION}:${ACCOUNT}:stateMachine:svc-dsr-dev-workflow`,
    );
    expect(model.getAtt('Key', 'Arn')).toBe(`arn:aws:kms:${REGION}:${ACCOUNT}:key/${model.keyId('Key')}`);
    expect(model.outputs().Guid).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('gives the same names on every run', () => {
    expect(new TemplateModel(template, 'svc-dsr-dev').ref('Bucket')).toBe(model.ref('Bucket'));
  });

  it('finds the bucket policy of an object by its bucket, resolved', () => {
    const policy = model.resourcePolicy(`${model.getAtt('Bucket', 'Arn')}/audit/x.json`);
    expect(policy?.Statement[0]?.Resource).toBe(`${model.getAtt('Bucket', 'Arn')}/*`);
    expect(model.resourcePolicy('arn:aws:s3:::another-bucket/x')).toBeUndefined();
  });

  it('refuses an attribute it cannot name, rather than guess', () => {
    expect(() => model.getAtt('Bucket', 'WebsiteURL')).toThrow(/does not know AWS::S3::Bucket.WebsiteURL/);
  });
});
