/** Runs on the thread template-thread.ts starts: synthesizes the stack and sends its template back. */
import { parentPort, workerData } from 'node:worker_threads';
import { synthesizeTemplate } from '../../lib/template.ts';
import type { TemplateMessage } from './template-thread.ts';

const port = parentPort;
if (port === null) throw new Error('template-thread-main.ts runs only as a worker thread');
let message: TemplateMessage;
try {
  message = { kind: 'template', template: synthesizeTemplate((workerData as { data: unknown }).data) };
} catch (error) {
  message = {
    kind: 'failed',
    name: error instanceof Error ? error.name : 'Error',
    message: error instanceof Error ? error.message : String(error),
  };
}
port.postMessage(message);
