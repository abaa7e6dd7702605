// The ArchiveExport step's Lambda entry.
import { lambdaStepDeps } from '#shared/runtime';
import { makeStepHandler } from '#shared/step-handler';
import { archiveExportStep } from './archive-export.ts';

export const handler = makeStepHandler(archiveExportStep, lambdaStepDeps);
