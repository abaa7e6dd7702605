// ArchiveExport's copies longer than one invocation: how many invocations, and the time each keeps.

/**
 * ArchiveExport invocations one execution spends on one copy at most (the state machine's
 * ArchiveContinues? Choice; lib/history-budget.ts counts each): about 5 x 13 minutes of download,
 * 390 GB at 100 MB/s and 3.9 GB at 1 MB/s (docs/design.md, "Copies longer than one invocation").
 */
export const ARCHIVE_MAX_INVOCATIONS = 5;

/**
 * Time an invocation keeps after its copy stops at a part boundary: the parts in flight, the
 * checkpoint and the answer. The stop comes earlier by twice the time the last part took to
 * download, so a slow link still reaches the next boundary in time.
 */
export const ARCHIVE_STOP_MARGIN_MS = 60_000;

/**
 * The pace a continued copy's proof is assumed to read the stored object back at (S3 in region,
 * one stream): with less time left than that needs, it runs in an invocation of its own.
 */
export const ARCHIVE_READBACK_BYTES_PER_SECOND = 50_000_000;

/** What ArchiveExport answers when the copy goes on in another invocation: step facts only. */
export interface ArchiveContinuation {
  readonly continuation: { invocation: number; bytes: number; total_bytes: number };
}
