/**
 * One access request through local mode, in a process of its own so its peak RSS is its own: the
 * platform holds the same state in every run (a light subject with 10 comments and a heavy one
 * with BENCH_HEAVY_COMMENTS, default 150,000), and the request is for the subject named on the
 * command line. The difference between the two runs' peaks is what a heavy subject's request
 * costs local mode. Prints one JSON line.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import type { EmulatorState } from '#local/emulator/state';
import { startLocalMode } from '#local/local-mode';

const args = z
  .object({ subject: z.enum(['light', 'heavy']), heavyComments: z.number().int().positive() })
  .parse(JSON.parse(process.argv[2] ?? '{}'));

const WORDS = 'the council budget library pool derby match referee goal season city park bus tram'.split(' ');

function platformState(heavyComments: number): EmulatorState {
  const conversations = Math.max(1, Math.floor(heavyComments / 25));
  const comments: NonNullable<EmulatorState['comments']> = [];
  for (let index = 0; index < 10; index++) {
    comments.push({
      id: `light-${index}`,
      primary_key: 'light',
      conversation_id: `conv-${index}`,
      text: `a light comment ${index}`,
      written_at: 1_700_000_000 + index,
      parent_id: null,
    });
  }
  for (let index = 0; index < heavyComments; index++) {
    const words = 8 + (index % 90);
    comments.push({
      id: `heavy-${index}`,
      primary_key: 'heavy',
      conversation_id: `conv-${index % conversations}`,
      text: Array.from({ length: words }, (_, word) => WORDS[(index + word) % WORDS.length]).join(' '),
      written_at: 1_700_000_000 + index * 60,
      parent_id: index >= conversations && index % 5 === 0 ? `heavy-${index - conversations}` : null,
    });
  }
  return {
    spot_id: 'sp_bench',
    conversations: Array.from({ length: conversations }, (_, index) => ({
      id: `conv-${index}`,
      url: `https://news.example.test/a/${index}`,
      title: `Article ${index}`,
    })),
    users: [
      { primary_key: 'light', user_name: 'light_user' },
      { primary_key: 'heavy', user_name: 'heavy_user' },
    ],
    comments,
    votes: [],
  };
}

const dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-local-package-'));
const mode = await startLocalMode({
  dataDir,
  platformState: platformState(args.heavyComments),
  faults: { export_ready_after_polls: 1 },
  waitMs: 0,
  logSink: () => undefined,
  // The emulator builds a 150,000-comment export in 3 to 6 s of CPU before it answers the export
  // POST; on a loaded shared host that passes the platform client's 10 s, which is not what this
  // measures. Both runs get the same longer timeout.
  env: { PLATFORM_TIMEOUT_MS: '60000' },
});
const rssBeforeBytes = process.memoryUsage().rss;
const started = performance.now();
let status = 'unknown';
let packageBytes = 0;
try {
  const received = new Date().toISOString();
  const requestId = randomUUID();
  await mode.submit([
    JSON.stringify({
      request_id: requestId,
      type: 'access',
      regulation: 'gdpr',
      primary_key: args.subject,
      received_at: received,
      verification: { method: 'email_link', verified_by: 'bench', verified_at: received },
    }),
  ]);
  await mode.idle();
  const item = await mode.workflow.ledger.require(requestId);
  status = `${item.status}${item.outcome === undefined ? '' : ` ${item.outcome}`}${item.error === undefined ? '' : ` ${item.error.code}: ${item.error.message}`}`;
  packageBytes = item.subject_package?.bytes ?? 0;
} finally {
  await mode.close();
  await rm(dataDir, { recursive: true, force: true });
}
process.stdout.write(
  `${JSON.stringify({
    status,
    packageBytes,
    seconds: (performance.now() - started) / 1000,
    rssBeforeBytes,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
  })}\n`,
);
process.exit(0);
