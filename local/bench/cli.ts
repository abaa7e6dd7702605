/**
 * The operator CLI's start-up cost (BENCH_ONLY=cli): CPU seconds (user + system, of the process
 * and every process it waited for) of `svc-dsr --version` and `--help` beside a bare `node -e 0`,
 * and of `svc-dsr status ID` and `svc-dsr list` against a served local mode beside the AWS CLI's
 * `aws dynamodb get-item` of the same item on the same endpoint. The commands take turns,
 * BENCH_CLI_ROUNDS times (default 15); the table shows the median and the mean of each, and each
 * median's ratio to its baseline's median from the same run. Targets: at most 2x for --version and
 * --help, at most 0.5x for status and list.
 *
 * Each process is started and reaped by a small Python program (`os.wait4`, which reports CPU to
 * the microsecond; GNU time prints hundredths, too coarse beside 0.05 s). The AWS CLI is the
 * image's: /usr/local/bin/aws, else `aws` on the PATH (a pyenv shim is resolved to the program it
 * runs, so the shim's own shell is not counted), else Debian's /usr/bin/aws. svc-dsr runs compiled
 * (dist/cli/), built first if it is not current.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { buildCli } from '../../bin/build-cli.mjs';
import { localEndpointsSchema } from '../../bin/cli/local-endpoints.ts';
import { compiledCli } from '../../bin/compiled-cli.mjs';
import { CLI, killServer, serveLocal } from '../../test/helpers/cli.ts';

/** Starts `argv`, waits for it and writes its exit code, CPU and wall seconds as JSON on fd 3. */
const REAPER = `
import json, os, sys, time
start = time.monotonic()
pid = os.posix_spawnp(sys.argv[1], sys.argv[1:], dict(os.environ))
_, status, usage = os.wait4(pid, 0)
os.write(3, json.dumps({"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime, "wall": time.monotonic() - start}).encode())
`;

const measuredSchema = z.object({ code: z.number(), cpu: z.number(), wall: z.number() });
type Measured = z.infer<typeof measuredSchema>;

/** One run of `argv`: its CPU seconds. A run that fails stops the bench with its output. */
function measure(argv: readonly string[], env: NodeJS.ProcessEnv): Measured {
  const run = spawnSync('python3', ['-c', REAPER, ...argv], {
    env,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    maxBuffer: 16 * 1024 * 1024,
  });
  const report = run.output[3]?.toString() ?? '';
  if (run.status !== 0 || report === '') {
    throw new Error(`could not measure ${argv.join(' ')}: ${run.stderr?.toString() ?? run.error?.message}`);
  }
  const measured = measuredSchema.parse(JSON.parse(report));
  if (measured.code !== 0) {
    throw new Error(`${argv.join(' ')} exited ${measured.code}: ${run.stderr.toString().slice(0, 2000)}`);
  }
  return measured;
}

/** The AWS CLI as the image ships it (see the header). */
function awsCli(): string {
  if (existsSync('/usr/local/bin/aws')) return '/usr/local/bin/aws';
  const onPath = (process.env.PATH ?? '')
    .split(':')
    .map((folder) => join(folder, 'aws'))
    .find((candidate) => existsSync(candidate));
  if (onPath?.includes('/.pyenv/shims/'))
    return execFileSync('pyenv', ['which', 'aws'], { encoding: 'utf8' }).trim();
  if (onPath !== undefined) return onPath;
  if (existsSync('/usr/bin/aws')) return '/usr/bin/aws';
  throw new Error("no AWS CLI: install Debian's awscli (apt-get install -y awscli)");
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] ?? 0)
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;

/** One request, run to its end by the served local mode, for status and get-item to read. */
function seedRequest(requestId: string): string {
  const now = Date.now();
  return JSON.stringify({
    request_id: requestId,
    type: 'access',
    regulation: 'gdpr',
    primary_key: 'u-alice',
    received_at: new Date(now - 3_600_000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date(now - 60_000).toISOString(),
    },
  });
}

/** The CLI bench: prints the table; a ratio over its target sets exit code 1. */
export async function cliBench(): Promise<void> {
  const rounds = Number(process.env.BENCH_CLI_ROUNDS ?? 15);
  const root = new URL('../..', import.meta.url);
  if (!compiledCli(root).current && (await buildCli(root)) === undefined) {
    throw new Error('the CLI bench measures the compiled CLI: install esbuild (npm ci) to build it');
  }
  const workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-cli-'));
  const dataDir = join(workdir, 'data');
  const requestId = randomUUID();
  await writeFile(join(workdir, 'request.jsonl'), `${seedRequest(requestId)}\n`);
  await writeFile(join(workdir, 'aws-config'), '[default]\nregion = us-east-1\n');
  await writeFile(
    join(workdir, 'aws-credentials'),
    '[default]\naws_access_key_id = local\naws_secret_access_key = local\n',
  );
  const server = await serveLocal(dataDir, ['--requests', join(workdir, 'request.jsonl')]);
  try {
    const endpoints = localEndpointsSchema.parse(
      JSON.parse(await readFile(join(dataDir, 'endpoints.json'), 'utf8')),
    );
    const aws = awsCli();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      AWS_CONFIG_FILE: join(workdir, 'aws-config'),
      AWS_SHARED_CREDENTIALS_FILE: join(workdir, 'aws-credentials'),
      AWS_PAGER: '',
      AWS_EC2_METADATA_DISABLED: 'true',
    };
    const node = process.execPath;
    const commands: { name: string; argv: string[]; baseline?: string; target?: number }[] = [
      { name: 'node -e 0', argv: [node, '-e', '0'] },
      { name: 'svc-dsr --version', argv: [node, CLI, '--version'], baseline: 'node -e 0', target: 2 },
      { name: 'svc-dsr --help', argv: [node, CLI, '--help'], baseline: 'node -e 0', target: 2 },
      {
        name: 'aws dynamodb get-item',
        argv: [
          aws,
          '--endpoint-url',
          endpoints.endpoints.dynamodb,
          '--output',
          'json',
          'dynamodb',
          'get-item',
          '--table-name',
          endpoints.outputs.LedgerTableName,
          '--key',
          JSON.stringify({ request_id: { S: requestId } }),
        ],
      },
      {
        name: 'svc-dsr status ID',
        argv: [node, CLI, 'status', requestId, '--data-dir', dataDir],
        baseline: 'aws dynamodb get-item',
        target: 0.5,
      },
      {
        name: 'svc-dsr list',
        argv: [node, CLI, 'list', '--data-dir', dataDir],
        baseline: 'aws dynamodb get-item',
        target: 0.5,
      },
    ];
    const cpu = new Map(commands.map((command) => [command.name, [] as number[]]));
    // One warm-up run each (disk cache, the local mode's first answers), not counted.
    for (const command of commands) measure(command.argv, env);
    for (let round = 0; round < rounds; round += 1) {
      // Interleaved, and in another order each round, so a busy moment falls on every command alike.
      const order = commands.map((_, index) => commands[(index + round) % commands.length]);
      for (const command of order) if (command) cpu.get(command.name)?.push(measure(command.argv, env).cpu);
    }
    const rows = commands.map((command) => {
      const samples = cpu.get(command.name) ?? [];
      const base = command.baseline === undefined ? undefined : median(cpu.get(command.baseline) ?? []);
      const ratio = base === undefined ? undefined : median(samples) / base;
      const verdict =
        ratio === undefined || command.target === undefined
          ? ''
          : `${ratio <= command.target ? 'met' : 'NOT MET'} (at most ${command.target}x)`;
      if (verdict.startsWith('NOT')) process.exitCode = 1;
      return [
        command.name,
        median(samples).toFixed(3),
        mean(samples).toFixed(3),
        command.baseline ?? '',
        ratio === undefined ? '' : `${ratio.toFixed(2)}x`,
        verdict,
      ];
    });
    printTable(
      `Operator CLI, CPU seconds per run (user + system), ${rounds} interleaved rounds; svc-dsr compiled (dist/cli/), local mode served; AWS CLI ${aws}`,
      ['command', 'median CPU s', 'mean CPU s', 'baseline', 'median / baseline', 'target'],
      rows,
    );
  } finally {
    await killServer(server, 'SIGTERM');
    await rm(workdir, { recursive: true, force: true });
  }
}

function printTable(title: string, header: string[], rows: string[][]) {
  const widths = header.map((cell, index) =>
    Math.max(cell.length, ...rows.map((row) => (row[index] ?? '').length)),
  );
  const line = (cells: string[]) => cells.map((cell, index) => cell.padEnd(widths[index] ?? 0)).join(' | ');
  console.log(`\n${title}\n${line(header)}\n${widths.map((width) => '-'.repeat(width)).join('-|-')}`);
  for (const row of rows) console.log(line(row));
  console.log('');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await cliBench();
