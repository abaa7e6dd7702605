import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireDataDirLock, DataDirInUseError, emptyDataDir, LOCK_FILE } from '#local/data-dir-lock';

let workdir: string;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-lock-'));
});
afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

/** The pid of a process that has exited. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await new Promise((resolve) => child.once('exit', resolve));
  if (child.pid === undefined) throw new Error('the child had no pid');
  return child.pid;
}

describe('the data dir lock', () => {
  it('names the holder when the dir is taken, and is free again once released', async () => {
    const dataDir = join(workdir, 'held');
    const lock = await acquireDataDirLock(dataDir, 'svc-dsr local --serve');
    const second = acquireDataDirLock(dataDir, 'svc-dsr start');
    await expect(second).rejects.toBeInstanceOf(DataDirInUseError);
    await expect(second).rejects.toThrow(`in use by process ${process.pid} (svc-dsr local --serve)`);
    await lock.release();
    const again = await acquireDataDirLock(dataDir, 'svc-dsr start');
    expect(JSON.parse(await readFile(join(dataDir, LOCK_FILE), 'utf8'))).toMatchObject({
      pid: process.pid,
      command: 'svc-dsr start',
    });
    await again.release();
  });

  it('lets exactly one of two racing owners in', async () => {
    const dataDir = join(workdir, 'race');
    const results = await Promise.allSettled([
      acquireDataDirLock(dataDir, 'first'),
      acquireDataDirLock(dataDir, 'second'),
    ]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    for (const result of results) if (result.status === 'fulfilled') await result.value.release();
  });

  it('takes over the lock of a process that has died', async () => {
    const dataDir = join(workdir, 'stale');
    await mkdir(dataDir, { recursive: true });
    const stale = {
      pid: await deadPid(),
      command: 'svc-dsr local --serve',
      started_at: '2026-01-01T00:00:00Z',
    };
    await writeFile(join(dataDir, LOCK_FILE), JSON.stringify(stale));
    const lock = await acquireDataDirLock(dataDir, 'svc-dsr start');
    expect(lock.owner.pid).toBe(process.pid);
    await lock.release();
    expect(await readdir(dataDir)).toEqual([]);
  });

  it('takes over the lock of a process killed and not yet reaped by its parent (a zombie)', async () => {
    // Prepare: `sleep 1` exits a second later, when its parent has become `sleep 30` by exec, which
    // never reaps it (bash would, had the child ended before the exec).
    const parent = spawn('bash', ['-c', 'sleep 1 & echo $!; exec sleep 30'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const zombie = await new Promise<number>((resolve) =>
      parent.stdout.once('data', (chunk) => resolve(Number(String(chunk).trim()))),
    );
    try {
      const zombieState = async () => (await readFile(`/proc/${zombie}/stat`, 'utf8')).split(') ')[1]?.[0];
      for (let tries = 0; tries < 100 && (await zombieState()) !== 'Z'; tries += 1)
        await new Promise((r) => setTimeout(r, 50));
      expect(await zombieState()).toBe('Z');
      expect(() => process.kill(zombie, 0)).not.toThrow();
      const dataDir = join(workdir, 'zombie');
      await mkdir(dataDir, { recursive: true });
      await writeFile(
        join(dataDir, LOCK_FILE),
        JSON.stringify({ pid: zombie, command: 'svc-dsr local --serve', started_at: '2026-01-01T00:00:00Z' }),
      );

      // Act
      const lock = await acquireDataDirLock(dataDir, 'svc-dsr start');

      // Assess
      expect(lock.owner.pid).toBe(process.pid);
      await lock.release();
    } finally {
      parent.kill('SIGKILL');
    }
  });

  it('empties a dir it holds but refuses while a dir inside it has a live owner', async () => {
    const dataDir = join(workdir, 'parent');
    const lock = await acquireDataDirLock(dataDir, 'svc-dsr start');
    const inner = await acquireDataDirLock(join(dataDir, 'served'), 'svc-dsr local --serve');
    await writeFile(join(dataDir, 'served', 'platform.json'), '{}');
    await expect(emptyDataDir(lock)).rejects.toThrow(/served is in use by process/);
    expect(await readdir(join(dataDir, 'served'))).toContain('platform.json');
    await inner.release();
    await emptyDataDir(lock);
    expect(await readdir(dataDir)).toEqual([LOCK_FILE]);
    await lock.release();
  });
});

describe('a held data dir lock whose file is deleted', () => {
  it('is put back as soon as the file goes, so a second owner is still refused', async () => {
    // Prepare
    const dataDir = join(workdir, 'deleted');
    let restored!: () => void;
    const wasRestored = new Promise<void>((resolve) => {
      restored = resolve;
    });
    const lock = await acquireDataDirLock(dataDir, 'svc-dsr local --serve', {
      onRestore: (outcome) => outcome === 'restored' && restored(),
    });
    const path = join(dataDir, LOCK_FILE);
    const text = await readFile(path, 'utf8');

    // Act
    await unlink(path);
    await wasRestored;

    // Assess
    expect(await readFile(path, 'utf8')).toBe(text);
    await expect(acquireDataDirLock(dataDir, 'svc-dsr start')).rejects.toBeInstanceOf(DataDirInUseError);
    await lock.release();
    expect(await readdir(dataDir)).toEqual([]);
  });

  it('puts the file back on restore, and leaves a lock another live owner took meanwhile', async () => {
    // Prepare
    const dataDir = join(workdir, 'restore');
    const lock = await acquireDataDirLock(dataDir, 'svc-dsr local --serve', { onRestore: () => {} });
    const path = join(dataDir, LOCK_FILE);
    const text = await readFile(path, 'utf8');

    // Act and assess: held, then deleted and put back
    expect(await lock.restore()).toBe('held');
    await unlink(path);
    expect(['held', 'restored']).toContain(await lock.restore());
    expect(await readFile(path, 'utf8')).toBe(text);

    // A live process's lock in its place is left as it is
    const other = JSON.stringify({ pid: process.ppid, command: 'svc-dsr start', started_at: 'x' });
    await writeFile(path, other);
    expect(await lock.restore()).toBe('lost');
    expect(await readFile(path, 'utf8')).toBe(other);
    await lock.release();
    expect(await readFile(path, 'utf8')).toBe(other);
    await unlink(path);
  });
});
