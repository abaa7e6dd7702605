// The ArchiveExport step: copies the finished export into the archive bucket and verifies the stored zip.
import {
  AuditChainClosedError,
  LedgerStateError,
  PlatformResponseInvalidError,
  RequestCancelledError,
} from '#shared/errors';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest, subjectGoneOr } from '#shared/step-guards';
import { type ArchiveOutput, archiveOutputSchema, type StepInput, stepInputSchema } from '#shared/step-io';

/** The archive's object key: built from request_id and attempt, never from a personal identifier. */
export function archiveKey(requestId: string, attempt: number): string {
  return `exports/${requestId}/attempt-${attempt}.zip`;
}

/**
 * Copies the finished export into the archive bucket and verifies the stored zip. The download
 * link comes from a fresh status call and never leaves this function.
 */
export async function archiveExport(input: StepInput, deps: StepDeps): Promise<ArchiveOutput> {
  const item = await activeRequest(deps, input.request_id, input.execution);
  if (item.archive !== undefined) {
    const { key, bytes, sha256, entries } = item.archive;
    return { key, bytes, sha256, entries };
  }
  if (item.export_id === undefined || item.export_status !== 'completed') {
    throw new LedgerStateError('the export has not completed, so there is nothing to archive');
  }
  const status = await deps.platform.exportStatus(item.export_id).catch(async (error: unknown) => {
    throw await subjectGoneOr(error, deps, item, 'ArchiveExport');
  });
  if (status.status !== 'completed') {
    throw new PlatformResponseInvalidError(
      `the platform now reports the completed export as ${status.status}`,
    );
  }
  const key = archiveKey(input.request_id, item.export_attempts);
  if (item.type === undefined) throw new LedgerStateError('the ledger item has no request type');
  if (item.type === 'correction') throw new LedgerStateError('a correction request has no export to archive');
  // The download is a platform call like the others; once it is done the export is no longer open.
  await deps.gate.admit();
  const copied = await deps.archive.copy(status.link, key, item.type);
  await deps.gate.releaseExport(input.request_id);
  const { entries } = await deps.archive.verify(key, copied);
  const verifiedAt = deps.clock().toISOString();
  try {
    await deps.ledger.update(
      input.request_id,
      {
        archive: {
          key,
          bytes: copied.bytes,
          sha256: copied.sha256,
          entries,
          verified_at: verifiedAt,
          ...(copied.versionId ? { version_id: copied.versionId } : {}),
        },
      },
      ['running'],
    );
  } catch (error) {
    if (error instanceof RequestCancelledError) await removeCancelledArchive(input.request_id, key, deps);
    throw error;
  }
  await deps.audit.append(input.request_id, {
    eventId: 'ArchiveExport',
    step: 'ArchiveExport',
    action: 'archive_verified',
    facts: { key, bytes: copied.bytes, sha256: copied.sha256, entries, version_id: copied.versionId ?? null },
  });
  deps.logger.info('archive verified', { key, bytes: copied.bytes, sha256: copied.sha256 });
  return { key, bytes: copied.bytes, sha256: copied.sha256, entries };
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
  output: archiveOutputSchema,
  run: archiveExport,
} as const;
