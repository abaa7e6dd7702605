/**
 * The store: each key's versions, their bytes under `.versions/` with the current one also at the
 * key's plain path, a record per key under `.meta/`, multipart uploads in progress, atomic writes.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  createReadStream,
  linkSync,
  lstatSync,
  readFileSync,
  renameSync,
  rmSync,
  type Stats,
  statSync,
} from 'node:fs';
import {
  type FileHandle,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  rmdir,
  stat,
  unlink,
} from 'node:fs/promises';
import { dirname, join, sep } from 'node:path';
import type { z } from 'zod';
import { asBuffers, writeNewFile } from './bodies.ts';
import {
  bytesLost,
  invalidArgument,
  keyConflict,
  methodNotAllowed,
  noSuchBucket,
  noSuchKey,
  noSuchUpload,
  noSuchVersion,
  preconditionFailed,
  S3Failure,
} from './errors.ts';
import { compareUtf8, errorCode, etagListMatches, isMissing, isUnstorableSegment } from './keys.ts';
import {
  BUCKETS_DIR,
  DEFAULT_CONTENT_TYPE,
  META_DIR,
  NULL_VERSION,
  TMP_DIR,
  UPLOAD_ID,
  UPLOADS_DIR,
  VERSIONS_DIR,
} from './limits.ts';
import { lockHeadersFor, refuseIfLocked, withoutLock } from './object-lock.ts';
import {
  type BucketSettings,
  bucketSettingsSchema,
  type DeleteMarker,
  type FileIdentity,
  type KeyRecord,
  keyRecordSchema,
  type LegacyObjectMeta,
  legacyObjectMetaSchema,
  type ObjectVersion,
  type PartRecord,
  partRecordSchema,
  type UploadRecord,
  uploadRecordSchema,
  type Version,
} from './records.ts';

/** Serializes the short steps that change the tree (renames, unlinks, folder pruning). */
class Mutex {
  #tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(task);
    this.#tail = result.catch(() => undefined);
    return result;
  }
}

export interface WriteCondition {
  readonly ifNoneMatch?: string;
  readonly ifMatch?: string;
}

/** How a delete or overwrite meets Object Lock: `x-amz-bypass-governance-retention` lifts GOVERNANCE only. */
export interface LockOverride {
  readonly bypassGovernance?: boolean;
}

/** What a write says of its new version; the store adds its id, its time and where its bytes are. */
export type NewVersion = Omit<ObjectVersion, 'kind' | 'versionId' | 'lastModified' | 'blob'>;

export class DiskStore {
  readonly #lock = new Mutex();
  /** The sequence of the last version id given (see #newVersionId). */
  #lastSequence = 0;
  /**
   * Files under `.versions` of versions a change under way drops: removed by #sweep once the
   * record without them is written, so a crash never leaves a record naming a removed file.
   */
  readonly #doomed: string[] = [];
  /** Buckets seen to exist: nothing here deletes a bucket, so one stays known once seen. */
  readonly #buckets = new Set<string>();
  /** Folders made or seen by a write; forgotten when a delete prunes folders. */
  readonly #folders = new Set<string>();
  /** Each bucket's settings as last read or written: only this store writes them. */
  readonly #settings = new Map<string, BucketSettings>();

  /**
   * `clock` gives the time an object is stored (its LastModified), as S3's own clock does: no
   * request header sets it. Tests pass a clock they advance; the default is the real time.
   */
  constructor(
    readonly root: string,
    readonly syncWrites: boolean,
    readonly clock: () => Date = () => new Date(),
  ) {}

  tempPath(): string {
    return join(this.root, TMP_DIR, randomBytes(12).toString('hex'));
  }

  #bucketDir(bucket: string): string {
    return join(this.root, bucket);
  }

  #objectPath(bucket: string, key: string): string {
    return pathWithin(this.#bucketDir(bucket), key);
  }

  #metaPath(bucket: string, key: string): string {
    return `${pathWithin(join(this.root, META_DIR, bucket), key)}.json`;
  }

  #uploadDir(uploadId: string): string {
    return join(this.root, UPLOADS_DIR, uploadId);
  }

  async bucketExists(bucket: string): Promise<boolean> {
    if (this.#buckets.has(bucket)) return true;
    try {
      const exists = (await stat(this.#bucketDir(bucket))).isDirectory();
      if (exists) this.#buckets.add(bucket);
      return exists;
    } catch (error) {
      if (isMissing(error)) return false;
      throw error;
    }
  }

  async requireBucket(bucket: string): Promise<void> {
    if (!(await this.bucketExists(bucket))) throw noSuchBucket();
  }

  #settingsPath(bucket: string): string {
    return join(this.root, BUCKETS_DIR, `${bucket}.json`);
  }

  /**
   * The bucket's settings. A bucket made by hand (a folder with no settings file) is unversioned,
   * without Object Lock, created when its folder was.
   */
  async settings(bucket: string): Promise<BucketSettings> {
    const known = this.#settings.get(bucket);
    if (known !== undefined) return known;
    await this.requireBucket(bucket);
    let stored: BucketSettings | undefined;
    try {
      stored = parseJson(bucketSettingsSchema, await readFile(this.#settingsPath(bucket), 'utf8'));
    } catch (error) {
      if (!isMissing(error)) throw error;
    }
    const settings = stored ?? {
      format: 1 as const,
      created: wholeSeconds((await stat(this.#bucketDir(bucket))).mtime),
    };
    this.#settings.set(bucket, settings);
    return settings;
  }

  /** Changes the bucket's settings and writes them, one change at a time. */
  async changeSettings(bucket: string, change: (current: BucketSettings) => BucketSettings): Promise<void> {
    const current = await this.settings(bucket);
    await this.#lock.run(async () => {
      const next = change(this.#settings.get(bucket) ?? current);
      this.#writeAtomic(this.#settingsPath(bucket), JSON.stringify(next, null, 2));
      this.#settings.set(bucket, next);
    });
  }

  /** Every bucket, in name order, with its creation date. */
  async listBuckets(): Promise<{ name: string; created: string }[]> {
    const entries = await readdir(this.root, { withFileTypes: true });
    const names = entries
      .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.'))
      .map((entry) => entry.name)
      .sort();
    const buckets: { name: string; created: string }[] = [];
    for (const name of names) buckets.push({ name, created: (await this.settings(name)).created });
    return buckets;
  }

  async createBucket(
    bucket: string,
    settings: Omit<BucketSettings, 'format' | 'created'> = {},
  ): Promise<void> {
    await this.#lock.run(async () => {
      try {
        await mkdir(this.#bucketDir(bucket));
        this.#buckets.add(bucket);
        const created: BucketSettings = { format: 1, created: wholeSeconds(new Date()), ...settings };
        this.#writeAtomic(this.#settingsPath(bucket), JSON.stringify(created, null, 2));
        this.#settings.set(bucket, created);
      } catch (error) {
        if (errorCode(error) !== 'EEXIST') throw error;
        throw new S3Failure(
          409,
          'BucketAlreadyOwnedByYou',
          'Your previous request to create the named bucket succeeded and you already own it.',
        );
      }
    });
  }

  // Objects and their versions ---------------------------------------------------------------------

  #blobPath(bucket: string, blob: string): string {
    return join(this.root, VERSIONS_DIR, bucket, blob.slice(0, 2), blob);
  }

  /** A new version id: later ids of this store sort after earlier ones (see VERSION_ID). */
  #newVersionId(): string {
    const sequence = Math.max(this.#lastSequence + 1, Date.now() * 1000);
    this.#lastSequence = sequence;
    return sequence.toString(36).padStart(11, '0') + randomChars(21);
  }

  /** The key's record as stored, in either layout; undefined when there is none or it does not parse. */
  #readRecord(bucket: string, key: string): KeyRecord | LegacyObjectMeta | undefined {
    let text: string;
    try {
      text = readFileSync(this.#metaPath(bucket, key), 'utf8');
    } catch (error) {
      if (isMissing(error) || errorCode(error) === 'EISDIR') return undefined;
      throw error;
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      return undefined;
    }
    const record = keyRecordSchema.safeParse(raw);
    if (record.success) return record.data;
    const legacy = legacyObjectMetaSchema.safeParse(raw);
    return legacy.success ? legacy.data : undefined;
  }

  /** The plain file at the key's path; undefined when there is none (a folder of other keys is none). */
  #plainStat(bucket: string, key: string): Stats | undefined {
    try {
      const stats = lstatSync(this.#objectPath(bucket, key), { throwIfNoEntry: false });
      return stats?.isFile() === true ? stats : undefined;
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
  }

  /**
   * The key's record once what was changed on disk outside S3 has been taken in: most calls find
   * the plain file as the record says and take no lock.
   */
  async #resolve(bucket: string, key: string): Promise<KeyRecord | undefined> {
    const record = this.#readRecord(bucket, key);
    if (record?.format !== 1 && isSettled(record, this.#plainStat(bucket, key))) return record;
    return this.#lock.run(() => this.#reconcile(bucket, key));
  }

  /**
   * Takes in, under the lock, what happened on disk since the record was written, as S3 would have
   * recorded the same change made through its API, each at the time the stand-in finds it (its
   * own clock, never a file's mtime): a file put or changed at the plain path is a new version, a
   * plain file removed is a delete marker (or, versioning off, the object's end). A file of the
   * first layout becomes the "null" version, and a write cut short by a crash is finished or undone.
   */
  async #reconcile(bucket: string, key: string): Promise<KeyRecord | undefined> {
    const stored = this.#readRecord(bucket, key);
    const stats = this.#plainStat(bucket, key);
    if (stored?.format !== 1 && isSettled(stored, stats)) return stored;
    let record: KeyRecord | undefined;
    if (stored?.format === 1) record = await this.#fromLegacy(bucket, key, stored, stats);
    else if (stored?.pending !== undefined) record = this.#settlePending(bucket, stored, stats);
    else record = stored;
    const next = isSettled(record, stats) ? record : await this.#takeInDisk(bucket, key, record, stats);
    await this.#writeRecord(bucket, key, next, this.syncWrites);
    this.#sweep();
    return next;
  }

  /** Marks a version's file for removal once the record that drops it is written. */
  #drop(bucket: string, blob: string | undefined): void {
    if (blob !== undefined) this.#doomed.push(this.#blobPath(bucket, blob));
  }

  #sweep(): void {
    for (const path of this.#doomed.splice(0)) rmSync(path, { force: true });
  }

  /**
   * A key of the first layout as its one version, "null" (as S3 names a version written before
   * versioning was on), with the time its sidecar gave. Its bytes are kept when the file still
   * holds them; a file changed or removed since is then taken in as any change on disk.
   */
  async #fromLegacy(
    bucket: string,
    key: string,
    legacy: LegacyObjectMeta,
    stats: Stats | undefined,
  ): Promise<KeyRecord> {
    const { format: _format, mtimeMs, ...described } = legacy;
    const version: ObjectVersion = { kind: 'object', versionId: NULL_VERSION, ...described };
    // The file as the sidecar knew it: no inode or change time, which this layout did not keep.
    const known: FileIdentity = { ino: 0, size: legacy.size, mtimeMs, ctimeMs: 0 };
    const dataPath = this.#objectPath(bucket, key);
    const holds =
      stats !== undefined &&
      ((stats.size === legacy.size && stats.mtimeMs === mtimeMs) ||
        (await holdsVersion(dataPath, stats, version, known)));
    if (!holds) return { format: 2, versions: [version], file: known };
    const blob = newBlob();
    const blobPath = this.#blobPath(bucket, blob);
    await this.#prepareParent(blobPath);
    linkSync(dataPath, blobPath);
    const linked = this.#plainStat(bucket, key);
    return {
      format: 2,
      versions: [{ ...version, blob }],
      ...(linked === undefined ? {} : { file: identityOf(linked) }),
    };
  }

  /** A write the process did not finish: kept when its file reached the plain path, undone otherwise. */
  #settlePending(bucket: string, record: KeyRecord, stats: Stats | undefined): KeyRecord | undefined {
    const { pending, ...rest } = record;
    if (pending === undefined) return record;
    if (
      stats !== undefined &&
      stats.ino === pending.ino &&
      stats.size === pending.size &&
      stats.mtimeMs === pending.mtimeMs
    ) {
      return this.#dropReplacedNull(bucket, { ...rest, file: identityOf(stats) });
    }
    const [written, ...older] = rest.versions;
    if (written?.kind === 'object') this.#drop(bucket, written.blob);
    return older.length === 0 ? undefined : { ...rest, versions: [older[0] as Version, ...older.slice(1)] };
  }

  /** The record with the disk's change taken in (see #reconcile); `record` has no pending write. */
  async #takeInDisk(
    bucket: string,
    key: string,
    record: KeyRecord | undefined,
    stats: Stats | undefined,
  ): Promise<KeyRecord | undefined> {
    const latest = record?.versions[0];
    const file = record?.file;
    if (record !== undefined && latest?.kind === 'object' && file !== undefined) {
      if (stats === undefined) return this.#removedOnDisk(bucket, record);
      if (sameIdentity(file, stats)) return record;
      // Touched, copied or linked elsewhere, but the same bytes: only the identity changed.
      if (await holdsVersion(this.#objectPath(bucket, key), stats, latest, file)) {
        return { ...record, file: identityOf(stats) };
      }
    }
    if (stats === undefined) return record;
    return this.#versionFromDisk(bucket, key, record, stats);
  }

  /** The plain file was removed on disk: what a DELETE without a version id would have done. */
  async #removedOnDisk(bucket: string, record: KeyRecord): Promise<KeyRecord | undefined> {
    const { file: _file, ...rest } = record;
    const versioning = (await this.settings(bucket)).versioning;
    if (versioning === 'Enabled') {
      const marker: DeleteMarker = {
        kind: 'marker',
        versionId: this.#newVersionId(),
        lastModified: wholeSeconds(this.clock()),
      };
      return { ...rest, versions: [marker, ...rest.versions] };
    }
    const kept = this.#withoutNull(bucket, rest.versions);
    if (versioning === 'Suspended') kept.unshift(this.#nullMarker());
    return kept.length === 0 ? undefined : { ...rest, versions: [kept[0] as Version, ...kept.slice(1)] };
  }

  /** New bytes at the plain path, put there on disk: a new version, stored now. */
  async #versionFromDisk(
    bucket: string,
    key: string,
    record: KeyRecord | undefined,
    stats: Stats,
  ): Promise<KeyRecord> {
    const settings = await this.settings(bucket);
    const dataPath = this.#objectPath(bucket, key);
    const [latest, ...older] = record?.versions ?? [];
    let versions: Version[] = latest === undefined ? [] : [latest, ...older];
    const previous = latest?.kind === 'object' ? latest : undefined;
    // Edited in place: the current version's own file was the one changed, so its bytes are gone.
    if (previous?.blob !== undefined) {
      const blobPath = this.#blobPath(bucket, previous.blob);
      if (statSync(blobPath, { throwIfNoEntry: false })?.ino === stats.ino) {
        const { blob: _lost, ...without } = previous;
        this.#drop(bucket, previous.blob);
        versions = [without, ...older];
      }
    }
    const carried =
      previous === undefined ? { 'content-type': DEFAULT_CONTENT_TYPE } : withoutLock(previous.headers);
    const now = this.clock();
    const versionId = settings.versioning === 'Enabled' ? this.#newVersionId() : NULL_VERSION;
    const blob = newBlob();
    const blobPath = this.#blobPath(bucket, blob);
    await this.#prepareParent(blobPath);
    const etag = await etagOfFile(dataPath);
    linkSync(dataPath, blobPath);
    const linked = this.#plainStat(bucket, key) ?? stats;
    const version: ObjectVersion = {
      kind: 'object',
      versionId,
      lastModified: wholeSeconds(now),
      etag,
      size: linked.size,
      headers: { ...carried, ...lockHeadersFor(settings, carried, now.getTime()) },
      blob,
    };
    const kept = versionId === NULL_VERSION ? this.#withoutNull(bucket, versions) : versions;
    return { format: 2, versions: [version, ...kept], file: identityOf(linked) };
  }

  /** `versions` without their "null" version, whose file goes: a write or delete while versioning is off replaces it. */
  #withoutNull(bucket: string, versions: readonly Version[]): Version[] {
    const kept: Version[] = [];
    for (const version of versions) {
      if (version.versionId !== NULL_VERSION) kept.push(version);
      else if (version.kind === 'object') this.#drop(bucket, version.blob);
    }
    return kept;
  }

  /** A finished write of a "null" version: the one it replaced goes. */
  #dropReplacedNull(bucket: string, record: KeyRecord): KeyRecord {
    const [written, ...older] = record.versions;
    if (written?.versionId !== NULL_VERSION) return record;
    return { ...record, versions: [written, ...this.#withoutNull(bucket, older)] };
  }

  #nullMarker(): DeleteMarker {
    return { kind: 'marker', versionId: NULL_VERSION, lastModified: wholeSeconds(this.clock()) };
  }

  /** Writes the key's record, or removes it (and the folders it leaves empty) when the key has no version left. */
  async #writeRecord(
    bucket: string,
    key: string,
    record: KeyRecord | undefined,
    flush: boolean,
  ): Promise<void> {
    const metaPath = this.#metaPath(bucket, key);
    if (record !== undefined) {
      await this.#prepareParent(metaPath);
      this.#writeAtomic(metaPath, JSON.stringify(record, null, 2), flush);
      return;
    }
    if (await isFile(metaPath)) await unlink(metaPath);
    this.#folders.clear();
    await pruneEmptyFolders(dirname(metaPath), join(this.root, META_DIR));
  }

  /** The key's current object: undefined when there is none or a delete marker is current. */
  async current(bucket: string, key: string): Promise<ObjectVersion | undefined> {
    const latest = (await this.#resolve(bucket, key))?.versions[0];
    return latest?.kind === 'object' ? latest : undefined;
  }

  /** One version of the key (a delete marker too), or without an id its current one. */
  async version(bucket: string, key: string, versionId?: string): Promise<Version | undefined> {
    const versions = (await this.#resolve(bucket, key))?.versions ?? [];
    return versionId === undefined
      ? versions[0]
      : versions.find((version) => version.versionId === versionId);
  }

  /** Every version and delete marker of the key, newest first. */
  async versions(bucket: string, key: string): Promise<readonly Version[]> {
    return (await this.#resolve(bucket, key))?.versions ?? [];
  }

  /**
   * Opens a version for reading (without an id, the current one): the handle keeps serving these
   * bytes even if the version is deleted meanwhile. A delete marker comes back without a handle.
   */
  async open(
    bucket: string,
    key: string,
    versionId?: string,
  ): Promise<{ version: Version; handle?: FileHandle } | undefined> {
    for (let attempt = 0; ; attempt += 1) {
      const version = await this.version(bucket, key, versionId);
      if (version === undefined || version.kind === 'marker') return version && { version };
      if (version.blob === undefined) throw bytesLost();
      try {
        return { version, handle: await open(this.#blobPath(bucket, version.blob), 'r') };
      } catch (error) {
        // Deleted between the lookup and the open: look again, once.
        if (!isMissing(error) || attempt > 0) throw error;
      }
    }
  }

  /** Resolves once the writes under way are done. */
  async idle(): Promise<void> {
    await this.#lock.run(async () => {});
  }

  /**
   * Stores `file` as the key's new version, after checking the write's conditions against the
   * current object: with versioning on, beside the versions there are (a locked one stays); off or
   * suspended, in place of the "null" version, which must not be locked.
   */
  async commit(
    bucket: string,
    key: string,
    file: string,
    fields: NewVersion,
    condition: WriteCondition & LockOverride,
  ): Promise<ObjectVersion> {
    return this.#lock.run(async () => {
      await this.requireBucket(bucket);
      const settings = await this.settings(bucket);
      const record = await this.#reconcile(bucket, key);
      const latest = record?.versions[0];
      checkWriteCondition(latest?.kind === 'object' ? latest : undefined, condition);
      const versionId = settings.versioning === 'Enabled' ? this.#newVersionId() : NULL_VERSION;
      if (versionId === NULL_VERSION) {
        const replaced = record?.versions.find((version) => version.versionId === NULL_VERSION);
        if (replaced?.kind === 'object') refuseIfLocked(replaced, condition, this.clock().getTime());
      }
      const version: Omit<ObjectVersion, 'blob'> = {
        kind: 'object',
        versionId,
        lastModified: wholeSeconds(this.clock()),
        ...fields,
      };
      try {
        return await this.#place(bucket, key, file, version, record);
      } catch (error) {
        // A folder removed by hand since this store last wrote there: make the folders again, once.
        if (!isMissing(error) || this.#folders.size === 0) throw error;
        this.#folders.clear();
        return await this.#place(bucket, key, file, version, record);
      }
    });
  }

  /**
   * Links the new version's file under `.versions`, records it as pending, renames it to the plain
   * path, and records it as placed: a crash between the two records is settled by #settlePending.
   */
  async #place(
    bucket: string,
    key: string,
    file: string,
    fields: Omit<ObjectVersion, 'blob'>,
    record: KeyRecord | undefined,
  ): Promise<ObjectVersion> {
    const dataPath = this.#objectPath(bucket, key);
    const metaPath = this.#metaPath(bucket, key);
    const blob = newBlob();
    const blobPath = this.#blobPath(bucket, blob);
    await this.#prepareParent(dataPath);
    await this.#prepareParent(metaPath);
    await this.#prepareParent(blobPath);
    if (isDirectory(dataPath) || isDirectory(metaPath)) throw keyConflict();
    linkSync(file, blobPath);
    const staged = statSync(file);
    const version: ObjectVersion = { ...fields, blob };
    const versions: KeyRecord['versions'] = [version, ...(record?.versions ?? [])];
    const previousFile = record?.file === undefined ? {} : { file: record.file };
    try {
      const pending = { ino: staged.ino, size: staged.size, mtimeMs: staged.mtimeMs };
      this.#writeAtomic(
        metaPath,
        JSON.stringify({ format: 2, versions, ...previousFile, pending } satisfies KeyRecord, null, 2),
        false,
      );
      renameSync(file, dataPath);
    } catch (error) {
      await this.#writeRecord(bucket, key, record, false);
      rmSync(blobPath, { force: true });
      throw error;
    }
    const placed = this.#dropReplacedNull(bucket, {
      format: 2,
      versions,
      file: identityOf(lstatSync(dataPath)),
    });
    this.#writeAtomic(metaPath, JSON.stringify(placed, null, 2), this.syncWrites);
    this.#sweep();
    return version;
  }

  /**
   * DeleteObject. Without a version id: with versioning on, a delete marker becomes current and
   * every version stays (a locked one too); off, the "null" version goes (suspended: a "null"
   * marker takes its place). With one: that version goes for good, unless Object Lock holds it;
   * a delete marker can always be removed. Answers what S3 answers in its headers.
   */
  async remove(
    bucket: string,
    key: string,
    versionId: string | undefined,
    override: LockOverride = {},
  ): Promise<{ versionId?: string; deleteMarker?: true }> {
    return this.#lock.run(async () => {
      await this.requireBucket(bucket);
      const record = await this.#reconcile(bucket, key);
      if (versionId !== undefined) return this.#removeVersion(bucket, key, record, versionId, override);
      const versioning = (await this.settings(bucket)).versioning;
      if (versioning === 'Enabled') {
        const marker: DeleteMarker = {
          kind: 'marker',
          versionId: this.#newVersionId(),
          lastModified: wholeSeconds(this.clock()),
        };
        await this.#unlinkPlain(bucket, key);
        await this.#writeRecord(
          bucket,
          key,
          { format: 2, versions: [marker, ...(record?.versions ?? [])] },
          this.syncWrites,
        );
        return { versionId: marker.versionId, deleteMarker: true };
      }
      const replaced = record?.versions.find((version) => version.versionId === NULL_VERSION);
      if (replaced?.kind === 'object') refuseIfLocked(replaced, override, this.clock().getTime());
      const others = (record?.versions ?? []).filter((version) => version.versionId !== NULL_VERSION);
      const versions = versioning === 'Suspended' ? [this.#nullMarker(), ...others] : others;
      if (replaced !== undefined || versioning === 'Suspended') await this.#unlinkPlain(bucket, key);
      await this.#writeRecord(
        bucket,
        key,
        versions.length === 0
          ? undefined
          : { format: 2, versions: [versions[0] as Version, ...versions.slice(1)] },
        this.syncWrites,
      );
      if (replaced?.kind === 'object') this.#drop(bucket, replaced.blob);
      this.#sweep();
      return versioning === 'Suspended' ? { versionId: NULL_VERSION, deleteMarker: true } : {};
    });
  }

  async #removeVersion(
    bucket: string,
    key: string,
    record: KeyRecord | undefined,
    versionId: string,
    override: LockOverride,
  ): Promise<{ versionId?: string; deleteMarker?: true }> {
    const versions = record?.versions ?? [];
    const index = versions.findIndex((version) => version.versionId === versionId);
    const removed = versions[index];
    // S3 answers 204 for a version that is not there.
    if (removed === undefined) return { versionId };
    if (removed.kind === 'object') refuseIfLocked(removed, override, this.clock().getTime());
    const rest = versions.filter((_version, at) => at !== index);
    const [head] = rest;
    let file = record?.file;
    if (index === 0) {
      // The version before it becomes current: its bytes go back to the plain path.
      await this.#unlinkPlain(bucket, key);
      file = undefined;
      if (head?.kind === 'object' && head.blob !== undefined) {
        const dataPath = this.#objectPath(bucket, key);
        const temp = this.tempPath();
        await this.#prepareParent(dataPath);
        if (isDirectory(dataPath)) throw keyConflict();
        linkSync(this.#blobPath(bucket, head.blob), temp);
        renameSync(temp, dataPath);
        file = identityOf(lstatSync(dataPath));
      }
    }
    await this.#writeRecord(
      bucket,
      key,
      head === undefined
        ? undefined
        : { format: 2, versions: [head, ...rest.slice(1)], ...(file === undefined ? {} : { file }) },
      this.syncWrites,
    );
    if (removed.kind === 'object') this.#drop(bucket, removed.blob);
    this.#sweep();
    return { versionId, ...(removed.kind === 'marker' ? { deleteMarker: true as const } : {}) };
  }

  /** Removes the plain file, if any, and the folders it leaves empty. */
  async #unlinkPlain(bucket: string, key: string): Promise<void> {
    const dataPath = this.#objectPath(bucket, key);
    // A key that names a folder of other keys is no object: there is nothing to remove.
    if (!(await isFile(dataPath))) return;
    await unlink(dataPath);
    this.#folders.clear();
    await pruneEmptyFolders(dirname(dataPath), this.#bucketDir(bucket));
  }

  /**
   * Rewrites one version's stored headers (its retention or legal hold) without touching its
   * bytes; `change` sees the version and may refuse by throwing.
   */
  async changeHeaders(
    bucket: string,
    key: string,
    versionId: string | undefined,
    change: (version: ObjectVersion) => Record<string, string>,
  ): Promise<void> {
    await this.#lock.run(async () => {
      const record = await this.#reconcile(bucket, key);
      const versions = record?.versions ?? [];
      const target = versionId === undefined ? versions[0] : versions.find((v) => v.versionId === versionId);
      requireObject(target, versionId);
      const changed = { ...target, headers: change(target) };
      const next = versions.map((version) => (version === target ? changed : version));
      if (record === undefined || next[0] === undefined) throw noSuchKey();
      await this.#writeRecord(
        bucket,
        key,
        { ...record, versions: [next[0], ...next.slice(1)] },
        this.syncWrites,
      );
    });
  }

  async #prepareParent(path: string): Promise<void> {
    const folder = dirname(path);
    if (this.#folders.has(folder)) return;
    try {
      await mkdir(folder, { recursive: true });
      this.#folders.add(folder);
    } catch (error) {
      const code = errorCode(error);
      if (code === 'ENOTDIR' || code === 'EEXIST') throw keyConflict();
      throw error;
    }
  }

  /** Replaces `path` with a small JSON file (a key's record, an upload's record) in one rename. */
  #writeAtomic(path: string, text: string, flush = this.syncWrites): void {
    const temp = this.tempPath();
    try {
      writeNewFile(temp, Buffer.from(text), flush);
      renameSync(temp, path);
    } catch (error) {
      rmSync(temp, { force: true });
      throw error;
    }
  }

  /**
   * Keys under the prefix after `after`, in UTF-8 byte order, walking only the folders that can
   * hold such keys: those with a plain file, and those with a record (a key whose current version is
   * a delete marker has only its record). `skip` is read live: keys starting with it are passed
   * over (rolled-up prefixes).
   */
  async *keys(
    bucket: string,
    prefix: string,
    after: string | undefined,
    skip: { prefix?: string },
  ): AsyncGenerator<string> {
    const base = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    // No key has such a segment, so the prefix matches nothing (and its path must not be walked).
    if (base !== '' && base.slice(0, -1).split('/').some(isUnstorableSegment)) return;
    const wanted = (key: string) =>
      key.startsWith(prefix) &&
      (after === undefined || compareUtf8(key, after) > 0) &&
      (skip.prefix === undefined || !key.startsWith(skip.prefix));
    const worthEntering = (folder: string) =>
      (folder.startsWith(prefix) || prefix.startsWith(folder)) &&
      (after === undefined || compareUtf8(folder, after) > 0 || after.startsWith(folder)) &&
      (skip.prefix === undefined || !folder.startsWith(skip.prefix));
    const trees = [this.#bucketDir(bucket), join(this.root, META_DIR, bucket)] as const;

    /** A folder's keys and subfolders in one of the trees; a record `<name>.json` stands for the key `<name>`. */
    async function entriesOf(folder: string, records: boolean): Promise<{ name: string; folder: boolean }[]> {
      let entries: { name: string; isDirectory(): boolean; isFile(): boolean }[];
      try {
        entries = await readdir(folder, { withFileTypes: true });
      } catch (error) {
        if (isMissing(error)) return [];
        throw error;
      }
      const found: { name: string; folder: boolean }[] = [];
      for (const entry of entries) {
        if (entry.isDirectory()) found.push({ name: entry.name, folder: true });
        else if (entry.isFile() && !records) found.push({ name: entry.name, folder: false });
        else if (entry.isFile() && entry.name.endsWith('.json'))
          found.push({ name: entry.name.slice(0, -'.json'.length), folder: false });
      }
      return found.filter((entry) => !isUnstorableSegment(entry.name));
    }

    async function* walk(segments: readonly string[], folderKey: string): AsyncGenerator<string> {
      const [plain, recorded] = await Promise.all(
        trees.map((tree) => entriesOf(join(tree, ...segments), tree !== trees[0])),
      );
      // A folder sorts as its name plus "/", so a depth-first walk yields keys in byte order.
      const byName = new Map<string, { name: string; folder: boolean; sortKey: Buffer }>();
      for (const entry of [...(plain ?? []), ...(recorded ?? [])]) {
        const id = entry.name + (entry.folder ? '/' : '');
        byName.set(id, { ...entry, sortKey: Buffer.from(id, 'utf8') });
      }
      const sorted = [...byName.values()].sort((a, b) => Buffer.compare(a.sortKey, b.sortKey));
      for (const entry of sorted) {
        const key = folderKey + entry.name;
        if (entry.folder) {
          if (worthEntering(`${key}/`)) yield* walk([...segments, entry.name], `${key}/`);
        } else if (wanted(key)) {
          yield key;
        }
      }
    }
    yield* walk(
      base.split('/').filter((segment) => segment !== ''),
      base,
    );
  }

  // Multipart uploads ---------------------------------------------------------------------------

  async createUpload(record: UploadRecord): Promise<string> {
    const uploadId = randomBytes(16).toString('hex');
    const dir = this.#uploadDir(uploadId);
    await mkdir(dir, { recursive: true });
    this.#writeAtomic(join(dir, 'upload.json'), JSON.stringify(record, null, 2));
    return uploadId;
  }

  async readUpload(uploadId: string, bucket: string, key: string): Promise<UploadRecord> {
    if (!UPLOAD_ID.test(uploadId)) throw noSuchUpload();
    let text: string;
    try {
      text = await readFile(join(this.#uploadDir(uploadId), 'upload.json'), 'utf8');
    } catch (error) {
      if (isMissing(error)) throw noSuchUpload();
      throw error;
    }
    const record = parseJson(uploadRecordSchema, text);
    if (record === undefined || record.bucket !== bucket || record.key !== key) throw noSuchUpload();
    return record;
  }

  async putPart(
    uploadId: string,
    partNumber: number,
    file: string,
    part: Omit<PartRecord, 'file' | 'format'>,
  ) {
    await this.#lock.run(async () => {
      const dir = this.#uploadDir(uploadId);
      if (!(await isFile(join(dir, 'upload.json')))) throw noSuchUpload();
      const previous = await this.readPart(uploadId, partNumber);
      const record: PartRecord = { format: 1, file: `${randomBytes(8).toString('hex')}.part`, ...part };
      await rename(file, join(dir, record.file));
      this.#writeAtomic(join(dir, `${partNumber}.json`), JSON.stringify(record));
      if (previous !== undefined) await rm(join(dir, previous.file), { force: true });
    });
  }

  async readPart(uploadId: string, partNumber: number): Promise<PartRecord | undefined> {
    let text: string;
    try {
      text = await readFile(join(this.#uploadDir(uploadId), `${partNumber}.json`), 'utf8');
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
    return parseJson(partRecordSchema, text);
  }

  /** The upload's parts by number, lowest first (what ListParts pages through). */
  async listParts(uploadId: string): Promise<{ partNumber: number; part: PartRecord }[]> {
    const names = await readdir(this.#uploadDir(uploadId)).catch((error: unknown) => {
      if (isMissing(error)) throw noSuchUpload();
      throw error;
    });
    const numbers = names
      .map((name) => /^(\d{1,5})\.json$/.exec(name)?.[1])
      .filter((number): number is string => number !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
    const parts: { partNumber: number; part: PartRecord }[] = [];
    for (const partNumber of numbers) {
      const part = await this.readPart(uploadId, partNumber);
      if (part !== undefined) parts.push({ partNumber, part });
    }
    return parts;
  }

  partPath(uploadId: string, part: PartRecord): string {
    return join(this.#uploadDir(uploadId), part.file);
  }

  async removeUpload(uploadId: string): Promise<void> {
    await this.#lock.run(() => rm(this.#uploadDir(uploadId), { recursive: true, force: true }));
  }
}

/** The key's path under `folder`; checkKey already refused anything that could leave it, this makes sure. */
function pathWithin(folder: string, key: string): string {
  const path = join(folder, ...key.split('/'));
  if (!path.startsWith(folder + sep)) throw invalidArgument('The key would leave its bucket folder.');
  return path;
}

function parseJson<T extends z.ZodType>(schema: T, text: string): z.infer<T> | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = schema.safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}

export function checkWriteCondition(current: ObjectVersion | undefined, condition: WriteCondition): void {
  if (condition.ifNoneMatch !== undefined && current !== undefined) throw preconditionFailed();
  if (condition.ifMatch !== undefined) {
    if (current === undefined) throw noSuchKey();
    if (!etagListMatches(condition.ifMatch, current.etag)) throw preconditionFailed();
  }
}

function isDirectory(path: string): boolean {
  try {
    return lstatSync(path, { throwIfNoEntry: false })?.isDirectory() === true;
  } catch {
    // A path through a file (ENOTDIR) or one it may not read names no directory either.
    return false;
  }
}

async function isFile(path: string): Promise<boolean> {
  return (await lstat(path).catch(() => undefined))?.isFile() === true;
}

/** S3 has no empty folders: once a folder's last key is gone, the folder goes too. */
async function pruneEmptyFolders(from: string, stopAt: string): Promise<void> {
  let folder = from;
  while (folder.startsWith(stopAt + sep)) {
    try {
      await rmdir(folder);
    } catch {
      return;
    }
    folder = dirname(folder);
  }
}

export function wholeSeconds(date: Date): string {
  return new Date(Math.floor(date.getTime() / 1000) * 1000).toISOString();
}

/** A file's identity as the record keeps it. */
function identityOf(stats: Stats): FileIdentity {
  return { ino: stats.ino, size: stats.size, mtimeMs: stats.mtimeMs, ctimeMs: stats.ctimeMs };
}

function sameIdentity(identity: FileIdentity, stats: Stats): boolean {
  return (
    identity.ino === stats.ino &&
    identity.size === stats.size &&
    identity.mtimeMs === stats.mtimeMs &&
    identity.ctimeMs === stats.ctimeMs
  );
}

/**
 * True when the record describes the disk as it is (no key and no file, a current object whose
 * plain file has the recorded identity, or a delete marker and no file): nothing to take in.
 */
function isSettled(record: KeyRecord | undefined, stats: Stats | undefined): boolean {
  if (record === undefined) return stats === undefined;
  if (record.pending !== undefined) return false;
  if (record.versions[0]?.kind !== 'object' || record.file === undefined) return stats === undefined;
  return stats !== undefined && sameIdentity(record.file, stats);
}

/**
 * Whether the file still holds the version's bytes, judged by its ETag computed again (per part
 * for a multipart object). A multipart object of the first layout, whose part sizes are unknown,
 * is judged by its size and mtime instead.
 */
async function holdsVersion(
  path: string,
  stats: Stats,
  version: ObjectVersion,
  recorded: FileIdentity,
): Promise<boolean> {
  if (stats.size !== version.size) return false;
  if (version.parts !== undefined && version.partSizes === undefined)
    return stats.mtimeMs === recorded.mtimeMs;
  return (await etagOfFile(path, version.partSizes)) === version.etag;
}

/** A file's ETag as S3 computes it: the MD5 of its bytes, or for a multipart object the MD5 of its parts' MD5s. */
async function etagOfFile(path: string, partSizes?: readonly number[]): Promise<string> {
  if (partSizes === undefined) {
    const whole = createHash('md5');
    for await (const chunk of asBuffers(createReadStream(path))) whole.update(chunk);
    return `"${whole.digest('hex')}"`;
  }
  const digests: Buffer[] = [];
  let start = 0;
  for (const size of partSizes) {
    const part = createHash('md5');
    if (size > 0) {
      for await (const chunk of asBuffers(createReadStream(path, { start, end: start + size - 1 })))
        part.update(chunk);
    }
    digests.push(part.digest());
    start += size;
  }
  return `"${createHash('md5').update(Buffer.concat(digests)).digest('hex')}-${partSizes.length}"`;
}

/** The name of a new version's file under `.versions/<bucket>/`. */
function newBlob(): string {
  return randomBytes(16).toString('hex');
}

const VERSION_ID_ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function randomChars(count: number): string {
  // 248 is the largest multiple of 62 below 256: bytes at or above it are drawn again, so no character is favoured.
  let text = '';
  while (text.length < count) {
    for (const byte of randomBytes(count * 2)) {
      if (byte < 248 && text.length < count) text += VERSION_ID_ALPHABET[byte % 62];
    }
  }
  return text;
}

/** Narrows `version` to an object, or throws what S3 answers for a missing version or a delete marker. */
export function requireObject(
  version: Version | undefined,
  versionId: string | undefined,
): asserts version is ObjectVersion {
  if (version === undefined) throw versionId === undefined ? noSuchKey() : noSuchVersion();
  if (version.kind === 'marker') {
    const headers = { 'x-amz-delete-marker': 'true', 'x-amz-version-id': version.versionId };
    // Named by its id, the marker's time comes too: "405 Method Not Allowed error and the Last-Modified: timestamp".
    throw versionId === undefined
      ? noSuchKey(headers)
      : methodNotAllowed({ ...headers, 'last-modified': new Date(version.lastModified).toUTCString() });
  }
}
