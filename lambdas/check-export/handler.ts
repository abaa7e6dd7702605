// The CheckExport step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { checkExportStep } from './check-export.ts';

export const handler = makeStepHandler(checkExportStep, lambdaStepDeps);
