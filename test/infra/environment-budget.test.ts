import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { INFORMATION_MAX_CHARS } from '../../lambdas/build-package/settings.ts';
import { stackNameForStage } from '../../lib/config.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import {
  environmentBudgetErrors,
  environmentBudgets,
  LAMBDA_ENVIRONMENT_LIMIT_BYTES,
  LONGEST,
} from '../../lib/environment-budget.ts';
import { productionConfig } from './fixtures.ts';

/** The longest stage (16 characters), and every text of the package at its longest (the texts are bundled, not in the environment). */
const LONGEST_STAGE = 'a-sixteen-chars1';
const longest = (notice: Record<string, string>) =>
  Object.fromEntries(Object.keys(notice).map((key) => [key, 'é'.repeat(INFORMATION_MAX_CHARS)]));
function longestConfig() {
  return {
    ...productionConfig,
    stage: LONGEST_STAGE,
    controllerName: 'y'.repeat(200),
    controllerContact: 'z'.repeat(300),
    accessNotice: {
      gdpr: longest(productionConfig.accessNotice.gdpr),
      ccpa: longest(productionConfig.accessNotice.ccpa),
    },
  };
}

function stackOf(config: unknown, id = stackNameForStage(LONGEST_STAGE)): DsrStack {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  return new DsrStack(app, id, { config });
}

describe('function environments at their longest', () => {
  const stack = stackOf(longestConfig());
  const budgets = environmentBudgets(stack).map((budget) => ({
    ...budget,
    name: budget.path.split('/')[1] ?? budget.path,
  }));

  it('fills the package texts to their cap for this check, and none of them reaches an environment', () => {
    // Assess
    const texts = [
      ...Object.values(stack.config.accessNotice.gdpr),
      ...Object.values(stack.config.accessNotice.ccpa),
    ];
    expect(texts).toHaveLength(13);
    for (const text of texts) expect(text).toHaveLength(INFORMATION_MAX_CHARS);
    const buildPackage = budgets.find((budget) => budget.name === 'BuildPackage');
    expect(buildPackage?.largest.map((entry) => entry.name)).not.toContain('PACKAGE_SETTINGS');
  });

  it('measures every function of the stack', () => {
    // Assess
    expect(budgets.map((budget) => budget.name).sort()).toEqual(Object.keys(stack.functions).sort());
  });

  it.each(budgets)('keeps $name within 4,096 bytes: $bytes at most', ({ bytes }) => {
    // Assess
    expect(bytes).toBeLessThanOrEqual(LAMBDA_ENVIRONMENT_LIMIT_BYTES);
  });

  it("quotes BuildPackage's figure in docs/deploy.md", () => {
    // Assess
    const deploy = readFileSync(new URL('../../docs/deploy.md', import.meta.url), 'utf8').replace(
      /\s*\n\s*/g,
      ' ',
    );
    const buildPackage = budgets.find((budget) => budget.name === 'BuildPackage');
    expect(deploy).toContain(`it comes to ${buildPackage?.bytes.toLocaleString('en-US')} bytes`);
  });

  it('counts a queue URL with the longest region, DNS suffix, account and generated name', () => {
    // Assess
    const intake = budgets.find((budget) => budget.name === 'Intake');
    const queueUrl = intake?.largest.find((entry) => entry.name === 'QUARANTINE_QUEUE_URL');
    // "QUARANTINE_QUEUE_URL":"https://sqs.<region>.<suffix>/<account>/<stack>-<logical id>-<random>"
    const name = Math.min(
      80,
      `${stack.stackName}-`.length + 'QuarantineQueue'.length + 8 + 1 + LONGEST.generatedSuffix,
    );
    const url =
      'https://sqs.'.length + LONGEST.region + 1 + LONGEST.dnsSuffix + 1 + LONGEST.account + 1 + name;
    expect(queueUrl?.bytes).toBe('"QUARANTINE_QUEUE_URL":'.length + url + 2);
  });
});

describe('the synth check', () => {
  it('fails synth for a function whose environment passes the limit, naming it, its size, the limit and the fix', () => {
    // Prepare
    const stack = stackOf(productionConfig, 'Test');
    const before = environmentBudgets(stack).find(
      (budget) => budget.path === 'Test/Reconciler/Function/Resource',
    );
    const padding = LAMBDA_ENVIRONMENT_LIMIT_BYTES - (before?.bytes ?? 0);
    // A value with quotes: Lambda measures the JSON, where each one takes two bytes.
    stack.functions.Reconciler.bindEnvironment('EXTRA', '"'.repeat(padding / 2));

    // Act / Assess
    expect(() => Template.fromStack(stack)).toThrow(
      /Test\/Reconciler\/Function\/Resource may take 4,1\d\d bytes .* above the 4,096 bytes Lambda allows \(largest: EXTRA \d+.*Fix: /,
    );
  });

  it('finds nothing to refuse in a stack whose environments fit', () => {
    // Act / Assess
    expect(environmentBudgetErrors(stackOf(longestConfig()))).toEqual([]);
  });
});
