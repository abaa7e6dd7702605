import { describe, expect, it, vi } from 'vitest';
import { InvalidArchiveError, LedgerStateError, RequestCancelledError } from '#shared/errors';
import type { ArchiveCopyFacts } from '#shared/ledger';
import type { ArchiveCheckpoint } from '#shared/step-deps';
import { archiveExport, archiveKey } from '../../../../lambdas/archive-export/archive-export.ts';
import {
  archived,
  deps,
  EXPORT_PENDING,
  freshGate,
  ledger,
  platform,
  requestIn,
  useStepWorld,
} from '../step-world.ts';

useStepWorld();

/** A request whose export completed, at the archiving step, and the platform's next status answer with its link. */
async function completedExportToArchive(): Promise<string> {
  const id = await requestIn({
    svc_user_id: 'svc-1',
    export_id: 'exp-1',
    export_status: 'completed',
    export_attempts: 1,
    step: 'archiving',
  });
  platform.exportStatus.mockResolvedValueOnce({
    status: 'completed',
    link: new URL('https://cdn.example.com/x.zip'),
  } as never);
  return id;
}

describe('archiveExport', () => {
  it('copies, verifies and records the archive in one ledger write', async () => {
    // Prepare
    const id = await completedExportToArchive();
    const writes = vi.spyOn(ledger, 'update');

    // Act / Assess
    try {
      await expect(archiveExport({ request_id: id }, deps)).resolves.toEqual({
        key: archiveKey(id, 1),
        bytes: 10,
        sha256: 'ab'.repeat(32),
        entries: 4,
      });
      expect(writes).toHaveBeenCalledTimes(1);
    } finally {
      writes.mockRestore();
    }
    expect(deps.archive.verify).toHaveBeenCalledWith(archiveKey(id, 1), {
      bytes: 10,
      sha256: 'ab'.repeat(32),
    });
    expect((await ledger.require(id)).archive).toMatchObject({ key: archiveKey(id, 1), entries: 4 });
  });

  it('gives its export slot back once the platform answers the download, before the copy ends', async () => {
    // Prepare
    const id = await completedExportToArchive();
    const gate = await freshGate();
    await gate.acquireExport(id);
    const heldDuringCopy: { before?: boolean; after?: boolean } = {};
    vi.mocked(deps.archive.copy).mockImplementationOnce(async (_link, _key, _type, continuable) => {
      heldDuringCopy.before = id in (await gate.exportHolders());
      await continuable.onDownloadOpened?.();
      heldDuringCopy.after = id in (await gate.exportHolders());
      return { kind: 'copied', copied: { bytes: 10, sha256: 'ab'.repeat(32) } };
    });

    // Act
    await archiveExport({ request_id: id }, { ...deps, gate });

    // Assess
    expect(heldDuringCopy).toEqual({ before: true, after: false });
    expect(id in (await gate.exportHolders())).toBe(false);
  });

  it('records nothing when the stored zip fails verification', async () => {
    // Prepare
    const id = await requestIn({
      svc_user_id: 'svc-1',
      export_id: 'exp-1',
      export_status: 'completed',
      export_attempts: 1,
    });
    platform.exportStatus.mockResolvedValueOnce({
      status: 'completed',
      link: new URL('https://cdn.example.com/x.zip'),
    } as never);
    vi.mocked(deps.archive.verify).mockRejectedValueOnce(new InvalidArchiveError('profile.json is missing'));

    // Act / Assess
    await expect(archiveExport({ request_id: id }, deps)).rejects.toBeInstanceOf(InvalidArchiveError);
    expect((await ledger.require(id)).archive).toBeUndefined();
  });

  it('refuses to archive an export that has not completed', async () => {
    // Prepare
    const id = await requestIn(EXPORT_PENDING);

    // Act / Assess
    await expect(archiveExport({ request_id: id }, deps)).rejects.toBeInstanceOf(LedgerStateError);
    expect(deps.archive.copy).not.toHaveBeenCalled();
  });

  it('returns the recorded archive without downloading again', async () => {
    // Prepare
    const id = await requestIn({ svc_user_id: 'svc-1', archive: archived });

    // Act / Assess
    await expect(archiveExport({ request_id: id }, deps)).resolves.toEqual({
      key: 'k',
      bytes: 10,
      sha256: 'ab',
      entries: 4,
    });
    expect(platform.exportStatus).not.toHaveBeenCalled();
  });
});

const MiB = 1024 * 1024;
const COMPLETED_EXPORT = {
  svc_user_id: 'svc-1',
  export_id: 'exp-1',
  export_status: 'completed',
  export_attempts: 1,
} as const;
const checkpoint = (parts: number): ArchiveCheckpoint => ({
  uploadId: 'upload-1',
  partSizeBytes: 8 * MiB,
  parts,
  partsCrc32: 0x1234abcd,
  totalBytes: 40 * MiB,
});

function linkOnce() {
  platform.exportStatus.mockResolvedValueOnce({
    status: 'completed',
    link: new URL('https://cdn.example.com/x.zip'),
  } as never);
}

describe('archiveExport: a copy longer than one invocation', () => {
  it('answers a continuation and records the checkpoint in the ledger when the copy stops for lack of time', async () => {
    // Prepare
    const id = await requestIn(COMPLETED_EXPORT);
    linkOnce();
    let stopAsked: boolean | undefined;
    vi.mocked(deps.archive.copy).mockImplementationOnce(async (_link, _key, _type, continuable) => {
      stopAsked = continuable.shouldStop();
      await continuable.onCheckpoint(checkpoint(1));
      return { kind: 'paused', checkpoint: checkpoint(2) };
    });

    // Act: 10 s left, below the margin.
    const answer = await archiveExport({ request_id: id }, { ...deps, remainingTimeMs: () => 10_000 });

    // Assess
    expect(stopAsked).toBe(true);
    expect(answer).toEqual({ continuation: { invocation: 1, bytes: 16 * MiB, total_bytes: 40 * MiB } });
    const item = await ledger.require(id);
    expect(item.archive).toBeUndefined();
    expect(item.archive_copy).toEqual({
      key: archiveKey(id, 1),
      upload_id: 'upload-1',
      part_size: 8 * MiB,
      parts: 2,
      parts_crc32: 0x1234abcd,
      total_bytes: 40 * MiB,
      run: 0,
      invocations: 1,
    });
    expect(deps.archive.verify).not.toHaveBeenCalled();
    // State carries counts only: no link, no upload id.
    expect(JSON.stringify(answer)).not.toMatch(/cdn\.example|upload-1/);
  });

  it('never stops a copy that has plenty of time, nor one without a clock of the time left', async () => {
    // Prepare
    const asked: boolean[] = [];
    for (const remainingTimeMs of [() => 800_000, undefined]) {
      const id = await requestIn(COMPLETED_EXPORT);
      linkOnce();
      vi.mocked(deps.archive.copy).mockImplementationOnce(async (_link, _key, _type, continuable) => {
        asked.push(continuable.shouldStop());
        return { kind: 'copied', copied: { bytes: 10, sha256: 'ab'.repeat(32) } };
      });

      // Act
      await archiveExport(
        { request_id: id },
        remainingTimeMs === undefined ? deps : { ...deps, remainingTimeMs },
      );
    }

    // Assess
    expect(asked).toEqual([false, false]);
  });

  it("carries the copy on from the ledger's checkpoint, proves it by one read and records the archive", async () => {
    // Prepare
    const id = await requestIn(COMPLETED_EXPORT);
    const carried: ArchiveCopyFacts = {
      key: archiveKey(id, 1),
      upload_id: 'upload-1',
      part_size: 8 * MiB,
      parts: 2,
      parts_crc32: 0x1234abcd,
      total_bytes: 40 * MiB,
      run: 0,
      invocations: 1,
    };
    await ledger.update(id, { archive_copy: carried }, ['running']);
    linkOnce();
    vi.mocked(deps.archive.copy).mockResolvedValueOnce({
      kind: 'continued',
      stored: { bytes: 40 * MiB, checksumCrc32: 'AAAAAA==-5', versionId: 'v-3' },
    });

    // Act
    const answer = await archiveExport({ request_id: id }, { ...deps, remainingTimeMs: () => 800_000 });

    // Assess
    expect(vi.mocked(deps.archive.copy).mock.calls[0]?.[3].checkpoint).toEqual(checkpoint(2));
    expect(deps.archive.verifyContinued).toHaveBeenCalledWith(archiveKey(id, 1), {
      bytes: 40 * MiB,
      checksumCrc32: 'AAAAAA==-5',
      versionId: 'v-3',
    });
    expect(answer).toEqual({ key: archiveKey(id, 1), bytes: 40 * MiB, sha256: 'cd'.repeat(32), entries: 4 });
    const item = await ledger.require(id);
    expect(item.archive).toMatchObject({ sha256: 'cd'.repeat(32), version_id: 'v-3' });
    expect(item.archive_copy).toBeUndefined();
  });

  it('leaves the proof to an invocation of its own when the read would not fit in the time left', async () => {
    // Prepare
    const id = await requestIn(COMPLETED_EXPORT);
    await ledger.update(
      id,
      {
        archive_copy: {
          key: archiveKey(id, 1),
          upload_id: 'upload-1',
          part_size: 8 * MiB,
          parts: 4,
          parts_crc32: 7,
          total_bytes: 10_000 * MiB,
          run: 0,
          invocations: 2,
        },
      },
      ['running'],
    );
    linkOnce();
    vi.mocked(deps.archive.copy).mockResolvedValueOnce({
      kind: 'continued',
      stored: { bytes: 10_000 * MiB, checksumCrc32: 'AAAAAA==-1250' },
    });

    // Act: 10 GB at the assumed 50 MB/s is 210 s; 100 s are left. Then the next invocation.
    const first = await archiveExport({ request_id: id }, { ...deps, remainingTimeMs: () => 100_000 });
    const recorded = (await ledger.require(id)).archive_copy;
    const second = await archiveExport({ request_id: id }, { ...deps, remainingTimeMs: () => 800_000 });

    // Assess
    expect(first).toEqual({
      continuation: { invocation: 3, bytes: 10_000 * MiB, total_bytes: 10_000 * MiB },
    });
    expect(recorded?.completed).toEqual({ checksum_crc32: 'AAAAAA==-1250' });
    expect(deps.archive.copy).toHaveBeenCalledTimes(1);
    expect(deps.archive.verifyContinued).toHaveBeenCalledTimes(1);
    expect(second).toMatchObject({ key: archiveKey(id, 1), sha256: 'cd'.repeat(32) });
  });

  it('counts the invocations of one run, and starts the count again in a later run', async () => {
    // Prepare: the checkpoint was written by run 1 after 3 invocations.
    const id = await requestIn({ ...COMPLETED_EXPORT, executions: 2 });
    const facts = (run: number): ArchiveCopyFacts => ({
      key: archiveKey(id, 1),
      upload_id: 'upload-1',
      part_size: 8 * MiB,
      parts: 1,
      parts_crc32: 0,
      total_bytes: 40 * MiB,
      run,
      invocations: 3,
    });
    const paused = () =>
      vi.mocked(deps.archive.copy).mockResolvedValueOnce({ kind: 'paused', checkpoint: checkpoint(2) });

    // Act
    await ledger.update(id, { archive_copy: facts(2) }, ['running']);
    linkOnce();
    paused();
    const sameRun = await archiveExport({ request_id: id, execution: `${id}-retry-2` }, deps);
    await ledger.update(id, { archive_copy: facts(1) }, ['running']);
    linkOnce();
    paused();
    const laterRun = await archiveExport({ request_id: id, execution: `${id}-retry-2` }, deps);

    // Assess
    expect(sameRun).toMatchObject({ continuation: { invocation: 4 } });
    expect(laterRun).toMatchObject({ continuation: { invocation: 1 } });
  });

  it('aborts the upload when the request was cancelled between two invocations', async () => {
    // Prepare
    const id = await requestIn(COMPLETED_EXPORT);
    await ledger.update(
      id,
      {
        archive_copy: {
          key: archiveKey(id, 1),
          upload_id: 'upload-9',
          part_size: 8 * MiB,
          parts: 1,
          parts_crc32: 0,
          total_bytes: 40 * MiB,
          run: 0,
          invocations: 1,
        },
      },
      ['running'],
    );
    await ledger.cancel(id, { reason: 'withdrawn' });

    // Act / Assess
    await expect(archiveExport({ request_id: id }, deps)).rejects.toBeInstanceOf(RequestCancelledError);
    expect(deps.archive.abandonUpload).toHaveBeenCalledWith(archiveKey(id, 1), 'upload-9');
    expect(deps.archive.copy).not.toHaveBeenCalled();
  });

  it("aborts an earlier export attempt's upload and copies the new attempt afresh", async () => {
    // Prepare
    const id = await requestIn({ ...COMPLETED_EXPORT, export_attempts: 2 });
    await ledger.update(
      id,
      {
        archive_copy: {
          key: archiveKey(id, 1),
          upload_id: 'upload-old',
          part_size: 8 * MiB,
          parts: 1,
          parts_crc32: 0,
          total_bytes: 40 * MiB,
          run: 0,
          invocations: 1,
        },
      },
      ['running'],
    );
    linkOnce();

    // Act
    await archiveExport({ request_id: id }, deps);

    // Assess
    expect(deps.archive.abandonUpload).toHaveBeenCalledWith(archiveKey(id, 1), 'upload-old');
    expect(vi.mocked(deps.archive.copy).mock.calls[0]?.[1]).toBe(archiveKey(id, 2));
    expect(vi.mocked(deps.archive.copy).mock.calls[0]?.[3].checkpoint).toBeUndefined();
  });
});
