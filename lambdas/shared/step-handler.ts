import type { z } from 'zod';
import { awsTransientError, PlatformThrottledError, StepInputError } from './errors.ts';
import type { StepDeps, StepLogger } from './step-deps.ts';

/** A step: its input and output contracts and its domain function. */
export interface StepDefinition<I extends z.ZodType, O extends z.ZodType> {
  readonly name: string;
  readonly input: I;
  readonly output: O;
  run(input: z.infer<I>, deps: StepDeps): Promise<z.infer<O>>;
}

/** Any step, for code that handles them all alike (the local runtime, the stack). */
export type AnyStep = StepDefinition<z.ZodType, z.ZodType>;

/**
 * The thin adapter every step Lambda is: parse the input, run the domain function, validate the
 * output. A 429 whose Retry-After fits under the cap is honoured here once; longer ones go back to
 * Step Functions' Retry. An AWS throttle or transient fault, in whatever spelling its SDK client
 * uses, leaves as one AwsTransientError, which the state machine retries.
 */
export function makeStepHandler<I extends z.ZodType, O extends z.ZodType>(
  step: StepDefinition<I, O>,
  deps: () => Promise<StepDeps> | StepDeps,
): (event: unknown) => Promise<z.infer<O>> {
  return async (event) => {
    try {
      return await runStep(step, deps, event);
    } catch (error) {
      throw awsTransientError(error) ?? error;
    }
  };
}

async function runStep<I extends z.ZodType, O extends z.ZodType>(
  step: StepDefinition<I, O>,
  deps: () => Promise<StepDeps> | StepDeps,
  event: unknown,
): Promise<z.infer<O>> {
  const parsed = step.input.safeParse(event);
  if (!parsed.success) {
    throw new StepInputError(
      `${step.name}: the input does not match the step's contract (${parsed.error.issues.map((issue) => issue.path.join('.') || '(input)').join(', ')})`,
    );
  }
  const base = await deps();
  const requestId =
    typeof event === 'object' && event !== null && 'request_id' in event ? String(event.request_id) : '';
  const stepDeps: StepDeps = {
    ...base,
    logger: withKeys(base.logger, { request_id: requestId, step: step.name }),
  };
  const attempt = async () => step.output.parse(await step.run(parsed.data, stepDeps)) as z.infer<O>;
  try {
    return await attempt();
  } catch (error) {
    if (
      error instanceof PlatformThrottledError &&
      error.retryAfterSeconds !== undefined &&
      error.retryAfterSeconds <= base.retryAfterCapSeconds
    ) {
      stepDeps.logger.warn('platform throttled; waiting as asked', {
        retry_after_seconds: error.retryAfterSeconds,
      });
      await base.sleep(error.retryAfterSeconds * 1000);
      return await attempt();
    }
    throw error;
  }
}

function withKeys(logger: StepLogger, keys: Record<string, unknown>): StepLogger {
  return {
    info: (message, attributes) => logger.info(message, { ...keys, ...attributes }),
    warn: (message, attributes) => logger.warn(message, { ...keys, ...attributes }),
    error: (message, attributes) => logger.error(message, { ...keys, ...attributes }),
    debug: (message, attributes) => logger.debug(message, { ...keys, ...attributes }),
  };
}
