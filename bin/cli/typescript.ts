/**
 * Where the package's files are, and how the compiled CLI runs the commands that stay TypeScript
 * (local mode's: local, emulator, start, from the local package), which load their modules through
 * tsx.
 */
import type { LocalCommands } from './local-package.ts';

/**
 * The package's root folder. This module sits in bin/cli/ and, compiled, in dist/cli/ (every
 * chunk is written there): from both, the root is two folders up.
 */
export const PACKAGE_ROOT = new URL('../../', import.meta.url);

/** True when this code runs from the sources (through tsx), not from the compiled CLI. */
const FROM_SOURCES = import.meta.url.endsWith('.ts');

/** The local package's commands, with tsx registered first when the CLI runs compiled. */
export async function localCommands(): Promise<LocalCommands> {
  if (!FROM_SOURCES) {
    const { register } = await import('tsx/esm/api');
    register();
  }
  // Loaded here, not at the top: every command's registration imports this module.
  const { loadLocalCommands } = await import('./local-package.ts');
  return loadLocalCommands();
}
