import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The product's tests and the local package's (local/test/): one run covers both.
    include: ['test/**/*.test.ts', 'local/test/**/*.test.ts'],
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
  },
});
