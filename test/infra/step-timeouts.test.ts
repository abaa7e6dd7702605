import { describe, expect, it } from 'vitest';
import { STEP_DIRECTORIES, type StepName } from '../../lambdas/steps.ts';
import { localFunctionArn, resolveStateMachine } from '../../lib/asl.ts';
import {
  DEFAULT_PLATFORM_TIMING,
  LAMBDA_MAX_TIMEOUT_SECONDS,
  STEP_TIMEOUT_MARGIN_SECONDS,
  StepTimeoutError,
  stepChain,
  stepTimeout,
} from '../../lib/step-timeouts.ts';
import { synthesizeTemplate } from '../../lib/template.ts';
import type { CfnObject } from './fixtures.ts';

const template = synthesizeTemplate();
const resources = template.Resources as Record<string, { Type: string; Properties: CfnObject }>;
const { definition } = resolveStateMachine(template);
const states = Object.values(definition.States as Record<string, CfnObject>);
const steps = Object.keys(STEP_DIRECTORIES) as StepName[];

/** The step's function in the template, found by its DSR_STEP variable. */
function functionOf(step: StepName): { id: string; timeout: number } {
  const found = Object.entries(resources).filter(
    ([, resource]) =>
      resource.Type === 'AWS::Lambda::Function' &&
      resource.Properties.Environment?.Variables?.DSR_STEP === step,
  );
  expect(found, step).toHaveLength(1);
  const [id = '', resource] = found[0] ?? [];
  return { id, timeout: resource?.Properties.Timeout };
}

describe('step timeouts', () => {
  it.each(steps)('gives %s a Lambda timeout of at least its worst chain plus the margin', (step) => {
    // Assess
    const chain = stepChain(step);
    const { timeout } = functionOf(step);

    expect(timeout).toBeGreaterThanOrEqual(chain.chainSeconds + STEP_TIMEOUT_MARGIN_SECONDS);
    expect(timeout).toBeGreaterThanOrEqual(chain.requiredSeconds);
    expect(timeout).toBeLessThanOrEqual(LAMBDA_MAX_TIMEOUT_SECONDS);
  });

  it.each(steps)('lets every Task of %s run longer than its Lambda may', (step) => {
    // Assess
    const { id, timeout } = functionOf(step);
    const arn = localFunctionArn(id);
    const tasks = states.filter((state) => state.Type === 'Task' && JSON.stringify(state).includes(arn));
    expect(tasks.length).toBeGreaterThan(0);
    for (const task of tasks) expect(task.TimeoutSeconds).toBeGreaterThanOrEqual(timeout);
  });

  it('gives EraseSubject room for two throttled calls, each retried, waited out and sent twice', () => {
    // Act / Assess
    // A send: up to 3 s for a rate slot and 10 s before it is abandoned; a call: two sends (a
    // token read afresh); an attempt: two calls; a run: two attempts and a 20 s Retry-After; an
    // invocation: two runs. 2 x (2 x 2 x 2 x 13 + 20) = 248 s.
    expect(stepChain('EraseSubject').chainSeconds).toBe(248);
    expect(functionOf('EraseSubject').timeout).toBeGreaterThanOrEqual(248 + STEP_TIMEOUT_MARGIN_SECONDS);
  });

  it('grows with the platform call timeout', () => {
    // Act
    const longer = stepChain('ResolveSubject', { ...DEFAULT_PLATFORM_TIMING, callTimeoutMs: 30_000 });

    // Assess
    expect(longer.timeoutSeconds).toBeGreaterThan(stepChain('ResolveSubject').timeoutSeconds);
  });

  it('refuses at synth a chain that Lambda cannot hold, saying which step and the fix', () => {
    // Prepare
    const slow = { ...DEFAULT_PLATFORM_TIMING, callTimeoutMs: 60_000 };

    // Act / Assess
    expect(() => stepTimeout('EraseSubject', slow)).toThrow(StepTimeoutError);
    expect(() => stepTimeout('EraseSubject', slow)).toThrow(
      /EraseSubject step may need \d+ s .* more than Lambda's 900 s .* Fix: /,
    );
  });
});
