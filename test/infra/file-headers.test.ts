/**
 * Every source file of the product (lambdas/, lib/, bin/) opens with a comment saying what it is:
 * a `//` line or a `/*` block, after a `#!` line when the file is run directly.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const FOLDERS = ['lambdas', 'lib', 'bin'];
/** Build output and installed packages: not the project's sources. */
const SKIPPED = new Set(['dist', 'node_modules']);

/** Every .ts, .mts and .mjs file under `folder`, as paths from the root, skipping SKIPPED folders. */
async function sourcesUnder(folder: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(join(ROOT, folder), { withFileTypes: true })) {
    const path = join(folder, entry.name);
    if (entry.isDirectory() && !SKIPPED.has(entry.name)) found.push(...(await sourcesUnder(path)));
    else if (entry.isFile() && /\.(?:ts|mts|mjs)$/.test(entry.name)) found.push(path);
  }
  return found;
}

/** True when the text opens with a comment, after a `#!` line if it has one. */
function opensWithComment(text: string): boolean {
  const lines = text.split('\n');
  const first = lines[0]?.startsWith('#!') ? lines[1] : lines[0];
  return first !== undefined && (first.startsWith('//') || first.startsWith('/*'));
}

describe('file headers', () => {
  it('tells a file that opens with a comment from one that does not', () => {
    // Arrange
    const headed = [
      '// The CLI.\nexport {};\n',
      '/** The CLI. */\n',
      '#!/usr/bin/env node\n// The launcher.\n',
    ];
    const bare = [
      "import { z } from 'zod';\n",
      '#!/usr/bin/env node\nimport x from "x";\n',
      '\n// late\n',
      '',
    ];

    // Act
    const answers = [...headed, ...bare].map(opensWithComment);

    // Assert
    expect(answers).toEqual([true, true, true, false, false, false, false]);
  });

  it('every source file in lambdas/, lib/ and bin/ opens with a comment saying what it is', async () => {
    // Arrange
    const files = (await Promise.all(FOLDERS.map(sourcesUnder))).flat();

    // Act
    const offenders: string[] = [];
    for (const file of files) {
      if (!opensWithComment(await readFile(join(ROOT, file), 'utf8'))) offenders.push(file);
    }

    // Assert
    expect(files.length).toBeGreaterThan(100);
    expect(offenders, 'these files do not open with a one-line header comment').toEqual([]);
  });
});
