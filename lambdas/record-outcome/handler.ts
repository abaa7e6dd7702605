// The RecordOutcome step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { recordOutcomeStep } from './record-outcome.ts';

export const handler = makeStepHandler(recordOutcomeStep, lambdaStepDeps);
