// The CorrectSubject step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { correctSubjectStep } from './correct-subject.ts';

export const handler = makeStepHandler(correctSubjectStep, lambdaStepDeps);
