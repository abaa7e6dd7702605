import { readFileSync } from 'node:fs';
import { App, Aspects, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { AwsSolutionsChecks } from 'cdk-nag';
import { describe, expect, it } from 'vitest';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

const AWS_SOLUTIONS = Match.stringLikeRegexp('AwsSolutions-.*');

function checked(build: (app: App) => Stack): Stack {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = build(app);
  Aspects.of(stack).add(new AwsSolutionsChecks({ reports: false }));
  return stack;
}

const stack = checked((app) => new DsrStack(app, 'Test', { config: productionConfig }));
const annotations = Annotations.fromStack(stack);

describe('cdk-nag AwsSolutions', () => {
  it('leaves no error unacknowledged', () => {
    // Assess
    const errors = annotations.findError('*', AWS_SOLUTIONS);
    expect(errors.map((error) => `${error.id}: ${String(error.entry.data).split('\n')[0]}`)).toEqual([]);
  });

  it('leaves no warning unacknowledged', () => {
    // Assess
    const warnings = annotations.findWarning('*', AWS_SOLUTIONS);
    expect(warnings.map((warning) => `${warning.id}: ${String(warning.entry.data).split('\n')[0]}`)).toEqual(
      [],
    );
  });

  it('acknowledges findings only on single resources, each with a reason and wildcards listed one by one', () => {
    // Assess
    const template = Template.fromStack(stack).toJSON();
    expect(template.Metadata?.cdk_nag).toBeUndefined();
    const acknowledgements = Object.entries(template.Resources as Record<string, CfnObject>).flatMap(
      ([id, resource]) =>
        (resource.Metadata?.cdk_nag?.rules_to_suppress ?? []).map((rule: CfnObject) => ({ id, rule })),
    );
    expect(acknowledgements.length).toBeGreaterThan(0);
    for (const { id, rule } of acknowledgements) {
      expect({ id, reason: rule.reason.length >= 40 }).toEqual({ id, reason: true });
      if (rule.id === 'AwsSolutions-IAM5') {
        expect({ id, appliesTo: rule.applies_to }).toEqual({ id, appliesTo: expect.any(Array) });
        for (const finding of rule.applies_to) expect(typeof finding).toBe('string');
      }
    }
  });

  it('acknowledges only the findings reviewed in docs/security.md', () => {
    // Assess
    const template = Template.fromStack(stack).toJSON();
    const ruleIds = new Set(
      Object.values(template.Resources as Record<string, CfnObject>).flatMap((resource) =>
        (resource.Metadata?.cdk_nag?.rules_to_suppress ?? []).map((rule: CfnObject) => rule.id),
      ),
    );
    expect([...ruleIds].sort()).toEqual([
      'AwsSolutions-DDB3',
      'AwsSolutions-IAM5',
      'AwsSolutions-SMG4',
      'AwsSolutions-SQS3',
    ]);
    const securityDoc = readFileSync(new URL('../../docs/security.md', import.meta.url), 'utf8');
    for (const ruleId of ruleIds) expect(securityDoc).toContain(`| ${ruleId} |`);
  });

  it('does report a finding it has not been told about (the check is live)', () => {
    // Act
    const careless = checked((app) => {
      const bare = new Stack(app, 'Careless');
      new sqs.Queue(bare, 'Plain', { encryption: sqs.QueueEncryption.UNENCRYPTED });
      return bare;
    });

    // Assess
    const errors = Annotations.fromStack(careless).findError('*', AWS_SOLUTIONS);
    expect(errors.map((error) => String(error.entry.data))).toContainEqual(
      expect.stringContaining('AwsSolutions-SQS4'),
    );
  });
});
