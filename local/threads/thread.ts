import { Worker } from 'node:worker_threads';

/**
 * Starts a worker thread running the TypeScript module `main` (a file in this folder) through
 * tsx; the module finds `data` at `workerData.data`. Only plain data crosses the thread boundary.
 */
export function startThread(main: `./${string}.ts`, data: unknown): Worker {
  return new Worker(new URL('./thread-entry.mjs', import.meta.url), { workerData: { main, data } });
}
