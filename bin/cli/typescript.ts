/**
 * Where the package's files are, and how the compiled CLI runs the commands that stay TypeScript
 * (local mode's: local, emulator, start), which load their modules through tsx.
 */

/**
 * The package's root folder. This module sits in bin/cli/ and, compiled, in dist/cli/ (every
 * chunk is written there): from both, the root is two folders up.
 */
export const PACKAGE_ROOT = new URL('../../', import.meta.url);

/** True when this code runs from the sources (through tsx), not from the compiled CLI. */
const FROM_SOURCES = import.meta.url.endsWith('.ts');

/**
 * Imports a TypeScript module of the package (`path` from its root) and returns it: through tsx,
 * registered here on first use when the CLI runs compiled. The caller names the module's type.
 */
export async function runTypeScript<T>(path: string): Promise<T> {
  if (!FROM_SOURCES) {
    const { register } = await import('tsx/esm/api');
    register();
  }
  return (await import(new URL(path, PACKAGE_ROOT).href)) as T;
}
