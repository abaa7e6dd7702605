import { describe, expect, it } from 'vitest';
import { PlatformThrottledError, StepInputError } from '#shared/errors';
import { makeStepHandler } from '#shared/step-handler';
import { resolveSubjectStep } from '../../../../lambdas/resolve-subject/resolve-subject.ts';
import { deps, platform, requestIn, sleeps, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('makeStepHandler', () => {
  it('rejects input that does not match the step contract', async () => {
    // Prepare
    const handler = makeStepHandler(resolveSubjectStep, () => deps);

    // Act / Assess
    await expect(handler({ request_id: 'not-a-uuid' })).rejects.toBeInstanceOf(StepInputError);
    expect(platform.retrieveUser).not.toHaveBeenCalled();
  });

  it('honours a Retry-After under the cap once, then succeeds', async () => {
    // Prepare
    const id = await requestIn();
    platform.retrieveUser.mockRejectedValueOnce(new PlatformThrottledError('slow down', 3));
    const handler = makeStepHandler(resolveSubjectStep, () => deps);

    // Act / Assess
    await expect(handler({ request_id: id })).resolves.toEqual({ found: true, already_completed: false });
    expect(sleeps).toEqual([3000]);
    expect(platform.retrieveUser).toHaveBeenCalledTimes(2);
  });

  it('hands a Retry-After over the cap back to Step Functions without sleeping', async () => {
    // Prepare
    const id = await requestIn();
    platform.retrieveUser.mockRejectedValueOnce(new PlatformThrottledError('slow down', 60));
    const handler = makeStepHandler(resolveSubjectStep, () => deps);

    // Act / Assess
    await expect(handler({ request_id: id })).rejects.toBeInstanceOf(PlatformThrottledError);
    expect(sleeps).toEqual([]);
  });
});
