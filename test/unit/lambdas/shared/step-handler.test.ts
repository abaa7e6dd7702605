import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { PlatformThrottledError, StepInputError } from '#shared/errors';
import { runRequestIdSchema } from '#shared/sites';
import type { StepDeps } from '#shared/step-deps';
import { makeStepHandler, type StepDefinition } from '#shared/step-handler';
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

  it("runs a site's part of a request with that site's deps, and a request of one site with the function's own", async () => {
    // Prepare: a step that answers which deps it ran with; each site's deps carry their own attempts
    const probe: StepDefinition<z.ZodType, z.ZodType> = {
      name: 'Probe',
      input: z.object({ request_id: runRequestIdSchema }),
      output: z.object({ attempts: z.number() }),
      run: async (_input, given: StepDeps) => ({ attempts: given.exportMaxAttempts }),
    };
    const asked: string[] = [];
    const handler = makeStepHandler(probe, () => ({
      ...deps,
      exportMaxAttempts: 1,
      forSite: (site) => {
        asked.push(site);
        return { ...deps, exportMaxAttempts: site === 'shop' ? 7 : 9 };
      },
    }));
    const id = '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f';

    // Act
    const own = await handler({ request_id: id });
    const shop = await handler({ request_id: `${id}_shop` });
    const blog = await handler({ request_id: `${id}_blog` });

    // Assess
    expect([own, shop, blog]).toEqual([{ attempts: 1 }, { attempts: 7 }, { attempts: 9 }]);
    expect(asked).toEqual(['shop', 'blog']);
  });
});
