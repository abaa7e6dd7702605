// The EraseSubject step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { eraseSubjectStep } from './erase-subject.ts';

export const handler = makeStepHandler(eraseSubjectStep, lambdaStepDeps);
