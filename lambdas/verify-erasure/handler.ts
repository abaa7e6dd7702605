// The VerifyErasure step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { verifyErasureStep } from './verify-erasure.ts';

export const handler = makeStepHandler(verifyErasureStep, lambdaStepDeps);
