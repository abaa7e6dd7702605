import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { afterEach, describe, expect, it } from 'vitest';
import type { ExecutionResult } from '#local/runtime/sfn-runner';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { type Harness, requestFor, startHarness, TEST_EXPORT_TOKEN, TEST_SSO_TOKEN } from './harness.ts';
import { submitAndSettle } from './submit.ts';

const MiB = 1024 * 1024;
/** A stored padding entry past two 8 MiB parts: the archive is three parts, the last a small one. */
const PADDING = 17 * MiB;

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

async function storedBytes(h: Harness, key: string): Promise<Buffer> {
  const { Body } = await h.workflow.s3.send(
    new GetObjectCommand({ Bucket: LOCAL_NAMES.archiveBucket, Key: key }),
  );
  return Buffer.from((await Body?.transformToByteArray()) ?? []);
}

/** The zip the emulator serves for `exportId`, downloaded in one go as any client would. */
async function emulatorZip(h: Harness, exportId: string): Promise<Buffer> {
  const status = await fetch(
    `${h.emulator.url}/gdpr/export/status/${exportId}?access_token=${TEST_EXPORT_TOKEN}&spot_id=${h.emulator.spotId}`,
  );
  const body: unknown = await status.json();
  const link = typeof body === 'object' && body !== null && 'link' in body ? String(body.link) : '';
  return Buffer.from(await (await fetch(link)).arrayBuffer());
}

function enteredStates(result: ExecutionResult | undefined): string[] {
  return (result?.events ?? [])
    .filter((event) => event.type === 'StateEntered')
    .map((event) => String(Object(event.state).name));
}

/** The ArchiveExport Range requests the emulator saw, from its call log. */
async function archiveCalls(h: Harness): Promise<number> {
  const calls = (await h.control('GET', 'calls')) as { calls?: { path: string }[] } | { path: string }[];
  const list = Array.isArray(calls) ? calls : (calls.calls ?? []);
  return list.filter((call) => call.path.startsWith('/_downloads/')).length;
}

describe('an export whose copy needs three invocations of ArchiveExport', () => {
  it('runs ArchiveExport again while it answers a continuation and archives the zip byte for byte', {
    timeout: 180_000,
  }, async () => {
    // Prepare: the first two invocations have too little time left, so each stops at its first
    // part boundary; the third has all it needs.
    const invocations: unknown[] = [];
    harness = await startHarness({
      faults: { export_padding_bytes: PADDING },
      stepOverrides: {
        ArchiveExport: (real) => (event) => {
          invocations.push(event);
          const left = invocations.length <= 2 ? 1_000 : 900_000;
          return real(event, { getRemainingTimeInMillis: () => left });
        },
      },
    });
    const h = harness;
    const request = requestFor('u-alice');

    // Act
    const results = await submitAndSettle(h, request);

    // Assess
    const result = results.get(request.request_id);
    expect(result?.status).toBe('SUCCEEDED');
    const entered = enteredStates(result);
    expect(entered.filter((name) => /Archive|RequestType/.test(name))).toEqual([
      'ArchiveExport',
      'RequestType?',
      'ArchiveContinues?',
      'ArchiveExport',
      'RequestType?',
      'ArchiveContinues?',
      'ArchiveExport',
      'RequestType?',
    ]);
    expect(entered.at(-1)).toBe('RecordExportedDone');
    expect(invocations).toHaveLength(3);
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'exported' });
    expect(item.archive_copy).toBeUndefined();
    const facts = item.archive;
    if (facts === undefined || item.export_id === undefined) throw new Error('the archive must be recorded');
    const stored = await storedBytes(h, facts.key);
    const served = await emulatorZip(h, item.export_id);
    expect(stored.length).toBe(served.length);
    expect(sha256(stored)).toBe(sha256(served));
    expect(facts).toMatchObject({ bytes: served.length, sha256: sha256(served), entries: 5 });
    // Three downloads: the whole, then the rest from each stop (and the test's own, above).
    expect(await archiveCalls(h)).toBe(4);
    // State carries counts only: no link, no upload id, no identifier or token.
    const state = JSON.stringify(result?.events);
    expect(state).not.toContain('/_downloads/');
    expect(state).not.toContain('upload_id');
    for (const secret of [
      'u-alice',
      'u_sample_alice',
      'alice@example.com',
      TEST_SSO_TOKEN,
      TEST_EXPORT_TOKEN,
    ]) {
      expect(state).not.toContain(secret);
    }
  });

  it('carries the copy on from the last checkpoint when an invocation dies without answering', {
    timeout: 180_000,
  }, async () => {
    // Prepare: the first invocation stops at its first boundary; the second dies once its next
    // part has landed in S3 (every S3 call it makes from then on never answers, and it never
    // returns), so Step Functions' retry runs ArchiveExport again from the ledger's checkpoint.
    const invocation = new AsyncLocalStorage<{ readonly number: number; dead: boolean }>();
    let invocations = 0;
    let kill: (() => void) | undefined;
    const failures: string[] = [];
    harness = await startHarness({
      faults: { export_padding_bytes: PADDING },
      stepOverrides: {
        ArchiveExport: (real) => (event) => {
          invocations += 1;
          const current = { number: invocations, dead: false };
          const left = current.number === 1 ? 1_000 : 900_000;
          return new Promise((resolve, reject) => {
            kill = () => {
              current.dead = true;
              const died = new Error('Task timed out after 900.00 seconds');
              died.name = 'Sandbox.Timedout';
              failures.push(died.name);
              reject(died);
            };
            invocation.run(current, () => {
              real(event, { getRemainingTimeInMillis: () => left }).then(resolve, reject);
            });
          });
        },
      },
    });
    const h = harness;
    h.workflow.s3.middlewareStack.add(
      (next, context) => async (args) => {
        const current = invocation.getStore();
        // Read again after each await: the invocation may have died meanwhile.
        const dead = () => current?.dead === true;
        if (dead()) return new Promise<never>(() => {});
        const output = await next(args);
        if (dead()) return new Promise<never>(() => {});
        if (current?.number === 2 && context.commandName === 'UploadPartCommand') {
          kill?.();
          return new Promise<never>(() => {});
        }
        return output;
      },
      { step: 'initialize', name: 'invocationDies' },
    );
    const request = requestFor('u-alice');

    // Act
    const results = await submitAndSettle(h, request);

    // Assess
    const result = results.get(request.request_id);
    expect(result?.status).toBe('SUCCEEDED');
    expect(failures).toEqual(['Sandbox.Timedout']);
    expect(invocations).toBe(3);
    // Step Functions retried the visit (the kill Retry rule), not RecordFailure.
    const retried = (result?.events ?? []).filter(
      (event) => event.type === 'StateRetried' && JSON.stringify(event).includes('Sandbox.Timedout'),
    );
    expect(retried.map((event) => String(Object(event.state).name))).toEqual(['ArchiveExport']);
    expect(enteredStates(result)).not.toContain('RecordFailure');
    const item = await h.workflow.ledger.require(request.request_id);
    const facts = item.archive;
    if (facts === undefined || item.export_id === undefined) throw new Error('the archive must be recorded');
    const served = await emulatorZip(h, item.export_id);
    expect(sha256(await storedBytes(h, facts.key))).toBe(sha256(served));
    expect(facts.sha256).toBe(sha256(served));
  });
});
