/**
 * The platform emulator itself: its data, exports, tokens, faults and limits, and the log of every call
 * it answered. The HTTP server (server.ts) and the in-process control API (control.ts) both drive it.
 */
import { randomBytes } from 'node:crypto';
import { snapshotExportFiles } from './archive.ts';
import type { ParseOutcome } from './config-file.ts';
import {
  type ExportIdShape,
  type FaultKind,
  type FaultProfile,
  type LimitAnswer,
  parseFaultProfile,
  type ResolvedFaults,
  resolveFaults,
} from './faults.ts';
import { PlatformLimits, type PlatformStats } from './limits.ts';
import {
  type EmulatorSnapshot,
  type ExportSnapshot,
  JsonListBytes,
  MAX_CALLS,
  SNAPSHOT_FORMAT,
  SNAPSHOT_VERSION,
} from './persistence.ts';
import { type CommentRecord, PlatformData, type UserRecord } from './platform.ts';
import { createRandom, pseudoRandomBytes, type Random } from './prng.ts';
import { type EmulatorState, parseEmulatorState } from './state.ts';
import { type DeflatedEntry, deflateEntry, exactSize, planZip, type ZipPlan } from './zip.ts';

export type CredentialKind = 'sso_access_token' | 'export_token';
export type CredentialLocation = 'header' | 'query' | 'body';

/** What a request presented where its endpoint expects a credential. Never holds the value. */
export interface CredentialUse {
  /** The credential the value matched: the expected one, the other one, unknown, or none (absent). */
  kind: CredentialKind | 'unknown' | 'none';
  expected: CredentialKind;
  location: CredentialLocation;
  name: string;
  present: boolean;
  valid: boolean;
}

/** A known token found somewhere its endpoint does not read it from, e.g. in a URL. */
export interface StrayCredential {
  kind: CredentialKind;
  location: CredentialLocation;
  name: string;
}

export type InjectedFault = FaultKind | LimitAnswer | 'truncate';

export interface CallRecord {
  seq: number;
  at: string;
  method: string;
  path: string;
  status: number | null;
  fault: InjectedFault | null;
  credential: CredentialUse | null;
  stray_credentials: StrayCredential[];
  duration_ms: number;
}

export type ExportOutcome = 'completed' | 'failed';

/** What endpoint 6 answers, in the shape the fault profile's export_id_shape chose. */
export type ExportIdBody = number | string | Record<string, unknown>;

export interface ExportRecord {
  number: number;
  publicId: string;
  idBody: ExportIdBody;
  svcUserId: string;
  primaryKey: string | null;
  createdAt: number;
  readyAfterPolls: number;
  outcome: ExportOutcome;
  polls: number;
  linkToken: string | null;
  linkCreatedAt: number | null;
  linkExpiresAt: number | null;
  paddingBytes: number;
  /** The seed the padding entry is generated from (the profile's seed when the export started). */
  paddingSeed: number;
  /**
   * The four JSON entries as captured when the export started, already deflated; null once the
   * link has expired, when nothing can download them any more.
   */
  files: DeflatedEntry[] | null;
  /** The archive's length in bytes (its Content-Length), kept when the entries are dropped. */
  byteSize: number;
  downloads: number;
}

export type ExportStatusAnswer =
  | { status: 'pending' }
  | { status: 'failed' }
  | { status: 'completed'; link: string };

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
  private readonly exports = new Map<string, ExportRecord>();
  private readonly downloads = new Map<string, ExportRecord>();
  private exportCounter = 0;
  private calls: CallRecord[] = [];
  /** The call log as snapshot JSON, each entry encoded once when it is logged. */
  private readonly callBytes = new JsonListBytes();
  /** Each export's snapshot JSON, made again after a change to the export. */
  private readonly savedExports = new WeakMap<ExportRecord, Buffer>();
  private callCounter = 0;
  private droppedCalls = 0;

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
    for (const saved of snapshot.exports) {
      const record = restoredExport(saved);
      emulator.exports.set(record.publicId, record);
      if (record.linkToken !== null) emulator.downloads.set(record.linkToken, record);
    }
    emulator.exportCounter = snapshot.exportCounter;
    emulator.calls = snapshot.calls.map((call) => structuredClone(call));
    for (const call of emulator.calls) emulator.callBytes.push(JSON.stringify(call));
    emulator.callCounter = snapshot.callCounter;
    emulator.droppedCalls = snapshot.droppedCalls;
    return emulator;
  }

  /** The snapshot's first keys, in the order both toSnapshot() and snapshotBytes() write them. */
  private snapshotHead(savedAt: string) {
    return {
      format: SNAPSHOT_FORMAT,
      version: SNAPSHOT_VERSION,
      savedAt,
      spotId: this.spotId,
      ssoAccessToken: this.ssoAccessToken,
      exportToken: this.exportToken,
    } as const;
  }

  /** The fault and randomness settings, which follow the baseline state in a snapshot. */
  private snapshotSettings() {
    return {
      initialFaults: this.initialFaults,
      faults: this.faults,
      activityEnabled: this.activity,
      randomStreams: this.randomStreams(),
    };
  }

  /** The whole state as a plain document (see persistence.ts); serialise it before the next change. */
  toSnapshot(savedAt: string): EmulatorSnapshot {
    return {
      ...this.snapshotHead(savedAt),
      baselineState: this.baselineState,
      ...this.snapshotSettings(),
      platform: this.data.toSnapshot(),
      exportCounter: this.exportCounter,
      exports: [...this.exports.values()].map(savedExport),
      callCounter: this.callCounter,
      droppedCalls: this.droppedCalls,
      calls: this.calls,
    };
  }

  /**
   * JSON.stringify(toSnapshot(savedAt)) as UTF-8, made of bytes kept from earlier saves where
   * nothing changed: call-log entries never change once logged, an export's entry changes only
   * with its polls, link and downloads, and the platform data and the baseline now and then. On a
   * busy emulator those are nearly all of the snapshot, so a save costs little more than a copy.
   */
  snapshotBytes(savedAt: string): Buffer {
    const head = JSON.stringify(this.snapshotHead(savedAt));
    const settings = JSON.stringify(this.snapshotSettings());
    const parts: Uint8Array[] = [
      Buffer.from(`${head.slice(0, -1)},"baselineState":`),
      stateBytes(this.baselineState),
      Buffer.from(`,${settings.slice(1, -1)},"platform":`),
      this.data.toSnapshotBytes(),
      Buffer.from(`,"exportCounter":${this.exportCounter},"exports":[`),
    ];
    let first = true;
    for (const record of this.exports.values()) {
      if (!first) parts.push(COMMA);
      first = false;
      parts.push(this.exportBytes(record));
    }
    parts.push(
      Buffer.from(`],"callCounter":${this.callCounter},"droppedCalls":${this.droppedCalls},"calls":[`),
    );
    parts.push(this.callBytes.bytes(), Buffer.from(']}'));
    return Buffer.concat(parts);
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

  /** JSON.stringify(savedExport(record)) as UTF-8; every change to an export forgets it. */
  private exportBytes(record: ExportRecord): Buffer {
    let bytes = this.savedExports.get(record);
    if (bytes === undefined) {
      const { files, ...fields } = record;
      bytes = exactSize(
        Buffer.concat([
          Buffer.from(`${JSON.stringify(fields).slice(0, -1)},"files":`),
          files === null ? NULL : filesBytes(files),
          Buffer.from('}'),
        ]),
      );
      this.savedExports.set(record, bytes);
    }
    return bytes;
  }

  private randomStreams(): StreamPositions {
    return {
      faults: this.randoms.faults.position(),
      names: this.randoms.names.position(),
      exports: this.randoms.exports.position(),
      downloads: this.randoms.downloads.position(),
    };
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
    this.data = this.rebindNames(this.data);
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
    this.durableChange = true;
    this.onChange();
    return guest;
  }

  startExport(user: UserRecord): ExportRecord {
    this.exportCounter += 1;
    const number = this.exportCounter;
    const shape = this.faults.export_id_shape;
    const publicId = shape === 'bare_string' ? `exp_${number.toString(36).padStart(6, '0')}` : String(number);
    const paddingBytes = this.faults.export_padding_bytes;
    const paddingSeed = this.faults.seed;
    const files = snapshotExportFiles(this.data, user).map(deflateEntry);
    // A scripted outcome (export_outcomes[n-1] for the n-th export) wins over the failure rate.
    const scripted = this.faults.export_outcomes[number - 1];
    const failed =
      scripted !== undefined
        ? scripted === 'failed'
        : this.faults.export_failure_rate > 0 &&
          this.randoms.exports.next() < this.faults.export_failure_rate;
    const record: ExportRecord = {
      number,
      publicId,
      idBody: exportIdBody(shape, number, publicId),
      svcUserId: user.svcUserId,
      primaryKey: user.primaryKey,
      createdAt: this.now(),
      readyAfterPolls: this.faults.export_ready_after_polls,
      outcome: failed ? 'failed' : 'completed',
      polls: 0,
      linkToken: null,
      linkCreatedAt: null,
      linkExpiresAt: null,
      paddingBytes,
      paddingSeed,
      files,
      downloads: 0,
      byteSize: exportZip(files, paddingBytes, paddingSeed).size,
    };
    this.exports.set(publicId, record);
    this.limits.countExportStarted(record.primaryKey, record.svcUserId, this.openExports());
    this.durableChange = true;
    this.onChange();
    return record;
  }

  /**
   * Exports started and not yet downloaded, failed (as polled) or expired: what max_open_exports
   * caps. On the way it drops the entries of every export whose link has expired.
   */
  openExports(): number {
    const now = this.now();
    let open = 0;
    for (const record of this.exports.values()) {
      const expired = record.linkExpiresAt !== null && now >= record.linkExpiresAt;
      if (expired) this.dropArchive(record);
      else if (record.downloads === 0 && this.currentStatus(record) !== 'failed') open += 1;
    }
    return open;
  }

  /** Forgets an expired export's entries: no link serves them any more (the record itself stays). */
  private dropArchive(record: ExportRecord): void {
    if (record.files === null) return;
    record.files = null;
    this.savedExports.delete(record);
    this.onChange();
  }

  /** Whether the open-exports cap lets one more export start. */
  exportAllowed(): boolean {
    return this.limits.exportAllowed(this.faults.rate_limit, this.openExports());
  }

  stats(): PlatformStats {
    return this.limits.stats(this.openExports());
  }

  findExport(publicId: string): ExportRecord | undefined {
    return this.exports.get(publicId);
  }

  /** Counts a status poll and answers it: pending for the first N polls, then the outcome. */
  pollExport(record: ExportRecord): ExportStatusAnswer {
    record.polls += 1;
    this.savedExports.delete(record);
    this.onChange();
    if (record.polls <= record.readyAfterPolls) return { status: 'pending' };
    if (record.outcome === 'failed') return { status: 'failed' };
    if (record.linkToken === null) {
      const token = randomBytes(24).toString('base64url');
      record.linkToken = token;
      record.linkCreatedAt = this.now();
      record.linkExpiresAt = record.linkCreatedAt + this.faults.link_ttl_seconds * 1000;
      this.downloads.set(token, record);
      this.durableChange = true;
    }
    return { status: 'completed', link: `${this.baseUrl}/_downloads/${record.linkToken}.zip` };
  }

  /** The export behind a download link; an expired link's entries are dropped on the way. */
  findDownload(token: string): ExportRecord | undefined {
    const record = this.downloads.get(token);
    if (record?.linkExpiresAt != null && this.now() >= record.linkExpiresAt) this.dropArchive(record);
    return record;
  }

  /** Counts a download of an export's archive (HEAD requests do not count). */
  countDownload(record: ExportRecord): void {
    record.downloads += 1;
    this.savedExports.delete(record);
    this.onChange();
  }

  /** Appends a platform request to the call log; every platform request ends here, changes or not. */
  record(call: Omit<CallRecord, 'seq'>): void {
    this.callCounter += 1;
    const entry = { seq: this.callCounter, ...call };
    this.calls.push(entry);
    this.callBytes.push(JSON.stringify(entry));
    if (this.calls.length > MAX_CALLS) {
      this.calls.shift();
      this.callBytes.shift();
      this.droppedCalls += 1;
    }
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
    const now = this.now();
    return [...this.exports.values()].map((record) => ({
      id: record.publicId,
      svc_user_id: record.svcUserId,
      primary_key: record.primaryKey,
      status: this.currentStatus(record),
      outcome: record.outcome,
      polls: record.polls,
      ready_after_polls: record.readyAfterPolls,
      created_at: new Date(record.createdAt).toISOString(),
      link_created_at: record.linkCreatedAt === null ? null : new Date(record.linkCreatedAt).toISOString(),
      link_expires_at: record.linkExpiresAt === null ? null : new Date(record.linkExpiresAt).toISOString(),
      link_expired: record.linkExpiresAt !== null && now >= record.linkExpiresAt,
      byte_size: record.byteSize,
      padding_bytes: record.paddingBytes,
      downloads: record.downloads,
    }));
  }

  /** Makes an export's link expire now; undefined when unknown, false when it has no link yet. */
  expireExport(publicId: string): boolean | undefined {
    const record = this.exports.get(publicId);
    if (!record) return undefined;
    if (record.linkExpiresAt === null) return false;
    record.linkExpiresAt = this.now();
    this.dropArchive(record);
    this.savedExports.delete(record);
    this.onChange();
    return true;
  }

  callsView(): { calls: CallRecord[]; dropped: number } {
    return { calls: this.calls.map((call) => structuredClone(call)), dropped: this.droppedCalls };
  }

  clearCalls(): void {
    this.calls = [];
    this.callBytes.clear();
    this.droppedCalls = 0;
    this.onChange();
  }

  private currentStatus(record: ExportRecord): string {
    return record.polls <= record.readyAfterPolls ? 'pending' : record.outcome;
  }

  private restart(): void {
    this.randoms = seededRandoms(this.faults.seed);
    this.data = PlatformData.fromState(this.spotId, this.baselineState, this.randoms.names, this.now);
    this.exports.clear();
    this.downloads.clear();
    this.exportCounter = 0;
    this.limits.clear();
    this.activityEnabled = true;
    this.clearCalls();
    this.callCounter = 0;
  }

  /** Keeps the data but makes later name suffixes come from the new seed's stream. */
  private rebindNames(data: PlatformData): PlatformData {
    data.useNames(this.randoms.names);
    return data;
  }
}

type StreamPositions = EmulatorSnapshot['randomStreams'];

function seededRandoms(seed: number, positions?: StreamPositions) {
  return {
    faults: createRandom(seed, 'faults', positions?.faults),
    names: createRandom(seed, 'names', positions?.names),
    exports: createRandom(seed, 'exports', positions?.exports),
    downloads: createRandom(seed, 'downloads', positions?.downloads),
  };
}

/**
 * An export's archive, planned for one download: the captured entries, plus padding regenerated
 * from its seed and size. Undefined once the entries are dropped (the link has expired).
 */
export function exportArchive(record: ExportRecord): ZipPlan | undefined {
  return record.files === null ? undefined : exportZip(record.files, record.paddingBytes, record.paddingSeed);
}

/** The archive: the captured JSON entries, plus padding regenerated from its seed and size. */
function exportZip(files: DeflatedEntry[], paddingBytes: number, paddingSeed: number): ZipPlan {
  return planZip(
    files,
    paddingBytes > 0
      ? [
          {
            name: 'padding.bin',
            size: paddingBytes,
            chunks: () => pseudoRandomBytes(paddingSeed, paddingBytes),
          },
        ]
      : [],
  );
}

const COMMA = Buffer.from(',');
const NULL = Buffer.from('null');

// Snapshot JSON of objects that are replaced, never changed: the baseline, an export's entries.
const savedStates = new WeakMap<EmulatorState, Buffer>();
const savedFiles = new WeakMap<DeflatedEntry[], Buffer>();

function stateBytes(state: EmulatorState): Buffer {
  let bytes = savedStates.get(state);
  if (bytes === undefined) {
    bytes = Buffer.from(JSON.stringify(state));
    savedStates.set(state, bytes);
  }
  return bytes;
}

function filesBytes(files: DeflatedEntry[]): Buffer {
  let bytes = savedFiles.get(files);
  if (bytes === undefined) {
    bytes = exactSize(Buffer.from(JSON.stringify(files.map(savedFile))));
    savedFiles.set(files, bytes);
  }
  return bytes;
}

function savedExport(record: ExportRecord): ExportSnapshot {
  const { files, ...fields } = record;
  return { ...fields, files: files === null ? null : files.map(savedFile) };
}

function savedFile(file: DeflatedEntry): NonNullable<ExportSnapshot['files']>[number] {
  return { name: file.name, crc32: file.crc32, size: file.size, deflated: file.deflated.toString('base64') };
}

function restoredExport(saved: ExportSnapshot): ExportRecord {
  const files =
    saved.files?.map((file) => ({
      name: file.name,
      crc32: file.crc32,
      size: file.size,
      deflated: exactSize(Buffer.from(file.deflated, 'base64')),
    })) ?? null;
  const byteSize =
    saved.byteSize ?? (files === null ? 0 : exportZip(files, saved.paddingBytes, saved.paddingSeed).size);
  return { ...saved, files, byteSize };
}

function exportIdBody(shape: ExportIdShape, number: number, publicId: string): ExportIdBody {
  switch (shape) {
    case 'id_number':
      return { id: number };
    case 'id_string':
      return { id: publicId };
    case 'export_id':
      return { export_id: publicId };
    case 'exportId':
      return { exportId: publicId };
    case 'data.id':
      return { data: { id: publicId } };
    case 'bare_number':
      return number;
    case 'bare_string':
      return publicId;
  }
}
