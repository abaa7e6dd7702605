// The API's OpenAPI 3.1 document, generated from the route table and the zod schemas its handler validates with.
import { z } from 'zod';
import { API_ROLES } from './identity.ts';
import { API_ROUTES } from './routes.ts';
import { apiErrorSchema } from './schemas.ts';

const jsonSchema = (schema: z.ZodType, io: 'input' | 'output') =>
  z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' });

const ERRORS: Readonly<Record<string, string>> = {
  '400': 'The body or the path is invalid: the message names the field and the fix',
  '401': 'No signed-in person',
  '403': "The signed-in person's groups do not admit this route",
  '404': 'No such request, or no such route',
  '409': "The ledger's rules refuse the action as the request stands",
  '413': 'The body is too large',
  '429': 'Too many calls: API Gateway throttles each route and person; try again shortly',
  '500': 'The API failed; nothing the audit trail does not show was changed',
  '503': 'The intake queue did not take the request; send it again',
};

/** The OpenAPI 3.1 document of the API: every route, its roles, body, answer and errors. */
export function openApiDocument(version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of API_ROUTES) {
    const operation = {
      operationId: route.operationId,
      summary: route.summary,
      description: `Roles: ${route.roles.join(', ')}.`,
      security: [{ userPool: [] }],
      'x-svc-dsr-roles': route.roles,
      parameters: [
        ...(route.path.includes('{request_id}')
          ? [
              {
                name: 'request_id',
                in: 'path',
                required: true,
                description:
                  "The request's id (a UUID), or one site's part of it: never a subject identifier",
                schema: { type: 'string' },
              },
            ]
          : []),
        ...Object.entries(route.query?.shape ?? {}).map(([name, schema]) => ({
          name,
          in: 'query',
          required: false,
          schema: jsonSchema(schema as z.ZodType, 'input'),
        })),
      ],
      ...(route.body === undefined && route.documentedBody === undefined
        ? {}
        : {
            requestBody: {
              required: true,
              content: {
                'application/json': {
                  schema: jsonSchema(route.documentedBody ?? route.body ?? z.unknown(), 'input'),
                },
              },
            },
          }),
      responses: {
        [String(route.status ?? 200)]: {
          description: route.status === 202 ? 'Taken: sent to the intake queue' : 'Done',
          headers: { 'Cache-Control': { schema: { type: 'string', const: 'no-store' } } },
          content: { 'application/json': { schema: jsonSchema(route.answer, 'output') } },
        },
        ...Object.fromEntries(
          Object.entries(ERRORS).map(([status, description]) => [
            status,
            {
              description,
              content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
            },
          ]),
        ),
      },
    };
    paths[route.path] = { ...paths[route.path], [route.method.toLowerCase()]: operation };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'svc-dsr API',
      version,
      description: `The privacy team's and other systems' way in: every route is checked against the signed-in person's groups (${API_ROLES.join(', ')}), and every action is recorded under that person's name.`,
    },
    paths,
    components: {
      securitySchemes: {
        userPool: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description: "A token of the stack's user pool; its cognito:groups give the roles",
        },
      },
      schemas: { Error: jsonSchema(apiErrorSchema, 'output') },
    },
  };
}
