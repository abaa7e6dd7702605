// The production stack synthesized in this process: its CloudFormation template as JSON.
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { DsrStack } from './dsr-stack.ts';

/**
 * Synthesizes the production stack in-process (no bundling) and returns its CloudFormation template.
 * CDK's built-in template validation is left to `npm run synth` and the stack tests: here it would
 * only add seconds to every local start.
 */
export function synthesizeTemplate(config: unknown = {}): Record<string, unknown> {
  const app = new App({
    context: { 'aws:cdk:bundling-stacks': [] },
    builtinCloudFormationValidation: false,
  });
  const stack = new DsrStack(app, 'SvcDsrLocal', { config });
  return Template.fromStack(stack).toJSON();
}
