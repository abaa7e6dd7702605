/**
 * One owner per data dir. Local mode opens the ledger's LevelDB, the queue journals and the S3
 * files of its data dir for writing; a second process on the same dir either dies on LevelDB's own
 * lock ("Database is closed") or, for `npm start`, wipes the first one's data. So whatever opens a
 * data dir (`svc-dsr local`, with or without `--serve`, and `npm start`) first takes its lock: a
 * file naming the process (pid, command, start time). The operator commands do not take it: they
 * reach a serving local mode through its endpoints (endpoints.json), never its files.
 *
 * The lock is created with a hard link, which fails when the file exists, so two processes that
 * race for it cannot both win. A lock whose process has died (a kill) is stale and is taken over.
 * While the lock is held, its file is watched: deleted (by hand, or by a clean-up that swept the
 * dir), it is put back at once, so a second local mode is still refused.
 */
import { randomBytes } from 'node:crypto';
import { type FSWatcher, watch } from 'node:fs';
import { link, mkdir, readdir, readFile, rename, rm, unlink, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import { processAlive } from '../bin/cli/local-endpoints.ts';

/** The lock's file name in a data dir. */
export const LOCK_FILE = 'owner.lock';

const ownerSchema = z.object({
  pid: z.number().int().positive(),
  command: z.string(),
  started_at: z.string(),
});
/** Who holds a data dir. */
export type DataDirOwner = z.infer<typeof ownerSchema>;

/**
 * What putting a held lock's file back came to: it was still there (`held`), it is back
 * (`restored`), or another live process took the dir meanwhile (`lost`).
 */
export type LockRestoreOutcome = 'held' | 'restored' | 'lost';

/** A held lock; `release()` removes it if it is still this process's. */
export interface DataDirLock {
  readonly dataDir: string;
  readonly owner: DataDirOwner;
  /** Puts the lock's file back if it is gone; the watcher calls it when the file is deleted. */
  restore(): Promise<LockRestoreOutcome>;
  release(): Promise<void>;
}

/** Options of acquireDataDirLock. */
export interface DataDirLockOptions {
  /**
   * Told of each restore the watcher made (`restored`, `lost`). @default a line on stderr for `lost`
   */
  readonly onRestore?: (outcome: LockRestoreOutcome) => void;
}

/**
 * Takes the lock of `dataDir` (created if missing) for this process, running `command`. Throws
 * DataDirInUseError naming the holder when a live process holds it; takes over a stale one. The
 * lock's file is put back whenever it is deleted while the lock is held.
 */
export async function acquireDataDirLock(
  dataDirPath: string,
  command: string,
  options: DataDirLockOptions = {},
): Promise<DataDirLock> {
  const dataDir = resolve(dataDirPath);
  await mkdir(dataDir, { recursive: true });
  const path = join(dataDir, LOCK_FILE);
  const owner: DataDirOwner = { pid: process.pid, command, started_at: new Date().toISOString() };
  const text = `${JSON.stringify(owner)}\n`;
  const holder = await claim(path, text);
  if (holder !== undefined) throw inUse(dataDir, holder);

  let released = false;
  // One restore at a time: a deletion can raise several change notices.
  let restoring: Promise<LockRestoreOutcome> = Promise.resolve('held');
  const restore = () => {
    // A restore that failed (the dir itself removed) does not stop the next one.
    restoring = restoring
      .catch(() => 'held' as const)
      .then(async () => {
        if (released) return 'held';
        if ((await readFile(path, 'utf8').catch(() => undefined)) === text) return 'held';
        return (await claim(path, text)) === undefined ? 'restored' : 'lost';
      });
    return restoring;
  };
  const report =
    options.onRestore ??
    ((outcome: LockRestoreOutcome) => {
      if (outcome === 'lost') {
        process.stderr.write(
          `svc-dsr: the lock ${path} was deleted and another process took it before it could be put back; stop one of them\n`,
        );
      }
    });
  const watcher = watchLock(dataDir, () => {
    restore().then(
      (outcome) => outcome !== 'held' && report(outcome),
      () => {},
    );
  });
  return {
    dataDir,
    owner,
    restore,
    async release() {
      if (released) return;
      released = true;
      watcher?.close();
      await restoring.catch(() => {});
      const held = await readFile(path, 'utf8').catch(() => undefined);
      if (held === text) await unlink(path).catch(() => {});
    },
  };
}

/**
 * Links `text` in as the lock at `path`. Answers the live holder when another process holds it,
 * undefined once `text` is the lock; a stale lock is taken over.
 */
async function claim(path: string, text: string): Promise<DataDirOwner | undefined> {
  const draft = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await writeFile(draft, text);
  try {
    for (let attempt = 0; ; attempt += 1) {
      try {
        await link(draft, path);
        return undefined;
      } catch (error) {
        if (!hasCode(error, 'EEXIST') || attempt >= 3) throw error;
      }
      const held = await readFile(path, 'utf8').catch(() => undefined);
      if (held === undefined) continue;
      if (held === text) return undefined;
      const holder = parseOwner(held);
      if (holder !== undefined && processAlive(holder.pid)) return holder;
      await takeOverStale(path, held);
    }
  } finally {
    await unlink(draft).catch(() => {});
  }
}

/** Calls `changed` when the lock's file in `dataDir` is renamed or deleted; none on a file system without change notices. */
function watchLock(dataDir: string, changed: () => void): FSWatcher | undefined {
  try {
    // Not persistent: a held lock alone does not keep the process running.
    const watcher = watch(dataDir, { persistent: false }, (_event, name) => {
      if (name === LOCK_FILE) changed();
    });
    // The dir itself removed: nothing left to guard.
    watcher.on('error', () => watcher.close());
    return watcher;
  } catch {
    return undefined;
  }
}

/**
 * Empties a data dir this process holds, keeping its lock; refuses while any data dir inside it
 * has a live owner (a served `<dir>/sub` would lose its data too).
 */
export async function emptyDataDir(lock: DataDirLock): Promise<void> {
  const entries = await readdir(lock.dataDir, { recursive: true });
  for (const entry of entries) {
    if (entry === LOCK_FILE || basename(entry) !== LOCK_FILE) continue;
    const nested = join(lock.dataDir, dirname(entry));
    const holder = await readOwner(nested);
    if (holder !== undefined) throw inUse(nested, holder);
  }
  for (const entry of await readdir(lock.dataDir)) {
    if (entry !== LOCK_FILE) await rm(join(lock.dataDir, entry), { recursive: true, force: true });
  }
}

/** The live owner of a data dir, if any. */
export async function readOwner(dataDir: string): Promise<DataDirOwner | undefined> {
  const held = await readFile(join(dataDir, LOCK_FILE), 'utf8').catch(() => undefined);
  const holder = held === undefined ? undefined : parseOwner(held);
  return holder !== undefined && processAlive(holder.pid) ? holder : undefined;
}

/** Moves a stale lock aside; puts it back if what moved was a racer's fresh lock instead. */
async function takeOverStale(path: string, staleText: string): Promise<void> {
  const aside = `${path}.stale.${process.pid}`;
  try {
    await rename(path, aside);
  } catch (error) {
    if (hasCode(error, 'ENOENT')) return;
    throw error;
  }
  const moved = await readFile(aside, 'utf8').catch(() => undefined);
  if (moved !== staleText) await link(aside, path).catch(() => {});
  await unlink(aside).catch(() => {});
}

/** A data dir is held by another live process; the message names it and says what to do. */
export class DataDirInUseError extends Error {
  override readonly name = 'DataDirInUseError';
  readonly code = 'data_dir_in_use';
}

function inUse(dataDir: string, holder: DataDirOwner): DataDirInUseError {
  return new DataDirInUseError(
    `the data dir ${dataDir} is in use by process ${holder.pid} (${holder.command}), running since ${holder.started_at}: ` +
      'stop that process first, or give another --data-dir. To query a serving local mode, use the operator commands ' +
      `(status, list, report...) with --target local --data-dir ${dataDir}. If process ${holder.pid} is not svc-dsr, ` +
      `delete ${join(dataDir, LOCK_FILE)}.`,
  );
}

function parseOwner(text: string): DataDirOwner | undefined {
  try {
    const parsed = ownerSchema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

function hasCode(error: unknown, code: string): boolean {
  return error instanceof Error && 'code' in error && error.code === code;
}
