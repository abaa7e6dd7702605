// The StartExport step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { startExportStep } from './start-export.ts';

export const handler = makeStepHandler(startExportStep, lambdaStepDeps);
