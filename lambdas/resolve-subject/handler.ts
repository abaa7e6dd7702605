// The ResolveSubject step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { resolveSubjectStep } from './resolve-subject.ts';

export const handler = makeStepHandler(resolveSubjectStep, lambdaStepDeps);
