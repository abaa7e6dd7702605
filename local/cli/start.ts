/** The `start` command (`npm start`): the demonstration, sample requests through the whole workflow. */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { StartFlags } from '../../bin/cli/local-package.ts';
import { CALLERS, setDefaultCaller } from '../../lambdas/shared/call-recorder.ts';
import { acquireDataDirLock, emptyDataDir } from '../data-dir-lock.ts';
import { type EmulatorState, emulatorStateSchema, loadStateFile } from '../emulator/state.ts';
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

/**
 * The demonstration's two sites: the sample state's news site, where every sample user has an
 * account, and a forum where only u-alice has one, so each request shows what each site came to.
 */
export const DEMO_SITES = [
  { id: 'news', name: 'Demo News', spotId: 'sp_demo' },
  { id: 'forum', name: 'Demo Forum', spotId: 'sp_forum' },
] as const;

/** The sample state as the news site, beside the forum's own account. */
export async function demoState(): Promise<EmulatorState> {
  const { spot_id: _spot, ...news } = await loadStateFile(
    fileURLToPath(new URL('../emulator/sample-state.json', import.meta.url)),
  );
  return emulatorStateSchema.parse({
    sites: [
      { spot_id: DEMO_SITES[0].spotId, ...news },
      {
        spot_id: DEMO_SITES[1].spotId,
        conversations: [
          { id: 'conv-forum-1', url: 'https://forum.example.com/t/1', title: 'Introduce yourself' },
        ],
        users: [
          {
            primary_key: 'u-alice',
            user_name: 'alice_forum',
            display_name: 'Alice W.',
            email: 'alice@example.com',
            email_verified: true,
          },
        ],
        comments: [
          {
            id: 'forum-c-1',
            primary_key: 'u-alice',
            conversation_id: 'conv-forum-1',
            text: 'Hello, forum!',
            written_at: 1_700_000_000,
            parent_id: null,
          },
        ],
        votes: [],
      },
    ],
  });
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
  const mode = await startLocalMode({
    dataDir: flags.dataDir,
    lock,
    platformState: await demoState(),
    stackConfig: { sites: DEMO_SITES },
  });
  try {
    write(
      `platform emulator: ${mode.emulator.url}, two sites: ${DEMO_SITES[0].name} (${DEMO_SITES[0].id}: the sample state, 4 users, comments, votes) and ${DEMO_SITES[1].name} (${DEMO_SITES[1].id}: u-alice only)\n`,
    );
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
    write(
      `\nThe privacy console, over these requests: \`npx svc-dsr local --serve --data-dir ${mode.dataDir}\` serves it and prints its address (http://127.0.0.1:<port>/console/) with one-time sign-in codes.\n`,
    );
    write('\nNext: `npx svc-dsr local --help`, `npx svc-dsr emulator --help`, and README.md.\n');
  } finally {
    await mode.close();
  }
}
