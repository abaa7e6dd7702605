import { Logger } from '@aws-lambda-powertools/logger';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SFNClient } from '@aws-sdk/client-sfn';
import { z } from 'zod';
import { parseEnv } from '#shared/config';
import { Ledger } from '#shared/ledger';
import { powertoolsLogger } from '#shared/runtime';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import { sfnStarter } from '../intake/aws.ts';
import { sfnLookup } from './aws.ts';
import {
  type ReconcileOptions,
  type ReconcilerDeps,
  type ReconcileSummary,
  reconcile,
} from './reconciler.ts';

/** Environment of the reconciler Lambda. */
export const reconcilerEnvSchema = z.object({
  TABLE_NAME: z.string().min(1),
  STATE_MACHINE_ARN: z
    .string()
    .regex(/^arn:[^:]+:states:[^:]*:\d*:stateMachine:[^:]+$/, 'expected a state machine ARN'),
  MAX_RESUMES: z.coerce.number().int().min(0).max(20).default(3),
  GRACE_SECONDS: z.coerce.number().int().min(0).default(600),
});

/** The scheduled handler: one reconciliation pass; the summary names request ids only. */
export function makeReconcilerHandler(deps: () => ReconcilerDeps & ReconcileOptions) {
  return async (): Promise<ReconcileSummary> => {
    const all = deps();
    return reconcile(all, { maxResumes: all.maxResumes, graceSeconds: all.graceSeconds });
  };
}

let lambdaDeps: (ReconcilerDeps & ReconcileOptions) | undefined;

function reconcilerLambdaDeps(): ReconcilerDeps & ReconcileOptions {
  if (lambdaDeps === undefined) {
    const env = parseEnv(reconcilerEnvSchema, process.env);
    const sfn = prepareSdkClient(new SFNClient(CACHED_MIDDLEWARE));
    lambdaDeps = {
      ledger: new Ledger(prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE)), env.TABLE_NAME),
      describe: sfnLookup(sfn, env.STATE_MACHINE_ARN),
      start: sfnStarter(sfn, env.STATE_MACHINE_ARN),
      clock: () => new Date(),
      logger: powertoolsLogger(new Logger({ serviceName: 'svc-dsr' })),
      maxResumes: env.MAX_RESUMES,
      graceSeconds: env.GRACE_SECONDS,
    };
  }
  return lambdaDeps;
}

export const handler = makeReconcilerHandler(reconcilerLambdaDeps);
