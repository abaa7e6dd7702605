import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { z } from 'zod';
import { ConfigurationError } from '#shared/errors';
import { STEPS, type StepName } from '../lambdas/steps.ts';
import { DsrStack } from '../lib/dsr-stack.ts';

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

const functionResourceSchema = z.looseObject({
  Type: z.literal('AWS::Lambda::Function'),
  Properties: z.looseObject({
    Environment: z.looseObject({ Variables: z.record(z.string(), z.unknown()) }).optional(),
  }),
});

/** Logical id of each step's Lambda in the template, found by the DSR_STEP variable it carries. */
export function stepFunctionIds(template: Record<string, unknown>): Record<StepName, string> {
  const resources = z.record(z.string(), z.unknown()).parse(template.Resources ?? {});
  const found: Partial<Record<StepName, string>> = {};
  for (const [logicalId, resource] of Object.entries(resources)) {
    const parsed = functionResourceSchema.safeParse(resource);
    const step = parsed.success ? parsed.data.Properties.Environment?.Variables.DSR_STEP : undefined;
    if (typeof step === 'string' && isStepName(step)) found[step] = logicalId;
  }
  const ids = {} as Record<StepName, string>;
  const missing: string[] = [];
  for (const step of Object.keys(STEPS).filter(isStepName)) {
    const id = found[step];
    if (id === undefined) missing.push(step);
    else ids[step] = id;
  }
  if (missing.length > 0)
    throw new ConfigurationError(`the template has no Lambda for step(s) ${missing.join(', ')}`);
  return ids;
}

function isStepName(name: string): name is StepName {
  return Object.hasOwn(STEPS, name);
}
