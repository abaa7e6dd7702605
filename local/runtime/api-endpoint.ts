/**
 * The API on loopback, as API Gateway's HTTP API with its JWT authorizer serves it in AWS: a bearer
 * token is verified (signed with the data dir's key, its issuer, audience and expiry checked, with
 * jose) and its claims handed to the same handler (lambdas/api/api.ts). A token that does not
 * verify gives the handler no claims, so it answers 401, as API Gateway does before any function.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import type { SFNClient } from '@aws-sdk/client-sfn';
import { jwtVerify, SignJWT } from 'jose';
import { z } from 'zod';
import { buildConsole } from '../../bin/build-console.mjs';
import { CONSOLE_CONFIG_FILE, type ConsoleConfig, consoleHeaders } from '../../console/headers.ts';
import { API_HEADERS } from '../../lambdas/api/answers.ts';
import { handleApiEvent } from '../../lambdas/api/api.ts';
import type { ApiDeps } from '../../lambdas/api/deps.ts';
import type { API_ROLES, ApiRole } from '../../lambdas/api/identity.ts';
import { API_ROUTES } from '../../lambdas/api/routes.ts';
import { callerThrottle } from '../../lambdas/api/throttle.ts';
import { runAsCaller } from '../../lambdas/shared/call-recorder.ts';
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
  workflow: Pick<
    LocalWorkflow,
    'ledger' | 's3' | 'shim' | 'sqs' | 'queueUrls' | 'dynamo' | 'documents' | 'timeZone'
  >,
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
    // Local mode keeps every archive (its data dir has no lifecycle rule), so none is expired by policy.
    evidence: {
      dynamo: workflow.documents,
      ledgerTableName: LOCAL_NAMES.table,
      timeZone: workflow.timeZone,
    },
  };
}

/** The largest body any route takes, read before the route is known (API Gateway's own limit is 10 MB). */
const LARGEST_BODY = Math.max(...API_ROUTES.map((route) => route.maxBodyBytes ?? 0), 16 * 1024);

/** The caller name of the API function, as its Lambda's in the IAM proof. */
export const API_CALLER = 'Api';

/** The path local mode's sign-in takes a one-time code at (the user pool's place in AWS). */
export const LOCAL_SIGN_IN_PATH = '/local/sign-in';

/** How long a one-time sign-in code lasts. */
const SIGN_IN_CODE_MS = 15 * 60 * 1000;

const signInSchema = z.strictObject({
  code: z.string().min(1).max(128),
  username: z
    .string()
    .regex(
      /^[A-Za-z0-9._-]{1,64}$/,
      'username: 1-64 letters, digits, ".", "_" or "-" (it names you in the audit records)',
    ),
});

/** Where local mode serves the privacy console: beside the API, so the page calls its own origin. */
export const LOCAL_CONSOLE_PATH = '/console/';

/** The console's files and their content types: nothing else under LOCAL_CONSOLE_PATH is served. */
const CONSOLE_FILES: Readonly<Record<string, string>> = {
  'index.html': 'text/html; charset=utf-8',
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
};

/** The console as local mode serves it: built from console/ into `dir`, its dates in `timeZone`. */
export interface LocalConsole {
  readonly dir: string;
  readonly timeZone: string;
}

/** Builds the console into `<dataDir>/console/` (esbuild, a fraction of a second), so what is served is the sources'. */
export async function localConsole(dataDir: string, timeZone: string): Promise<LocalConsole> {
  const dir = join(dataDir, 'console');
  await mkdir(dir, { recursive: true });
  await buildConsole(dir);
  return { dir, timeZone };
}

/** The answer to a GET under LOCAL_CONSOLE_PATH: a console file with the console's headers, or 404. */
async function consoleFile(
  held: LocalConsole,
  name: string,
): Promise<{ status: number; headers: Record<string, string>; body: string | Buffer }> {
  const headers = consoleHeaders('self');
  if (name === CONSOLE_CONFIG_FILE) {
    const config: ConsoleConfig = {
      api_url: '',
      time_zone: held.timeZone,
      sign_in: { kind: 'local', path: LOCAL_SIGN_IN_PATH },
    };
    return {
      status: 200,
      headers: { ...headers, 'content-type': 'application/json', 'cache-control': 'no-store' },
      body: JSON.stringify(config),
    };
  }
  const file = name === '' ? 'index.html' : name;
  const type = CONSOLE_FILES[file];
  if (type === undefined) {
    return { status: 404, headers: { ...headers, 'content-type': 'text/plain' }, body: 'not a console file' };
  }
  return {
    status: 200,
    headers: { ...headers, 'content-type': type },
    body: await readFile(join(held.dir, file)),
  };
}

export interface ApiEndpoint {
  readonly url: string;
  /** The privacy console's address, where it is served. */
  readonly consoleUrl: string | undefined;
  /**
   * A one-time sign-in code for a role, good for SIGN_IN_CODE_MS: `POST /local/sign-in` with
   * `{"code", "username"}` answers a token of that role for that person, once.
   */
  signInCode(role: (typeof API_ROLES)[number]): string;
  close(): Promise<void>;
}

/**
 * Serves the API on loopback (port 0 unless given) with `deps`, verifying tokens with `key`; with
 * `caller`, the API's AWS calls are recorded under that name (the IAM proof's API function).
 */
export async function startApiEndpoint(
  deps: ApiDeps,
  key: Uint8Array,
  options: { readonly port?: number; readonly caller?: string; readonly console?: LocalConsole } = {},
): Promise<ApiEndpoint> {
  const codes = new Map<string, { role: (typeof API_ROLES)[number]; until: number }>();
  const signIn = async (body: Buffer): Promise<{ status: number; body: unknown }> => {
    let json: unknown;
    try {
      json = JSON.parse(body.toString('utf8'));
    } catch {
      return { status: 400, body: { error: { code: 'invalid', message: 'the body is not JSON' } } };
    }
    const parsed = signInSchema.safeParse(json);
    if (!parsed.success) {
      return {
        status: 400,
        body: { error: { code: 'invalid', message: parsed.error.issues[0]?.message ?? 'invalid' } },
      };
    }
    const held = codes.get(parsed.data.code);
    codes.delete(parsed.data.code);
    if (held === undefined || held.until < Date.now()) {
      return {
        status: 401,
        body: {
          error: {
            code: 'unauthenticated',
            message: 'the code is unknown, used or expired: take a new one from svc-dsr local',
          },
        },
      };
    }
    const { username } = parsed.data;
    const token = await localToken(key, { username, subject: `local-${username}`, groups: [held.role] });
    return { status: 200, body: { token, role: held.role, expires_in: 3600 } };
  };
  const server = createServer((request, response) => {
    const send = (statusCode: number, headers: Readonly<Record<string, string>>, body: string) => {
      response.writeHead(statusCode, headers);
      response.end(body);
    };
    void (async () => {
      const body = await readBody(request, LARGEST_BODY);
      const url = new URL(request.url ?? '/', `http://${LOOPBACK}`);
      const held = options.console;
      if (held !== undefined && request.method === 'GET') {
        if (url.pathname === '/' || url.pathname === LOCAL_CONSOLE_PATH.slice(0, -1)) {
          send(302, { location: LOCAL_CONSOLE_PATH, 'cache-control': 'no-store' }, '');
          return;
        }
        if (url.pathname.startsWith(LOCAL_CONSOLE_PATH)) {
          const answer = await consoleFile(held, url.pathname.slice(LOCAL_CONSOLE_PATH.length));
          response.writeHead(answer.status, answer.headers);
          response.end(answer.body);
          return;
        }
      }
      if (url.pathname === LOCAL_SIGN_IN_PATH && request.method === 'POST') {
        const answer = await signIn(body);
        send(answer.status, API_HEADERS, JSON.stringify(answer.body));
        return;
      }
      const claims = await verifiedClaims(request.headers.authorization, key);
      const call = () =>
        handleApiEvent(deps, {
          rawPath: url.pathname,
          rawQueryString: url.search.replace(/^\?/, ''),
          body: body.toString('utf8'),
          isBase64Encoded: false,
          requestContext: {
            http: { method: request.method ?? 'GET' },
            ...(claims === undefined ? {} : { authorizer: { jwt: { claims } } }),
          },
        });
      const answer = options.caller === undefined ? await call() : await runAsCaller(options.caller, call);
      send(answer.statusCode, answer.headers, answer.body);
    })().catch((error: unknown) => {
      const tooLarge = error instanceof BodyTooLargeError;
      send(
        tooLarge ? 413 : 500,
        API_HEADERS,
        JSON.stringify({
          error: tooLarge
            ? { code: 'invalid', message: `the body is over ${LARGEST_BODY} bytes` }
            : { code: 'internal', message: 'the local API failed' },
        }),
      );
    });
  });
  const sockets = trackSockets(server);
  const { endpoint } = await listen(server, options.port ?? 0);
  return {
    url: endpoint,
    consoleUrl: options.console === undefined ? undefined : `${endpoint}${LOCAL_CONSOLE_PATH}`,
    signInCode(role) {
      const code = randomBytes(24).toString('base64url');
      codes.set(code, { role, until: Date.now() + SIGN_IN_CODE_MS });
      return code;
    },
    close: () => closeServer(server, sockets),
  };
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
