/** The `start` command (`npm start`): the demonstration, sample requests through the whole workflow. */
import { randomUUID } from 'node:crypto';
import type { StartFlags } from '../../bin/cli/local-package.ts';
import { CALLERS, setDefaultCaller } from '../../lambdas/shared/call-recorder.ts';
import { acquireDataDirLock, emptyDataDir } from '../data-dir-lock.ts';
import { commandLine, ownDataDir, printSummary, summarize } from './local.ts';

/** The sample requests `npm start` submits: one of each path through the workflow. */
export function sampleRequests(now = new Date()): string[] {
  const received = new Date(now.getTime() - 2 * 24 * 3600 * 1000).toISOString();
  const verification = { method: 'email_link', verified_by: 'privacy-team', verified_at: received };
  const request = (fields: Record<string, unknown>) =>
    JSON.stringify({ request_id: randomUUID(), received_at: received, verification, ...fields });
  return [
    request({ type: 'access', regulation: 'gdpr', primary_key: 'u-alice', reference: 'DEMO-1' }),
    request({ type: 'erasure', regulation: 'ccpa', primary_key: 'u-bruno', reference: 'DEMO-2' }),
    request({ type: 'access', regulation: 'gdpr', primary_key: 'u-nobody', reference: 'DEMO-3' }),
    // A correction needs a stronger check than an e-mail link (the address itself may change).
    request({
      type: 'correction',
      regulation: 'ccpa',
      primary_key: 'u-chloe',
      reference: 'DEMO-4',
      verification: { ...verification, method: 'account_login' },
      corrections: { display_name: 'Chloé Dubois', location: 'Lyon' },
    }),
    JSON.stringify({ request_id: randomUUID(), type: 'delete', regulation: 'gdpr' }),
  ];
}

/** `npm start`: the whole workflow on this machine with sample data, shown as it runs. */
export async function startCommand(flags: StartFlags): Promise<void> {
  const write = (text: string) => process.stdout.write(text);
  // The dir is emptied only once this process owns it: never while another one uses it.
  const lock = await ownDataDir(async () => {
    const held = await acquireDataDirLock(flags.dataDir, commandLine());
    await emptyDataDir(held).catch(async (error: unknown) => {
      await held.release();
      throw error;
    });
    return held;
  });
  write('svc-dsr: starting the platform emulator, local AWS stand-ins and the state machine...\n');
  const { startLocalMode } = await import('../local-mode.ts');
  setDefaultCaller(CALLERS.localRuntime);
  const mode = await startLocalMode({ dataDir: flags.dataDir, lock });
  try {
    write(`platform emulator: ${mode.emulator.url} (sample state: 4 users, comments, votes)\n`);
    const lines = sampleRequests();
    write(
      `submitting ${lines.length} requests: an access, an erasure, an unknown user, a correction, an invalid message\n`,
    );
    const seen = new Map<string, string>();
    const watch = setInterval(() => {
      void (async () => {
        for (const id of seen.keys()) {
          const item = await mode.workflow.ledger.get(id);
          const state = item
            ? `${item.status}${item.step ? ` (${item.step})` : ''}${item.outcome ? `: ${item.outcome}` : ''}`
            : '';
          if (state !== '' && seen.get(id) !== state) {
            seen.set(id, state);
            write(`  ${id}  ${state}\n`);
          }
        }
      })();
    }, 50);
    const outcomes = await mode.submit(lines);
    for (const outcome of outcomes) if (outcome.kind === 'accepted') seen.set(outcome.requestId, '');
    await mode.idle();
    clearInterval(watch);
    printSummary(mode, await summarize(mode, outcomes), write);
    write('\nNext: `npx svc-dsr local --help`, `npx svc-dsr emulator --help`, and README.md.\n');
  } finally {
    await mode.close();
  }
}
