/**
 * The operator function's URL, locally: the CLI's signed POST reaches the same handler as in AWS,
 * run as the Operator function's caller, with the local principal in place of the IAM one Lambda
 * would put in the event. The principal is the serving process's OS user: whoever can reach this
 * loopback port with the local credentials is the local operator, as whoever holds a role is in AWS.
 */

import { createServer } from 'node:http';
import { userInfo } from 'node:os';
import type { SFNClient } from '@aws-sdk/client-sfn';
import { makeOperatorHandler } from '../../lambdas/operator/handler.ts';
import { auditableOperator } from '../../lambdas/operator/identity.ts';
import type { OperatorDeps } from '../../lambdas/operator/operator.ts';
import { runAsCaller } from '../../lambdas/shared/call-recorder.ts';
import type { StepLogger } from '../../lambdas/shared/step-deps.ts';
import { closeServer, listen, readBody, trackSockets } from '../http.ts';
import { LOCAL_NAMES, type LocalWorkflow } from './workflow.ts';

/** The caller name of the operator function, as its Lambda's in the IAM proof. */
export const OPERATOR_CALLER = 'Operator';

/** Largest body read: commands are a few hundred bytes. */
const MAX_BODY_BYTES = 64 * 1024;

/** Who acts locally: `local-user:<login>` of the serving process. */
export function localPrincipal(): string {
  let login: string;
  try {
    login = userInfo().username;
  } catch {
    login = process.env.USER ?? process.env.USERNAME ?? 'unknown';
  }
  return auditableOperator(`local-user:${login}`);
}

/** A running local operator endpoint. */
export interface OperatorEndpoint {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves the operator handler on a loopback port. A request must be SigV4-signed with the local
 * credentials' access key (as the CLI signs for the function URL); anything else is 403, as a
 * function URL with AWS_IAM auth answers an unsigned call.
 */
export async function startOperatorEndpoint(
  deps: OperatorDeps,
  options: { readonly accessKeyId: string; readonly logger: StepLogger; readonly principal?: string },
): Promise<OperatorEndpoint> {
  const handler = makeOperatorHandler(
    () => deps,
    () => options.logger,
  );
  const principal = options.principal ?? localPrincipal();
  const server = createServer((request, response) => {
    const send = (status: number, body: string) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(body);
    };
    const authorization = request.headers.authorization ?? '';
    if (
      !authorization.startsWith('AWS4-HMAC-SHA256 ') ||
      !authorization.includes(`Credential=${options.accessKeyId}/`)
    ) {
      send(403, JSON.stringify({ Message: 'Forbidden: sign the request with the local credentials' }));
      return;
    }
    readBody(request, MAX_BODY_BYTES)
      .then((body) =>
        runAsCaller(OPERATOR_CALLER, () =>
          handler({
            version: '2.0',
            requestContext: {
              http: { method: request.method ?? 'GET' },
              authorizer: { iam: { userArn: principal } },
            },
            body: body.toString('utf8'),
            isBase64Encoded: false,
          }),
        ),
      )
      .then(
        (answer) => send(answer.statusCode, answer.body),
        (error: unknown) =>
          send(
            500,
            JSON.stringify({
              ok: false,
              code: 'internal',
              message: error instanceof Error ? error.message : String(error),
            }),
          ),
      );
  });
  const sockets = trackSockets(server);
  const { endpoint } = await listen(server);
  return { url: `${endpoint}/`, close: () => closeServer(server, sockets) };
}

/**
 * The operator function's deps over local mode's workflow, as the stack gives them to the Lambda:
 * the ledger, S3, Step Functions (`sfn`, a client of the workflow's shim) and the local names.
 */
export function localOperatorDeps(
  workflow: Pick<LocalWorkflow, 'ledger' | 's3' | 'shim'>,
  sfn: SFNClient,
): OperatorDeps {
  return {
    ledger: workflow.ledger,
    s3: workflow.s3,
    sfn,
    names: {
      ArchiveBucketName: LOCAL_NAMES.archiveBucket,
      AuditBucketName: LOCAL_NAMES.auditBucket,
      StateMachineArn: workflow.shim.stateMachineArn,
    },
    clock: () => new Date(),
  };
}
