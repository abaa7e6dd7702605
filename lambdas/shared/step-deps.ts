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

/** Where the workflow keeps archives: copy from a link, then prove what was stored. */
export interface ArchiveStore {
  /** Copies the export; an archive found broken or too large on the way is never stored. */
  copy(link: URL, key: string, requestType: 'access' | 'erasure'): Promise<CopiedArchive>;
  /** Verifies the stored zip; on failure removes it so no corrupt archive stays behind, then throws. */
  verify(key: string, copied: CopiedArchive): Promise<{ entries: number }>;
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
  readonly gate: Pick<PlatformGate, 'admit' | 'report' | 'acquireExport' | 'releaseExport'>;
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
}
