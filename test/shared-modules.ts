/**
 * Which unit test files may share their modules with the files run before them in one worker
 * (vitest's `isolate: false`): loading the AWS SDK, zod and the product's modules once per worker
 * instead of once per file takes most of the fast tier's CPU off. A file may share when nothing it
 * runs, itself or through the test helpers it imports, changes what a later file would load: no
 * mocked AWS client (aws-sdk-client-mock patches the client classes themselves), no module mock,
 * no stubbed or written environment, no fake timers. Every other file keeps a fresh module graph.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** What a file does that outlives it in a shared worker. */
export const GLOBAL_CHANGES =
  /aws-sdk-client-mock|mockClient\(|vi\.mock\(|vi\.doMock\(|vi\.stubEnv|vi\.stubGlobal|process\.env\b|useFakeTimers|vi\.spyOn\(/;

/** The folders of the fast tier (`npm run test:unit`). */
export const UNIT_FOLDERS = ['test/unit', 'local/test/unit'];

/** The relative imports of `file` that are test code (under a test folder), as absolute paths. */
function testImports(file: string, text: string): string[] {
  const specifiers = [...text.matchAll(/\bfrom\s+['"](\.[^'"]+)['"]/g)].map((match) => match[1] ?? '');
  return specifiers
    .map((specifier) => resolve(dirname(file), specifier))
    .filter((path) => /\/test\//.test(path) && path.endsWith('.ts'));
}

/** True when `file` or a test helper it reaches changes global state (see GLOBAL_CHANGES). */
function changesGlobals(file: string, seen: Map<string, boolean>): boolean {
  const known = seen.get(file);
  if (known !== undefined) return known;
  seen.set(file, false);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return false;
  }
  const changes =
    GLOBAL_CHANGES.test(text) || testImports(file, text).some((helper) => changesGlobals(helper, seen));
  seen.set(file, changes);
  return changes;
}

/** The unit test files under `root` that may share modules, as paths from `root`. */
export function sharedModuleFiles(root: string): string[] {
  const seen = new Map<string, boolean>();
  const files: string[] = [];
  for (const folder of UNIT_FOLDERS.filter((name) => existsSync(join(root, name)))) {
    for (const entry of readdirSync(join(root, folder), { withFileTypes: true, recursive: true })) {
      if (!entry.isFile() || !entry.name.endsWith('.test.ts')) continue;
      const path = join(entry.parentPath, entry.name);
      if (!changesGlobals(path, seen)) files.push(relative(root, path));
    }
  }
  return files.sort();
}
