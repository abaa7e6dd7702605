/**
 * Exports a request left open on the platform when it ended (a cancel, a denial, a failure): the
 * platform counts an export as open until it is downloaded, fails, or its link expires, so the
 * gate keeps such an export's slot until the reconciler has taken it to its end (polled, then
 * downloaded and discarded), never handing it to the next request early.
 */
import { IdleWatchdog, nodeHttpGet, openDownload } from './archive/download.ts';
import { assertDownloadAllowed, type DownloadPolicy } from './download-policy.ts';
import { DownloadLinkExpiredError, PlatformNotFoundError } from './errors.ts';
import type { LedgerItem } from './ledger/index.ts';
import type { PlatformClient } from './platform-client.ts';
import type { PlatformGate } from './platform-gate.ts';

/**
 * True when the request's export may still count as open on the platform: one was started (the
 * ledger has its id), it did not fail, and no archive says it was downloaded.
 */
export function exportLeftOpen(item: LedgerItem): boolean {
  return (
    item.export_id !== undefined &&
    item.archive === undefined &&
    (item.export_status === 'pending' || item.export_status === 'completed')
  );
}

/** Where an export left open stands on the platform. */
export type LeftExportState = 'pending' | 'completed' | 'failed' | 'gone';

/** Takes an export left open to its end: its state, and a download whose bytes are discarded. */
export interface ExportDrain {
  /** The export's state; `gone` when the platform no longer knows it. */
  state(exportId: string): Promise<LeftExportState>;
  /** Downloads the completed export to nowhere, so the platform stops counting it; answers the bytes read. */
  discard(exportId: string): Promise<number>;
}

/** How long a discarded download may stall before it is dropped (and tried again next pass). */
const DISCARD_IDLE_MS = 60_000;

/**
 * The drain over the platform client (its calls admitted by the gate) and a plain download whose
 * bytes go nowhere: nothing of the subject's data is kept, logged or stored.
 */
export function platformExportDrain(
  platform: Pick<PlatformClient, 'exportStatus'>,
  gate: Pick<PlatformGate, 'admit'>,
  policy: DownloadPolicy,
): ExportDrain {
  return {
    async state(exportId) {
      try {
        return (await platform.exportStatus(exportId)).status;
      } catch (error) {
        if (error instanceof PlatformNotFoundError) return 'gone';
        throw error;
      }
    },
    async discard(exportId) {
      const status = await platform.exportStatus(exportId);
      if (status.status !== 'completed') return 0;
      assertDownloadAllowed(status.link, policy);
      await gate.admit();
      const connection = new AbortController();
      const watchdog = new IdleWatchdog(DISCARD_IDLE_MS, () => connection.abort());
      try {
        let response: Awaited<ReturnType<typeof openDownload>>;
        try {
          response = await openDownload(status.link, policy, nodeHttpGet, {
            signal: connection.signal,
            watchdog,
          });
        } catch (error) {
          // A link the platform no longer serves (expired): the export no longer counts as open.
          if (error instanceof DownloadLinkExpiredError) return 0;
          throw error;
        }
        let bytes = 0;
        for (;;) {
          watchdog.arm();
          const chunk = await response.body.next();
          if (chunk.done) break;
          bytes += chunk.value.byteLength;
        }
        return bytes;
      } finally {
        watchdog.stop();
        connection.abort();
      }
    },
  };
}
