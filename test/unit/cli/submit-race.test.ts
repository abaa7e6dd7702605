import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { LedgerItem } from '#shared/ledger';
import { parseRequestMessage } from '#shared/request';
import { runSubmit, type SubmitTarget } from '../../../bin/cli/commands/submit.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { ledgerRecord, NAMES, PRIMARY_KEY } from './helpers.ts';

const sqsMock = mockClient(SQSClient);
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-dsr-submit-race-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
beforeEach(() => {
  sqsMock.reset();
});

function request(requestId: string, reference: string): Record<string, unknown> {
  return {
    request_id: requestId,
    type: 'access',
    regulation: 'gdpr',
    primary_key: PRIMARY_KEY,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    reference,
  };
}

/**
 * The intake queue and intake as they behave: messages wait in the queue, and intake records the
 * first message of a request_id in the ledger and quarantines a later one with other content.
 * `intake()` takes what the queue holds, in the order it was sent.
 */
function queueAndIntake() {
  const queue: string[] = [];
  const ledger = new Map<string, LedgerItem>();
  sqsMock
    .on(SendMessageBatchCommand)
    .callsFake((input: { Entries?: { Id?: string; MessageBody?: string }[] }) => {
      queue.push(...(input.Entries ?? []).map((entry) => entry.MessageBody ?? ''));
      return {
        Successful: (input.Entries ?? []).map((entry) => ({ Id: entry.Id, MessageId: `m-${entry.Id}` })),
        Failed: [],
      };
    });
  const sqs = new SQSClient({ region: 'eu-west-1', credentials: { accessKeyId: 't', secretAccessKey: 't' } });
  const target: SubmitTarget = { sqs, names: NAMES, ledger: { get: async (id) => ledger.get(id) } };
  return {
    connect: async () => target,
    queued: () => queue.length,
    intake() {
      for (const body of queue.splice(0)) {
        const parsed = parseRequestMessage(body);
        if (parsed.kind !== 'valid' || ledger.has(parsed.request.request_id)) continue;
        ledger.set(
          parsed.request.request_id,
          ledgerRecord({
            request_id: parsed.request.request_id,
            fingerprint: parsed.fingerprint,
            status: 'received',
          }),
        );
      }
    },
  };
}

async function file(name: string, lines: readonly Record<string, unknown>[]): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, `${lines.map((line) => JSON.stringify(line)).join('\n')}\n`);
  return path;
}

describe('two submits of one request_id with different content, a moment apart', () => {
  it('reports the conflict on the one intake quarantined (exit 1); the other exits 0', async () => {
    // Prepare: both read the ledger before intake has recorded either
    const requestId = randomUUID();
    const world = queueAndIntake();
    const first = await file('first.jsonl', [request(requestId, 'DSR-1')]);
    const second = await file('second.jsonl', [request(requestId, 'DSR-2')]);
    const ios = [collectingIo(), collectingIo()] as const;

    // Act: intake runs once both have sent, as it would a moment later
    const runs = Promise.all([
      runSubmit({ file: first, waitSeconds: 30 }, ios[0], world.connect),
      runSubmit({ file: second, waitSeconds: 30 }, ios[1], world.connect),
    ]);
    while (world.queued() < 2) await new Promise((resolve) => setImmediate(resolve));
    world.intake();
    const results = await runs;

    // Assess: whichever reached intake second is the one told
    expect(results.map((run) => run.exitCode).sort()).toEqual([0, 1]);
    const loserIndex = results.findIndex((run) => run.exitCode === 1);
    const winner = results[1 - loserIndex];
    const loser = results[loserIndex];
    expect(winner?.result).toMatchObject({ intake_checked: true, intake_conflicts: [], unconfirmed: [] });
    expect(loser?.result.sent).toEqual([{ line: 1, request_id: requestId }]);
    expect(loser?.result.intake_conflicts).toEqual([{ line: 1, request_id: requestId, status: 'received' }]);
    const loserIo = ios[loserIndex === 0 ? 0 : 1];
    expect(loserIo.stderr()).toContain(
      `line 1: request ${requestId} was sent, but intake holds that request_id with other content (received)`,
    );
    expect(`${loserIo.stdout()}${loserIo.stderr()}`).not.toContain(PRIMARY_KEY);
  });

  it('exits 0 without waiting with --wait 0, and reports what intake has not recorded by the end of a wait', async () => {
    // Prepare: an intake that never runs
    const world = queueAndIntake();
    const path = await file('unseen.jsonl', [request(randomUUID(), 'DSR-3')]);

    // Act
    const skipped = await runSubmit({ file: path, waitSeconds: 0 }, collectingIo(), world.connect);
    const io = collectingIo();
    const waited = await runSubmit({ file: path, waitSeconds: 0.3 }, io, world.connect);

    // Assess
    expect(skipped).toMatchObject({ exitCode: 0, result: { intake_checked: false, unconfirmed: [] } });
    expect(waited.exitCode).toBe(0);
    expect(waited.result.unconfirmed).toHaveLength(1);
    expect(io.stderr()).toContain('intake had not recorded 1 of the requests sent by the end of the wait');
  });
});
