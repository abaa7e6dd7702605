import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';
import { collidingRequestIds } from '../helpers/dynamo.ts';

let workdir: string;
let dataDir: string;
let server: ServingLocal;

const target = () => ['--target', 'local', '--data-dir', dataDir];

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-list-index-'));
  dataDir = join(workdir, 'data');
  const faults = join(workdir, 'faults.json');
  // Every export fails, so both requests end `failed`: still owed an answer, so in the open index.
  await writeFile(faults, JSON.stringify({ export_failure_rate: 1 }));
  server = await serveLocal(dataDir, ['--faults', faults]);
}, 120_000);

afterAll(async () => {
  if (server) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

async function statusOf(requestId: string): Promise<string | undefined> {
  const result = await runCli(['status', requestId, '--json', ...target()]);
  if (result.code !== 0) return undefined;
  return z.object({ status: z.string() }).loose().parse(JSON.parse(result.stdout)).status;
}

describe('svc-dsr list against a serving local mode', () => {
  it('lists both of two requests that share a status, a due date and a short index key', async () => {
    // Received together, so one due date; the ids share dynalite's short index key (helpers/dynamo.ts).
    const ids = collidingRequestIds();
    const receivedAt = new Date(Date.now() - 3600 * 1000).toISOString();
    const lines = ids.map((requestId) =>
      JSON.stringify({
        request_id: requestId,
        type: 'access',
        regulation: 'gdpr',
        primary_key: 'u-alice',
        received_at: receivedAt,
        verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: receivedAt },
      }),
    );
    const file = join(workdir, 'pair.jsonl');
    await writeFile(file, `${lines.join('\n')}\n`);
    const submitted = await runCli(['submit', '--file', file, ...target()]);
    expect(submitted.code, submitted.stderr).toBe(0);
    for (const requestId of ids) {
      for (let attempt = 0; (await statusOf(requestId)) !== 'failed'; attempt += 1) {
        if (attempt > 120) throw new Error(`${requestId} never failed: ${server.stderr()}`);
        await delay(500);
      }
    }

    const listed = await runCli(['list', '--status', 'failed', '--json', ...target()]);
    expect(listed.code, listed.stderr).toBe(0);
    const result = z
      .object({ count: z.number(), requests: z.array(z.object({ request_id: z.string() })) })
      .parse(JSON.parse(listed.stdout));
    expect(result.requests.map((request) => request.request_id).sort()).toEqual([...ids].sort());
    expect(result.count).toBe(2);
  }, 180_000);
});
