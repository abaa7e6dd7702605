import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { MAX_LINE_BYTES, parseCsv, runSubmit, type SubmitTarget } from '../../../bin/cli/commands/submit.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { CliError } from '../../../bin/cli/io.ts';
import { NAMES, PRIMARY_KEY } from './helpers.ts';

const sqsMock = mockClient(SQSClient);
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-dsr-submit-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
beforeEach(() => {
  sqsMock.reset();
});

function request(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: PRIMARY_KEY,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    ...overrides,
  };
}

async function file(name: string, lines: string[]): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, `${lines.join('\n')}\n`);
  return path;
}

function target(): { connect: () => Promise<SubmitTarget>; calls: () => number } {
  let calls = 0;
  const sqs = new SQSClient({ region: 'eu-west-1', credentials: { accessKeyId: 't', secretAccessKey: 't' } });
  return {
    connect: async () => {
      calls += 1;
      return { sqs, names: NAMES };
    },
    calls: () => calls,
  };
}

/** SQS accepting every entry of every batch. */
function acceptAll(): void {
  sqsMock.on(SendMessageBatchCommand).callsFake((input: { Entries?: { Id?: string }[] }) => ({
    Successful: (input.Entries ?? []).map((entry) => ({ Id: entry.Id, MessageId: `m-${entry.Id}` })),
    Failed: [],
  }));
}

describe('runSubmit with a JSONL file', () => {
  it('sends the valid lines in batches of at most 10, the validated request as each body', async () => {
    // Prepare
    acceptAll();
    const requests = Array.from({ length: 23 }, () => request());
    const path = await file(
      'many.jsonl',
      requests.map((r) => JSON.stringify(r)),
    );
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, io, target().connect);
    // Assess
    expect(exitCode).toBe(0);
    const batches = sqsMock.commandCalls(SendMessageBatchCommand).map((call) => call.args[0].input);
    expect(batches.map((batch) => batch.Entries?.length).sort()).toEqual([10, 10, 3]);
    expect(batches.every((batch) => batch.QueueUrl === NAMES.IntakeQueueUrl)).toBe(true);
    const entries = batches.flatMap((batch) => batch.Entries ?? []);
    const first = entries.find((entry) => entry.Id === 'line-1');
    expect(JSON.parse(first?.MessageBody ?? '')).toEqual(requests[0]);
    expect(result.sent.map((entry) => entry.request_id)).toEqual(requests.map((r) => r.request_id));
    expect(io.stdout().trim().split('\n')).toEqual(requests.map((r) => r.request_id));
  });

  it('reports every bad line with its number and field errors, sends the rest, and exits 2', async () => {
    // Prepare
    acceptAll();
    const good = request();
    const path = await file('mixed.jsonl', [
      JSON.stringify(good),
      '',
      JSON.stringify(request({ type: 'acces', received_at: undefined, extra: 1 })),
      `{"primary_key": "${PRIMARY_KEY}", not json`,
      '[1,2]',
    ]);
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, io, target().connect);
    // Assess
    expect(exitCode).toBe(2);
    expect(result.sent).toEqual([{ line: 1, request_id: good.request_id }]);
    expect(result.bad_lines.map((bad) => bad.line)).toEqual([3, 4, 5]);
    expect(result.bad_lines[0]?.errors).toEqual([
      'type: must be "access", "erasure" or "correction"',
      'received_at: is required',
      'unknown field(s) "extra": remove them or fix the spelling',
    ]);
    expect(io.stderr()).toContain('line 4: is not valid JSON');
    expect(io.stderr()).toContain('line 5: must be a JSON object');
    expect(`${io.stdout()}${io.stderr()}`).not.toContain(PRIMARY_KEY);
  });

  it('reads lines up to the queue size limit, refuses a longer one alone, and sends the others', async () => {
    // Prepare: a valid request padded with white space to just under the limit; an 8 MB line of escapes
    acceptAll();
    const [first, padded, last] = [request(), request(), request()];
    const paddedLine = `${JSON.stringify(padded).slice(0, -1)}${' '.repeat(MAX_LINE_BYTES - 1000)}}`;
    const huge = JSON.stringify(request({ reference: 'A'.repeat(1_400_000) })).replaceAll('A', '\\u0041');
    const path = await file('huge.jsonl', [JSON.stringify(first), paddedLine, huge, JSON.stringify(last)]);
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, io, target().connect);
    // Assess
    expect(huge.length).toBeGreaterThan(8_000_000);
    expect(exitCode).toBe(2);
    expect(result.sent).toEqual([
      { line: 1, request_id: first.request_id },
      { line: 2, request_id: padded.request_id },
      { line: 4, request_id: last.request_id },
    ]);
    expect(result.bad_lines).toEqual([
      {
        line: 3,
        request_id: null,
        errors: [
          expect.stringMatching(
            /^is \d+ bytes; a line may hold at most 262144 \(the queue's message size limit\)/,
          ),
        ],
      },
    ]);
  });

  it('validates without sending or connecting on --dry-run', async () => {
    // Prepare
    const path = await file('dry.jsonl', [
      JSON.stringify(request()),
      JSON.stringify(request({ regulation: 'hipaa' })),
    ]);
    const io = collectingIo();
    const sqs = target();
    // Act
    const { exitCode, result } = await runSubmit({ file: path, dryRun: true }, io, sqs.connect);
    // Assess
    expect(exitCode).toBe(2);
    expect(sqs.calls()).toBe(0);
    expect(sqsMock.commandCalls(SendMessageBatchCommand)).toHaveLength(0);
    expect(result).toMatchObject({ dry_run: true, valid: 1, sent: [] });
    expect(io.stderr()).toContain('line 2 (request');
    expect(io.stderr()).toContain('regulation: must be "gdpr" or "ccpa"');
    expect(io.stdout()).toContain('dry run: 1 valid, 1 bad line of 2; nothing was sent');
  });

  it.each([
    ['an empty JSONL file', 'empty.jsonl', ['']],
    [
      'a CSV file with its header only',
      'header.csv',
      ['request_id,type,regulation,primary_key,received_at,verification_method,verified_by,verified_at'],
    ],
    ['an empty JSON array', 'none.json', ['[]']],
  ])('refuses %s with exit 2: it holds no requests', async (_label, name, lines) => {
    const path = await file(name, lines);
    const connected = target();
    await expect(runSubmit({ file: path }, collectingIo(), connected.connect)).rejects.toMatchObject({
      exitCode: 2,
      message: `--file: ${path} holds no requests; check the file`,
    });
    expect(connected.calls()).toBe(0);
  });

  it('says on a dry run that the method list is checked at intake, and refuses a method no list can name', async () => {
    // Prepare: "pending" is on no default list but may be on the stack's; a Cyrillic "е" is on none.
    const pending = request({
      verification: { method: 'pending', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    });
    const lookAlike = request({
      verification: {
        method: '\u0435mail_link',
        verified_by: 'privacy-team',
        verified_at: '2026-11-20T09:05:00Z',
      },
    });
    const noneLookAlike = request({
      verification: { method: 'n\u043ene', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    });
    const path = await file(
      'methods.jsonl',
      [pending, lookAlike, noneLookAlike].map((line) => JSON.stringify(line)),
    );
    const io = collectingIo();

    // Act
    const { exitCode, result } = await runSubmit({ file: path, dryRun: true }, io, target().connect);

    // Assess: "pending" and the look-alike of "none" are intake's to judge (rejected or denied there).
    expect(exitCode).toBe(2);
    expect(result.bad_lines).toEqual([
      {
        line: 2,
        request_id: lookAlike.request_id,
        errors: [
          expect.stringMatching(
            /^verification\.method: holds U\+0435, which is invisible or only looks like/,
          ),
        ],
      },
    ]);
    expect(result.valid).toBe(2);
    expect(io.stderr()).toContain(
      'dry run: verification.method and the age of verified_at are checked at intake against the stack\'s list of methods (stack config "verification", docs/deploy.md)',
    );
  });

  it('warns on a dry run of a primary_key that mixes scripts, without printing it, and counts the line valid', async () => {
    // Prepare: a Cyrillic а among Latin letters on line 2.
    const key = 'u-p\u0430ul28';
    const mixed = request({ primary_key: key });
    const path = await file('mixed.jsonl', [JSON.stringify(request()), JSON.stringify(mixed)]);
    const io = collectingIo();
    const json = collectingIo();

    // Act
    const { exitCode, result } = await runSubmit({ file: path, dryRun: true }, io, target().connect);
    await runSubmit({ file: path, dryRun: true, json: true }, json, target().connect);

    // Assess
    expect(exitCode).toBe(0);
    expect(result.valid).toBe(2);
    expect(result.warnings).toEqual([
      {
        line: 2,
        request_id: mixed.request_id,
        code: 'primary_key_mixed_scripts',
        message: expect.stringMatching(/^primary_key mixes letters of more than one script/),
      },
    ]);
    expect(io.stderr()).toContain(
      `line 2 (request ${mixed.request_id}): warning primary_key_mixed_scripts: primary_key mixes letters of more than one script`,
    );
    expect(io.stdout()).toContain('dry run: 2 valid, 0 bad lines of 2; nothing was sent');
    expect(JSON.parse(json.stdout())).toMatchObject({
      warnings: [{ line: 2, code: 'primary_key_mixed_scripts' }],
    });
    expect(`${io.stdout()}${io.stderr()}${json.stdout()}${json.stderr()}`).not.toContain(key);
  });

  it('warns of a --primary-key that mixes scripts given as flags, and sends it all the same', async () => {
    // Prepare
    acceptAll();
    const io = collectingIo();
    const flags = {
      type: 'erasure',
      regulation: 'gdpr',
      primaryKey: 'u-b\u03bfb29',
      receivedAt: '2026-11-20T09:00:00Z',
      verificationMethod: 'email_link',
      verifiedBy: 'privacy-team',
      verifiedAt: '2026-11-20T09:05:00Z',
    };

    // Act
    const { exitCode, result } = await runSubmit({ request: flags, waitSeconds: 0 }, io, target().connect);

    // Assess
    expect(exitCode).toBe(0);
    expect(result.sent).toHaveLength(1);
    expect(io.stderr()).toMatch(/^submit: warning primary_key_mixed_scripts: primary_key mixes letters/m);
    expect(io.stderr()).not.toContain(flags.primaryKey);
  });

  it('exits 0 on a dry run of a file with no bad line', async () => {
    const path = await file('clean.jsonl', [JSON.stringify(request())]);
    const { exitCode } = await runSubmit({ file: path, dryRun: true }, collectingIo(), target().connect);
    expect(exitCode).toBe(0);
  });

  it('sends a repeated request once and refuses the same id with different content', async () => {
    // Prepare
    acceptAll();
    const original = request();
    const path = await file('repeats.jsonl', [
      JSON.stringify(original),
      JSON.stringify(original),
      JSON.stringify({ ...original, type: 'erasure' }),
    ]);
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, collectingIo(), target().connect);
    // Assess
    expect(exitCode).toBe(2);
    expect(result.sent).toHaveLength(1);
    expect(result.duplicates).toEqual([{ line: 2, request_id: original.request_id, first_line: 1 }]);
    expect(result.bad_lines[0]).toMatchObject({ line: 3, request_id: original.request_id });
    expect(result.bad_lines[0]?.errors[0]).toContain('already used on line 1 with different content');
  });

  it('refuses a line with a repeated key, naming the key, and treats an upper-case id as the same request', async () => {
    // Prepare
    acceptAll();
    const first = request();
    const ambiguous = JSON.stringify(request()).replace(
      '"type":"access"',
      '"type":"access","type":"erasure"',
    );
    const path = await file('ambiguous.jsonl', [
      JSON.stringify(first),
      ambiguous,
      JSON.stringify({ ...first, request_id: String(first.request_id).toUpperCase() }),
    ]);
    // Act
    const { exitCode, result } = await runSubmit(
      { file: path, dryRun: true },
      collectingIo(),
      target().connect,
    );
    // Assess
    expect(exitCode).toBe(2);
    expect(result.bad_lines).toEqual([
      {
        line: 2,
        request_id: null,
        errors: [expect.stringContaining('repeats the key "type" in one object')],
      },
    ]);
    expect(result.duplicates).toEqual([{ line: 3, request_id: first.request_id, first_line: 1 }]);
  });

  it('says what a wrong-typed field should be, and reads a file that starts with a byte-order mark', async () => {
    const path = join(dir, 'bom.jsonl');
    await writeFile(
      path,
      `\uFEFF${JSON.stringify(request({ primary_key: 42 }))}\n${JSON.stringify(request())}\n`,
    );
    const { result } = await runSubmit({ file: path, dryRun: true }, collectingIo(), target().connect);
    expect(result.valid).toBe(1);
    expect(result.bad_lines).toEqual([
      { line: 1, request_id: expect.any(String), errors: ['primary_key: must be a string, got a number'] },
    ]);
  });

  it('retries the entries SQS could not take once, and only those', async () => {
    // Prepare
    const requests = [request(), request(), request()];
    sqsMock
      .on(SendMessageBatchCommand)
      .resolvesOnce({
        Successful: [{ Id: 'line-1', MessageId: 'm1', MD5OfMessageBody: 'x' }],
        Failed: [
          { Id: 'line-2', Code: 'InternalError', SenderFault: false },
          { Id: 'line-3', Code: 'ServiceUnavailable', SenderFault: false },
        ],
      })
      .resolvesOnce({
        Successful: [{ Id: 'line-2', MessageId: 'm2', MD5OfMessageBody: 'x' }],
        Failed: [{ Id: 'line-3', Code: 'ServiceUnavailable', SenderFault: false, Message: 'try later' }],
      });
    const path = await file(
      'retry.jsonl',
      requests.map((r) => JSON.stringify(r)),
    );
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, io, target().connect);
    // Assess
    expect(exitCode).toBe(1);
    const calls = sqsMock.commandCalls(SendMessageBatchCommand);
    expect(calls).toHaveLength(2);
    expect(calls[1]?.args[0].input.Entries?.map((entry) => entry.Id)).toEqual(['line-2', 'line-3']);
    expect(result.sent.map((entry) => entry.line)).toEqual([1, 2]);
    expect(result.failed).toEqual([
      { line: 3, request_id: requests[2]?.request_id, code: 'ServiceUnavailable', message: 'try later' },
    ]);
    expect(io.stderr()).toContain('line 3: request');
  });

  it('does not retry an entry SQS refused as malformed', async () => {
    sqsMock.on(SendMessageBatchCommand).resolves({
      Successful: [],
      Failed: [{ Id: 'line-1', Code: 'InvalidMessageContents', SenderFault: true, Message: 'bad' }],
    });
    const path = await file('sender.jsonl', [JSON.stringify(request())]);
    const { exitCode, result } = await runSubmit({ file: path }, collectingIo(), target().connect);
    expect(exitCode).toBe(1);
    expect(sqsMock.commandCalls(SendMessageBatchCommand)).toHaveLength(1);
    expect(result.failed[0]?.code).toBe('InvalidMessageContents');
  });

  it('stops sending once a batch fails twice and reports the lines not attempted', async () => {
    // Prepare
    sqsMock.on(SendMessageBatchCommand).rejects(new Error('connect ETIMEDOUT'));
    const path = await file(
      'down.jsonl',
      Array.from({ length: 60 }, () => JSON.stringify(request())),
    );
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, collectingIo(), target().connect);
    // Assess
    expect(exitCode).toBe(1);
    expect(result.sent).toHaveLength(0);
    expect(result.failed).toHaveLength(60);
    // Four batches were in flight at once; each tried twice; the other two were never attempted.
    expect(sqsMock.commandCalls(SendMessageBatchCommand)).toHaveLength(8);
    expect(result.failed.filter((failure) => failure.code === 'not_attempted')).toHaveLength(20);
    expect(result.failed[0]?.message).toContain('ETIMEDOUT');
  });

  it('prints progress on stderr for a long file, and none with --json', async () => {
    // Prepare
    acceptAll();
    const path = await file(
      'progress.jsonl',
      Array.from({ length: 25 }, () => JSON.stringify(request())),
    );
    const human = collectingIo();
    const machine = collectingIo();
    // Act
    await runSubmit({ file: path, progressEvery: 10 }, human, target().connect);
    await runSubmit({ file: path, progressEvery: 10, json: true }, machine, target().connect);
    // Assess
    expect(human.stderr()).toMatch(/submit: 10\/25 valid lines sent \(40%\)/);
    expect(human.stderr()).toMatch(/submit: 25\/25 valid lines sent \(100%\)/);
    expect(machine.stderr()).toBe('');
    expect(JSON.parse(machine.stdout())).toMatchObject({ lines: 25, valid: 25 });
  });

  it('refuses an extension it cannot read as CSV or JSONL, naming --format', async () => {
    const path = await file('requests.txt', [JSON.stringify(request())]);
    await expect(runSubmit({ file: path }, collectingIo(), target().connect)).rejects.toThrow(
      /--format csv\|jsonl/,
    );
  });

  it('refuses a missing file with exit 2', async () => {
    const error = await runSubmit({ file: join(dir, 'nope.jsonl') }, collectingIo(), target().connect).catch(
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(CliError);
    expect(error).toMatchObject({ exitCode: 2 });
    expect(String(error)).toContain('does not exist');
  });
});

describe('runSubmit with a CSV file', () => {
  it('reads both spellings of the verification columns, quoted cells, and blank optional cells', async () => {
    // Prepare
    acceptAll();
    const [a, b] = [randomUUID(), randomUUID()];
    const dotted = await file('dotted.csv', [
      'request_id,type,regulation,primary_key,received_at,verification.method,verification.verified_by,verification.verified_at,reference',
      `${a},erasure,ccpa,${PRIMARY_KEY},2026-11-20T09:00:00Z,email_link,"Privacy, Team",2026-11-20T09:05:00Z,`,
    ]);
    const flat = await file('flat.csv', [
      'request_id,type,regulation,primary_key,received_at,verification_method,verified_by,verified_at,submitted_by',
      `${b},access,gdpr,${PRIMARY_KEY},2026-11-20T09:00:00Z,"id ""check""",pt,2026-11-20T09:05:00Z,jane`,
    ]);
    // Act
    const first = await runSubmit({ file: dotted }, collectingIo(), target().connect);
    const second = await runSubmit({ file: flat }, collectingIo(), target().connect);
    // Assess
    expect(first.exitCode).toBe(0);
    expect(second.exitCode).toBe(0);
    const bodies = sqsMock
      .commandCalls(SendMessageBatchCommand)
      .flatMap((call) => call.args[0].input.Entries ?? [])
      .map((entry) => JSON.parse(entry.MessageBody ?? ''));
    expect(bodies[0]).toEqual({
      request_id: a,
      type: 'erasure',
      regulation: 'ccpa',
      primary_key: PRIMARY_KEY,
      received_at: '2026-11-20T09:00:00Z',
      verification: {
        method: 'email_link',
        verified_by: 'Privacy, Team',
        verified_at: '2026-11-20T09:05:00Z',
      },
    });
    expect(bodies[1]).toMatchObject({ verification: { method: 'id "check"' }, submitted_by: 'jane' });
  });

  it('reads the channel column, and refuses a channel outside the closed list with the list', async () => {
    // Prepare
    acceptAll();
    const [a, b] = [randomUUID(), randomUUID()];
    const path = await file('channel.csv', [
      'request_id,type,regulation,primary_key,received_at,verification_method,verified_by,verified_at,channel',
      `${a},access,ccpa,${PRIMARY_KEY},2026-11-20T09:00:00Z,email_link,pt,2026-11-20T09:05:00Z,postal_mail`,
      `${b},access,ccpa,${PRIMARY_KEY},2026-11-20T09:00:00Z,email_link,pt,2026-11-20T09:05:00Z,fax`,
    ]);
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, collectingIo(), target().connect);
    // Assess
    expect(exitCode).toBe(2);
    const bodies = sqsMock
      .commandCalls(SendMessageBatchCommand)
      .flatMap((call) => call.args[0].input.Entries ?? [])
      .map((entry) => JSON.parse(entry.MessageBody ?? ''));
    expect(bodies).toEqual([expect.objectContaining({ request_id: a, channel: 'postal_mail' })]);
    expect(JSON.stringify(result.bad_lines)).toContain(
      'channel: must be one of \\"web_form\\", \\"email\\", \\"phone\\", \\"postal_mail\\", \\"in_person\\", \\"authorized_agent\\", \\"other\\"',
    );
  });

  it("reads a correction's new values from its corrections.<field> columns, a blank cell correcting nothing", async () => {
    // Prepare
    acceptAll();
    const [a, b] = [randomUUID(), randomUUID()];
    const path = await file('corrections.csv', [
      'request_id,type,regulation,primary_key,received_at,verification.method,verified_by,verified_at,corrections.display_name,corrections.email,corrections.bio',
      `${a},correction,ccpa,${PRIMARY_KEY},2026-11-20T09:00:00Z,account_login,pt,2026-11-20T09:05:00Z,"Walker, Alice",,"Line one"`,
      `${b},correction,gdpr,${PRIMARY_KEY},2026-11-20T09:00:00Z,account_login,pt,2026-11-20T09:05:00Z,,not-an-email,`,
    ]);
    // Act
    const { exitCode, result } = await runSubmit({ file: path }, collectingIo(), target().connect);
    // Assess
    expect(exitCode).toBe(2);
    const [body] = sqsMock
      .commandCalls(SendMessageBatchCommand)
      .flatMap((call) => call.args[0].input.Entries ?? [])
      .map((entry) => JSON.parse(entry.MessageBody ?? ''));
    expect(body).toMatchObject({
      request_id: a,
      corrections: { display_name: 'Walker, Alice', bio: 'Line one' },
    });
    expect(body.corrections).not.toHaveProperty('email');
    expect(result.bad_lines).toEqual([
      expect.objectContaining({
        line: 3,
        errors: ['corrections.email: must be an e-mail address, e.g. name@example.com'],
      }),
    ]);
  });

  it('numbers bad rows by their line in the file, counting line breaks inside quoted cells', async () => {
    // Prepare
    const path = await file('lines.csv', [
      'request_id,type,regulation,primary_key,received_at,verification.method,verified_by,verified_at,reference',
      `${randomUUID()},access,gdpr,u-1,2026-11-20T09:00:00Z,email,pt,2026-11-20T09:05:00Z,"two`,
      `line ref"`,
      `${randomUUID()},access,gdpr,u-2,yesterday,email,pt,2026-11-20T09:05:00Z,`,
      `${randomUUID()},access,gdpr`,
    ]);
    // Act
    const { exitCode, result } = await runSubmit(
      { file: path, dryRun: true },
      collectingIo(),
      target().connect,
    );
    // Assess
    expect(exitCode).toBe(2);
    // A reference on two lines is refused now (one line of plain text), but still numbered right.
    expect(result.valid).toBe(0);
    expect(result.bad_lines.map((bad) => [bad.line, bad.errors[0]])).toEqual([
      [
        2,
        'reference: must be one line of plain text, without control characters (escape sequences, tabs, newlines, bidirectional marks and overrides, invisible characters)',
      ],
      [4, 'received_at: must be an RFC 3339 date-time, e.g. 2026-11-02T09:30:00Z'],
      [5, 'has 3 cells, but the header has 9 columns'],
    ]);
  });

  it('refuses an unknown column and a missing required column before reading any row', async () => {
    const unknown = await file('unknown.csv', ['request_id,typ', `${randomUUID()},access`]);
    const missing = await file('missing.csv', ['request_id,type', `${randomUUID()},access`]);
    await expect(
      runSubmit({ file: unknown, dryRun: true }, collectingIo(), target().connect),
    ).rejects.toThrow('unknown column(s) "typ"');
    await expect(
      runSubmit({ file: missing, dryRun: true }, collectingIo(), target().connect),
    ).rejects.toThrow(/lacks the column\(s\) regulation, primary_key, received_at/);
  });

  it('does not echo a first row that is data rather than a header', async () => {
    const headless = await file('headless.csv', [
      `${randomUUID()},access,gdpr,${PRIMARY_KEY},2026-11-20T09:00:00Z,e,pt,2026-11-20T09:05:00Z`,
    ]);
    const error = await runSubmit({ file: headless, dryRun: true }, collectingIo(), target().connect).catch(
      (caught: unknown) => caught,
    );
    expect(error).toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('names no known column; add a header row'),
    });
    expect(String(error)).not.toContain(PRIMARY_KEY);
  });
});

describe('runSubmit with flags', () => {
  it('sends one request with a random request id when none is given, and prints the id', async () => {
    // Prepare
    acceptAll();
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runSubmit(
      {
        request: {
          type: 'erasure',
          regulation: 'gdpr',
          primaryKey: PRIMARY_KEY,
          receivedAt: '2026-11-20T09:00:00Z',
          verificationMethod: 'email_link',
          verifiedBy: 'privacy-team',
          verifiedAt: '2026-11-20T09:05:00Z',
          reference: 'DSR-1',
        },
      },
      io,
      target().connect,
    );
    // Assess
    expect(exitCode).toBe(0);
    const id = result.sent[0]?.request_id ?? '';
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(io.stdout()).toBe(`${id}\n`);
    expect(sqsMock).toHaveReceivedCommandWith(SendMessageBatchCommand, {
      QueueUrl: NAMES.IntakeQueueUrl,
      Entries: [expect.objectContaining({ Id: 'line-1' })],
    });
    expect(io.stderr()).not.toContain(PRIMARY_KEY);
  });

  it('sends the channel given with --channel', async () => {
    // Prepare
    acceptAll();
    // Act
    const { exitCode } = await runSubmit(
      {
        request: {
          type: 'access',
          regulation: 'ccpa',
          primaryKey: PRIMARY_KEY,
          receivedAt: '2026-11-20T09:00:00Z',
          verificationMethod: 'email_link',
          verifiedBy: 'privacy-team',
          verifiedAt: '2026-11-20T09:05:00Z',
          channel: 'phone',
        },
      },
      collectingIo(),
      target().connect,
    );
    // Assess
    expect(exitCode).toBe(0);
    const [entry] = sqsMock
      .commandCalls(SendMessageBatchCommand)
      .flatMap((call) => call.args[0].input.Entries ?? []);
    expect(JSON.parse(entry?.MessageBody ?? '{}')).toMatchObject({ channel: 'phone' });
  });

  it('names the flags that are missing or invalid (exit 2) and sends nothing', async () => {
    const connect = vi.fn();
    const error = await runSubmit(
      { request: { type: 'delete', regulation: 'gdpr' } },
      collectingIo(),
      connect,
    ).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(CliError);
    expect(error).toMatchObject({ exitCode: 2 });
    const message = String(error);
    expect(message).toContain('--type: must be "access", "erasure" or "correction"');
    expect(message).toContain('--primary-key: is required');
    expect(message).toContain('--verified-at: is required');
    expect(connect).not.toHaveBeenCalled();
  });

  it('refuses request flags together with --file', async () => {
    await expect(
      runSubmit({ file: 'x.jsonl', request: { type: 'access' } }, collectingIo(), target().connect),
    ).rejects.toThrow('drop --type');
  });
});

describe('parseCsv', () => {
  it('handles CRLF, doubled quotes, commas and line breaks in quoted cells, and skips blank lines', () => {
    expect(parseCsv('a,b\r\n"x, ""y""","1\n2"\r\n\r\nlast,\n')).toEqual([
      { line: 1, cells: ['a', 'b'] },
      { line: 2, cells: ['x, "y"', '1\n2'] },
      { line: 5, cells: ['last', ''] },
    ]);
  });

  it('drops a byte-order mark, keeps a stray quote in an unquoted cell as text, and reads lone CR line ends', () => {
    expect(parseCsv('\uFEFFa,b\rx"y,"é\r\nz"\r\n\n\nlast,1')).toEqual([
      { line: 1, cells: ['a', 'b'] },
      { line: 2, cells: ['x"y', 'é\r\nz'] },
      { line: 6, cells: ['last', '1'] },
    ]);
  });

  it('keeps the records before a quote that is never closed, and counts the blank lines before it', () => {
    const records = parseCsv('a,b\n"1\n2",3\n\n\n"open,1\n2,3\n');
    expect(records.map((record) => record.line)).toEqual([1, 2, 6]);
    expect(records[1]?.cells).toEqual(['1\n2', '3']);
    expect(records[2]?.error).toContain('never closed');
  });

  it('reports a quoted cell that is never closed on the line where it opens', () => {
    const records = parseCsv('a,b\n"open,1\n2,3\n');
    expect(records[1]).toMatchObject({ line: 2 });
    expect(records[1]?.error).toContain('never closed');
  });
});

/** The bodies sent, parsed. */
function sent(): Record<string, unknown>[] {
  return sqsMock
    .commandCalls(SendMessageBatchCommand)
    .flatMap((call) => call.args[0].input.Entries ?? [])
    .map((entry) => JSON.parse(entry.MessageBody ?? '{}') as Record<string, unknown>);
}

const siteFlags = {
  type: 'erasure',
  regulation: 'gdpr',
  primaryKey: PRIMARY_KEY,
  receivedAt: '2026-11-20T09:00:00Z',
  verificationMethod: 'email_link',
  verifiedBy: 'privacy-team',
  verifiedAt: '2026-11-20T09:05:00Z',
};

describe('svc-dsr submit, the sites a request covers', () => {
  beforeEach(acceptAll);

  it('sends the sites of --sites, comma-separated, as a list', async () => {
    // Act
    const { exitCode } = await runSubmit(
      { request: { ...siteFlags, sites: 'news, shop-de' } },
      collectingIo(),
      target().connect,
    );

    // Assess
    expect(exitCode).toBe(0);
    expect(sent()[0]?.sites).toEqual(['news', 'shop-de']);
  });

  it('takes a CSV sites column of ids separated by spaces, and an empty cell as every site', async () => {
    // Prepare
    const path = join(dir, 'sites.csv');
    const row = (sites: string) =>
      `${randomUUID()},access,gdpr,${PRIMARY_KEY},2026-11-20T09:00:00Z,email_link,privacy-team,2026-11-20T09:05:00Z,${sites}`;
    await writeFile(
      path,
      [
        'request_id,type,regulation,primary_key,received_at,verification_method,verified_by,verified_at,sites',
        row('news shop'),
        row(''),
      ].join('\n'),
    );

    // Act
    const { exitCode } = await runSubmit({ file: path }, collectingIo(), target().connect);

    // Assess
    expect(exitCode).toBe(0);
    expect(sent().map((body) => body.sites)).toEqual([['news', 'shop'], undefined]);
  });

  it('gives a line naming a site id of the wrong form its verdict before anything is sent', async () => {
    // Prepare
    const request = (sites: unknown) => ({
      request_id: randomUUID(),
      type: 'access',
      regulation: 'gdpr',
      primary_key: PRIMARY_KEY,
      received_at: '2026-11-20T09:00:00Z',
      verification: {
        method: 'email_link',
        verified_by: 'privacy-team',
        verified_at: '2026-11-20T09:05:00Z',
      },
      sites,
    });
    const path = join(dir, 'sites.jsonl');
    await writeFile(
      path,
      [JSON.stringify(request(['news'])), JSON.stringify(request(['News', 'news']))].join('\n'),
    );
    const io = collectingIo();

    // Act
    const { exitCode, result } = await runSubmit({ file: path, dryRun: true }, io, target().connect);

    // Assess
    expect(exitCode).toBe(2);
    expect(result).toMatchObject({ valid: 1, sent: [] });
    expect(io.stderr()).toContain('line 2');
    expect(io.stderr()).toContain('sites.0: expected a site id');
    expect(sent()).toEqual([]);
  });
});
