// The local services thread's entry: loads the TypeScript through tsx, as bin/svc-dsr.mjs does.
import { register } from 'tsx/esm/api';

register();
await import('./services-thread-main.ts');
