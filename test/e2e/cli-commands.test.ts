import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.ts';

const COMMANDS = [
  'submit',
  'status',
  'list',
  'cancel',
  'deny',
  'extend',
  'notice',
  'retry',
  'package',
  'verify',
  'report',
];
const SECRET_PK = 'pk-never-printed-4471';
const REQUEST_ID = '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f';
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-dsr-cli-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function request(overrides: Record<string, unknown> = {}): string {
  return JSON.stringify({
    request_id: REQUEST_ID,
    type: 'access',
    regulation: 'gdpr',
    primary_key: SECRET_PK,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    ...overrides,
  });
}

describe('svc-dsr operator commands, run as a process', () => {
  it('gives every command a --help with its usage, exit codes and an example', {
    timeout: 120_000,
  }, async () => {
    const results = await Promise.all(COMMANDS.map((command) => runCli([command, '--help'])));
    results.forEach((result, index) => {
      const command = COMMANDS[index];
      expect(result.code, command).toBe(0);
      expect(result.stdout, command).toContain(`Usage: svc-dsr ${command}`);
      expect(result.stdout, command).toContain('Exit codes:');
      expect(result.stdout, command).toMatch(new RegExp(`\\$ npx svc-dsr ${command} `));
      expect(result.stdout, command).toContain('--target <target>');
    });
  });

  it('validates a JSONL file with --dry-run: each bad line numbered, exit 2, nothing sent and no subject shown', async () => {
    // Prepare: no local mode and no stack, so anything but validation would fail differently
    const path = join(dir, 'requests.jsonl');
    await writeFile(
      path,
      [
        request(),
        '',
        request({ request_id: '8d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f', type: 'delete' }),
        `{"primary_key":"${SECRET_PK}"`,
        request({ request_id: '9d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f', verification: undefined }),
      ].join('\n'),
    );
    // Act
    const result = await runCli(['submit', '--dry-run', '--file', path, '--data-dir', join(dir, 'none')]);
    // Assess
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('dry run: 1 valid, 3 bad lines of 4; nothing was sent\n');
    expect(result.stderr).toContain(
      'line 3 (request 8d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f): type: must be "access", "erasure" or "correction"',
    );
    expect(result.stderr).toContain('line 4: is not valid JSON');
    expect(result.stderr).toContain(
      'line 5 (request 9d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f): verification: is required',
    );
    expect(`${result.stdout}${result.stderr}`).not.toContain(SECRET_PK);
  });

  it('exits 0 on a dry run of a valid CSV file and prints a JSON summary with --json', async () => {
    const path = join(dir, 'requests.csv');
    await writeFile(
      path,
      'request_id,type,regulation,primary_key,received_at,verification_method,verified_by,verified_at\n' +
        `${REQUEST_ID},erasure,ccpa,${SECRET_PK},2026-11-20T09:00:00Z,email_link,pt,2026-11-20T09:05:00Z\n`,
    );
    const result = await runCli(['submit', '--dry-run', '--json', '--file', path]);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({
      dry_run: true,
      source: 'csv',
      valid: 1,
      bad_lines: [],
    });
    expect(result.stdout).not.toContain(SECRET_PK);
  });

  it('says how to create a missing --stack-outputs file (exit 2)', async () => {
    const missing = join(dir, 'outputs.json');
    const result = await runCli(['status', REQUEST_ID, '--target', 'aws', '--stack-outputs', missing]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`--stack-outputs: ${missing} does not exist`);
    expect(result.stderr).toContain('npx cdk deploy --outputs-file');
    expect(result.stdout).toBe('');
  });

  it('points at svc-dsr local --serve when no local mode is serving (exit 1)', async () => {
    const result = await runCli(['list', '--target', 'local', '--data-dir', join(dir, 'not-serving')]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('svc-dsr local --serve');
    expect(result.stdout).toBe('');
  });

  it('refuses bad input with exit 2 before looking for a target', async () => {
    const [badId, noReason, longLink, badDate, badCode, mailReason] = await Promise.all([
      runCli(['status', 'DSR-1042']),
      runCli(['cancel', REQUEST_ID, '--reason', ' ']),
      runCli(['package', REQUEST_ID, '--expires-in', '7200']),
      runCli(['report', '--from', 'yesterday']),
      runCli(['deny', REQUEST_ID, '--reason-code', 'bored', '--reason', 'x']),
      runCli([
        'extend',
        REQUEST_ID,
        '--reason',
        'asked by jane.doe@example.com',
        '--notice-channel',
        'email',
      ]),
    ]);
    expect(badId.code).toBe(2);
    expect(badId.stderr).toContain('<request_id>: must be a request id');
    expect(noReason.code).toBe(2);
    expect(noReason.stderr).toContain('--reason: must not be empty');
    expect(longLink.code).toBe(2);
    expect(longLink.stderr).toContain('--expires-in: must be at most 3600 seconds');
    expect(badDate.code).toBe(2);
    expect(badDate.stderr).toContain('--from: must be a date');
    expect(badCode.code).toBe(2);
    expect(badCode.stderr).toContain('--reason-code: must be one of identity_not_verified');
    expect(mailReason.code).toBe(2);
    expect(mailReason.stderr).toContain('--reason: looks like an e-mail address');
  });
});
