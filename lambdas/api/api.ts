// The API's handler: an HTTP API event with its verified token's claims, answered by the route it names, under the roles of the signed-in person.
import { z } from 'zod';
import type { LedgerItem } from '#shared/ledger';
import type { StepLogger } from '#shared/step-deps';
import type { OperatorCommand } from '../operator/commands.ts';
import { runOperatorCommand } from '../operator/operator.ts';
import { type OperatorDeps, OperatorInputError, OperatorRefusal } from '../operator/records.ts';
import { callerOf } from './identity.ts';
import { matchRoute, pathRequestIdSchema, type RequestDetail } from './routes.ts';

/** The largest body the API takes: an action's is a few hundred bytes. */
export const API_MAX_BODY_BYTES = 16 * 1024;

/** The part of an API Gateway HTTP API (payload 2.0) event with a JWT authorizer the handler reads. */
export const apiEventSchema = z.object({
  rawPath: z.string(),
  body: z.string().optional(),
  isBase64Encoded: z.boolean().optional(),
  requestContext: z.object({
    http: z.object({ method: z.string() }),
    authorizer: z.object({ jwt: z.object({ claims: z.record(z.string(), z.unknown()) }) }).optional(),
  }),
});

export interface ApiResponse {
  readonly statusCode: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** Every answer: JSON, never kept by a browser or a proxy. */
const HEADERS = { 'content-type': 'application/json', 'cache-control': 'no-store' } as const;

function answer(statusCode: number, body: unknown): ApiResponse {
  return { statusCode, headers: HEADERS, body: JSON.stringify(body) };
}

function failure(statusCode: number, code: string, message: string): ApiResponse {
  return answer(statusCode, { error: { code, message } });
}

/** The HTTP status of each refusal of the operator's rules. */
const REFUSAL_STATUS: Readonly<Record<string, number>> = { unknown_request: 404 };

/**
 * Answers one API call: the route its method and path name, for a caller whose roles admit it,
 * with the body that route takes. An action runs the operator's own code path
 * (runOperatorCommand), under the signed-in person's name, so the ledger's rules are the CLI's.
 * Log lines name the route, the request id and the operator, never a body or a subject.
 */
export async function handleApiEvent(
  deps: OperatorDeps & { readonly logger: StepLogger },
  event: unknown,
): Promise<ApiResponse> {
  const parsed = apiEventSchema.safeParse(event);
  if (!parsed.success) return failure(400, 'invalid', 'not an HTTP API request');
  const { rawPath, requestContext } = parsed.data;
  const caller = callerOf(requestContext.authorizer?.jwt.claims);
  if (caller === undefined) {
    return failure(401, 'unauthenticated', 'sign in first: the API answers only a signed-in person');
  }
  const method = requestContext.http.method.toUpperCase();
  const matched = matchRoute(method, rawPath);
  if (matched.route === undefined) {
    return matched.known
      ? failure(405, 'invalid', `${method} is not allowed on ${rawPath}`)
      : failure(404, 'not_found', `no route ${method} ${rawPath}; docs/openapi.json lists every route`);
  }
  const { route } = matched;
  if (!route.roles.some((role) => caller.roles.has(role))) {
    deps.logger.info('api call forbidden', {
      route: `${route.method} ${route.path}`,
      operator: caller.operator,
    });
    return failure(
      403,
      'forbidden',
      `${route.method} ${route.path} is for ${route.roles.join(' or ')}; your groups give ${caller.roles.size === 0 ? 'no role' : [...caller.roles].join(', ')}: ask an administrator to add you to the group`,
    );
  }
  const requestId = pathRequestIdSchema.safeParse(matched.requestId);
  if (!requestId.success) {
    return failure(
      400,
      'invalid',
      'request_id: must be a request id, a UUID (the path holds no other identifier)',
    );
  }
  const id = requestId.data;
  if (route.action === undefined) {
    const item = await deps.ledger.get(id);
    if (item === undefined) return failure(404, 'unknown_request', `no request ${id} in the ledger`);
    return answer(200, { request: detailOf(item, caller.roles.has('privacy-team')) });
  }
  const text =
    parsed.data.isBase64Encoded === true
      ? Buffer.from(parsed.data.body ?? '', 'base64').toString('utf8')
      : (parsed.data.body ?? '');
  if (Buffer.byteLength(text) > API_MAX_BODY_BYTES) {
    return failure(413, 'invalid', `the body is over ${API_MAX_BODY_BYTES} bytes`);
  }
  let json: unknown;
  try {
    json = text === '' ? {} : JSON.parse(text);
  } catch {
    return failure(400, 'invalid', 'the body is not JSON');
  }
  const body = route.body?.safeParse(json);
  if (body !== undefined && !body.success) {
    const issue = body.error.issues[0];
    const where = issue?.path.map(String).join('.') ?? '';
    return failure(400, 'invalid', `${where === '' ? 'the body' : where}: ${issue?.message ?? 'invalid'}`);
  }
  const command = { ...(body?.data as object), command: route.action, request_id: id } as OperatorCommand;
  const where = { route: `${route.method} ${route.path}`, request_id: id, operator: caller.operator };
  try {
    const result = await runOperatorCommand(deps, caller.operator, command);
    deps.logger.info('api action applied', where);
    return answer(200, { result });
  } catch (error) {
    if (error instanceof OperatorRefusal) {
      deps.logger.info('api action refused', { ...where, code: error.code });
      return failure(REFUSAL_STATUS[error.code] ?? 409, error.code, error.message);
    }
    if (error instanceof OperatorInputError) return failure(400, 'invalid', error.message);
    deps.logger.error('api action failed', {
      ...where,
      error: error instanceof Error ? error.name : 'unknown',
    });
    return failure(500, 'internal', 'the API failed; the request is as it was or as its audit trail says');
  }
}

/** A ledger item as the API shows it opened; the primary_key only where `withKey`. */
export function detailOf(item: LedgerItem, withKey: boolean): RequestDetail {
  return {
    request_id: item.request_id,
    status: item.status,
    step: item.step ?? null,
    type: item.type ?? null,
    regulation: item.regulation ?? null,
    outcome: item.outcome ?? null,
    received_at: item.received_at ?? null,
    due_at: item.due_at ?? null,
    extended: item.extended,
    completed_at: item.completed_at ?? null,
    error: item.error === undefined ? null : { code: item.error.code, message: item.error.message },
    reference: item.reference ?? null,
    sites: item.sites ?? null,
    site_results: item.site_results ?? null,
    ...(withKey && item.primary_key !== undefined ? { primary_key: item.primary_key } : {}),
  };
}
