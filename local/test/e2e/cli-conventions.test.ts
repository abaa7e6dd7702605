/**
 * The CLI as people and scripts use it, run as processes against one serving local mode: pipes
 * that close, conflicts at submit time, untrusted text, and the hints it prints.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { DynamoDBClient, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { marshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { readLocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { auditRecordKey } from '../../../lambdas/shared/audit.ts';
import { CLI, killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';
import { ledgerRecord } from '../../../test/unit/cli/helpers.ts';
import { chainsFor, type LockedChain } from '../../../test/unit/cli/locked-chains.ts';

let workdir: string;
let dataDir: string;
let server: ServingLocal | undefined;

const target = () => ['--target', 'local', '--data-dir', dataDir];

function request(primaryKey: string, overrides: Record<string, unknown> = {}) {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: new Date(Date.now() - 24 * 3600 * 1000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
    ...overrides,
  };
}

/** The first request's three export attempts fail (see the faults file); the second completes. */
const failing = request('u-alice', { reference: 'T-1' });
const completing = request('u-bruno', { reference: 'T-2' });

async function statusOf(requestId: string): Promise<string | undefined> {
  const result = await runCli(['status', requestId, '--json', ...target()]);
  if (result.code !== 0) return undefined;
  return z.object({ status: z.string() }).parse(JSON.parse(result.stdout)).status;
}

async function untilStatus(requestId: string, status: string): Promise<void> {
  for (let attempt = 0; attempt < 240; attempt += 1) {
    if ((await statusOf(requestId)) === status) return;
    await delay(250);
  }
  throw new Error(`request ${requestId} never became ${status}`);
}

/**
 * Runs `svc-dsr <args>` with its stdout on a real pipe to `reader` (a shell command), as
 * `svc-dsr ... | head -1` would, and answers the CLI's own exit code and stderr.
 */
function piped(args: readonly string[], reader: string): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'bash',
      ['-c', `"$0" "$@" | ${reader}; exit "\${PIPESTATUS[0]}"`, process.execPath, CLI, ...args],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`svc-dsr ${args.join(' ')} | ${reader} did not finish; stderr: ${stderr}`));
    }, 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stderr });
    });
  });
}

/** A reader that takes one line and goes away. */
const ONE_LINE = 'head -1 >/dev/null';
/** A reader that goes away before the CLI has written anything (it takes a second to start). */
const GONE = '(exec 0<&-)';

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-conventions-'));
  dataDir = join(workdir, 'data');
  const faults = join(workdir, 'faults.json');
  await writeFile(faults, JSON.stringify({ export_outcomes: ['failed', 'failed', 'failed'] }));
  server = await serveLocal(dataDir, ['--faults', faults]);
  const first = join(workdir, 'first.jsonl');
  await writeFile(first, `${JSON.stringify(failing)}\n`);
  expect((await runCli(['submit', '--file', first, ...target()])).code).toBe(0);
  await untilStatus(failing.request_id, 'failed');
  const second = join(workdir, 'second.jsonl');
  await writeFile(second, `${JSON.stringify(completing)}\n`);
  expect((await runCli(['submit', '--file', second, ...target()])).code).toBe(0);
  await untilStatus(completing.request_id, 'completed');
}, 240_000);

afterAll(async () => {
  if (server !== undefined) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

describe('a reader that goes away', () => {
  it('keeps submit quiet when head takes one line of a long output, and keeps its exit code: 2 for invalid lines', async () => {
    const file = join(workdir, 'many-bad.jsonl');
    const bad = Array.from({ length: 3000 }, () => JSON.stringify({ request_id: randomUUID(), type: 'x' }));
    await writeFile(file, `${bad.join('\n')}\n`);
    const result = await piped(['submit', '--file', file, '--dry-run', '--json'], ONE_LINE);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(2);
  }, 60_000);

  it('sends every line of a submit whose reader went away, and exits 0', async () => {
    const lines = Array.from({ length: 25 }, () => ({ ...completing, request_id: randomUUID() }));
    const file = join(workdir, 'many-good.jsonl');
    await writeFile(file, `${lines.map((line) => JSON.stringify(line)).join('\n')}\n`);
    const result = await piped(['submit', '--file', file, ...target()], GONE);
    expect(result.stderr).toBe('submit: 25 sent, 0 bad lines\n');
    expect(result.code).toBe(0);
    for (const { request_id: requestId } of lines) {
      const status = await runCli(['status', requestId, '--json', ...target()]);
      expect(status.code).toBe(0);
    }
  }, 120_000);

  it.each([
    ['list', ['list', '--status', 'failed,completed']],
    ['list --json', ['list', '--status', 'completed', '--json']],
    ['report', ['report']],
    ['report --json', ['report', '--json']],
    ['status', ['status', failing.request_id]],
  ])(
    'stops %s quietly with exit 0 when its reader has closed the pipe',
    async (_name, args) => {
      const result = await piped([...args, ...target()], GONE);
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
    },
    60_000,
  );
});

/** Writes a ledger item straight to the served ledger, as one recorded before intake refused control characters. */
async function putLegacyItem(item: Record<string, unknown>): Promise<void> {
  const local = await readLocalEndpoints(dataDir);
  const client = new DynamoDBClient({
    region: local.region,
    credentials: local.credentials,
    endpoint: local.endpoints.dynamodb,
  });
  try {
    await client.send(
      new PutItemCommand({
        TableName: local.outputs.LedgerTableName,
        Item: marshall(item, { removeUndefinedValues: true }),
      }),
    );
  } finally {
    client.destroy();
  }
}

/** Writes audit chains straight to the served audit bucket. */
async function putChains(chains: readonly LockedChain[]): Promise<void> {
  const local = await readLocalEndpoints(dataDir);
  const s3 = new S3Client({
    region: local.region,
    credentials: local.credentials,
    endpoint: local.endpoints.s3,
    forcePathStyle: true,
  });
  try {
    for (const { chainId, records } of chains) {
      for (const record of records) {
        await s3.send(
          new PutObjectCommand({
            Bucket: local.outputs.AuditBucketName,
            Key: auditRecordKey(chainId, record.seq),
            Body: `${JSON.stringify(record, null, 2)}\n`,
          }),
        );
      }
    }
  } finally {
    s3.destroy();
  }
}

describe('untrusted text', () => {
  const ESCAPES = 'T\u001b[2J\u009b31m\u202eevil\u2028line';

  it('refuses control characters in reference, submitted_by, verified_by and reasons at intake, with exit 2', async () => {
    const flags = [
      '--type',
      'access',
      '--regulation',
      'gdpr',
      '--primary-key',
      'u-carla',
      '--received-at',
      '2026-11-20T09:00:00Z',
      '--verification-method',
      'email_link',
      '--verified-at',
      '2026-11-20T09:05:00Z',
    ];
    const reference = await runCli([
      'submit',
      ...flags,
      '--verified-by',
      'privacy-team',
      '--reference',
      'DSR\u001b[31m-1',
      ...target(),
    ]);
    expect(reference.code).toBe(2);
    expect(reference.stderr).toContain(
      '--reference: must be one line of plain text, without control characters',
    );
    const verifiedBy = await runCli(['submit', ...flags, '--verified-by', 'privacy\nteam', '--dry-run']);
    expect(verifiedBy.code).toBe(2);
    expect(verifiedBy.stderr).toContain('--verified-by: must be one line of plain text');

    const file = join(workdir, 'controls.jsonl');
    await writeFile(file, `${JSON.stringify(request('u-dora', { submitted_by: 'ops\u009b2J' }))}\n`);
    const submitted = await runCli(['submit', '--file', file, ...target()]);
    expect(submitted.code).toBe(2);
    expect(submitted.stderr).toContain('line 1');
    expect(submitted.stderr).toContain('submitted_by: must be one line of plain text');
    expect(submitted.stdout).toBe('');

    const cancel = await runCli(['cancel', failing.request_id, '--reason', 'asked\u001b]8;;x', ...target()]);
    expect(cancel.code).toBe(2);
    expect(cancel.stderr).toContain('--reason: must be one line of plain text');
  }, 60_000);

  it('prints control characters already in the ledger escaped in status, list and report', async () => {
    // Received a minute ago and answered now: its records (below) are stored when they say.
    const receivedAt = new Date(Date.now() - 60_000).toISOString();
    const legacy = ledgerRecord({
      request_id: randomUUID(),
      status: 'completed',
      step: undefined,
      outcome: 'no_data',
      received_at: receivedAt,
      verification: { method: 'email_link', verified_by: ESCAPES, verified_at: receivedAt },
      reference: ESCAPES,
      submitted_by: ESCAPES,
      completed_at: new Date().toISOString(),
    });
    await putLegacyItem(legacy);
    // The report prints only what the audit records back: the chain intake and the workflow wrote for it.
    await putChains(chainsFor(legacy));
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point.
    const raw = /[\u001b\u009b\u202e\u2028]/;
    const outputs = [
      await runCli(['status', legacy.request_id, ...target()]),
      await runCli(['status', legacy.request_id, '--json', ...target()]),
      await runCli(['list', '--status', 'completed', ...target()]),
      await runCli(['list', '--status', 'completed', '--json', ...target()]),
      await runCli(['report', ...target()]),
      await runCli(['report', '--json', ...target()]),
    ];
    for (const output of outputs) {
      expect(output.code).toBe(0);
      expect(output.stdout).toContain(legacy.request_id);
      expect(output.stdout).not.toMatch(raw);
    }
    expect(outputs[0]?.stdout).toContain('T\\x1b[2J\\x9b31m\\u202eevil\\u2028line');
    expect(outputs[2]?.stdout).toContain('T\\x1b[2J\\x9b31m\\u202eevil\\u2028line');
    expect(outputs[4]?.stdout).toContain('T\\x1b[2J\\x9b31m\\u202eevil\\u2028line');
    // JSON keeps the value: its escapes read back as the same characters.
    expect(JSON.parse(outputs[1]?.stdout ?? '')).toMatchObject({ reference: ESCAPES });
  }, 60_000);
});

describe('submit against the ledger', () => {
  it('reports a request already in the ledger as a duplicate, sends it, and exits 0', async () => {
    const file = join(workdir, 'again.jsonl');
    await writeFile(file, `${JSON.stringify(completing)}\n`);
    const result = await runCli(['submit', '--file', file, ...target()]);
    expect(result.code).toBe(0);
    expect(result.stderr).toContain(
      `line 1: request ${completing.request_id} is already in the ledger with the same content (completed)`,
    );
    expect(result.stderr).toContain('1 already in the ledger');
  }, 60_000);

  it('reports a conflict with the ledger before sending, sends only the rest, and exits 2', async () => {
    const fresh = request('u-erin');
    const file = join(workdir, 'conflict.jsonl');
    await writeFile(
      file,
      `${JSON.stringify({ ...completing, reference: 'changed' })}\n${JSON.stringify(fresh)}\n`,
    );
    const result = await runCli(['submit', '--file', file, '--json', ...target()]);
    expect(result.code).toBe(2);
    const summary = z
      .object({
        ledger_checked: z.boolean(),
        sent: z.array(z.object({ request_id: z.string() })),
        conflicts: z.array(z.object({ line: z.number(), request_id: z.string(), status: z.string() })),
      })
      .parse(JSON.parse(result.stdout));
    expect(summary.ledger_checked).toBe(true);
    expect(summary.conflicts).toEqual([{ line: 1, request_id: completing.request_id, status: 'completed' }]);
    expect(summary.sent.map((entry) => entry.request_id)).toEqual([fresh.request_id]);

    const flags = await runCli([
      'submit',
      '--request-id',
      completing.request_id,
      '--type',
      'erasure',
      '--regulation',
      'gdpr',
      '--primary-key',
      'u-bruno',
      '--received-at',
      completing.received_at,
      '--verification-method',
      'email_link',
      '--verified-by',
      'privacy-team',
      '--verified-at',
      completing.verification.verified_at,
      ...target(),
    ]);
    expect(flags.code).toBe(2);
    expect(flags.stdout).toBe('');
    expect(flags.stderr).toContain(
      `request ${completing.request_id} is already in the ledger (completed) with different content; not sent`,
    );
    // Nothing reached intake for the conflicting id: its conflict counter is unchanged.
    const status = await runCli(['status', completing.request_id, '--json', ...target()]);
    expect(JSON.parse(status.stdout)).toMatchObject({ conflicts: 0 });
  }, 60_000);
});

describe('hints that work when pasted', () => {
  it('says how to retry a failed request, and the command it gives works as pasted', async () => {
    const status = await runCli(['status', failing.request_id, ...target()]);
    expect(status.code).toBe(0);
    const hint = /retry it: (npx svc-dsr retry \S+ --target local --data-dir \S+)/.exec(status.stdout);
    expect(hint?.[1]).toBe(`npx svc-dsr retry ${failing.request_id} --target local --data-dir ${dataDir}`);
    // `npx svc-dsr` is this CLI; the rest of the line is run by a shell exactly as printed.
    const pasted = (hint?.[1] ?? '').replace(/^npx svc-dsr /, '');
    const retried = await new Promise<number | null>((resolve) => {
      const child = spawn('bash', ['-c', `"$0" "$1" ${pasted}`, process.execPath, CLI], { stdio: 'ignore' });
      child.on('close', resolve);
    });
    expect(retried).toBe(0);
    await untilStatus(failing.request_id, 'completed');
    const after = await runCli(['status', failing.request_id, ...target()]);
    expect(after.stdout).not.toContain('retry it:');
  }, 120_000);

  it('lists the ended requests the demo summary points at', async () => {
    const result = await runCli(['list', '--status', 'completed,failed,rejected', ...target()]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(completing.request_id);
  }, 60_000);
});
