import { mkdir, mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { compiledCli } from '../../../bin/compiled-cli.mjs';
import { runCli } from '../../helpers/cli.ts';

describe('compiledCli', () => {
  let root: string;
  const rootUrl = () => pathToFileURL(`${root}/`);

  /** A package root whose dist/cli/ was built at `startedMs` from `inputs`. */
  async function built(startedMs: number, inputs: string[]): Promise<void> {
    await mkdir(join(root, 'dist/cli'), { recursive: true });
    await writeFile(join(root, 'dist/cli/inputs.json'), JSON.stringify({ started_ms: startedMs, inputs }));
  }

  async function source(path: string, changedMs: number): Promise<void> {
    await mkdir(join(root, path, '..'), { recursive: true });
    await writeFile(join(root, path), '');
    await utimes(join(root, path), changedMs / 1000, changedMs / 1000);
  }

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'svc-dsr-compiled-cli-'));
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('answers not compiled when dist/cli/ is missing', () => {
    // Act
    const compiled = compiledCli(rootUrl());

    // Assert
    expect(compiled).toEqual({ current: false, reason: 'the CLI is not compiled (no dist/cli/)' });
  });

  it('answers the compiled entry when no source changed after the build started', async () => {
    // Arrange
    const buildMs = Date.parse('2026-11-27T12:00:00Z');
    await source('bin/svc-dsr.ts', buildMs - 60_000);
    await source('package.json', buildMs - 60_000);
    await built(buildMs, ['bin/svc-dsr.ts', 'package.json']);

    // Act
    const compiled = compiledCli(rootUrl());

    // Assert
    expect(compiled).toEqual({ current: true, entry: new URL('dist/cli/svc-dsr.js', rootUrl()).href });
  });

  it('answers stale, naming the source, when one changed after the build started', async () => {
    // Arrange
    const buildMs = Date.parse('2026-11-27T12:00:00Z');
    await source('bin/svc-dsr.ts', buildMs - 60_000);
    await source('bin/cli/commands/status.ts', buildMs + 1_000);
    await built(buildMs, ['bin/svc-dsr.ts', 'bin/cli/commands/status.ts']);

    // Act
    const compiled = compiledCli(rootUrl());

    // Assert
    expect(compiled).toEqual({
      current: false,
      reason: 'bin/cli/commands/status.ts changed since the CLI was compiled',
    });
  });

  it('answers stale when a source it was built from is gone', async () => {
    // Arrange
    const buildMs = Date.parse('2026-11-27T12:00:00Z');
    await built(buildMs, ['bin/cli/gone.ts']);

    // Act
    const compiled = compiledCli(rootUrl());

    // Assert
    expect(compiled).toEqual({ current: false, reason: 'bin/cli/gone.ts, compiled into dist/cli/, is gone' });
  });
});

const metafileSchema = z.object({
  inputs: z.record(z.string(), z.unknown()),
  outputs: z.record(
    z.string(),
    z.object({
      entryPoint: z.string().optional(),
      imports: z.array(z.object({ path: z.string(), kind: z.string() })),
      inputs: z.record(z.string(), z.unknown()),
    }),
  ),
});

describe('the compiled CLI (dist/cli/, built before the tests)', () => {
  /** The modules an output loads at once: its own and those of the chunks it imports statically. */
  async function loadedWith(entryPoint: string | undefined): Promise<string[]> {
    const meta = metafileSchema.parse(JSON.parse(await readFile('dist/cli/meta.json', 'utf8')));
    const start = Object.entries(meta.outputs).find(([path, output]) =>
      entryPoint === undefined ? path.endsWith('/svc-dsr.js') : output.entryPoint === entryPoint,
    )?.[0];
    if (start === undefined) throw new Error(`no output for ${entryPoint ?? 'the entry'}`);
    const seen = new Set<string>();
    const visit = (path: string) => {
      if (seen.has(path)) return;
      seen.add(path);
      for (const imported of meta.outputs[path]?.imports ?? []) {
        if (imported.kind === 'import-statement') visit(imported.path);
      }
    };
    visit(start);
    return [...seen].flatMap((path) => Object.keys(meta.outputs[path]?.inputs ?? {}));
  }

  it('loads commander and no AWS SDK, zod or command module for --version and --help', async () => {
    // Act
    const modules = await loadedWith(undefined);

    // Assert
    const packages = new Set(
      modules.flatMap((module) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(module)?.[1] ?? []),
    );
    expect([...packages]).toEqual(['commander']);
    expect(modules.filter((module) => module.startsWith('bin/cli/commands/'))).toEqual([]);
  });

  it('loads for status no SDK client but DynamoDB, and no operator function', async () => {
    // Act
    const modules = await loadedWith('bin/cli/commands/status.ts');

    // Assert
    const clients = new Set(
      modules.flatMap((module) => /node_modules\/@aws-sdk\/(client-[^/]+)/.exec(module)?.[1] ?? []),
    );
    expect([...clients]).toEqual(['client-dynamodb']);
    expect(modules.filter((module) => module.includes('operator'))).toEqual([]);
  });

  it('answers --version through the launcher from the compiled CLI, with nothing on stderr', async () => {
    // Act
    const { code, stdout, stderr } = await runCli(['--version']);

    // Assert
    const { version } = z
      .object({ version: z.string() })
      .parse(JSON.parse(await readFile('package.json', 'utf8')));
    expect({ code, stdout, stderr }).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });
});
