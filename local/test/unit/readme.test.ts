/**
 * local/README.md, the newcomer's tour: every file it names exists, and every file of local/ is
 * named in it, so the tour cannot drift from the folder it describes.
 */
import { access, readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadAwsFaultsFile } from '../../aws/aws-faults.ts';
import { loadFaultsFile } from '../../emulator/faults.ts';
import { loadStateFile } from '../../emulator/state.ts';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const LOCAL = join(ROOT, 'local');

/** Paths in backticks: `local/...` in full, or a bare file name taken as in the folder its bullet names. */
async function namedPaths(): Promise<{ full: string[]; bare: string[] }> {
  const text = await readFile(join(LOCAL, 'README.md'), 'utf8');
  const quoted = [...text.matchAll(/`([^`\s]+)`/g)].map((match) => match[1] ?? '');
  return {
    full: quoted.filter(
      (path) => path.startsWith('local/') || path.startsWith('lambdas/') || path.startsWith('lib/'),
    ),
    bare: quoted.filter((path) => /^[\w-]+\.(?:ts|mjs|json)$/.test(path)),
  };
}

/** The package's own files: its tests, its bench and what npm installs are not part of the tour. */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  const outside = ['test', 'bench', 'node_modules'].map((folder) => join(dir, folder));
  return entries
    .filter((entry) => !outside.some((folder) => `${entry.parentPath}/`.startsWith(`${folder}/`)))
    .filter((entry) => entry.isFile() && /\.(?:ts|mjs|json)$/.test(entry.name))
    .map((entry) => relative(ROOT, join(entry.parentPath, entry.name)));
}

describe('local/README.md', () => {
  it('names only paths that exist', async () => {
    const { full } = await namedPaths();
    expect(full.length).toBeGreaterThan(20);
    for (const path of full) {
      const real = path.replace(/\/$/, '');
      await expect(access(join(ROOT, real)), path).resolves.toBeUndefined();
    }
  });

  it('names every file of local/, in full or by its name under its folder', async () => {
    const { full, bare } = await namedPaths();
    const named = new Set([...full, ...bare]);
    for (const file of await filesUnder(LOCAL)) {
      const name = file.split('/').at(-1) ?? '';
      expect(named.has(file) || named.has(name), file).toBe(true);
    }
  });

  it('ships sample fault and state files that local mode and the emulator accept', async () => {
    await expect(loadFaultsFile(join(ROOT, 'examples/faults.json'))).resolves.toMatchObject({ seed: 7 });
    await expect(loadAwsFaultsFile(join(ROOT, 'examples/aws-faults.json'))).resolves.toMatchObject({
      throttle_rate: 0.05,
    });
    await expect(loadStateFile(join(LOCAL, 'emulator/sample-state.json'))).resolves.toBeDefined();
  });
});
