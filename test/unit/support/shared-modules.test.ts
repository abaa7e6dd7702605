import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sharedModuleFiles } from '../../shared-modules.ts';

let root: string | undefined;

afterEach(async () => {
  if (root !== undefined) await rm(root, { recursive: true, force: true });
  root = undefined;
});

/** A repository root holding `files` (path -> text). */
async function tree(files: Record<string, string>): Promise<string> {
  root = await mkdtemp(join(tmpdir(), 'shared-modules-'));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(root, path)), { recursive: true });
    await writeFile(join(root, path), text);
  }
  return root;
}

describe('sharedModuleFiles', () => {
  it('shares a file that changes nothing global, and isolates one that mocks a client, stubs the environment or fakes timers', async () => {
    // Prepare
    const at = await tree({
      'test/unit/plain.test.ts': "import { x } from '../../lambdas/x.ts';\n",
      'test/unit/mocked.test.ts': "import { mockClient } from 'aws-sdk-client-mock';\n",
      'test/unit/env.test.ts': "process.env.TABLE = 'x';\n",
      'local/test/unit/timers.test.ts': 'vi.useFakeTimers();\n',
      'local/test/unit/module-mock.test.ts': "vi.mock('node:fs');\n",
      'local/test/unit/plain.test.ts': "import { describe } from 'vitest';\n",
    });

    // Act
    const shared = sharedModuleFiles(at);

    // Assess
    expect(shared).toEqual(['local/test/unit/plain.test.ts', 'test/unit/plain.test.ts']);
  });

  it('isolates a file whose test helper, at any depth, mocks a client', async () => {
    // Prepare
    const at = await tree({
      'test/unit/cli/status.test.ts': "import { world } from './helpers.ts';\n",
      'test/unit/cli/helpers.ts':
        "export { world } from '../../helpers/world.ts';\nimport { a } from '../../helpers/world.ts';\n",
      'test/helpers/world.ts': "import { mockClient } from 'aws-sdk-client-mock';\n",
      'test/unit/cli/list.test.ts': "import { x } from '../../helpers/plain.ts';\n",
      'test/helpers/plain.ts': 'export const x = 1;\n',
    });

    // Act
    const shared = sharedModuleFiles(at);

    // Assess
    expect(shared).toEqual(['test/unit/cli/list.test.ts']);
  });
});
