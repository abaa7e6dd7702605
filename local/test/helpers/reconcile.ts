import type { LocalMode } from '#local/local-mode';
import type { ReconcileSummary } from '../../../lambdas/reconciler/reconciler.ts';

/**
 * Runs reconciler passes (no grace) until one resumes or strands `requestId`, and answers that
 * pass's summary. A request is stranded in a test by stopping its execution while a step runs;
 * that step's handler may still write the ledger after the stop, and a pass leaves alone a request
 * updated since the pass began, so a single pass can miss it on a loaded machine.
 */
export async function reconcileUntilActedOn(
  mode: Pick<LocalMode, 'reconcile'>,
  requestId: string,
  options: { maxResumes?: number } = {},
  timeoutMs = 60_000,
): Promise<ReconcileSummary> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const summary = await mode.reconcile({ graceSeconds: 0, ...options });
    if (summary.resumed.includes(requestId) || summary.stranded.includes(requestId)) return summary;
    if (Date.now() > end) throw new Error(`no reconciler pass acted on ${requestId} in ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
