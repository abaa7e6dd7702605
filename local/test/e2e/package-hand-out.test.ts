/**
 * `svc-dsr package` run as a process against a local mode whose function logs are kept: the
 * operator function records every hand-out before it answers the link, and the link (a bearer
 * credential) is in none of its log lines, its audit records, the ledger, or anything else the data
 * dir holds. Only the command's own stdout carries it, in link mode.
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type LocalMode, startLocalMode } from '#local/local-mode';
import { CALLERS, runAsCaller } from '../../../lambdas/shared/call-recorder.ts';
import { runCli } from '../../../test/helpers/cli.ts';

let dataDir: string;
let mode: LocalMode;
const logLines: string[] = [];
const requestId = randomUUID();

const cli = (...args: string[]) => runCli([...args, '--target', 'local', '--data-dir', dataDir]);

/** Every byte the data dir holds, file by file (ledger, audit records, archives, histories...). */
async function dataDirContents(): Promise<Buffer> {
  const entries = await readdir(dataDir, { recursive: true, withFileTypes: true });
  const files = entries.filter((entry) => entry.isFile()).map((entry) => join(entry.parentPath, entry.name));
  return Buffer.concat(await Promise.all(files.map((file) => readFile(file).catch(() => Buffer.alloc(0)))));
}

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-hand-out-'));
  mode = await startLocalMode({ dataDir, logSink: (line) => logLines.push(line) });
  const receivedAt = new Date(Date.now() - 3_600_000).toISOString();
  await runAsCaller(CALLERS.localRuntime, () =>
    mode.submit([
      JSON.stringify({
        request_id: requestId,
        type: 'access',
        regulation: 'gdpr',
        primary_key: 'u-alice',
        received_at: receivedAt,
        verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: receivedAt },
      }),
    ]),
  );
  await mode.idle();
}, 180_000);

afterAll(async () => {
  await mode?.close();
  await rm(dataDir, { recursive: true, force: true });
});

describe('svc-dsr package through the operator function', () => {
  it('records every hand-out, and keeps the link out of the logs, the records and the data dir', async () => {
    // Prepare
    const status = z
      .object({ status: z.literal('completed'), subject_package: z.object({ sha256: z.string() }) })
      .parse(JSON.parse((await cli('status', requestId, '--json')).stdout));
    const out = join(dataDir, '..', `${requestId}-your-data.zip`);

    // Act: a link, then a copy.
    const linked = await cli('package', requestId, '--expires-in', '900', '--json');
    const copied = await cli('package', requestId, '--out', out);

    // Assess: both handed out.
    expect(linked.code, linked.stderr).toBe(0);
    expect(copied.code, copied.stderr).toBe(0);
    const { url } = z.object({ url: z.url() }).parse(JSON.parse(linked.stdout));
    const signature = new URL(url).searchParams.get('X-Amz-Signature') ?? '';
    expect(signature).toMatch(/^[0-9a-f]{64}$/);
    const copy = await readFile(out);
    expect(createHash('sha256').update(copy).digest('hex')).toBe(status.subject_package.sha256);
    await rm(out);

    // Both are in the packages chain, which verify finds whole.
    const verified = await cli('verify', requestId, '--json');
    expect(verified.code, verified.stderr).toBe(0);
    const packages = z
      .object({ side_chains: z.array(z.object({ kind: z.string(), records: z.number() })) })
      .parse(JSON.parse(verified.stdout))
      .side_chains.find((chain) => chain.kind === 'packages');
    expect(packages?.records).toBe(2);

    // The function's logs were kept (it logged both hand-outs), and never hold the link.
    const handOutLogs = logLines.filter((line) => line.includes('hand_out_package'));
    expect(handOutLogs).toHaveLength(2);
    const logs = logLines.join('\n');
    expect(logs).not.toContain(signature);
    expect(logs).not.toContain('X-Amz-Signature');
    // Nor does anything stored: the records, the ledger, the histories.
    const stored = await dataDirContents();
    expect(stored.includes(signature)).toBe(false);
    expect(stored.includes('X-Amz-Signature')).toBe(false);
    // Nor the command's own notes and errors; the copy's output names no link at all.
    expect(linked.stderr + copied.stdout + copied.stderr).not.toContain('X-Amz-');
  }, 120_000);
});
