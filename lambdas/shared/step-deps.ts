// What a workflow step depends on, as narrow interfaces: ledger, archive, platform, audit, clock.
import type { PackageSettings } from '../build-package/settings.ts';
import type { VerifiedArchive } from './archive/options.ts';
import type { AuditTrail } from './audit.ts';
import type { PollSchedule } from './config.ts';
import type { Ledger } from './ledger/index.ts';
import type { PlatformClient } from './platform-client.ts';
import type { PlatformGate } from './platform-gate.ts';

/**
 * What a copy measured. Besides the size and SHA-256 the ledger keeps, the store may carry what it
 * needs to prove the stored object without reading it back (a checksum, the entries it checked).
 */
export interface CopiedArchive {
  readonly bytes: number;
  readonly sha256: string;
  readonly versionId?: string;
  readonly checksumCrc32?: string;
  readonly archive?: VerifiedArchive;
}

/**
 * Where a copy into the archive stands between two invocations (lambdas/shared/archive/continued-copy.ts):
 * the multipart upload, the parts S3 acknowledged, and the archive's size. No link, no identifier.
 */
export interface ArchiveCheckpoint {
  readonly uploadId: string;
  readonly partSizeBytes: number;
  readonly parts: number;
  readonly partsCrc32: number;
  readonly totalBytes: number;
}

/** How a copy may stop and be carried on by another invocation. */
export interface ContinuableCopy {
  /** The earlier invocation's checkpoint to carry on from. @default a new copy */
  readonly checkpoint?: ArchiveCheckpoint;
  /** Asked at every part boundary: true stops the copy there. */
  readonly shouldStop: () => boolean;
  /** Where the copy stands, as it goes: recorded, so an invocation that dies is carried on from it. */
  readonly onCheckpoint: (checkpoint: ArchiveCheckpoint) => Promise<void>;
  /** Once the platform answers the download with the archive: the export is no longer open there. */
  readonly onDownloadOpened?: () => Promise<void>;
}

/** What a copy that may continue came to: stored and measured, stored but to be proven by a read, or stopped. */
export type ContinuableCopyOutcome =
  | { readonly kind: 'copied'; readonly copied: CopiedArchive; readonly restarted?: string }
  | {
      readonly kind: 'continued';
      readonly stored: {
        readonly bytes: number;
        readonly checksumCrc32: string;
        readonly versionId?: string;
      };
    }
  | { readonly kind: 'paused'; readonly checkpoint: ArchiveCheckpoint; readonly restarted?: string };

/** Where the workflow keeps archives: copy from a link, then prove what was stored. */
export interface ArchiveStore {
  /**
   * Copies the export; an archive found broken or too large on the way is never stored. It stops
   * at a part boundary when `continuable.shouldStop` says so, and carries on from a checkpoint; a
   * copy carried on is stored but not yet proven (verifyContinued).
   */
  copy(
    link: URL,
    key: string,
    requestType: 'access' | 'erasure',
    continuable: ContinuableCopy,
  ): Promise<ContinuableCopyOutcome>;
  /** Verifies the stored zip; on failure removes it so no corrupt archive stays behind, then throws. */
  verify(key: string, copied: CopiedArchive): Promise<{ entries: number }>;
  /**
   * Proves a copy carried across invocations by one read of the stored object (its SHA-256 and its
   * zip); on failure removes it, as `verify` does, then throws.
   */
  verifyContinued(
    key: string,
    stored: { bytes: number; checksumCrc32: string; versionId?: string },
  ): Promise<{ entries: number; sha256: string }>;
  /** Aborts a multipart upload that will not be completed (its parts hold the subject's data). */
  abandonUpload(key: string, uploadId: string): Promise<void>;
  /** Deletes every version (and delete marker) of the key, for good; answers how many went. */
  remove(key: string): Promise<number>;
  /**
   * The stored object's bytes as a stream, checked against its recorded size and SHA-256: the
   * stream fails with InvalidArchiveError at its end (or as soon as it is too long) if they differ.
   */
  read(
    key: string,
    expected: { bytes: number; sha256: string; versionId?: string },
  ): Promise<AsyncIterable<Uint8Array>>;
  /**
   * Stores a subject package from a stream (tagged as an access request's, named for download),
   * in parts S3 checks by their CRC32; resolves once the whole body was read and stored.
   */
  storePackage(
    key: string,
    body: AsyncIterable<Uint8Array>,
    fileName: string,
  ): Promise<{ versionId?: string }>;
}

/** What step code logs through: a Powertools Logger (powertools.ts) in Lambda, JSON lines locally. */
export interface StepLogger {
  info(message: string, attributes?: Record<string, unknown>): void;
  warn(message: string, attributes?: Record<string, unknown>): void;
  error(message: string, attributes?: Record<string, unknown>): void;
  debug(message: string, attributes?: Record<string, unknown>): void;
  /** A logger that adds `keys` to every line; without it, the lines go without them. */
  child?(keys: Record<string, unknown>): StepLogger;
}

/** Everything a step's domain function needs, as narrow interfaces. */
export interface StepDeps {
  readonly ledger: Ledger;
  readonly audit: Pick<AuditTrail, 'append'>;
  readonly platform: Pick<
    PlatformClient,
    'retrieveUser' | 'updateUser' | 'deleteUser' | 'startExport' | 'exportStatus' | 'userActivity'
  >;
  /** The shared load control: rate limit, export slots and circuit (the platform client uses it too). */
  readonly gate: Pick<
    PlatformGate,
    'admit' | 'report' | 'acquireExport' | 'releaseExport' | 'exportRefused' | 'exportStarted'
  >;
  readonly archive: ArchiveStore;
  /**
   * Who answers access requests, the Art. 15(1) texts, the language, and the time zone dates are
   * written in. @default placeholders (local mode); the stack always sets them
   */
  readonly subjectPackage?: PackageSettings & { readonly timeZone: string };
  readonly schedule: PollSchedule;
  readonly exportMaxAttempts: number;
  /**
   * Days an erasure request's archive is kept after the erasure is verified: 0 deletes it then.
   * @default undefined: VerifyErasure leaves the archive to the bucket's lifecycle
   */
  readonly erasureArchiveKeepDays?: number;
  /** Longest Retry-After honoured inside a step before handing the retry to Step Functions. */
  readonly retryAfterCapSeconds: number;
  readonly clock: () => Date;
  readonly sleep: (ms: number) => Promise<void>;
  /** A number in [0, 1), for the jitter of poll waits. @default Math.random */
  readonly random?: () => number;
  /**
   * Milliseconds left before the invocation's timeout (the Lambda context's), for a step that can
   * continue its work in another invocation. @default no limit (local mode)
   */
  readonly remainingTimeMs?: () => number;
  readonly logger: StepLogger;
  /** Publishes a count (Powertools Metrics in Lambda). @default nothing is published (local mode, tests) */
  readonly countMetric?: (name: string, value: number) => void;
  /**
   * The deps of a request that runs on another site (its id names the site: sites.ts
   * siteRequestId): that site's platform account, tokens and gate. @default every request runs with these deps
   */
  readonly forSite?: (site: string) => StepDeps;
}
