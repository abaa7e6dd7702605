/**
 * What local mode reads from the synthesized stack besides the state machine, so it runs as the
 * deployed stack would: each step's Lambda by logical id, the subject package settings
 * BuildPackage is given, the deadline sweep's settings and schedule, and intake's verification gate.
 */
import { z } from 'zod';
import { PACKAGE_SETTINGS_METADATA } from '../../lambdas/build-package/settings.ts';
import { ConfigurationError } from '../../lambdas/shared/errors.ts';
import {
  VERIFICATION_POLICY_ENV,
  type VerificationPolicy,
  verificationPolicyEnvSchema,
} from '../../lambdas/shared/verification.ts';
import { STEPS, type StepName } from '../../lambdas/steps.ts';

const functionResourceSchema = z.looseObject({
  Type: z.literal('AWS::Lambda::Function'),
  Metadata: z.record(z.string(), z.unknown()).optional(),
  Properties: z.looseObject({
    Environment: z.looseObject({ Variables: z.record(z.string(), z.unknown()) }).optional(),
  }),
});

/**
 * The subject package settings the stack bundles into BuildPackage (the controller, each law's
 * notice texts, from cdk.json), kept in the template as the function's metadata, so local mode's
 * packages say what the deployed stack's would.
 */
export function packageSettingsOf(template: Record<string, unknown>): string | undefined {
  const resources = z.record(z.string(), z.unknown()).parse(template.Resources ?? {});
  for (const resource of Object.values(resources)) {
    const parsed = functionResourceSchema.safeParse(resource);
    const variables = parsed.success ? parsed.data.Properties.Environment?.Variables : undefined;
    if (variables?.DSR_STEP !== 'BuildPackage') continue;
    const settings = parsed.success ? parsed.data.Metadata?.[PACKAGE_SETTINGS_METADATA] : undefined;
    return typeof settings === 'string' ? settings : undefined;
  }
  return undefined;
}

/**
 * A plain environment variable the stack sets on one step's function (e.g. VerifyErasure's
 * ERASURE_ARCHIVE_KEEP_DAYS), so local mode's shared step environment carries it too.
 */
export function stepVariableOf(
  template: Record<string, unknown>,
  step: StepName,
  name: string,
): string | undefined {
  const resources = z.record(z.string(), z.unknown()).parse(template.Resources ?? {});
  for (const resource of Object.values(resources)) {
    const parsed = functionResourceSchema.safeParse(resource);
    const variables = parsed.success ? parsed.data.Properties.Environment?.Variables : undefined;
    if (variables?.DSR_STEP !== step) continue;
    const value = variables[name];
    return typeof value === 'string' ? value : undefined;
  }
  return undefined;
}

/** The function the call recorder names the deadline sweep's calls after, as the stack names it. */
export const SWEEP_CALLER = 'DeadlineSweep';

const sweepEnvSchema = z.looseObject({
  DUE_SOON_DAYS: z.coerce.number().int().positive(),
  MINIMISE_AFTER_DAYS: z.coerce.number().int().positive(),
});
const ruleSchema = z.looseObject({
  Type: z.literal('AWS::Events::Rule'),
  Properties: z.looseObject({
    ScheduleExpression: z.string().optional(),
    Targets: z.array(z.looseObject({ Arn: z.unknown() })).optional(),
  }),
});

/**
 * The deadline sweep's settings in the synthesized stack: its function's DUE_SOON_DAYS and
 * MINIMISE_AFTER_DAYS, and the rate of the schedule that invokes it, so local mode sweeps as the
 * deployed stack would.
 */
export function sweepSettingsOf(template: Record<string, unknown>): {
  dueSoonDays: number;
  minimiseAfterDays: number;
  everyMinutes: number;
} {
  const resources = z.record(z.string(), z.unknown()).parse(template.Resources ?? {});
  for (const [logicalId, resource] of Object.entries(resources)) {
    const parsed = functionResourceSchema.safeParse(resource);
    const env = sweepEnvSchema.safeParse(
      parsed.success ? parsed.data.Properties.Environment?.Variables : undefined,
    );
    if (!env.success) continue;
    for (const candidate of Object.values(resources)) {
      const rule = ruleSchema.safeParse(candidate);
      if (!rule.success) continue;
      const targetsSweep = (rule.data.Properties.Targets ?? []).some((target) =>
        JSON.stringify(target.Arn).includes(`"${logicalId}"`),
      );
      const rate = /^rate\((\d+) (minute|hour|day)s?\)$/.exec(rule.data.Properties.ScheduleExpression ?? '');
      if (targetsSweep && rate?.[1] !== undefined && rate[2] !== undefined) {
        const unitMinutes = rate[2] === 'day' ? 1440 : rate[2] === 'hour' ? 60 : 1;
        return {
          dueSoonDays: env.data.DUE_SOON_DAYS,
          minimiseAfterDays: env.data.MINIMISE_AFTER_DAYS,
          everyMinutes: Number(rate[1]) * unitMinutes,
        };
      }
    }
  }
  throw new ConfigurationError('the template has no deadline sweep function with a rate schedule');
}

/**
 * The verification gate the stack gives the intake Lambda (stack config `verification`), so local
 * mode judges requests as the deployed stack would.
 */
export function verificationPolicyOf(template: Record<string, unknown>): VerificationPolicy {
  const resources = z.record(z.string(), z.unknown()).parse(template.Resources ?? {});
  for (const resource of Object.values(resources)) {
    const parsed = functionResourceSchema.safeParse(resource);
    const policy = parsed.success
      ? parsed.data.Properties.Environment?.Variables[VERIFICATION_POLICY_ENV]
      : undefined;
    if (policy === undefined) continue;
    const read = verificationPolicyEnvSchema.safeParse(policy);
    if (read.success) return read.data;
    throw new ConfigurationError(
      `the template's ${VERIFICATION_POLICY_ENV} is invalid: ${read.error.issues.map((issue) => issue.message).join('; ')}`,
    );
  }
  throw new ConfigurationError(`the template has no intake function with ${VERIFICATION_POLICY_ENV}`);
}

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
