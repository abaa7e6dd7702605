/** The store: objects as files with sidecars, multipart uploads in progress, atomic writes. */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, lstatSync, readFileSync, renameSync, rmSync, type Stats, statSync } from 'node:fs';
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
  invalidArgument,
  keyConflict,
  noSuchBucket,
  noSuchKey,
  noSuchUpload,
  preconditionFailed,
  S3Failure,
} from './errors.ts';
import { compareUtf8, errorCode, etagListMatches, isMissing, isUnstorableSegment } from './keys.ts';
import { BUCKETS_DIR, DEFAULT_CONTENT_TYPE, META_DIR, TMP_DIR, UPLOAD_ID, UPLOADS_DIR } from './limits.ts';
import { refuseIfLocked } from './object-lock.ts';
import {
  type BucketSettings,
  bucketSettingsSchema,
  type ObjectMeta,
  objectMetaSchema,
  type PartRecord,
  partRecordSchema,
  type UploadRecord,
  uploadRecordSchema,
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

export class DiskStore {
  readonly #lock = new Mutex();
  readonly #background = new Set<Promise<unknown>>();
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

  /** The object's metadata, or undefined when there is no such object. */
  async describe(bucket: string, key: string, opened?: FileHandle): Promise<ObjectMeta | undefined> {
    let stats: Stats | undefined;
    try {
      stats =
        opened === undefined
          ? statSync(this.#objectPath(bucket, key), { throwIfNoEntry: false })
          : await opened.stat();
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
    if (stats === undefined || !stats.isFile()) return undefined;
    const stored = this.#readMeta(bucket, key);
    if (stored !== undefined && stored.size === stats.size && stored.mtimeMs === stats.mtimeMs) return stored;
    return this.#rebuildMeta(bucket, key, stats, stored, opened);
  }

  /** Opens the object for reading; the handle keeps serving these bytes even if a PUT replaces them. */
  async open(bucket: string, key: string): Promise<{ handle: FileHandle; meta: ObjectMeta } | undefined> {
    let handle: FileHandle;
    try {
      handle = await open(this.#objectPath(bucket, key), 'r');
    } catch (error) {
      if (isMissing(error) || errorCode(error) === 'EISDIR') return undefined;
      throw error;
    }
    try {
      const meta = await this.describe(bucket, key, handle);
      if (meta === undefined) {
        await handle.close();
        return undefined;
      }
      return { handle, meta };
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  #readMeta(bucket: string, key: string): ObjectMeta | undefined {
    let text: string;
    try {
      text = readFileSync(this.#metaPath(bucket, key), 'utf8');
    } catch (error) {
      if (isMissing(error) || errorCode(error) === 'EISDIR') return undefined;
      throw error;
    }
    return parseJson(objectMetaSchema, text);
  }

  /**
   * A file without a matching sidecar was put there by hand or outlived an interrupted write:
   * describe it from its bytes, keep what the old sidecar said about headers, and save that.
   */
  async #rebuildMeta(
    bucket: string,
    key: string,
    stats: Stats,
    stale: ObjectMeta | undefined,
    opened: FileHandle | undefined,
  ): Promise<ObjectMeta> {
    const path = this.#objectPath(bucket, key);
    const source =
      opened === undefined ? createReadStream(path) : opened.createReadStream({ start: 0, autoClose: false });
    const md5 = createHash('md5');
    for await (const chunk of asBuffers(source)) md5.update(chunk);
    const meta: ObjectMeta = {
      format: 1,
      etag: `"${md5.digest('hex')}"`,
      size: stats.size,
      mtimeMs: stats.mtimeMs,
      lastModified: wholeSeconds(stats.mtime),
      headers: stale?.headers ?? { 'content-type': DEFAULT_CONTENT_TYPE },
    };
    // Not awaited: a commit holding the lock may be the caller, and saving is only a cache.
    const saving = this.#lock
      .run(async () => {
        const now = await stat(path).catch(() => undefined);
        if (now?.ino !== stats.ino || now.mtimeMs !== stats.mtimeMs || now.size !== stats.size) return;
        const metaPath = this.#metaPath(bucket, key);
        await this.#prepareParent(metaPath);
        this.#writeAtomic(metaPath, JSON.stringify(meta, null, 2));
      })
      .catch(() => undefined)
      .finally(() => this.#background.delete(saving));
    this.#background.add(saving);
    return meta;
  }

  /** Resolves once the sidecars being saved in the background are written. */
  async idle(): Promise<void> {
    await Promise.all([...this.#background]);
  }

  /** Moves a received file into place with its sidecar, after checking the write's conditions. */
  async commit(
    bucket: string,
    key: string,
    file: string,
    meta: ObjectMeta,
    condition: WriteCondition & LockOverride,
  ) {
    const locking = (await this.settings(bucket)).objectLock !== undefined;
    await this.#lock.run(async () => {
      await this.requireBucket(bucket);
      if (condition.ifNoneMatch !== undefined || condition.ifMatch !== undefined || locking) {
        const current = await this.describe(bucket, key);
        checkWriteCondition(current, condition);
        // This store keeps one version per key: an overwrite would destroy a locked version.
        if (locking) refuseIfLocked(current, condition);
      }
      const dataPath = this.#objectPath(bucket, key);
      const metaPath = this.#metaPath(bucket, key);
      try {
        await this.#place(file, dataPath, metaPath, meta);
      } catch (error) {
        // A folder removed by hand since this store last wrote there: make the folders again, once.
        if (!isMissing(error) || this.#folders.size === 0) throw error;
        this.#folders.clear();
        await this.#place(file, dataPath, metaPath, meta);
      }
    });
  }

  async #place(file: string, dataPath: string, metaPath: string, meta: ObjectMeta): Promise<void> {
    await this.#prepareParent(dataPath);
    await this.#prepareParent(metaPath);
    if (isDirectory(dataPath) || isDirectory(metaPath)) throw keyConflict();
    // Sidecar first: if the process dies between the renames, the sidecar no longer matches the
    // file's stat and the next read rebuilds it from the bytes.
    this.#writeAtomic(metaPath, JSON.stringify(meta, null, 2));
    renameSync(file, dataPath);
  }

  async remove(bucket: string, key: string, override: LockOverride = {}): Promise<void> {
    const locking = (await this.settings(bucket)).objectLock !== undefined;
    await this.#lock.run(async () => {
      await this.requireBucket(bucket);
      if (locking) refuseIfLocked(await this.describe(bucket, key), override);
      const dataPath = this.#objectPath(bucket, key);
      const metaPath = this.#metaPath(bucket, key);
      // A key that names a folder of other keys is no object: there is nothing to delete.
      if (await isFile(dataPath)) await unlink(dataPath);
      if (await isFile(metaPath)) await unlink(metaPath);
      this.#folders.clear();
      await pruneEmptyFolders(dirname(dataPath), this.#bucketDir(bucket));
      await pruneEmptyFolders(dirname(metaPath), join(this.root, META_DIR));
    });
  }

  /**
   * Rewrites the object's stored headers (its retention or legal hold) without touching its bytes;
   * `change` sees the current metadata and may refuse by throwing.
   */
  async changeHeaders(
    bucket: string,
    key: string,
    change: (meta: ObjectMeta) => Record<string, string>,
  ): Promise<void> {
    await this.#lock.run(async () => {
      const current = await this.describe(bucket, key);
      if (current === undefined) throw noSuchKey();
      const next: ObjectMeta = { ...current, headers: change(current) };
      this.#writeAtomic(this.#metaPath(bucket, key), JSON.stringify(next, null, 2));
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

  /** Replaces `path` with a small JSON file (a sidecar, an upload's record) in one rename. */
  #writeAtomic(path: string, text: string): void {
    const temp = this.tempPath();
    try {
      writeNewFile(temp, Buffer.from(text), this.syncWrites);
      renameSync(temp, path);
    } catch (error) {
      rmSync(temp, { force: true });
      throw error;
    }
  }

  /**
   * Keys under the prefix after `after`, in UTF-8 byte order, walking only the folders that can
   * hold such keys. `skip` is read live: keys starting with it are passed over (rolled-up prefixes).
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
    const bucketDir = this.#bucketDir(bucket);

    async function* walk(folderPath: string, folderKey: string): AsyncGenerator<string> {
      let entries: { name: string; isDirectory(): boolean; isFile(): boolean }[];
      try {
        entries = await readdir(folderPath, { withFileTypes: true });
      } catch (error) {
        if (isMissing(error)) return;
        throw error;
      }
      // A folder sorts as its name plus "/", so a depth-first walk yields keys in byte order.
      const sorted = entries
        .filter((entry) => entry.isFile() || entry.isDirectory())
        .map((entry) => ({
          entry,
          sortKey: Buffer.from(entry.name + (entry.isDirectory() ? '/' : ''), 'utf8'),
        }))
        .sort((a, b) => Buffer.compare(a.sortKey, b.sortKey));
      for (const { entry } of sorted) {
        const key = folderKey + entry.name;
        if (entry.isDirectory()) {
          if (worthEntering(`${key}/`)) yield* walk(join(folderPath, entry.name), `${key}/`);
        } else if (wanted(key)) {
          yield key;
        }
      }
    }
    yield* walk(join(bucketDir, ...base.split('/').filter((segment) => segment !== '')), base);
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

export function checkWriteCondition(current: ObjectMeta | undefined, condition: WriteCondition): void {
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
