// The API's routes: each one's method, path, the roles it admits, what it takes and answers, and the code that answers it, in one table the handler and the OpenAPI document read.
import { z } from 'zod';
import { dsrRequestSchema } from '#shared/request';
import { runRequestIdSchema } from '#shared/sites';
import { operatorCommandSchema, operatorResultSchemas } from '../operator/commands.ts';
import { runOperatorCommand } from '../operator/operator.ts';
import type { ApiDeps } from './deps.ts';
import { manifestsOf, reportOf, verificationOf } from './evidence.ts';
import type { ApiCaller, ApiRole } from './identity.ts';
import { countsOf, detailOf, listOpen, requireItem, timelineOf } from './reads.ts';
import {
  batchBodySchema,
  countsAnswerSchema,
  countsQuerySchema,
  listAnswerSchema,
  listQuerySchema,
  MAX_BATCH_BYTES,
  manifestsAnswerSchema,
  manifestsQuerySchema,
  packageBodySchema,
  reportAnswerSchema,
  reportQuerySchema,
  requestDetailSchema,
  submitAnswerSchema,
  timelineAnswerSchema,
  verifyAnswerSchema,
} from './schemas.ts';
import { submitBatch, submitOne } from './submit.ts';

/** The operator commands the API takes as actions on a request, each at /requests/{id}/{action}. */
export const API_ACTIONS = ['cancel', 'deny', 'extend', 'retry', 'notice'] as const;
export type ApiAction = (typeof API_ACTIONS)[number];

/** The largest body an action takes: an action's is a few hundred bytes. */
export const API_MAX_BODY_BYTES = 16 * 1024;

/** An action's body: its operator command without the command's name and the request id (the path gives both). */
export function actionBodySchema(action: ApiAction) {
  const option: z.ZodObject | undefined = operatorCommandSchema.options.find(
    (each) => each.shape.command.value === action,
  );
  if (option === undefined) throw new Error(`no operator command ${action}`);
  return option.omit({ command: true, request_id: true }).strict();
}

/** What a route's code is given: the deps, who calls, the request id of the path, the parsed query and body. */
export interface RouteCall {
  readonly deps: ApiDeps;
  readonly caller: ApiCaller;
  readonly requestId: string;
  readonly query: unknown;
  readonly body: unknown;
}

/** One route of the API. */
export interface ApiRoute {
  readonly method: 'GET' | 'POST';
  /** The path as OpenAPI writes it: `{request_id}` for the request's id. */
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  readonly roles: readonly ApiRole[];
  /** The query parameters it takes (strict: one it does not name is refused). */
  readonly query?: z.ZodObject;
  /** The body it takes, validated before its code runs. */
  readonly body?: z.ZodType;
  /** The body as the OpenAPI document describes it, where the code judges it itself (a submitted request). */
  readonly documentedBody?: z.ZodType;
  /** The largest body it takes, in bytes. @default API_MAX_BODY_BYTES */
  readonly maxBodyBytes?: number;
  /** The status of a success. @default 200 */
  readonly status?: number;
  readonly answer: z.ZodType;
  /** Whether the route acts (is on record under the caller's name) rather than reads. */
  readonly writes: boolean;
  run(call: RouteCall): Promise<unknown>;
}

/** An operator command run on the operator's own code path, under the caller's name. */
async function operate(call: RouteCall, command: Record<string, unknown>): Promise<unknown> {
  const parsed = operatorCommandSchema.parse({ ...command, request_id: call.requestId });
  return await runOperatorCommand(call.deps, call.caller.operator, parsed);
}

/** A request id as a path holds it: a request's UUID, or one site's part of it. */
export const pathRequestIdSchema = runRequestIdSchema;

export const API_ROUTES: readonly ApiRoute[] = [
  {
    method: 'GET',
    path: '/requests',
    operationId: 'listRequests',
    summary: 'The open requests, earliest due first, a page at a time, filtered; never a subject identifier',
    roles: ['privacy-team', 'auditor', 'machine'],
    query: listQuerySchema,
    answer: listAnswerSchema,
    writes: false,
    run: async (call) => await listOpen(call.deps, call.query as z.infer<typeof listQuerySchema>),
  },
  {
    method: 'POST',
    path: '/requests',
    operationId: 'submitRequest',
    summary: 'Submit one request, judged as svc-dsr submit judges it, to the intake queue',
    roles: ['privacy-team', 'machine'],
    documentedBody: dsrRequestSchema,
    status: 202,
    answer: submitAnswerSchema,
    writes: true,
    run: async (call) => await submitOne(call.deps, call.caller.operator, call.body),
  },
  {
    method: 'POST',
    path: '/requests/batch',
    operationId: 'submitBatch',
    summary: 'Judge a CSV, JSONL or JSON batch line by line and, unless dry_run, send its valid lines',
    roles: ['privacy-team', 'machine'],
    body: batchBodySchema,
    maxBodyBytes: MAX_BATCH_BYTES + 64 * 1024,
    answer: submitAnswerSchema,
    writes: true,
    run: async (call) =>
      await submitBatch(call.deps, call.caller.operator, call.body as z.infer<typeof batchBodySchema>),
  },
  {
    method: 'GET',
    path: '/requests/counts',
    operationId: 'countRequests',
    summary:
      'How many requests are open, by status, and how many of them are due by a date: counted by the open index',
    roles: ['privacy-team', 'auditor', 'machine'],
    query: countsQuerySchema,
    answer: countsAnswerSchema,
    writes: false,
    run: async (call) => await countsOf(call.deps, call.query as z.infer<typeof countsQuerySchema>),
  },
  {
    method: 'GET',
    path: '/requests/{request_id}',
    operationId: 'getRequest',
    summary: 'A request opened: its facts, deadlines and what each site came to',
    roles: ['privacy-team', 'auditor', 'machine'],
    answer: z.object({ request: requestDetailSchema }),
    writes: false,
    run: async (call) => ({
      request: detailOf(
        await requireItem(call.deps, call.requestId),
        call.caller.roles.has('privacy-team') || call.caller.roles.has('machine'),
      ),
    }),
  },
  {
    method: 'GET',
    path: '/requests/{request_id}/timeline',
    operationId: 'getTimeline',
    summary: "A request's audit records, chain by chain, with each chain's state against the ledger",
    roles: ['privacy-team', 'auditor', 'machine'],
    answer: timelineAnswerSchema,
    writes: false,
    run: async (call) => await timelineOf(call.deps, call.requestId),
  },
  {
    method: 'GET',
    path: '/requests/{request_id}/verify',
    operationId: 'verifyRequest',
    summary:
      'A request verified as svc-dsr verify does: its archive and package re-hashed, its chains against the ledger and the manifests',
    roles: ['privacy-team', 'auditor', 'machine'],
    answer: verifyAnswerSchema,
    writes: false,
    run: async (call) => await verificationOf(call.deps, await requireItem(call.deps, call.requestId)),
  },
  {
    method: 'GET',
    path: '/report',
    operationId: 'getReport',
    summary:
      'The CCPA section 7101 records and section 7102 metrics of the requests received in a range, each checked against its audit records first',
    roles: ['privacy-team', 'auditor', 'machine'],
    query: reportQuerySchema,
    answer: reportAnswerSchema,
    writes: false,
    run: async (call) => await reportOf(call.deps, call.query as z.infer<typeof reportQuerySchema>),
  },
  {
    method: 'GET',
    path: '/manifests',
    operationId: 'listManifests',
    summary:
      "The audit bucket's daily manifests, each checked and chained to the day before; with day, that day's manifest whole",
    roles: ['privacy-team', 'auditor', 'machine'],
    query: manifestsQuerySchema,
    answer: manifestsAnswerSchema,
    writes: false,
    run: async (call) => await manifestsOf(call.deps, call.query as z.infer<typeof manifestsQuerySchema>),
  },
  ...API_ACTIONS.map(
    (action): ApiRoute => ({
      method: 'POST',
      path: `/requests/{request_id}/${action}`,
      operationId: `${action}Request`,
      summary: `${action[0]?.toUpperCase() ?? ''}${action.slice(1)} the request, as svc-dsr ${action} does, recorded under the signed-in person's name`,
      roles: ['privacy-team', 'machine'],
      body: actionBodySchema(action),
      answer: z.object({ result: operatorResultSchemas[action] }),
      writes: true,
      run: async (call) => ({ result: await operate(call, { ...(call.body as object), command: action }) }),
    }),
  ),
  {
    method: 'POST',
    path: '/requests/{request_id}/package',
    operationId: 'handOutPackage',
    summary:
      "Hand out a completed request's subject package (or with raw its platform archive) as a time-limited link, recorded first",
    roles: ['privacy-team', 'machine'],
    body: packageBodySchema,
    answer: z.object({ result: operatorResultSchemas.hand_out_package }),
    writes: true,
    run: async (call) => {
      const { raw, expires_in: expiresIn, reason } = call.body as z.infer<typeof packageBodySchema>;
      return {
        result: await operate(call, {
          command: 'hand_out_package',
          raw: raw === true,
          hand_out: { delivery: 'link', expires_in: expiresIn },
          ...(reason === undefined ? {} : { reason }),
        }),
      };
    },
  },
];

/** Each route with its path as a pattern that captures the request id. */
const PATTERNS = API_ROUTES.map((route) => ({
  route,
  pattern: new RegExp(`^${route.path.replace('{request_id}', '([^/]+)')}$`),
}));

/**
 * The route a method and path name, and the request id in it; else whether the path is known
 * under another method.
 */
export function matchRoute(
  method: string,
  path: string,
): { route: ApiRoute; requestId: string | undefined } | { route: undefined; known: boolean } {
  let known = false;
  for (const { route, pattern } of PATTERNS) {
    const found = pattern.exec(path);
    if (found === null) continue;
    if (route.method === method) {
      return { route, requestId: found[1] === undefined ? undefined : decodeURIComponent(found[1]) };
    }
    known = true;
  }
  return { route: undefined, known };
}
