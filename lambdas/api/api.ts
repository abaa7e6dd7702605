// The API's handler: an HTTP API event with its verified token's claims, answered by the route it names, under the roles of the signed-in person.
import { z } from 'zod';
import { OperatorInputError, OperatorRefusal } from '../operator/records.ts';
import { ApiFailure, type ApiResponse, answer, failure, firstIssue } from './answers.ts';
import type { ApiDeps } from './deps.ts';
import { type ApiCaller, callerOf, MACHINE_ROLE, machineCallerOf } from './identity.ts';
import { API_MAX_BODY_BYTES, type ApiRoute, matchRoute, pathRequestIdSchema } from './routes.ts';

export type { ApiResponse } from './answers.ts';
export { detailOf } from './reads.ts';
export { API_MAX_BODY_BYTES } from './routes.ts';

/** The part of an API Gateway HTTP API (payload 2.0) event with a JWT authorizer the handler reads. */
export const apiEventSchema = z.object({
  rawPath: z.string(),
  rawQueryString: z.string().optional(),
  body: z.string().optional(),
  isBase64Encoded: z.boolean().optional(),
  requestContext: z.object({
    http: z.object({ method: z.string() }),
    authorizer: z
      .object({
        jwt: z.object({ claims: z.record(z.string(), z.unknown()) }).optional(),
        iam: z.unknown().optional(),
      })
      .optional(),
  }),
});

/** The prefix of the routes for machine clients, which API Gateway authorizes with IAM. */
export const MACHINE_PREFIX = '/iam';

/** The HTTP status of each refusal of the operator's rules. */
const REFUSAL_STATUS: Readonly<Record<string, number>> = { unknown_request: 404 };

/** Query parameters that would put a subject identifier in a URL: refused by name, never echoed. */
const IDENTIFIER_PARAMETERS = /^(primary_key|email|e-mail|mail|svc_user_id|user_id|user|subject)$/i;

/**
 * Answers one API call: the route its method and path name, for a caller whose roles admit it,
 * with the query and body that route takes. An action runs the operator's own code path
 * (runOperatorCommand), under the signed-in person's name, so the ledger's rules are the CLI's.
 * Log lines name the route, the request id and the operator, never a body, a query or a subject.
 */
export async function handleApiEvent(deps: ApiDeps, event: unknown): Promise<ApiResponse> {
  const parsed = apiEventSchema.safeParse(event);
  if (!parsed.success) return failure(400, 'invalid', 'not an HTTP API request');
  const { requestContext } = parsed.data;
  // The `/iam` routes are the same routes for systems that sign with SigV4 (IAM authorization).
  const machine = parsed.data.rawPath.startsWith(`${MACHINE_PREFIX}/`);
  const rawPath = machine ? parsed.data.rawPath.slice(MACHINE_PREFIX.length) : parsed.data.rawPath;
  const caller: ApiCaller | undefined = machine
    ? machineCallerOf(requestContext.authorizer?.iam, deps.account)
    : callerOf(requestContext.authorizer?.jwt?.claims);
  if (caller === undefined) {
    return machine
      ? failure(
          403,
          'forbidden',
          'the /iam routes answer a SigV4-signed caller of this account or its organisation only',
        )
      : failure(401, 'unauthenticated', 'sign in first: the API answers only a signed-in person');
  }
  if (!(await deps.throttle.admit(caller.subject))) {
    return failure(
      429,
      'throttled',
      'too many calls from you in a short time; wait a few seconds and try again',
    );
  }
  const method = requestContext.http.method.toUpperCase();
  const matched = matchRoute(method, rawPath);
  if (matched.route === undefined) {
    return matched.known
      ? failure(405, 'invalid', `${method} is not allowed on this path; docs/openapi.json lists every route`)
      : failure(404, 'not_found', `no such route (${method}); docs/openapi.json lists every route`);
  }
  const { route } = matched;
  const where = { route: `${route.method} ${route.path}`, operator: caller.operator };
  if (!route.roles.some((role) => caller.roles.has(role))) {
    deps.logger.info('api call forbidden', where);
    return failure(
      403,
      'forbidden',
      `${route.method} ${route.path} is for ${route.roles.filter((role) => role !== MACHINE_ROLE).join(' or ')}; your groups give ${caller.roles.size === 0 ? 'no role' : [...caller.roles].join(', ')}: ask an administrator to add you to the group`,
    );
  }
  try {
    const requestId = pathId(matched.requestId);
    const logged = requestId === '' ? where : { ...where, request_id: requestId };
    const query = queryOf(route, parsed.data.rawQueryString ?? '');
    const body = bodyOf(route, parsed.data.body, parsed.data.isBase64Encoded === true);
    const result = await route.run({ deps, caller, requestId, query, body });
    if (route.writes) deps.logger.info('api action applied', logged);
    return answer(route.status ?? 200, result);
  } catch (error) {
    return failed(deps, where, error);
  }
}

/** The request id of the path, or '' for a route without one. */
function pathId(raw: string | undefined): string {
  if (raw === undefined) return '';
  const id = pathRequestIdSchema.safeParse(raw);
  if (!id.success) {
    throw new ApiFailure(
      400,
      'invalid',
      'request_id: must be a request id, a UUID (the path holds no other identifier)',
    );
  }
  return id.data;
}

/** The query parameters a route takes, each given once; none for a route that takes none. */
function queryOf(route: ApiRoute, raw: string): unknown {
  const params = new URLSearchParams(raw);
  const values: Record<string, string> = {};
  for (const [name, value] of params) {
    if (IDENTIFIER_PARAMETERS.test(name)) {
      throw new ApiFailure(
        400,
        'invalid',
        `query: ${name} is refused: a subject identifier never goes in a URL`,
      );
    }
    if (Object.hasOwn(values, name)) throw new ApiFailure(400, 'invalid', `query: give ${name} once`);
    values[name] = value;
  }
  if (route.query === undefined) {
    if (Object.keys(values).length > 0)
      throw new ApiFailure(400, 'invalid', 'query: this route takes no query parameters');
    return undefined;
  }
  const query = route.query.safeParse(values);
  if (!query.success) {
    const known = Object.keys(route.query.shape).join(', ');
    const issue = query.error.issues[0];
    if (issue?.code === 'unrecognized_keys') {
      throw new ApiFailure(
        400,
        'invalid',
        `query: ${issue.keys.join(', ')} is not a parameter of this route; it takes ${known}`,
      );
    }
    throw new ApiFailure(400, 'invalid', `query ${firstIssue(query.error.issues, 'parameters')}`);
  }
  return query.data;
}

/** The body a route takes, as JSON, within its size limit and its schema. */
function bodyOf(route: ApiRoute, raw: string | undefined, base64: boolean): unknown {
  if (route.body === undefined && route.documentedBody === undefined) return undefined;
  const text = base64 ? Buffer.from(raw ?? '', 'base64').toString('utf8') : (raw ?? '');
  const limit = route.maxBodyBytes ?? API_MAX_BODY_BYTES;
  if (Buffer.byteLength(text) > limit)
    throw new ApiFailure(413, 'invalid', `the body is over ${limit} bytes`);
  let json: unknown;
  try {
    json = text === '' ? {} : JSON.parse(text);
  } catch {
    throw new ApiFailure(400, 'invalid', 'the body is not JSON');
  }
  if (route.body === undefined) return json;
  const body = route.body.safeParse(json);
  if (!body.success) throw new ApiFailure(400, 'invalid', firstIssue(body.error.issues, 'the body'));
  return body.data;
}

/** A failure as its answer: a route's refusal, the operator's, or a 500 that names no detail. */
function failed(deps: ApiDeps, where: Record<string, string>, error: unknown): ApiResponse {
  if (error instanceof ApiFailure) return failure(error.statusCode, error.code, error.message);
  if (error instanceof OperatorRefusal) {
    deps.logger.info('api action refused', { ...where, code: error.code });
    return failure(REFUSAL_STATUS[error.code] ?? 409, error.code, error.message);
  }
  if (error instanceof OperatorInputError) return failure(400, 'invalid', error.message);
  deps.logger.error('api call failed', { ...where, error: error instanceof Error ? error.name : 'unknown' });
  return failure(500, 'internal', 'the API failed; the request is as it was or as its audit trail says');
}
