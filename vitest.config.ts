import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { sharedModuleFiles } from './test/shared-modules.ts';

const ROOT = fileURLToPath(new URL('.', import.meta.url));
/** Unit test files that leave no global change behind: they share one module graph per worker. */
const shared = sharedModuleFiles(ROOT);

export default defineConfig({
  test: {
    setupFiles: ['test/setup.ts'],
    // The CLI as installed: compiled into dist/cli/ when it is missing or older than its sources.
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    env: {
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
      POWERTOOLS_DEV: 'false',
    },
    // The product's tests and the local package's (local/test/): one run covers both.
    projects: [
      { extends: true, test: { name: 'shared', include: shared, isolate: false } },
      {
        extends: true,
        test: {
          name: 'isolated',
          include: ['test/**/*.test.ts', 'local/test/**/*.test.ts'],
          exclude: [...shared, '**/node_modules/**'],
        },
      },
    ],
  },
});
