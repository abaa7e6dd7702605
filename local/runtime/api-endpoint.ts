/**
 * The API on loopback, as API Gateway's HTTP API with its JWT authorizer serves it in AWS: a bearer
 * token is verified (signed with the data dir's key, its issuer, audience and expiry checked, with
 * jose) and its claims handed to the same handler (lambdas/api/api.ts). A token that does not
 * verify gives the handler no claims, so it answers 401, as API Gateway does before any function.
 */
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import type { SFNClient } from '@aws-sdk/client-sfn';
import { jwtVerify, SignJWT } from 'jose';
import { handleApiEvent } from '../../lambdas/api/api.ts';
import type { ApiDeps } from '../../lambdas/api/deps.ts';
import type { ApiRole } from '../../lambdas/api/identity.ts';
import { API_ROUTES } from '../../lambdas/api/routes.ts';
import { callerThrottle } from '../../lambdas/api/throttle.ts';
import type { StepLogger } from '../../lambdas/shared/step-deps.ts';
import { BodyTooLargeError, closeServer, LOOPBACK, listen, readBody, trackSockets } from '../http.ts';
import { localOperatorDeps } from './operator-endpoint.ts';
import { LOCAL_NAMES, type LocalWorkflow } from './workflow.ts';

/** Who signs local mode's tokens, and for whom: the claims API Gateway's authorizer would check. */
export const LOCAL_TOKEN_ISSUER = 'svc-dsr-local';
export const LOCAL_TOKEN_AUDIENCE = 'svc-dsr-api';

/** The data dir's token signing key (HS256), made on first use and kept mode 0600. */
export async function localSigningKey(dataDir: string): Promise<Uint8Array> {
  const path = join(dataDir, 'api-signing-key');
  try {
    const key = Buffer.from((await readFile(path, 'utf8')).trim(), 'base64url');
    if (key.length === 32) return key;
  } catch {
    // none yet
  }
  const key = randomBytes(32);
  await writeFile(path, `${key.toString('base64url')}\n`, { mode: 0o600 });
  return key;
}

/** A token for a local person, as the user pool issues one: subject, username, groups, an hour. */
export async function localToken(
  key: Uint8Array,
  person: { readonly username: string; readonly subject: string; readonly groups: readonly ApiRole[] },
  lifetimeSeconds = 3600,
): Promise<string> {
  return await new SignJWT({ 'cognito:username': person.username, 'cognito:groups': [...person.groups] })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(person.subject)
    .setIssuer(LOCAL_TOKEN_ISSUER)
    .setAudience(LOCAL_TOKEN_AUDIENCE)
    .setIssuedAt()
    .setExpirationTime(`${lifetimeSeconds}s`)
    .sign(key);
}

/** The account local mode's ARNs carry: the machine clients of the `/iam` routes are of it. */
export const LOCAL_ACCOUNT_ID = '000000000000';

/** The API's deps over a local workflow: the operator's, a logger, and the local intake queue. */
export function localApiDeps(
  workflow: Pick<LocalWorkflow, 'ledger' | 's3' | 'shim' | 'sqs' | 'queueUrls' | 'dynamo'>,
  sfn: SFNClient,
  logger: StepLogger,
  limits?: { readonly calls: number; readonly windowSeconds: number },
): ApiDeps {
  return {
    ...localOperatorDeps(workflow, sfn),
    logger,
    intake: { sqs: workflow.sqs, queueUrl: workflow.queueUrls.intake },
    throttle: callerThrottle(workflow.dynamo, LOCAL_NAMES.gateTable, Date.now, limits),
    account: { accountId: LOCAL_ACCOUNT_ID },
  };
}

/** The largest body any route takes, read before the route is known (API Gateway's own limit is 10 MB). */
const LARGEST_BODY = Math.max(...API_ROUTES.map((route) => route.maxBodyBytes ?? 0), 16 * 1024);

export interface ApiEndpoint {
  readonly url: string;
  close(): Promise<void>;
}

/** Serves the API on loopback (port 0 unless given) with `deps`, verifying tokens with `key`. */
export async function startApiEndpoint(deps: ApiDeps, key: Uint8Array, port = 0): Promise<ApiEndpoint> {
  const server = createServer((request, response) => {
    const send = (statusCode: number, headers: Readonly<Record<string, string>>, body: string) => {
      response.writeHead(statusCode, headers);
      response.end(body);
    };
    void (async () => {
      const body = await readBody(request, LARGEST_BODY);
      const claims = await verifiedClaims(request.headers.authorization, key);
      const url = new URL(request.url ?? '/', `http://${LOOPBACK}`);
      const answer = await handleApiEvent(deps, {
        rawPath: url.pathname,
        rawQueryString: url.search.replace(/^\?/, ''),
        body: body.toString('utf8'),
        isBase64Encoded: false,
        requestContext: {
          http: { method: request.method ?? 'GET' },
          ...(claims === undefined ? {} : { authorizer: { jwt: { claims } } }),
        },
      });
      send(answer.statusCode, answer.headers, answer.body);
    })().catch((error: unknown) => {
      const tooLarge = error instanceof BodyTooLargeError;
      send(
        tooLarge ? 413 : 500,
        { 'content-type': 'application/json', 'cache-control': 'no-store' },
        JSON.stringify({
          error: tooLarge
            ? { code: 'invalid', message: `the body is over ${LARGEST_BODY} bytes` }
            : { code: 'internal', message: 'the local API failed' },
        }),
      );
    });
  });
  const sockets = trackSockets(server);
  const { endpoint } = await listen(server, port);
  return { url: endpoint, close: () => closeServer(server, sockets) };
}

/** The claims of a bearer token this endpoint signed and that is still valid; undefined otherwise. */
async function verifiedClaims(
  authorization: string | undefined,
  key: Uint8Array,
): Promise<Record<string, unknown> | undefined> {
  const token = /^Bearer (\S+)$/i.exec(authorization ?? '')?.[1];
  if (token === undefined) return undefined;
  try {
    const { payload } = await jwtVerify(token, key, {
      issuer: LOCAL_TOKEN_ISSUER,
      audience: LOCAL_TOKEN_AUDIENCE,
      algorithms: ['HS256'],
    });
    return payload;
  } catch {
    return undefined;
  }
}
