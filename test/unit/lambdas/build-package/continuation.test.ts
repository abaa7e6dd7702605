import { createHash, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import yazl from 'yazl';
import { computeDeadlines } from '#shared/deadlines';
import { InvalidArchiveError, RequestCancelledError } from '#shared/errors';
import { Ledger } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import type { ArchiveStore, StepDeps } from '#shared/step-deps';
import { makeStepHandler } from '#shared/step-handler';
import {
  buildPackageStep,
  buildSubjectPackage,
  packageKey,
} from '../../../../lambdas/build-package/build-package.ts';
import { packageWorkPrefix } from '../../../../lambdas/build-package/continuation.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';
import { exportedMessage, rawFiles, T0 } from './fixtures.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;

beforeAll(async () => {
  dynamo = await startDynamo();
});
afterAll(async () => {
  await dynamo.close();
});

/** An archive bucket in memory that checks reads against their recorded size and SHA-256, as S3 reads are checked. */
function memoryStore(objects = new Map<string, Buffer>()): ArchiveStore & { objects: Map<string, Buffer> } {
  return {
    objects,
    copy: async () => {
      throw new Error('not used');
    },
    verify: async () => ({ entries: 4 }),
    verifyContinued: async () => {
      throw new Error('not used');
    },
    abandonUpload: async () => {
      throw new Error('not used');
    },
    remove: async (key) => (objects.delete(key) ? 1 : 0),
    async read(key, expected) {
      const body = objects.get(key);
      if (body === undefined) throw new InvalidArchiveError('the archive object is missing from the bucket');
      const sha256 = createHash('sha256').update(body).digest('hex');
      if (body.length !== expected.bytes || sha256 !== expected.sha256) {
        throw new InvalidArchiveError('the stored object no longer matches what was recorded');
      }
      return (async function* () {
        // In pieces, as a download comes.
        for (let start = 0; start < body.length; start += 4096) yield body.subarray(start, start + 4096);
      })();
    },
    async storePackage(key, body) {
      const chunks: Buffer[] = [];
      for await (const chunk of body) chunks.push(Buffer.from(chunk));
      objects.set(key, Buffer.concat(chunks));
      return {};
    },
  };
}

/** An export of 1,500 comments in 60 conversations, replies to own and others' comments, repeated votes. */
async function exportArchive(): Promise<Buffer> {
  const messages = Array.from({ length: 1_500 }, (_, index) =>
    exportedMessage(`m-${index}`, `conv-${index % 60}`, T0 + ((index * 7919) % 100_000), `comment ${index}`, {
      parent_comment_id: index % 4 === 3 ? `m-${index - 60}` : index % 9 === 0 ? `other-${index}` : null,
    }),
  );
  const files = rawFiles(messages, {
    likes: ['m-5', 'x-1', 'm-5', 'm-77', 'x-2'],
    dislikes: ['x-9', 'm-1', 'x-9'],
  });
  const zip = new yazl.ZipFile();
  for (const [name, body] of Object.entries(files)) zip.addBuffer(body, name);
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/** One access request, archived, in a ledger of its own (so the same request id can be built twice). */
async function archivedRequest(requestId: string, archive: Buffer) {
  const table = `continuation-${randomUUID()}`;
  await createLedgerTable(dynamo.client, table);
  const ledger = new Ledger(dynamo.client, table);
  await ledger.createReceived(
    {
      request_id: requestId,
      type: 'access',
      regulation: 'gdpr',
      primary_key: 'subject-pk-77',
      received_at: '2026-11-20T00:00:00Z',
      verification: { method: 'm', verified_by: 'v', verified_at: '2026-11-20T00:00:00Z' },
    },
    'fp',
    computeDeadlines('gdpr', new Date('2026-11-20T00:00:00Z')),
  );
  await ledger.update(
    requestId,
    {
      status: 'running',
      svc_user_id: 'svc-1',
      archive: {
        key: `exports/${requestId}/export.zip`,
        bytes: archive.length,
        sha256: createHash('sha256').update(archive).digest('hex'),
        entries: 4,
        verified_at: '2026-11-21T11:00:00Z',
      },
    },
    ['received'],
  );
  const store = memoryStore(new Map([[`exports/${requestId}/export.zip`, archive]]));
  const audits: unknown[] = [];
  const deps: StepDeps = {
    ledger,
    audit: {
      append: async (_id, record) => {
        audits.push(record);
        return {} as never;
      },
    },
    platform: {
      retrieveUser: async () => ({ found: true as const, svcUserId: 'svc-1', user: {} }),
      updateUser: async () => {
        throw new Error('a package build never updates a user');
      },
      deleteUser: async () => ({ outcome: 'deleted' as const, status: 200 }),
      startExport: async () => ({ exportId: 'exp-1' }),
      exportStatus: async () => ({ status: 'pending' as const, reported: 'pending' }),
      userActivity: async (_svcUserId, page) => ({
        cursor: { offset: page.offset, count: 0, has_next: false },
        items: [],
        users: {},
      }),
    },
    gate: {
      admit: async () => undefined,
      report: async () => undefined,
      acquireExport: async () => true,
      releaseExport: async () => undefined,
    } as unknown as StepDeps['gate'],
    archive: store,
    schedule: { initialSeconds: 30, maxSeconds: 120, budgetSeconds: 600, growthPercent: 100 },
    exportMaxAttempts: 2,
    retryAfterCapSeconds: 5,
    clock: () => new Date('2026-11-21T12:00:00Z'),
    sleep: async () => undefined,
    logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
  };
  return { ledger, store, deps, audits };
}

describe('BuildPackage continued across invocations', () => {
  it('stops after ordering when the invocation is short of time, and the next pass stores the same package as one uninterrupted build', async () => {
    const requestId = randomUUID();
    const archive = await exportArchive();
    const whole = await archivedRequest(requestId, archive);
    const split = await archivedRequest(requestId, archive);

    // Prepare: the uninterrupted build, with a Lambda context that has the whole 15 minutes left.
    const handler = makeStepHandler(buildPackageStep, () => whole.deps);
    const uninterrupted = await handler(
      { request_id: requestId },
      { getRemainingTimeInMillis: () => 900_000 },
    );

    // Act: the same build in an invocation with 5 s left, then the pass the state machine runs with its answer.
    const continuedHandler = makeStepHandler(buildPackageStep, () => split.deps);
    const first = await continuedHandler(
      { request_id: requestId },
      { getRemainingTimeInMillis: () => 5_000 },
    );

    // Assess: the first pass stored its work, not the package, and answers step facts only.
    expect(first).toEqual({
      continuation: { pass: 2, bytes: expect.any(Number), sha256: expect.any(String) },
    });
    expect(JSON.stringify(first)).not.toContain('subject-pk-77');
    expect(split.store.objects.has(packageKey(requestId))).toBe(false);
    expect(
      [...split.store.objects.keys()].filter((key) => key.startsWith(packageWorkPrefix(requestId))).sort(),
    ).toEqual(
      ['comments.ndjson', 'dislikes.ndjson', 'likes.ndjson', 'manifest.json'].map(
        (name) => `${packageWorkPrefix(requestId)}${name}`,
      ),
    );
    expect((await split.ledger.require(requestId)).subject_package).toBeUndefined();
    expect(split.audits).toEqual([]);

    const second = await continuedHandler(
      { request_id: requestId, ...first },
      { getRemainingTimeInMillis: () => 5_000 },
    );

    expect(second).toEqual(uninterrupted);
    expect(
      split.store.objects
        .get(packageKey(requestId))
        ?.equals(whole.store.objects.get(packageKey(requestId)) ?? Buffer.alloc(0)),
    ).toBe(true);
    expect((await split.ledger.require(requestId)).subject_package).toEqual(
      (await whole.ledger.require(requestId)).subject_package,
    );
    // The work is gone once the package is recorded; the archive stays.
    expect([...split.store.objects.keys()].sort()).toEqual(
      [`exports/${requestId}/export.zip`, packageKey(requestId)].sort(),
    );
    expect(split.audits).toEqual([
      expect.objectContaining({
        action: 'subject_package_built',
        facts: expect.objectContaining({ passes: 2 }),
      }),
    ]);
  });

  it('refuses a continuation whose stored work does not match the size and SHA-256 it carries', async () => {
    const requestId = randomUUID();
    const { deps, store } = await archivedRequest(requestId, await exportArchive());
    const first = await buildSubjectPackage({ request_id: requestId }, { ...deps, remainingTimeMs: () => 0 });
    if (!('continuation' in first)) throw new Error('expected a continuation');
    const manifestKey = `${packageWorkPrefix(requestId)}manifest.json`;
    const manifest = store.objects.get(manifestKey) ?? Buffer.alloc(0);
    store.objects.set(
      manifestKey,
      Buffer.from(manifest.toString('utf8').replace('"comments":', '"comments": ')),
    );

    await expect(buildSubjectPackage({ request_id: requestId, ...first }, deps)).rejects.toBeInstanceOf(
      InvalidArchiveError,
    );
    expect(store.objects.has(packageKey(requestId))).toBe(false);
  });

  it('removes the stored work when the request was cancelled between the two passes', async () => {
    const requestId = randomUUID();
    const { deps, store, ledger } = await archivedRequest(requestId, await exportArchive());
    const first = await buildSubjectPackage({ request_id: requestId }, { ...deps, remainingTimeMs: () => 0 });
    if (!('continuation' in first)) throw new Error('expected a continuation');
    await ledger.cancel(requestId, { reason: 'subject withdrew the request' });

    await expect(buildSubjectPackage({ request_id: requestId, ...first }, deps)).rejects.toBeInstanceOf(
      RequestCancelledError,
    );

    expect([...store.objects.keys()]).toEqual([`exports/${requestId}/export.zip`]);
  });
});
