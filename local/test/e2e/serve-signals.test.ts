/**
 * `svc-dsr local --serve` stopped by SIGTERM or SIGINT while an execution waits for an export slot,
 * as a supervisor or Ctrl-C stops it: it exits 0 within seconds, and a restart on the same data dir
 * finishes every request.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { exited, killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

let workdir: string;
let faults: string;
const servers: ServingLocal[] = [];

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-signals-'));
  // One export slot: the second request waits for the first one's export to be downloaded.
  faults = join(workdir, 'faults.json');
  await writeFile(faults, JSON.stringify({ rate_limit: { max_open_exports: 1 } }));
});

afterAll(async () => {
  for (const server of servers) await killServer(server, 'SIGKILL');
  await rm(workdir, { recursive: true, force: true });
});

async function serve(dataDir: string, args: readonly string[]): Promise<ServingLocal> {
  const server = await serveLocal(dataDir, ['--faults', faults, ...args]);
  servers.push(server);
  return server;
}

function request(requestId: string, reference: string) {
  return {
    request_id: requestId,
    type: 'access',
    regulation: 'gdpr',
    primary_key: 'u-alice',
    received_at: new Date(Date.now() - 3600_000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
    reference,
  };
}

const statusSchema = z.looseObject({
  status: z.string(),
  export_slot_waits: z.number().optional(),
  export_id: z.string().optional(),
});

async function status(dataDir: string, requestId: string): Promise<z.infer<typeof statusSchema>> {
  const result = await runCli(['status', requestId, '--json', '--target', 'local', '--data-dir', dataDir]);
  expect(result.code, result.stderr).toBe(0);
  return statusSchema.parse(JSON.parse(result.stdout));
}

async function until(probe: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(250);
  }
}

describe.each(['SIGTERM', 'SIGINT'] as const)('svc-dsr local --serve on %s', (signal) => {
  it('exits 0 within seconds while a request waits for an export slot, and a restart finishes both', async () => {
    // Prepare: two requests, one export slot; each Wait state lasts a minute, so the first one's
    // export stays open and the second one keeps waiting for the slot.
    const dataDir = join(workdir, `data-${signal}`);
    const first =
      signal === 'SIGTERM' ? '5a1e0000-0000-4000-8000-000000000001' : '5a1e0000-0000-4000-8000-000000000011';
    const second =
      signal === 'SIGTERM' ? '5a1e0000-0000-4000-8000-000000000002' : '5a1e0000-0000-4000-8000-000000000012';
    const server = await serve(dataDir, ['--wait-ms', '60000']);
    const file = join(workdir, `requests-${signal}.jsonl`);
    await writeFile(
      file,
      `${JSON.stringify(request(first, 'DSR-1'))}\n${JSON.stringify(request(second, 'DSR-2'))}\n`,
    );
    const submitted = await runCli(['submit', '--file', file, '--target', 'local', '--data-dir', dataDir]);
    expect(submitted.code, submitted.stderr).toBe(0);
    await until(
      async () => {
        const [one, two] = [await status(dataDir, first), await status(dataDir, second)];
        // Whichever got the slot holds the export; the other has found every slot taken.
        return (
          (one.export_id !== undefined && (two.export_slot_waits ?? 0) > 0) ||
          (two.export_id !== undefined && (one.export_slot_waits ?? 0) > 0)
        );
      },
      60_000,
      'one request to hold the export slot and the other to wait for it',
    );

    // Act
    const stoppedAt = Date.now();
    const code = exited(server.child);
    server.child.kill(signal);
    const exitCode = await Promise.race([code, delay(8_000).then(() => 'still running')]);

    // Assess: stopped in time, cleanly, saying so.
    expect(exitCode, server.stderr()).toBe(0);
    expect(Date.now() - stoppedAt).toBeLessThan(8_000);
    expect(server.stderr()).toContain(`${signal}: stopping`);
    // Both executions are left RUNNING in their records, for the next start to resume.
    for (const name of [first, second]) {
      const record = z
        .looseObject({ status: z.string() })
        .parse(JSON.parse(await readFile(join(dataDir, 'executions', `${name}.json`), 'utf8')));
      expect(record.status).toBe('RUNNING');
    }

    // Nothing lost: started again without the long waits, both requests complete.
    const restarted = await serve(dataDir, []);
    await until(
      async () =>
        (await status(dataDir, first)).status === 'completed' &&
        (await status(dataDir, second)).status === 'completed',
      90_000,
      'both requests to complete after the restart',
    );
    const again = exited(restarted.child);
    restarted.child.kill(signal);
    expect(await again).toBe(0);
  }, 240_000);
});
