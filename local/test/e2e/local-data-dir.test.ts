import { mkdtemp, readdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

let workdir: string;
let dataDir: string;
let server: ServingLocal | undefined;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-data-dir-'));
  dataDir = join(workdir, 'data');
  server = await serveLocal(dataDir);
}, 120_000);

afterAll(async () => {
  if (server) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

const ownerSchema = z.object({ pid: z.number(), command: z.string(), started_at: z.string() });

describe('a data dir has one owner at a time', () => {
  it('refuses a second local mode, npm start and a local run with exit 2, naming the serving process', async () => {
    const pid = server?.child.pid;
    const requests = join(workdir, 'one.jsonl');
    await writeFile(requests, '{}\n');
    const before = (await readdir(dataDir)).sort();

    for (const args of [
      ['local', '--serve', '--data-dir', dataDir],
      ['start', '--data-dir', dataDir],
      ['local', '--requests', requests, '--data-dir', dataDir],
    ]) {
      const refused = await runCli(args);
      expect(refused.code, `${args.join(' ')}: ${refused.stderr}`).toBe(2);
      expect(refused.stderr).toContain(
        `is in use by process ${pid} (svc-dsr local --serve --data-dir ${dataDir})`,
      );
      expect(refused.stderr).not.toContain('Database is closed');
      expect(refused.stderr).not.toMatch(/\n\s+at /);
    }
    // npm start did not empty the served dir, and the server still answers the read commands.
    expect((await readdir(dataDir)).sort()).toEqual(before);
    const listed = await runCli(['list', '--json', '--target', 'local', '--data-dir', dataDir]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(server?.child.exitCode).toBeNull();
    const owner = ownerSchema.parse(JSON.parse(await readFile(join(dataDir, 'owner.lock'), 'utf8')));
    expect(owner).toMatchObject({ pid, command: `svc-dsr local --serve --data-dir ${dataDir}` });
  }, 180_000);

  it('puts back its lock file when it is deleted, and goes on refusing a second local mode', async () => {
    const path = join(dataDir, 'owner.lock');
    const held = await readFile(path, 'utf8');

    await unlink(path);
    let restored: string | undefined;
    for (let look = 0; look < 100 && restored === undefined; look += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      restored = await readFile(path, 'utf8').catch(() => undefined);
    }

    expect(restored).toBe(held);
    const refused = await runCli(['local', '--serve', '--data-dir', dataDir]);
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr).toContain(`is in use by process ${server?.child.pid}`);
  }, 120_000);

  it('takes over the lock of a local mode that was killed', async () => {
    if (server === undefined) throw new Error('no server');
    await killServer(server, 'SIGKILL');
    server = await serveLocal(dataDir);
    const owner = ownerSchema.parse(JSON.parse(await readFile(join(dataDir, 'owner.lock'), 'utf8')));
    expect(owner.pid).toBe(server.child.pid);
    const listed = await runCli(['list', '--json', '--target', 'local', '--data-dir', dataDir]);
    expect(listed.code, listed.stderr).toBe(0);
  }, 180_000);
});
