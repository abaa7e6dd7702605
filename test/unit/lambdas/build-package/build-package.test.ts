import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import yazl from 'yazl';
import { InvalidArchiveError, LedgerStateError, RequestCancelledError } from '#shared/errors';
import type { LedgerPatch } from '#shared/ledger';
import { buildSubjectPackage, packageKey } from '../../../../lambdas/build-package/build-package.ts';
import { archived, deps, EXPORT_PENDING, ledger, requestIn, useStepWorld } from '../step-world.ts';

useStepWorld();

describe('buildSubjectPackage', () => {
  /** A zip of the four export files, as the archive bucket holds it. */
  async function exportZip(): Promise<Buffer> {
    const zip = new yazl.ZipFile();
    const files = {
      'dislikes.json': [],
      'likes.json': ['c-9'],
      'messages.json': [
        {
          id: 'c-1',
          conversation_id: 'conv-1',
          parent_comment_id: null,
          written_at: 1_704_103_200,
          content: [{ id: 'x', text: 'hello', type: 'text' }],
          published: true,
        },
      ],
      'profile.json': { user_id: 'svc-1', roles: [], basic: { user_name: 'subject_77' } },
    };
    for (const [name, value] of Object.entries(files))
      zip.addBuffer(Buffer.from(JSON.stringify(value)), name);
    zip.end();
    const chunks: Buffer[] = [];
    for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
    return Buffer.concat(chunks);
  }

  async function archivedAccess(patch: LedgerPatch = {}): Promise<string> {
    return requestIn({ ...EXPORT_PENDING, export_status: 'completed', archive: archived, ...patch });
  }

  it('builds from the verified archive, stores the package and records it once, with a leap-second receipt time', async () => {
    // Prepare
    const id = await archivedAccess({ received_at: '2016-12-31t23:59:60z' });
    vi.mocked(deps.archive.read).mockResolvedValue(Readable.from([await exportZip()]));
    const stored: Buffer[] = [];
    vi.mocked(deps.archive.storePackage).mockImplementation(async (_key, body) => {
      const chunks: Uint8Array[] = [];
      for await (const chunk of body) chunks.push(chunk);
      stored.push(Buffer.concat(chunks));
      return { versionId: 'v-1' };
    });

    // Act
    const output = await buildSubjectPackage({ request_id: id }, deps);

    // Assess
    expect(deps.archive.read).toHaveBeenCalledWith('k', { bytes: 10, sha256: 'ab' });
    expect(stored).toHaveLength(1);
    expect(output).toEqual({
      key: packageKey(id),
      bytes: stored[0]?.length,
      sha256: createHash('sha256')
        .update(stored[0] ?? '')
        .digest('hex'),
      conversation_details: 'complete',
    });
    const item = await ledger.require(id);
    expect(item.subject_package).toMatchObject({
      key: packageKey(id),
      version_id: 'v-1',
      file_name: 'your-data-2026-11-21.zip',
    });
    expect(deps.audit.append).toHaveBeenCalledWith(
      id,
      expect.objectContaining({ eventId: 'BuildPackage', action: 'subject_package_built' }),
    );

    // A second run answers from the ledger.
    await expect(buildSubjectPackage({ request_id: id }, deps)).resolves.toEqual(output);
    expect(stored).toHaveLength(1);
    expect(deps.archive.read).toHaveBeenCalledTimes(1);
  });

  it('refuses an erasure request: it gets no subject package', async () => {
    // Prepare
    const id = await requestIn({ ...EXPORT_PENDING, archive: archived }, 'erasure');

    // Act / Assess
    await expect(buildSubjectPackage({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
    expect(deps.archive.read).not.toHaveBeenCalled();
  });

  it('stores nothing when the archive no longer matches the ledger', async () => {
    // Prepare
    const id = await archivedAccess();
    vi.mocked(deps.archive.read).mockRejectedValue(new InvalidArchiveError('no longer matches the ledger'));

    // Act / Assess
    await expect(buildSubjectPackage({ request_id: id }, deps)).rejects.toBeInstanceOf(InvalidArchiveError);

    expect(deps.archive.storePackage).not.toHaveBeenCalled();
    expect((await ledger.require(id)).subject_package).toBeUndefined();
  });

  it('removes the package it stored when the request was cancelled meanwhile', async () => {
    // Prepare
    const id = await archivedAccess();
    vi.mocked(deps.archive.read).mockResolvedValue(Readable.from([await exportZip()]));
    vi.mocked(deps.archive.storePackage).mockImplementation(async (_key, body) => {
      for await (const _chunk of body) {
        // The whole package is read, as S3 would.
      }
      await ledger.cancel(id, { reason: 'subject withdrew the request' });
      return {};
    });

    // Act / Assess
    await expect(buildSubjectPackage({ request_id: id }, deps)).rejects.toBeInstanceOf(RequestCancelledError);

    expect(deps.archive.remove).toHaveBeenCalledWith(packageKey(id));
    expect((await ledger.require(id)).subject_package).toBeUndefined();
  });
});
