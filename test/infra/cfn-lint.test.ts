/**
 * The synthesized template through cfn-lint, AWS's own linter of CloudFormation (the machine image
 * holds it): no error, whatever warnings it prints about dependencies CDK states twice.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { productionConfig } from './fixtures.ts';

interface Finding {
  readonly Level: string;
  readonly Rule: { readonly Id: string };
  readonly Message: string;
}

/** cfn-lint's findings on a template, as JSON; it exits non-zero whenever it finds anything. */
function lint(template: unknown): Finding[] {
  const dir = mkdtempSync(join(tmpdir(), 'svc-dsr-cfn-lint-'));
  try {
    const file = join(dir, 'template.json');
    writeFileSync(file, JSON.stringify(template));
    let output: string;
    try {
      output = execFileSync('cfn-lint', ['--format', 'json', file], { encoding: 'utf8' });
    } catch (error) {
      const { stdout } = error as { stdout?: string };
      if (stdout === undefined || stdout === '') throw error;
      output = stdout;
    }
    return JSON.parse(output) as Finding[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('cfn-lint', () => {
  it('finds no error in the production stack, the API and its user pool included', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const template = Template.fromStack(new DsrStack(app, 'Linted', { config: productionConfig })).toJSON();

    // Act
    const findings = lint(template);

    // Assess
    expect(Object.values(template.Resources as Record<string, { Type: string }>).map((r) => r.Type)).toEqual(
      expect.arrayContaining([
        'AWS::Cognito::UserPool',
        'AWS::ApiGatewayV2::Api',
        'AWS::ApiGatewayV2::Authorizer',
      ]),
    );
    expect(
      findings.filter((finding) => finding.Level === 'Error').map((f) => `${f.Rule.Id}: ${f.Message}`),
    ).toEqual([]);
  }, 120_000);

  it('does report an error it is shown (the check is live)', () => {
    // Act
    const findings = lint({
      AWSTemplateFormatVersion: '2010-09-09',
      Resources: { Table: { Type: 'AWS::DynamoDB::Table', Properties: { BillingMode: 'SOMETIMES' } } },
    });

    // Assess
    expect(findings.some((finding) => finding.Level === 'Error')).toBe(true);
  }, 60_000);
});
