// Entry of local mode's worker threads: loads the TypeScript module that workerData.main names
// (relative to this folder) through tsx, as bin/svc-dsr.mjs does for the CLI.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(new URL(workerData.main, import.meta.url).href);
