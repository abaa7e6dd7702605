// The API's routes: each one's method, path, the roles it admits, the body it takes and what it answers, in one table the handler and the OpenAPI document read.
import { z } from 'zod';
import { ledgerItemSchema } from '#shared/ledger';
import { runRequestIdSchema } from '#shared/sites';
import { operatorCommandSchema } from '../operator/commands.ts';
import type { ApiRole } from './identity.ts';

/** The operator commands the API takes as actions on a request, each at /requests/{id}/{action}. */
export const API_ACTIONS = ['cancel', 'deny', 'extend', 'retry', 'notice'] as const;
export type ApiAction = (typeof API_ACTIONS)[number];

/** An action's body: its operator command without the command's name and the request id (the path gives both). */
export function actionBodySchema(action: ApiAction) {
  const option: z.ZodObject | undefined = operatorCommandSchema.options.find(
    (each) => each.shape.command.value === action,
  );
  if (option === undefined) throw new Error(`no operator command ${action}`);
  return option.omit({ command: true, request_id: true }).strict();
}

/**
 * A request as the API shows it when it is opened: its facts, deadlines and per-site results.
 * The subject's primary_key only for the privacy team, and only here: no list, URL or log holds it.
 */
export const requestDetailSchema = z.object({
  request_id: z.string(),
  status: ledgerItemSchema.shape.status,
  step: z.string().nullable(),
  type: z.string().nullable(),
  regulation: z.string().nullable(),
  outcome: z.string().nullable(),
  received_at: z.string().nullable(),
  due_at: z.string().nullable(),
  extended: z.boolean(),
  completed_at: z.string().nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  reference: z.string().nullable(),
  sites: z.array(z.string()).nullable(),
  site_results: z
    .record(z.string(), z.object({ status: z.string(), outcome: z.string().optional(), at: z.string() }))
    .nullable(),
  primary_key: z.string().optional(),
});
export type RequestDetail = z.infer<typeof requestDetailSchema>;

/** Every error the API answers, in one shape: a code the CLI shares and a sentence that says the fix. */
export const apiErrorSchema = z.object({
  error: z.object({ code: z.string(), message: z.string() }),
});

/** One route of the API. */
export interface ApiRoute {
  readonly method: 'GET' | 'POST';
  /** The path as OpenAPI writes it: `{request_id}` for the request's id. */
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  readonly roles: readonly ApiRole[];
  readonly body?: z.ZodType;
  readonly answer: z.ZodType;
  readonly action?: ApiAction;
}

/** The request id a path holds: a request's UUID, or one site's part of it. */
export const pathRequestIdSchema = runRequestIdSchema;

export const API_ROUTES: readonly ApiRoute[] = [
  {
    method: 'GET',
    path: '/requests/{request_id}',
    operationId: 'getRequest',
    summary: 'A request opened: its facts, deadlines and what each site came to',
    roles: ['privacy-team', 'auditor'],
    answer: z.object({ request: requestDetailSchema }),
  },
  ...API_ACTIONS.map(
    (action): ApiRoute => ({
      method: 'POST',
      path: `/requests/{request_id}/${action}`,
      operationId: `${action}Request`,
      summary: `${action[0]?.toUpperCase() ?? ''}${action.slice(1)} the request, as svc-dsr ${action} does, recorded under the signed-in person's name`,
      roles: ['privacy-team'],
      body: actionBodySchema(action),
      answer: z.object({ result: z.unknown() }),
      action,
    }),
  ),
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
): { route: ApiRoute; requestId: string } | { route: undefined; known: boolean } {
  let known = false;
  for (const { route, pattern } of PATTERNS) {
    const found = pattern.exec(path);
    if (found === null) continue;
    if (route.method === method) return { route, requestId: decodeURIComponent(found[1] ?? '') };
    known = true;
  }
  return { route: undefined, known };
}
