import type { CustomMatcher } from 'aws-sdk-client-mock-vitest';

declare module 'vitest' {
  // biome-ignore lint/suspicious/noExplicitAny: must repeat vitest's own declaration to merge with it
  interface Assertion<T = any> extends CustomMatcher<T> {}
}
