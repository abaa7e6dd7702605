import { once } from 'node:events';
import { copyFile, mkdir, mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { compiledCli } from '../../../bin/compiled-cli.mjs';
import { CLI, runCli, runProcess } from '../../helpers/cli.ts';

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
    expect(compiled).toEqual({
      current: true,
      entry: new URL('dist/cli/svc-dsr.js', rootUrl()).href,
      help: new URL('dist/cli/help.txt', rootUrl()),
    });
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

  it('gives the Node modules it imports (taken with getBuiltinModule) no chunk of their own', async () => {
    // Arrange
    const meta = metafileSchema.parse(JSON.parse(await readFile('dist/cli/meta.json', 'utf8')));

    // Act
    const wrappersAlone = Object.entries(meta.outputs)
      .filter(([path, output]) => path.endsWith('.js') && output.entryPoint === undefined)
      .filter(([, output]) => {
        const inputs = Object.keys(output.inputs);
        return inputs.length > 0 && inputs.every((input) => input.startsWith('node-builtin:'));
      })
      .map(([path]) => path);

    // Assert
    expect(wrappersAlone).toEqual([]);
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

describe('what the compiled CLI loads of Node', () => {
  /** Runs the CLI and answers its output and the Node modules it loaded (process.moduleLoadList). */
  async function runListingModules(args: string[]) {
    const atExit =
      'data:text/javascript,process.on("exit",()=>process.stderr.write("\\nMODULES "+JSON.stringify(process.moduleLoadList)))';
    const { code, stdout, stderr } = await runProcess(process.execPath, ['--import', atExit, CLI, ...args]);
    const [before, modules] = stderr.split('\nMODULES ');
    return {
      code,
      stdout,
      stderr: before,
      modules: z.array(z.string()).parse(JSON.parse(modules ?? '[]')),
    };
  }

  it('answers --help without loading child_process or fs/promises', async () => {
    // Act
    const { code, stdout, modules } = await runListingModules(['--help']);

    // Assert
    expect(code).toBe(0);
    expect(stdout).toContain('Usage: svc-dsr');
    expect(modules).toContain('NativeModule fs');
    expect(modules.filter((module) => /child_process|fs\/promises/.test(module))).toEqual([]);
  });

  it('reads the ledger over node:http without loading fetch (undici)', async () => {
    // Arrange: a DynamoDB endpoint that knows no request, behind a local mode's endpoints file
    const dataDir = await mkdtemp(join(tmpdir(), 'svc-dsr-compiled-cli-'));
    const server = createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        response.writeHead(200, { 'content-type': 'application/x-amz-json-1.0' });
        response.end('{}');
      });
    }).listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    await writeFile(
      join(dataDir, 'endpoints.json'),
      JSON.stringify({
        region: 'us-east-1',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
        endpoints: { sqs: url, s3: url, dynamodb: url, sfn: url },
        outputs: {
          IntakeQueueUrl: `${url}/000000000000/svc-dsr-intake`,
          QuarantineQueueUrl: `${url}/000000000000/svc-dsr-quarantine`,
          LedgerTableName: 'svc-dsr-ledger',
          ArchiveBucketName: 'svc-dsr-archive',
          AuditBucketName: 'svc-dsr-audit',
          StateMachineArn: 'arn:aws:states:us-east-1:000000000000:stateMachine:svc-dsr-local',
          TimeZone: 'UTC',
        },
        pid: process.pid,
        platform: { url, spot_id: 'sp_demo' },
      }),
    );

    try {
      // Act
      const { code, stderr, modules } = await runListingModules([
        'status',
        '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f',
        '--data-dir',
        dataDir,
      ]);

      // Assert
      expect({ code, stderr }).toEqual({
        code: 1,
        stderr: expect.stringContaining('no request 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f in the ledger'),
      });
      expect(modules).toContain('NativeModule http');
      expect(modules.filter((module) => module.includes('undici'))).toEqual([]);
    } finally {
      server.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('the launcher', () => {
  let root: string | undefined;

  afterEach(async () => {
    if (root !== undefined) await rm(root, { recursive: true, force: true });
    root = undefined;
  });

  /**
   * The launcher alone beside a package.json (version 9.8.7) in a folder of its own, and `files`
   * (path -> text) beside it; answers how to run it.
   */
  async function launcherIn(
    files: Record<string, string> = {},
  ): Promise<(flag: string) => ReturnType<typeof runProcess>> {
    const at = await mkdtemp(join(tmpdir(), 'svc-dsr-launcher-'));
    root = at;
    await mkdir(join(at, 'bin'));
    await copyFile(CLI, join(at, 'bin/svc-dsr.mjs'));
    await copyFile(join(CLI, '../compiled-cli.mjs'), join(at, 'bin/compiled-cli.mjs'));
    await writeFile(join(at, 'package.json'), JSON.stringify({ name: 'svc-dsr', version: '9.8.7' }));
    for (const [path, text] of Object.entries(files)) {
      await mkdir(join(at, path, '..'), { recursive: true });
      await writeFile(join(at, path), text);
    }
    return (flag) => runProcess(process.execPath, [join(at, 'bin/svc-dsr.mjs'), flag]);
  }

  /** A build that counts as current: it started after package.json, its only input, was written. */
  const CURRENT_BUILD = {
    'dist/cli/inputs.json': JSON.stringify({ started_ms: Date.now() + 60_000, inputs: ['package.json'] }),
  };

  it('answers --version and -V from package.json with no compiled CLI and nothing to run the sources', async () => {
    // Arrange: the launcher alone beside a package.json: no dist/cli/, no sources, no tsx
    const launcher = await launcherIn();

    // Act
    const results = await Promise.all(['--version', '-V'].map(launcher));

    // Assert
    expect(results).toEqual([
      { code: 0, stdout: '9.8.7\n', stderr: '' },
      { code: 0, stdout: '9.8.7\n', stderr: '' },
    ]);
  });

  it('answers a bare --help and -h from the copy the build wrote, without loading the CLI', async () => {
    // Prepare: a current build whose entry is missing, so only the copy can answer
    const launcher = await launcherIn({ ...CURRENT_BUILD, 'dist/cli/help.txt': 'Usage: the copy\n' });

    // Act
    const results = await Promise.all(['--help', '-h'].map(launcher));

    // Assess
    expect(results).toEqual([
      { code: 0, stdout: 'Usage: the copy\n', stderr: '' },
      { code: 0, stdout: 'Usage: the copy\n', stderr: '' },
    ]);
  });

  it('answers --help through the compiled CLI when the build wrote no copy of it', async () => {
    // Prepare: a current build from before the copy: an entry that prints a marker, no help.txt
    const launcher = await launcherIn({
      ...CURRENT_BUILD,
      'dist/cli/svc-dsr.js': "process.stdout.write('from the entry\\n');\n",
    });

    // Act
    const result = await launcher('--help');

    // Assess
    expect(result).toEqual({ code: 0, stdout: 'from the entry\n', stderr: '' });
  });

  it("writes as its copy of the help exactly what the compiled CLI's commander prints", async () => {
    // Act
    const [launcher, compiled] = await Promise.all([
      runProcess(process.execPath, [CLI, '--help']),
      runProcess(process.execPath, [join(CLI, '../../dist/cli/svc-dsr.js'), '--help']),
    ]);

    // Assess
    expect(compiled.code).toBe(0);
    expect(compiled.stdout).toMatch(/^Usage: svc-dsr/);
    expect(launcher).toEqual(compiled);
  });
});
