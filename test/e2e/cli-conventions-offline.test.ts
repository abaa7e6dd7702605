/**
 * The conventions people expect of a command-line tool, run as processes with no local mode:
 * --version, completion, standard input and JSON files, environment variables, -o, the region from
 * the outputs file, a busy port.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, runCli, runProcess } from '../helpers/cli.ts';
import { type StubServer, startStubServer } from '../helpers/stub-server.ts';
import { ledgerRecord, NAMES, REQUEST_ID, storedItem } from '../unit/cli/helpers.ts';

let workdir: string;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-conventions-offline-'));
});

afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

function request(primaryKey: string) {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
  };
}

/** Runs the CLI with `input` on its standard input. */
function runWithInput(args: readonly string[], input: string) {
  return runProcess(process.execPath, [CLI, ...args], { input });
}

/** Runs a bash script and answers its exit code and output. */
function bash(script: string) {
  return runProcess('bash', ['-c', script]);
}

describe('conventions', () => {
  it('says in one line, with exit 1, that its output cannot be written (a full disk)', async () => {
    for (const flag of ['--help', '--version', 'completion']) {
      const args = flag === 'completion' ? ['completion', 'bash'] : [flag];
      const result = await runProcess('bash', [
        '-c',
        '"$0" "$@" > /dev/full',
        process.execPath,
        CLI,
        ...args,
      ]);
      expect(result.stderr, flag).toBe('svc-dsr: cannot write the output: ENOSPC\n');
      expect(result.code, flag).toBe(1);
    }
  });

  it('prints its version with --version', async () => {
    const { version } = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8'));
    const result = await runCli(['--version']);
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(`${version}\n`);
  });

  it('prints bash and zsh completion scripts generated from its commands', async () => {
    const script = join(workdir, 'completion.bash');
    const bashScript = await runCli(['completion', 'bash']);
    expect(bashScript.code).toBe(0);
    await writeFile(script, bashScript.stdout);
    const completed = await bash(
      `source ${script}; COMP_WORDS=(svc-dsr pa); COMP_CWORD=1; _svc_dsr; echo "\${COMPREPLY[@]}"; ` +
        `COMP_WORDS=(svc-dsr list --ov); COMP_CWORD=2; _svc_dsr; echo "\${COMPREPLY[@]}"`,
    );
    expect(completed.code).toBe(0);
    expect(completed.stdout).toBe('package\n--overdue\n');
    const zsh = await runCli(['completion', 'zsh']);
    expect(zsh.code).toBe(0);
    expect(zsh.stdout.startsWith('#compdef svc-dsr\n')).toBe(true);
    for (const command of ['submit', 'status', 'list', 'package', 'report', 'completion']) {
      expect(zsh.stdout).toContain(`    '${command}:`);
    }
    const fish = await runCli(['completion', 'fish']);
    expect(fish.code).toBe(2);
    expect(fish.stderr).toContain('<shell>: must be bash or zsh');
  });

  it('reads requests from standard input with --file -', async () => {
    const lines = `${JSON.stringify(request('u-1'))}\n${JSON.stringify(request('u-2'))}\n`;
    const result = await runWithInput(['submit', '--file', '-', '--dry-run'], lines);
    // The one note a clean dry run prints: what only intake can judge.
    expect(result.stderr).toMatch(
      /^dry run: verification\.method and the age of verified_at are checked at intake[^\n]*\n$/,
    );
    expect(result.code).toBe(0);
    expect(result.stdout).toBe('dry run: 2 valid, 0 bad lines of 2; nothing was sent\n');
    const csv = await runWithInput(
      ['submit', '--file', '-', '--dry-run'],
      'request_id,type,regulation,primary_key,received_at,verification.method,verified_by,verified_at\n' +
        `${randomUUID()},access,gdpr,u-3,2026-11-20T09:00:00Z,email_link,privacy-team,2026-11-20T09:05:00Z\n`,
    );
    expect(csv.code).toBe(0);
    expect(csv.stdout).toBe('dry run: 1 valid, 0 bad lines of 1; nothing was sent\n');
  });

  it('accepts a JSON file of one request or an array, and refuses JSON given as JSONL with a hint', async () => {
    const array = join(workdir, 'requests.json');
    await writeFile(array, JSON.stringify([request('u-1'), request('u-2'), { type: 'x' }], null, 2));
    const many = await runCli(['submit', '--file', array, '--dry-run', '--json']);
    expect(many.code).toBe(2);
    expect(JSON.parse(many.stdout)).toMatchObject({ source: 'json', lines: 3, valid: 2 });
    const single = join(workdir, 'one.json');
    await writeFile(single, JSON.stringify(request('u-1'), null, 2));
    const one = await runCli(['submit', '--file', single, '--dry-run']);
    expect(one.code).toBe(0);
    expect(one.stdout).toBe('dry run: 1 valid, 0 bad lines of 1; nothing was sent\n');
    const misnamed = join(workdir, 'pretty.jsonl');
    await writeFile(misnamed, JSON.stringify(request('u-1'), null, 2));
    const refused = await runCli(['submit', '--file', misnamed, '--dry-run']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`--file: ${misnamed} is one JSON document, not JSONL`);
    expect(refused.stderr).toContain('name it .json or pass --format json');
  });

  it('takes the data dir and target from SVC_DSR_DATA_DIR and SVC_DSR_TARGET; a flag wins', async () => {
    const dataDir = join(workdir, 'from-env');
    const fromEnv = await runCli(['status', REQUEST_ID], { env: { SVC_DSR_DATA_DIR: dataDir } });
    expect(fromEnv.code).toBe(1);
    expect(fromEnv.stderr).toContain(`no local mode is serving from ${dataDir}`);
    expect(fromEnv.stderr).toContain(`npx svc-dsr local --serve --data-dir ${dataDir}`);
    const flag = join(workdir, 'from-flag');
    const flagWins = await runCli(['status', REQUEST_ID, '--data-dir', flag], {
      env: { SVC_DSR_DATA_DIR: dataDir },
    });
    expect(flagWins.stderr).toContain(`no local mode is serving from ${flag}`);
    const aws = await runCli(['status', REQUEST_ID], { env: { SVC_DSR_TARGET: 'aws' } });
    expect(aws.code).toBe(2);
    expect(aws.stderr).toContain('--target aws needs the stack names');
  });

  it('takes defaults from ./.svc-dsr.json or SVC_DSR_CLI_CONFIG, below the environment and the flags', async () => {
    // Prepare: a folder whose defaults file names a data dir relative to itself.
    const folder = await mkdtemp(join(workdir, 'defaults-'));
    await writeFile(join(folder, '.svc-dsr.json'), JSON.stringify({ data_dir: 'ledger-here' }));
    const run = (args: string[], env: Record<string, string> = {}) =>
      runProcess(process.execPath, [CLI, ...args], { cwd: folder, env: { SVC_DSR_CLI_CONFIG: '', ...env } });

    // Act and assess: the file's data dir, then the environment's, then the flag's.
    const fromFile = await run(['status', REQUEST_ID]);
    expect(fromFile.code).toBe(1);
    expect(fromFile.stderr).toContain(`no local mode is serving from ${join(folder, 'ledger-here')}`);
    const fromEnv = await run(['status', REQUEST_ID], { SVC_DSR_DATA_DIR: join(folder, 'env') });
    expect(fromEnv.stderr).toContain(`no local mode is serving from ${join(folder, 'env')}`);
    const fromFlag = await run(['status', REQUEST_ID, '--data-dir', join(folder, 'flag')]);
    expect(fromFlag.stderr).toContain(`no local mode is serving from ${join(folder, 'flag')}`);

    // A file named by SVC_DSR_CLI_CONFIG wins over ./.svc-dsr.json, and is checked strictly.
    const named = join(folder, 'aws.json');
    await writeFile(named, JSON.stringify({ target: 'aws' }));
    const aws = await run(['status', REQUEST_ID], { SVC_DSR_CLI_CONFIG: named });
    expect(aws.code).toBe(2);
    expect(aws.stderr).toContain('--target aws needs the stack names');
    await writeFile(named, JSON.stringify({ target: 'aws', datadir: 'x' }));
    const unknown = await run(['status', REQUEST_ID], { SVC_DSR_CLI_CONFIG: named });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`the defaults file ${named}: unknown key(s) datadir`);
    await writeFile(named, '{ not json');
    const broken = await run(['status', REQUEST_ID], { SVC_DSR_CLI_CONFIG: named });
    expect(broken.code).toBe(2);
    expect(broken.stderr).toContain(`the defaults file ${named} cannot be read as JSON`);
  });

  it('refuses an -o format the command does not print, with exit 2', async () => {
    const list = await runCli(['list', '-o', 'csv']);
    expect(list.code).toBe(2);
    expect(list.stderr).toContain('-o: must be table or json for list');
    const report = await runCli(['report', '-o', 'table']);
    expect(report.code).toBe(2);
    expect(report.stderr).toContain('-o: must be csv or json for report');
  });

  it('says clearly that the emulator port is busy', async () => {
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const address = busy.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    try {
      const result = await runCli(['emulator', '--port', String(port)]);
      expect(result.code).toBe(1);
      expect(result.stderr).toBe(
        `svc-dsr: --port: 127.0.0.1:${port} is already in use by another program; pick another --port, or --port 0 for any free one\n`,
      );
    } finally {
      await new Promise((resolve) => busy.close(resolve));
    }
  });
});

describe('a deployed stack named by SVC_DSR_STACK_OUTPUTS', () => {
  let stub: StubServer;
  let outputs: string;
  const env = () => ({
    SVC_DSR_STACK_OUTPUTS: outputs,
    AWS_ENDPOINT_URL: stub.url,
    AWS_REGION: '',
    AWS_DEFAULT_REGION: '',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    AWS_MAX_ATTEMPTS: '1',
  });

  beforeAll(async () => {
    stub = await startStubServer();
    stub.handle((seen, response) => {
      if (seen.headers['x-amz-target'] !== 'DynamoDB_20120810.GetItem') {
        response.writeHead(400).end();
        return;
      }
      response.writeHead(200, { 'content-type': 'application/x-amz-json-1.0' });
      response.end(JSON.stringify({ Item: storedItem(ledgerRecord()) }));
    });
    outputs = join(workdir, 'outputs.json');
    await writeFile(outputs, JSON.stringify({ SvcDsrStack: { ...NAMES, Region: 'eu-south-2' } }));
  });

  afterAll(async () => {
    await stub.close();
  });

  it('reads the ledger in the region of the outputs file, and -o json is --json', async () => {
    const result = await runCli(['status', REQUEST_ID, '-o', 'json'], { env: env() });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ request_id: REQUEST_ID, status: 'running' });
    const signed = stub.requests.at(-1)?.headers.authorization ?? '';
    expect(signed).toContain('/eu-south-2/dynamodb/aws4_request');
  });
});
