import { App, CfnResource, Stack, TagManager } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { DsrStack, TAG_KEYS } from '../../lib/dsr-stack.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
const stack = new DsrStack(app, 'svc-dsr-qa', { config: { ...productionConfig, stage: 'qa' } });
const resources = Template.fromStack(stack).toJSON().Resources as Record<string, CfnObject>;

/** The logical ids of every resource CDK can tag (either tagging interface), found in the construct tree. */
const taggable = stack.node
  .findAll()
  .filter(
    (node): node is CfnResource =>
      node instanceof CfnResource && (TagManager.isTaggable(node) || TagManager.isTaggableV2(node)),
  )
  .map((resource) => Stack.of(resource).getLogicalId(resource));

/** A resource's tags as a map, whichever of the two CloudFormation shapes its type uses. */
function tagsOf(logicalId: string): Record<string, string> {
  // A user pool keeps its tags as a map under UserPoolTags.
  const tags: unknown =
    resources[logicalId]?.Properties?.Tags ?? resources[logicalId]?.Properties?.UserPoolTags;
  if (Array.isArray(tags)) return Object.fromEntries(tags.map((tag: CfnObject) => [tag.Key, tag.Value]));
  return (tags ?? {}) as Record<string, string>;
}

function idsOf(type: string, prefix = ''): string[] {
  return Object.entries(resources)
    .filter(([id, resource]) => resource.Type === type && id.startsWith(prefix))
    .map(([id]) => id);
}

describe('tags', () => {
  it('finds the taggable resources of every kind the stack has', () => {
    // Assess
    const types = new Set(taggable.map((id) => resources[id]?.Type));

    expect(taggable.length).toBeGreaterThan(40);
    for (const type of [
      'AWS::KMS::Key',
      'AWS::SQS::Queue',
      'AWS::DynamoDB::Table',
      'AWS::S3::Bucket',
      'AWS::SecretsManager::Secret',
      'AWS::Lambda::Function',
      'AWS::Logs::LogGroup',
      'AWS::IAM::Role',
      'AWS::StepFunctions::StateMachine',
      'AWS::SNS::Topic',
      'AWS::CloudWatch::Alarm',
    ]) {
      expect(types).toContain(type);
    }
  });

  it('tags every taggable resource with the project, the stage and a data classification', () => {
    // Assess
    const missing = taggable.filter((id) => {
      const tags = tagsOf(id);
      return (
        tags[TAG_KEYS.project] !== 'svc-dsr' ||
        tags[TAG_KEYS.stage] !== 'qa' ||
        !['personal', 'operational'].includes(tags[TAG_KEYS.dataClassification] ?? '')
      );
    });

    expect(missing).toEqual([]);
  });

  it('classifies the queues, the ledger, the archive and audit buckets, the data key and the secrets as personal, the rest as operational', () => {
    // Assess
    const personal = [
      ...idsOf('AWS::SQS::Queue').filter((id) => !id.startsWith('StatusEventsFailureQueue')),
      ...idsOf('AWS::DynamoDB::Table', 'Ledger'),
      ...idsOf('AWS::S3::Bucket', 'ArchiveBucket'),
      ...idsOf('AWS::S3::Bucket', 'AuditBucket'),
      ...idsOf('AWS::KMS::Key', 'DataKey'),
      ...idsOf('AWS::SecretsManager::Secret'),
      // The people who act: their names, e-mail addresses and second factors.
      ...idsOf('AWS::Cognito::UserPool'),
    ];
    // Three queues, the ledger, two buckets, the data key, three secrets and the user pool.
    expect(personal).toHaveLength(11);

    const classified = (value: string) =>
      taggable.filter((id) => tagsOf(id)[TAG_KEYS.dataClassification] === value).sort();
    expect(classified('personal')).toEqual(personal.sort());
    expect(classified('operational')).toEqual(taggable.filter((id) => !personal.includes(id)).sort());
    expect(classified('operational')).toEqual(
      expect.arrayContaining([
        ...idsOf('AWS::S3::Bucket', 'AccessLogBucket'),
        ...idsOf('AWS::KMS::Key', 'OperationsKey'),
        // Load-control state only: request ids, times and task tokens, nothing about a subject.
        ...idsOf('AWS::DynamoDB::Table', 'PlatformGate'),
        // Where in the ledger stream a batch of status events failed (shard, sequence numbers).
        ...idsOf('AWS::SQS::Queue', 'StatusEventsFailureQueue'),
      ]),
    );
  });
});
