/**
 * `svc-dsr package` run as a process against a deployed-stack target whose operator function URL
 * (and AWS_ENDPOINT_URL) is a loopback stub: the function hands out a link to a completed
 * request's archive, and the link serves it as each test scripts (slowly, cut short).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CLI, runCli } from '../helpers/cli.ts';
import { type SeenRequest, type StubServer, startStubServer } from '../helpers/stub-server.ts';
import { NAMES, REQUEST_ID } from '../unit/cli/helpers.ts';

const ARCHIVE = Buffer.alloc(256 * 1024, 7);
const SHA256 = createHash('sha256').update(ARCHIVE).digest('hex');

let workdir: string;
let config: string;
let stub: StubServer;

const env = () => ({
  AWS_ENDPOINT_URL: stub.url,
  AWS_REGION: 'eu-west-1',
  AWS_ACCESS_KEY_ID: 'test',
  AWS_SECRET_ACCESS_KEY: 'test',
  AWS_MAX_ATTEMPTS: '1',
});
const target = () => ['--target', 'aws', '--config', config];

const OPERATOR_ARN = 'arn:aws:iam::123456789012:user/privacy-operator';
/** The operator function's URL path on the stub: the hand-out is recorded through the function. */
const OPERATOR_PATH = '/operator/';
/** Whether a request is the hand-out sent to the operator function, which writes its record. */
const isHandOut = (request: SeenRequest) =>
  request.method === 'POST' && request.url.startsWith(OPERATOR_PATH);

/** The path of the link the stub's operator function hands out; its GET is served by `body`. */
const LINK_PATH = '/archives/exports/link.zip';
const SIGNATURE = 'f'.repeat(64);

/**
 * The stub plays the operator function (it answers the hand-out with a link to itself, as the
 * function answers a presigned GET it signed) and the bucket behind that link, which answers with
 * `body`. The CLI makes no other call: it reads neither the ledger nor the archive bucket.
 */
function serve(body: (response: import('node:http').ServerResponse) => void): void {
  stub.handle((request, response) => {
    if (isHandOut(request)) {
      const command = JSON.parse(request.body) as {
        request_id: string;
        hand_out: { delivery: string; expires_in?: number };
      };
      const seconds = command.hand_out.expires_in ?? 300;
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify({
          ok: true,
          result: {
            request_id: command.request_id,
            package: 'platform_archive',
            file_name: 'attempt-1.zip',
            url: new URL(`${LINK_PATH}?X-Amz-Expires=${seconds}&X-Amz-Signature=${SIGNATURE}`, stub.url).href,
            expires_at: new Date(Date.now() + seconds * 1000).toISOString(),
            key: `exports/${REQUEST_ID}/attempt-1.zip`,
            version_id: null,
            bytes: ARCHIVE.length,
            sha256: SHA256,
            recorded: true,
          },
        }),
      );
      return;
    }
    if (request.method === 'GET' && request.url.startsWith(LINK_PATH)) {
      body(response);
      return;
    }
    response.writeHead(500).end();
  });
}

/** The files in `dir` (a `.partial` left there would hold personal data). */
async function filesIn(dir: string): Promise<string[]> {
  return (await readdir(dir)).sort();
}

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-package-out-'));
  config = join(workdir, 'config.json');
  stub = await startStubServer();
  await writeFile(config, JSON.stringify({ ...NAMES, OperatorUrl: new URL(OPERATOR_PATH, stub.url).href }));
});

afterAll(async () => {
  await stub.close();
  await rm(workdir, { recursive: true, force: true });
});

describe('svc-dsr package', () => {
  let outDir: string;
  beforeEach(async () => {
    outDir = await mkdtemp(join(workdir, 'out-'));
  });

  it('prints exactly the link on stdout and its note on stderr', async () => {
    serve((response) => response.writeHead(500).end());
    const before = stub.requests.length;
    const result = await runCli(['package', REQUEST_ID, '--raw', ...target()], { env: env() });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\S+\n$/);
    expect(new URL(result.stdout.trim()).searchParams.get('X-Amz-Expires')).toBe('3600');
    // Only the operator function was asked: the CLI itself reads neither the ledger nor the bucket.
    expect(stub.requests.slice(before).filter((request) => !isHandOut(request))).toEqual([]);
    expect(result.stderr).toContain('valid until');
    expect(result.stderr).toContain(SHA256);
    // The hand-out goes to the operator function, signed so that it learns who handed it out from
    // the caller's principal; the body names no operator and never holds the link.
    const handOut = stub.requests.filter(isHandOut).at(-1);
    expect(handOut?.headers.authorization).toMatch(/^AWS4-HMAC-SHA256 Credential=test\//);
    expect(JSON.parse(handOut?.body ?? '{}')).toMatchObject({
      command: 'hand_out_package',
      request_id: REQUEST_ID,
      raw: true,
      hand_out: { delivery: 'link', expires_in: 3600 },
    });
    expect(handOut?.body).not.toContain(OPERATOR_ARN);
    expect(handOut?.body).not.toContain(result.stdout.trim());
  });

  it('refuses an --out that is a directory, or in a missing directory, with exit 2 before any call', async () => {
    serve((response) => response.writeHead(500).end());
    const before = stub.requests.length;
    const dir = await runCli(['package', REQUEST_ID, '--raw', '--out', outDir, ...target()], { env: env() });
    expect(dir.code).toBe(2);
    expect(dir.stderr).toContain(`--out: ${outDir} is a directory; give a file path`);
    const missing = join(outDir, 'no-such-folder', 'alice.zip');
    const parent = await runCli(['package', REQUEST_ID, '--raw', '--out', missing, ...target()], {
      env: env(),
    });
    expect(parent.code).toBe(2);
    expect(parent.stderr).toContain(`--out: the folder ${join(outDir, 'no-such-folder')} does not exist`);
    // `-` is not standard output for a zip: no file named "-" is written.
    const dash = await runCli(['package', REQUEST_ID, '--raw', '--out', '-', ...target()], { env: env() });
    expect(dash.code).toBe(2);
    expect(dash.stderr).toContain('--out -: the package is a zip file');
    expect(stub.requests.length).toBe(before);
    expect(await filesIn(outDir)).toEqual([]);
  });

  it('writes the verified copy when the download completes', async () => {
    serve((response) => {
      response.writeHead(200, { 'content-length': String(ARCHIVE.length) });
      response.end(ARCHIVE);
    });
    const out = join(outDir, 'alice.zip');
    const result = await runCli(['package', REQUEST_ID, '--raw', '--out', out, ...target()], { env: env() });
    expect(result.code, result.stderr).toBe(0);
    expect(await filesIn(outDir)).toEqual(['alice.zip']);
    expect(JSON.parse(stub.requests.filter(isHandOut).at(-1)?.body ?? '{}')).toMatchObject({
      command: 'hand_out_package',
      hand_out: { delivery: 'file' },
    });
    // The link went to the download, and nowhere the user sees it.
    expect(stub.requests.some((request) => request.url.startsWith(LINK_PATH))).toBe(true);
    expect(result.stdout + result.stderr).not.toContain(SIGNATURE);
  });

  it('leaves no .partial file when the download is cut short', async () => {
    serve((response) => {
      response.writeHead(200, { 'content-length': String(ARCHIVE.length) });
      response.write(ARCHIVE.subarray(0, 64 * 1024), () => response.destroy());
    });
    const out = join(outDir, 'alice.zip');
    const result = await runCli(['package', REQUEST_ID, '--raw', '--out', out, ...target()], { env: env() });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('nothing was written');
    expect(result.stderr).not.toContain(SIGNATURE);
    expect(await filesIn(outDir)).toEqual([]);
  });

  it.each(['SIGINT', 'SIGTERM'] as const)(
    'leaves no .partial file when stopped by %s mid-download',
    async (signal) => {
      // Half the archive, then nothing: the copy stays partial until the signal comes.
      serve((response) => {
        response.writeHead(200, { 'content-length': String(ARCHIVE.length) });
        response.write(ARCHIVE.subarray(0, 64 * 1024));
      });
      const out = join(outDir, 'alice.zip');
      const child: ChildProcess = spawn(
        process.execPath,
        [CLI, 'package', REQUEST_ID, '--raw', '--out', out, ...target()],
        {
          env: { ...process.env, ...env() },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let stderr = '';
      child.stderr?.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      for (
        let attempt = 0;
        !(await filesIn(outDir)).some((name) => name.includes('.partial'));
        attempt += 1
      ) {
        if (attempt > 200 || child.exitCode !== null) throw new Error(`no partial copy appeared: ${stderr}`);
        await delay(100);
      }
      child.kill(signal);
      expect(await exited).toBe(signal === 'SIGINT' ? 130 : 143);
      expect(stderr).toContain(`stopped by ${signal}; nothing was written to ${out}`);
      expect(await filesIn(outDir)).toEqual([]);
    },
    60_000,
  );

  it('still refuses an existing file without --force', async () => {
    serve((response) => response.writeHead(500).end());
    const out = join(outDir, 'taken.zip');
    await mkdir(outDir, { recursive: true });
    await writeFile(out, 'mine');
    const result = await runCli(['package', REQUEST_ID, '--raw', '--out', out, ...target()], { env: env() });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('already exists');
  });
});
