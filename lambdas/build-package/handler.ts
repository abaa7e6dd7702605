// The BuildPackage step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { buildPackageStep } from './build-package.ts';

export const handler = makeStepHandler(buildPackageStep, lambdaStepDeps);
