import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, runProcess } from '../../helpers/cli.ts';

/** A Node that says it is 20: what a machine's older default Node looks like to the launcher. */
const AS_NODE_20 = [
  '--import',
  `data:text/javascript,${encodeURIComponent("Object.defineProperty(process.versions, 'node', { value: '20.20.2' }); Object.defineProperty(process, 'version', { value: 'v20.20.2' });")}`,
];

describe('the launcher on an older Node', () => {
  let root: string | undefined;
  afterEach(async () => {
    if (root !== undefined) await rm(root, { recursive: true, force: true });
  });

  it('runs the command again on the Node 24 that npm ci installed', async () => {
    // Act
    const run = await runProcess(process.execPath, [...AS_NODE_20, CLI, '--version']);

    // Assert
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it('passes the exit code of the command through', async () => {
    // Act
    const run = await runProcess(process.execPath, [...AS_NODE_20, CLI, 'no-such-command']);

    // Assert
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("unknown command 'no-such-command'");
  });

  it('exits 2 saying to run npm ci when no Node 24 was installed beside it', async () => {
    // Arrange: the launcher alone, in a folder with no node_modules.
    root = await mkdtemp(join(tmpdir(), 'svc-dsr-launcher-'));
    await mkdir(join(root, 'bin'));
    for (const file of ['svc-dsr.mjs', 'compiled-cli.mjs']) {
      await copyFile(
        fileURLToPath(new URL(`../../../bin/${file}`, import.meta.url)),
        join(root, 'bin', file),
      );
    }

    // Act
    const run = await runProcess(process.execPath, [
      ...AS_NODE_20,
      join(root, 'bin/svc-dsr.mjs'),
      '--version',
    ]);

    // Assert
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('svc-dsr needs Node.js 24 or newer, and this is v20.20.2');
    expect(run.stderr).toContain('run `npm ci` in the clone');
  });
});
