import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import { describe, expect, it } from 'vitest';
import { openApiDocument } from '../../../../lambdas/api/openapi.ts';
import { API_ROUTES } from '../../../../lambdas/api/routes.ts';

const VERSION = '0.1.0';

describe('docs/openapi.json', () => {
  it('is the document generated from the route table and its zod schemas', () => {
    const published: unknown = JSON.parse(readFileSync('docs/openapi.json', 'utf8'));
    expect(
      published,
      `docs/openapi.json is out of date; regenerate it with: node --import tsx -e "import('./lambdas/api/openapi.ts').then(m=>process.stdout.write(JSON.stringify(m.openApiDocument('${VERSION}'),null,2)+'\\n'))" > docs/openapi.json && npx biome format --write docs/openapi.json`,
    ).toEqual(openApiDocument(VERSION));
  });

  it('is a valid OpenAPI 3.1 document', async () => {
    const result = await new Validator().validate(openApiDocument(VERSION));

    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it('describes every route the handler serves, with its roles', () => {
    const paths = openApiDocument(VERSION).paths as Record<
      string,
      Record<string, { 'x-svc-dsr-roles': string[] }>
    >;

    for (const route of API_ROUTES) {
      expect(paths[route.path]?.[route.method.toLowerCase()]?.['x-svc-dsr-roles']).toEqual(route.roles);
    }
    expect(Object.values(paths).flatMap((methods) => Object.keys(methods))).toHaveLength(API_ROUTES.length);
  });
});
