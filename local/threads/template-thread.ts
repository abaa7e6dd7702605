/**
 * The stack synthesized on a short-lived worker thread. Loaded and synthesized, the CDK keeps some
 * 45 MB of modules and constructs on the heap. On its own thread that memory goes when the thread
 * ends; in the thread that then runs every request, each full garbage collection would mark it
 * again, for as long as local mode runs.
 */
import { once } from 'node:events';
import { z } from 'zod';
import { startThread } from './thread.ts';

export const templateMessageSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('template'), template: z.record(z.string(), z.unknown()) }),
  z.object({ kind: z.literal('failed'), name: z.string(), message: z.string() }),
]);
export type TemplateMessage = z.infer<typeof templateMessageSchema>;

/** What `synthesizeTemplate(config)` returns, computed on a thread of its own. */
export async function synthesizeTemplateOnThread(config: unknown = {}): Promise<Record<string, unknown>> {
  const worker = startThread('./template-thread-main.ts', config);
  const [message] = await Promise.race([
    once(worker, 'message'),
    once(worker, 'exit').then(([code]) => {
      throw new Error(`the synthesis thread exited (code ${code}) before it sent the template`);
    }),
  ]);
  const answer = templateMessageSchema.parse(message);
  if (answer.kind === 'template') return answer.template;
  throw new Error(`the stack could not be synthesized (${answer.name}): ${answer.message}`);
}
