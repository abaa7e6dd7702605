import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireDataDirLock, emptyDataDir, LOCK_FILE } from '#local/data-dir-lock';
import { DataDirInUseError } from '#shared/errors';

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
