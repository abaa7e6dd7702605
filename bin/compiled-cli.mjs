/**
 * Whether dist/cli/ holds a compiled CLI as new as every source it was built from (the list
 * bin/build-cli.mjs writes there). Plain JavaScript with no dependency: the launcher asks it
 * before it loads anything else.
 */

/** The list of sources the compiled CLI was built from, written beside it. */
export const INPUTS_FILE = 'dist/cli/inputs.json';

/** The top-level help as the compiled CLI prints it, written beside it at the build. */
export const HELP_FILE = 'dist/cli/help.txt';

/**
 * `{ current: true, entry, help }` (the compiled entry's URL, and its help copy's) when dist/cli/ is
 * there and no source is newer than its build; otherwise `{ current: false, reason }`, in words.
 */
export function compiledCli(root = new URL('..', import.meta.url)) {
  // Taken rather than imported, and given plain paths: Node's `import` of node:fs loads its
  // streams and fs/promises, and a URL per source costs more than the stat; the launcher runs
  // this on every command.
  const { readFileSync, statSync } = process.getBuiltinModule('node:fs');
  const { fileURLToPath } = process.getBuiltinModule('node:url');
  const rootPath = fileURLToPath(root);
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(`${rootPath}${INPUTS_FILE}`, 'utf8'));
  } catch {
    return { current: false, reason: 'the CLI is not compiled (no dist/cli/)' };
  }
  const { started_ms: startedMs, inputs } = manifest ?? {};
  if (typeof startedMs !== 'number' || !Array.isArray(inputs)) {
    return { current: false, reason: `${INPUTS_FILE} is not one bin/build-cli.mjs wrote` };
  }
  for (const input of inputs) {
    let changedMs;
    try {
      changedMs = statSync(`${rootPath}${input}`).mtimeMs;
    } catch {
      return { current: false, reason: `${input}, compiled into dist/cli/, is gone` };
    }
    // Compared with when the build started: a source saved during the build makes it stale.
    if (changedMs > startedMs)
      return { current: false, reason: `${input} changed since the CLI was compiled` };
  }
  return { current: true, entry: new URL('dist/cli/svc-dsr.js', root).href, help: new URL(HELP_FILE, root) };
}
