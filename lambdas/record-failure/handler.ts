// The RecordFailure step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { recordFailureStep } from './record-failure.ts';

export const handler = makeStepHandler(recordFailureStep, lambdaStepDeps);
