/**
 * The line between the product and local mode (local/, the package @svc-dsr/local): the product's
 * code and its tests import nothing of local mode, and the product's dependencies are what its own
 * code loads, none of them there for local mode alone.
 */
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SELF = relative(ROOT, fileURLToPath(import.meta.url));
const PRODUCT_FOLDERS = ['lambdas', 'lib', 'bin', 'test'];

const manifestSchema = z.object({
  dependencies: z.record(z.string(), z.string()),
  devDependencies: z.record(z.string(), z.string()).optional(),
});

/** Every TypeScript or JavaScript source under the product's folders, as paths from the root. */
async function productSources(): Promise<string[]> {
  const found: string[] = [];
  for (const folder of PRODUCT_FOLDERS) {
    const entries = await readdir(join(ROOT, folder), { withFileTypes: true, recursive: true });
    for (const entry of entries) {
      if (entry.isFile() && /\.(?:ts|mts|mjs|js)$/.test(entry.name)) {
        found.push(relative(ROOT, join(entry.parentPath, entry.name)));
      }
    }
  }
  return found;
}

/** The specifiers a source imports: static imports and re-exports, `import('...')` with a literal. */
function importedSpecifiers(source: string): string[] {
  const statics = [...source.matchAll(/^\s*(?:import|export)\b[^'"`;]*?\bfrom\s+['"]([^'"]+)['"]/gm)];
  const bare = [...source.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm)];
  const dynamic = [...source.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)];
  return [...statics, ...bare, ...dynamic].map((match) => match[1] ?? '');
}

/** True when `specifier`, imported from `file`, names local mode. */
function intoLocal(file: string, specifier: string): boolean {
  if (specifier.startsWith('@svc-dsr/local') || specifier.startsWith('#local/')) return true;
  if (!specifier.startsWith('.')) return false;
  const target = relative(ROOT, resolve(ROOT, dirname(file), specifier));
  return target === 'local' || target.startsWith('local/');
}

/** The npm package a bare specifier loads (`@scope/name/sub` -> `@scope/name`). */
function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('#') || specifier.startsWith('node:'))
    return undefined;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

describe('the product and local mode', () => {
  it('finds imports with every form the sources use', () => {
    const source = [
      "import { a } from '../local/aws/s3-disk.ts';",
      "import type { B } from '@svc-dsr/local/emulator';",
      "export { c } from '#local/runtime/workflow';",
      "import 'side-effect';",
      "const d = await import('@svc-dsr/local/cli');",
      'import {\n  e,\n  f,\n} from "zod";',
    ].join('\n');
    expect(importedSpecifiers(source).sort()).toEqual(
      [
        '../local/aws/s3-disk.ts',
        '@svc-dsr/local/emulator',
        '#local/runtime/workflow',
        'side-effect',
        '@svc-dsr/local/cli',
        'zod',
      ].sort(),
    );
    expect(intoLocal('test/unit/x.test.ts', '../../local/aws/s3-disk.ts')).toBe(true);
    expect(intoLocal('test/unit/x.test.ts', '../../lambdas/shared/errors.ts')).toBe(false);
    expect(intoLocal('test/unit/x.test.ts', '../../local-endpoints.ts')).toBe(false);
  });

  it("imports nothing of local mode from the product's code or its tests", async () => {
    // Prepare
    const sources = await productSources();
    expect(sources.length).toBeGreaterThan(200);

    // Act
    const crossings: string[] = [];
    // This file's own samples above are strings, not imports.
    for (const file of sources.filter((path) => path !== SELF)) {
      const text = await readFile(join(ROOT, file), 'utf8');
      for (const specifier of importedSpecifiers(text)) {
        if (intoLocal(file, specifier)) crossings.push(`${file} imports ${specifier}`);
      }
    }

    // Assess: the operator CLI loads the local package's commands by a name it holds in a constant
    // (bin/cli/local-package.ts), only when one of them runs.
    expect(crossings).toEqual([]);
  });

  it("lists as the product's dependencies only what its own code loads, none for local mode alone", async () => {
    // Prepare
    const product = manifestSchema.parse(JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')));
    const local = manifestSchema.parse(JSON.parse(await readFile(join(ROOT, 'local/package.json'), 'utf8')));
    const loaded = new Set<string>();
    for (const file of await productSources()) {
      if (file.startsWith('test/')) continue;
      const text = await readFile(join(ROOT, file), 'utf8');
      for (const specifier of importedSpecifiers(text)) {
        const name = packageOf(specifier);
        if (name !== undefined) loaded.add(name);
      }
    }
    // cdk.json's app runs the stack's entry through tsx.
    const cdk = z
      .object({ app: z.string() })
      .parse(JSON.parse(await readFile(join(ROOT, 'cdk.json'), 'utf8')));
    if (/--import tsx\b/.test(cdk.app)) loaded.add('tsx');

    // Act
    const unused = Object.keys(product.dependencies).filter((name) => !loaded.has(name));
    const localOnly = Object.keys(local.dependencies).filter(
      (name) => name in product.dependencies && !loaded.has(name),
    );

    // Assess
    expect(unused).toEqual([]);
    expect(localOnly).toEqual([]);
    expect(Object.keys(product.dependencies)).not.toContain('aws-local-stepfunctions');
    expect(Object.keys(product.dependencies)).not.toContain('dynalite');
  });
});
