// The ArchiveExport step: copies the finished export into the archive bucket and verifies the stored zip.
import {
  AuditChainClosedError,
  LedgerStateError,
  PlatformResponseInvalidError,
  RequestCancelledError,
} from '#shared/errors';
import type { ArchiveCopyFacts } from '#shared/ledger';
import type { ArchiveCheckpoint, StepDeps } from '#shared/step-deps';
import { activeRequest, runOfExecution, subjectGoneOr } from '#shared/step-guards';
import {
  type ArchiveOutput,
  archiveStepOutputSchema,
  type StepInput,
  stepInputSchema,
} from '#shared/step-io';
import {
  ARCHIVE_READBACK_BYTES_PER_SECOND,
  ARCHIVE_STOP_MARGIN_MS,
  type ArchiveContinuation,
} from './continuation.ts';

/** The archive's object key: built from request_id and attempt, never from a personal identifier. */
export function archiveKey(requestId: string, attempt: number): string {
  return `exports/${requestId}/attempt-${attempt}.zip`;
}

/**
 * Copies the finished export into the archive bucket and verifies the stored zip. The download
 * link comes from a fresh status call and never leaves this function. A copy that does not fit in
 * one invocation (`deps.remainingTimeMs`) stops at a part boundary, records where it stands in the
 * ledger (`archive_copy`) and answers a continuation; the state machine runs the step again, and
 * that invocation carries the copy on from the ledger's checkpoint (lambdas/shared/archive/continued-copy.ts).
 */
export async function archiveExport(
  input: StepInput,
  deps: StepDeps,
): Promise<ArchiveOutput | ArchiveContinuation> {
  const item = await activeRequest(deps, input.request_id, input.execution).catch(async (error: unknown) => {
    // A request that ended between two invocations keeps no parts of the subject's data.
    if (error instanceof RequestCancelledError || error instanceof LedgerStateError) {
      await abandonCopy(input.request_id, deps);
    }
    throw error;
  });
  if (item.archive !== undefined) {
    const { key, bytes, sha256, entries } = item.archive;
    return { key, bytes, sha256, entries };
  }
  if (item.export_id === undefined || item.export_status !== 'completed') {
    throw new LedgerStateError('the export has not completed, so there is nothing to archive');
  }
  const key = archiveKey(input.request_id, item.export_attempts);
  if (item.type === undefined) throw new LedgerStateError('the ledger item has no request type');
  if (item.type === 'correction') throw new LedgerStateError('a correction request has no export to archive');
  let carried = item.archive_copy;
  if (carried !== undefined && carried.key !== key) {
    // An earlier export attempt's copy: that export is gone, and so is the use of its parts.
    await deps.archive.abandonUpload(carried.key, carried.upload_id);
    carried = undefined;
  }
  const run = runOfExecution(input.request_id, input.execution) ?? item.executions;
  const invocation = carried === undefined || carried.run !== run ? 1 : carried.invocations + 1;
  if (carried?.completed !== undefined) {
    const { checksum_crc32, version_id } = carried.completed;
    return proveContinued(input.request_id, key, deps, {
      bytes: carried.total_bytes,
      checksumCrc32: checksum_crc32,
      ...(version_id === undefined ? {} : { versionId: version_id }),
    });
  }
  const status = await deps.platform.exportStatus(item.export_id).catch(async (error: unknown) => {
    throw await subjectGoneOr(error, deps, item, 'ArchiveExport');
  });
  if (status.status !== 'completed') {
    throw new PlatformResponseInvalidError(
      `the platform now reports the completed export as ${status.status}`,
    );
  }
  const record = (copy: Omit<ArchiveCopyFacts, 'key' | 'run' | 'invocations'>) =>
    deps.ledger.update(input.request_id, { archive_copy: { ...copy, key, run, invocations: invocation } }, [
      'running',
    ]);
  const recordCheckpoint = (checkpoint: ArchiveCheckpoint) =>
    record(copyFacts(checkpoint)).then(() => undefined);
  // The download is a platform call like the others. Once the platform answers it with the
  // archive, the export is no longer open there: its slot goes to the next request while the copy
  // runs (a platform that counts it longer refuses that start, and the gate learns its cap).
  await deps.gate.admit();
  const outcome = await deps.archive
    .copy(status.link, key, item.type, {
      ...(carried === undefined ? {} : { checkpoint: checkpointOf(carried) }),
      shouldStop: stopBeforeTimeout(deps.remainingTimeMs),
      onCheckpoint: recordCheckpoint,
      onDownloadOpened: () => deps.gate.releaseExport(input.request_id),
    })
    .catch(async (error: unknown) => {
      if (error instanceof RequestCancelledError) await abandonCopy(input.request_id, deps);
      throw error;
    });
  if ('restarted' in outcome && outcome.restarted !== undefined) {
    deps.logger.warn('the recorded copy could not be carried on; it began anew', {
      reason: outcome.restarted,
    });
  }
  if (outcome.kind === 'paused') {
    const { checkpoint } = outcome;
    await recordCheckpoint(checkpoint).catch(async (error: unknown) => {
      if (error instanceof RequestCancelledError) await abandonCopy(input.request_id, deps);
      throw error;
    });
    const bytes = checkpoint.parts * checkpoint.partSizeBytes;
    deps.logger.info('archive copy continues in another invocation', {
      key,
      invocation,
      bytes,
      total_bytes: checkpoint.totalBytes,
    });
    return { continuation: { invocation, bytes, total_bytes: checkpoint.totalBytes } };
  }
  await deps.gate.releaseExport(input.request_id);
  if (outcome.kind === 'continued') {
    const { stored } = outcome;
    const remaining = deps.remainingTimeMs?.();
    const readMs = (stored.bytes / ARCHIVE_READBACK_BYTES_PER_SECOND) * 1000;
    if (remaining !== undefined && remaining < ARCHIVE_STOP_MARGIN_MS + readMs) {
      // The proof reads the whole archive back: it gets an invocation of its own.
      if (carried === undefined) throw new LedgerStateError('a carried-on copy has no checkpoint');
      await record({
        ...copyFacts(checkpointOf(carried)),
        completed: {
          checksum_crc32: stored.checksumCrc32,
          ...(stored.versionId === undefined ? {} : { version_id: stored.versionId }),
        },
      });
      deps.logger.info('archive stored; its proof runs in another invocation', { key, invocation });
      return { continuation: { invocation, bytes: stored.bytes, total_bytes: stored.bytes } };
    }
    return proveContinued(input.request_id, key, deps, stored);
  }
  const { copied } = outcome;
  const { entries } = await deps.archive.verify(key, copied);
  return recordArchive(input.request_id, key, deps, { ...copied, entries });
}

/**
 * `shouldStop` for the copy: true once the invocation's time left is below the margin plus twice
 * the time the last part took, so the copy stops at the last boundary it can still leave cleanly.
 * Without a clock of the time left (local mode) the copy never stops.
 */
function stopBeforeTimeout(remainingTimeMs: (() => number) | undefined): () => boolean {
  if (remainingTimeMs === undefined) return () => false;
  let lastBoundary = performance.now();
  return () => {
    const now = performance.now();
    const partMs = now - lastBoundary;
    lastBoundary = now;
    return remainingTimeMs() < ARCHIVE_STOP_MARGIN_MS + 2 * partMs;
  };
}

function copyFacts(checkpoint: ArchiveCheckpoint): Omit<ArchiveCopyFacts, 'key' | 'run' | 'invocations'> {
  return {
    upload_id: checkpoint.uploadId,
    part_size: checkpoint.partSizeBytes,
    parts: checkpoint.parts,
    parts_crc32: checkpoint.partsCrc32,
    total_bytes: checkpoint.totalBytes,
  };
}

function checkpointOf(copy: ArchiveCopyFacts): ArchiveCheckpoint {
  return {
    uploadId: copy.upload_id,
    partSizeBytes: copy.part_size,
    parts: copy.parts,
    partsCrc32: copy.parts_crc32,
    totalBytes: copy.total_bytes,
  };
}

/** Proves a copy carried across invocations by reading it back, then records it. */
async function proveContinued(
  requestId: string,
  key: string,
  deps: StepDeps,
  stored: { bytes: number; checksumCrc32: string; versionId?: string },
): Promise<ArchiveOutput> {
  const { entries, sha256 } = await deps.archive.verifyContinued(key, stored);
  return recordArchive(requestId, key, deps, {
    bytes: stored.bytes,
    sha256,
    entries,
    ...(stored.versionId === undefined ? {} : { versionId: stored.versionId }),
  });
}

/** Records the verified archive (and drops the copy's checkpoint) in one ledger write, then audits it. */
async function recordArchive(
  requestId: string,
  key: string,
  deps: StepDeps,
  copied: { bytes: number; sha256: string; entries: number; versionId?: string },
): Promise<ArchiveOutput> {
  const { entries } = copied;
  const verifiedAt = deps.clock().toISOString();
  try {
    await deps.ledger.update(
      requestId,
      {
        archive: {
          key,
          bytes: copied.bytes,
          sha256: copied.sha256,
          entries,
          verified_at: verifiedAt,
          ...(copied.versionId ? { version_id: copied.versionId } : {}),
        },
        archive_copy: null,
      },
      ['running'],
    );
  } catch (error) {
    if (error instanceof RequestCancelledError) await removeCancelledArchive(requestId, key, deps);
    throw error;
  }
  await deps.audit.append(requestId, {
    eventId: 'ArchiveExport',
    step: 'ArchiveExport',
    action: 'archive_verified',
    facts: { key, bytes: copied.bytes, sha256: copied.sha256, entries, version_id: copied.versionId ?? null },
  });
  deps.logger.info('archive verified', { key, bytes: copied.bytes, sha256: copied.sha256 });
  return { key, bytes: copied.bytes, sha256: copied.sha256, entries };
}

/**
 * The request ended (cancelled, or out of the running) while a copy was carried across
 * invocations: its multipart upload is aborted, so no part of the subject's data stays behind.
 */
async function abandonCopy(requestId: string, deps: StepDeps): Promise<void> {
  const copy = (await deps.ledger.get(requestId))?.archive_copy;
  if (copy === undefined) return;
  await deps.archive.abandonUpload(copy.key, copy.upload_id);
  deps.logger.info('archive copy abandoned: the request ended between two invocations', { key: copy.key });
}

/**
 * The request was cancelled while its export was being copied: a cancelled request keeps no copy
 * of the subject's data, so every version this key holds (this copy and any an earlier, interrupted
 * run of the step wrote) is deleted, and the removal is recorded.
 */
async function removeCancelledArchive(requestId: string, key: string, deps: StepDeps): Promise<void> {
  const versions = await deps.archive.remove(key);
  try {
    await deps.audit.append(requestId, {
      eventId: `ArchiveExport:removed:${key}`,
      step: 'ArchiveExport',
      action: 'archive_removed',
      facts: { key, versions, reason: 'request_cancelled' },
    });
  } catch (error) {
    // The cancel's final record closed the chain first: the removal is then in the log only.
    if (!(error instanceof AuditChainClosedError)) throw error;
  }
  deps.logger.info('archive removed: the request was cancelled during the copy', { key, versions });
}

/** The ArchiveExport step: contract and domain function. */
export const archiveExportStep = {
  name: 'ArchiveExport',
  input: stepInputSchema,
  output: archiveStepOutputSchema,
  run: archiveExport,
} as const;
