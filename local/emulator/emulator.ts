/**
 * The platform emulator itself: its data, exports, tokens, faults and limits, and the log of every call
 * it answered. The HTTP server (server.ts) and the in-process control API (control.ts) both drive it;
 * the exports live in exports.ts, the call log in calls.ts and the snapshot's making in snapshot.ts.
 */
import { CallLog, type CallRecord } from './calls.ts';
import type { ParseOutcome } from './config-file.ts';
import { ExportBook, type ExportHooks, type ExportRecord, type ExportStatusAnswer } from './exports.ts';
import {
  type FaultKind,
  type FaultProfile,
  parseFaultProfile,
  type ResolvedFaults,
  resolveFaults,
} from './faults.ts';
import { PlatformLimits, type PlatformStats } from './limits.ts';
import { type CommentRecord, PlatformData, type UserRecord } from './platform.ts';
import { createRandom, type Random } from './prng.ts';
import { type SnapshotSource, type StreamPositions, snapshotBytes, snapshotDocument } from './snapshot.ts';
import type { EmulatorSnapshot } from './snapshot-schema.ts';
import { type EmulatorState, parseEmulatorState } from './state.ts';

export interface EmulatorSettings {
  spotId: string;
  ssoAccessToken: string;
  exportToken: string;
  state: EmulatorState;
  faults: FaultProfile;
  now: () => number;
}

/** What a restart may change about a saved emulator; everything else comes from the snapshot. */
export interface RestoreSettings {
  now: () => number;
  /** Replaces the saved fault profile, both the one in effect and the one reset() returns to. */
  faults?: FaultProfile | undefined;
  ssoAccessToken?: string | undefined;
  exportToken?: string | undefined;
}

/**
 * The emulator's state and behaviour, independent of HTTP: the platform data, exports, the fault
 * profile with its seeded random streams, the call log and the control operations.
 */
export class Emulator {
  readonly spotId: string;
  readonly ssoAccessToken: string;
  readonly exportToken: string;
  readonly now: () => number;
  baseUrl = '';
  data: PlatformData;
  faults: ResolvedFaults;
  /** The rate limit, the open-exports cap and the outage window, with what the platform saw. */
  readonly limits: PlatformLimits;
  /** Called after every change a snapshot must record (the persistence layer listens here). */
  onChange: () => void = () => undefined;
  private activity = true;
  private durableChange = false;
  private baselineState: EmulatorState;
  private readonly initialFaults: FaultProfile;
  private randoms: { faults: Random; names: Random; exports: Random; downloads: Random };
  /** How the exports read the clock and report their changes (see changed()). */
  private readonly exportHooks: ExportHooks = {
    now: () => this.now(),
    changed: (durable) => this.changed(durable),
  };
  /** Replaced whole by a reset, a new state and a restore, as the call log is. */
  private exports = new ExportBook(this.exportHooks);
  private calls = new CallLog();

  constructor(settings: EmulatorSettings) {
    this.spotId = settings.spotId;
    this.ssoAccessToken = settings.ssoAccessToken;
    this.exportToken = settings.exportToken;
    this.now = settings.now;
    this.limits = new PlatformLimits(settings.now);
    this.baselineState = settings.state;
    this.initialFaults = settings.faults;
    this.faults = resolveFaults(settings.faults);
    this.randoms = seededRandoms(this.faults.seed);
    this.data = PlatformData.fromState(this.spotId, this.baselineState, this.randoms.names, this.now);
  }

  /**
   * Rebuilds an emulator saved by toSnapshot(): data, exports and their links, counters, random
   * streams and the call log continue where they were. Given faults replace the saved profile; the
   * random streams then continue only if the seed stays the same.
   */
  static restore(snapshot: EmulatorSnapshot, settings: RestoreSettings): Emulator {
    const emulator = new Emulator({
      spotId: snapshot.spotId,
      ssoAccessToken: settings.ssoAccessToken ?? snapshot.ssoAccessToken,
      exportToken: settings.exportToken ?? snapshot.exportToken,
      state: snapshot.baselineState,
      faults: settings.faults ?? snapshot.initialFaults,
      now: settings.now,
    });
    if (settings.faults === undefined) emulator.faults = structuredClone(snapshot.faults);
    if (emulator.faults.seed === snapshot.faults.seed) {
      emulator.randoms = seededRandoms(emulator.faults.seed, snapshot.randomStreams);
    }
    emulator.data = PlatformData.fromSnapshot(
      snapshot.spotId,
      snapshot.platform,
      emulator.randoms.names,
      settings.now,
    );
    emulator.activity = snapshot.activityEnabled;
    emulator.exports = new ExportBook(emulator.exportHooks, snapshot);
    emulator.calls = new CallLog(snapshot);
    return emulator;
  }

  /** The whole state as a plain document (see snapshot-schema.ts); serialise it before the next change. */
  toSnapshot(savedAt: string): EmulatorSnapshot {
    return snapshotDocument(this.snapshotSource(), savedAt);
  }

  /** JSON.stringify(toSnapshot(savedAt)) as UTF-8, mostly from bytes kept since earlier saves. */
  snapshotBytes(savedAt: string): Buffer {
    return snapshotBytes(this.snapshotSource(), savedAt);
  }

  private snapshotSource(): SnapshotSource {
    return {
      spotId: this.spotId,
      ssoAccessToken: this.ssoAccessToken,
      exportToken: this.exportToken,
      baselineState: this.baselineState,
      initialFaults: this.initialFaults,
      faults: this.faults,
      activityEnabled: this.activity,
      randomStreams: {
        faults: this.randoms.faults.position(),
        names: this.randoms.names.position(),
        exports: this.randoms.exports.position(),
        downloads: this.randoms.downloads.position(),
      },
      platform: this.data,
      exports: this.exports,
      calls: this.calls,
    };
  }

  /**
   * True once after a change that a client must not be able to repeat after a crash (a deletion,
   * an export start, a new download link): the server saves it before answering.
   */
  takeDurableChange(): boolean {
    const taken = this.durableChange;
    this.durableChange = false;
    return taken;
  }

  /** Marks a change for the snapshot; a durable one is saved before its answer (takeDurableChange). */
  private changed(durable: boolean): void {
    if (durable) this.durableChange = true;
    this.onChange();
  }

  get activityEnabled(): boolean {
    return this.activity;
  }

  set activityEnabled(enabled: boolean) {
    this.activity = enabled;
    this.onChange();
  }

  /** Back to the baseline state and the start-up fault profile, with fresh counters and PRNGs. */
  reset(): void {
    this.faults = resolveFaults(this.initialFaults);
    this.restart();
    this.onChange();
  }

  /** Makes a state document the new baseline and applies it; the fault profile stays. */
  loadState(document: unknown): ParseOutcome<EmulatorState> {
    const outcome = parseEmulatorState(document);
    if (!outcome.success) return outcome;
    if (outcome.value.sites !== undefined) {
      // One emulator object is one site; the server picks it by the route's spot_id query.
      return {
        success: false,
        problems: [
          {
            field: 'sites',
            message: "send one site's state in the one-site form, and pick the site with ?spot_id=",
          },
        ],
      };
    }
    this.baselineState = outcome.value;
    this.restart();
    this.onChange();
    return outcome;
  }

  /** Replaces the fault profile (unset keys take their defaults) and reseeds the random streams. */
  setFaults(document: unknown): ParseOutcome<ResolvedFaults> {
    const outcome = parseFaultProfile(document);
    if (!outcome.success) return outcome;
    this.faults = resolveFaults(outcome.value);
    this.randoms = seededRandoms(this.faults.seed);
    // The data stays, but later name suffixes come from the new seed's stream.
    this.data.useNames(this.randoms.names);
    this.onChange();
    return { success: true, value: this.faults };
  }

  /** Decides whether a platform request gets a fault; draws from the fault stream only when it may. */
  drawFault(pathname: string): FaultKind | null {
    if (this.faults.error_rate <= 0) return null;
    if (!this.faults.paths.some((prefix) => pathname.startsWith(prefix))) return null;
    if (this.randoms.faults.next() >= this.faults.error_rate) return null;
    return this.faults.errors[this.randoms.faults.below(this.faults.errors.length)] ?? null;
  }

  /** Decides whether a download is cut short and, if so, after how many bytes. */
  drawTruncation(size: number): number | null {
    if (this.faults.truncate_download_rate <= 0 || size < 2) return null;
    if (this.randoms.downloads.next() >= this.faults.truncate_download_rate) return null;
    return Math.max(1, Math.min(size - 1, Math.floor(size * (0.1 + 0.8 * this.randoms.downloads.next()))));
  }

  /** Deletes an SSO user (comments go to a new guest) as endpoint 5 does. */
  deleteUser(user: UserRecord): UserRecord {
    this.limits.countDelete(user.primaryKey, user.svcUserId);
    const guest = this.data.deleteUser(user);
    this.changed(true);
    return guest;
  }

  /** Starts an export of a user's data (endpoint 6) and counts it against the open-exports cap. */
  startExport(user: UserRecord): ExportRecord {
    const record = this.exports.start(user, this.data, this.faults, this.randoms.exports);
    this.limits.countExportStarted(record.primaryKey, record.svcUserId, this.openExports());
    return record;
  }

  /**
   * Exports started and not yet downloaded, failed (as polled) or expired: what max_open_exports
   * caps. On the way it drops the entries of every export whose link has expired.
   */
  openExports(): number {
    return this.exports.open();
  }

  /** Whether the open-exports cap lets one more export start. */
  exportAllowed(): boolean {
    return this.limits.exportAllowed(this.faults.rate_limit, this.openExports());
  }

  stats(): PlatformStats {
    return this.limits.stats(this.openExports());
  }

  findExport(publicId: string): ExportRecord | undefined {
    return this.exports.find(publicId);
  }

  /** Counts a status poll and answers it: pending for the first N polls, then the outcome. */
  pollExport(record: ExportRecord): ExportStatusAnswer {
    return this.exports.poll(record, this.faults.link_ttl_seconds, this.baseUrl);
  }

  /** The export behind a download link; an expired link's entries are dropped on the way. */
  findDownload(token: string): ExportRecord | undefined {
    return this.exports.findDownload(token);
  }

  /** Counts a download of an export's archive (HEAD requests do not count). */
  countDownload(record: ExportRecord): void {
    this.exports.countDownload(record);
  }

  /** Appends a platform request to the call log; every platform request ends here, changes or not. */
  record(call: Omit<CallRecord, 'seq'>): void {
    this.calls.record(call);
    this.onChange();
  }

  // ---- control operations, shared by the HTTP control API and in-process callers ----

  usersView(): Record<string, unknown>[] {
    return [...this.data.users.values()].map((user) => this.userView(user));
  }

  userView(user: UserRecord): Record<string, unknown> {
    return {
      primary_key: user.primaryKey,
      svc_user_id: user.svcUserId,
      registered: user.registered,
      user_name: user.userName,
      display_name: user.displayName,
      email: user.email,
      email_verified: user.emailVerified,
      image_url: user.imageUrl,
      location: user.location,
      private_profile: user.privateProfile,
      user_metadata: user.userMetadata,
      bio: user.bio,
      role: user.role,
      settings: { notifications: user.settings },
      created_at: new Date(user.createdAt).toISOString(),
      updated_at: new Date(user.updatedAt).toISOString(),
    };
  }

  /** Finds a user by primary_key, or by svc_user_id (guests have no primary_key). */
  findUser(key: string): UserRecord | undefined {
    return this.data.userByPrimaryKey(key) ?? this.data.users.get(key);
  }

  commentsView(): Record<string, unknown>[] {
    return [...this.data.comments.values()].map((comment: CommentRecord) => {
      const author = this.data.users.get(comment.authorId);
      const rank = this.data.rankOf(comment.id);
      return {
        id: comment.id,
        conversation_id: comment.conversationId,
        parent_id: comment.parentId,
        text: comment.text,
        written_at: comment.writtenAt,
        author_svc_user_id: comment.authorId,
        author_primary_key: author?.primaryKey ?? null,
        author_registered: author?.registered ?? false,
        likes: rank.up,
        dislikes: rank.down,
      };
    });
  }

  exportsView(): Record<string, unknown>[] {
    return this.exports.view();
  }

  /** Makes an export's link expire now; undefined when unknown, false when it has no link yet. */
  expireExport(publicId: string): boolean | undefined {
    return this.exports.expire(publicId);
  }

  callsView(): { calls: CallRecord[]; dropped: number } {
    return this.calls.view();
  }

  clearCalls(): void {
    this.calls.clear();
    this.onChange();
  }

  /** Back to the baseline with fresh random streams, no exports, no calls and call numbers from 1. */
  private restart(): void {
    this.randoms = seededRandoms(this.faults.seed);
    this.data = PlatformData.fromState(this.spotId, this.baselineState, this.randoms.names, this.now);
    this.exports = new ExportBook(this.exportHooks);
    this.limits.clear();
    this.activityEnabled = true;
    this.calls = new CallLog();
  }
}

function seededRandoms(seed: number, positions?: StreamPositions) {
  return {
    faults: createRandom(seed, 'faults', positions?.faults),
    names: createRandom(seed, 'names', positions?.names),
    exports: createRandom(seed, 'exports', positions?.exports),
    downloads: createRandom(seed, 'downloads', positions?.downloads),
  };
}
