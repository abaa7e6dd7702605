import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runSubmit, type SubmitTarget } from '../../../bin/cli/commands/submit.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { NAMES, PRIMARY_KEY } from './helpers.ts';

// The sites a request covers, as the CLI takes them: --sites, a CSV column, a JSONL field.
const sqsMock = mockClient(SQSClient);
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-dsr-submit-sites-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
beforeEach(() => {
  sqsMock.reset();
  sqsMock.on(SendMessageBatchCommand).callsFake((input: { Entries?: { Id?: string }[] }) => ({
    Successful: (input.Entries ?? []).map((entry) => ({ Id: entry.Id, MessageId: `m-${entry.Id}` })),
    Failed: [],
  }));
});

const connect = async (): Promise<SubmitTarget> => ({
  sqs: new SQSClient({ region: 'eu-west-1', credentials: { accessKeyId: 't', secretAccessKey: 't' } }),
  names: NAMES,
});

/** The bodies sent, parsed. */
function sent(): Record<string, unknown>[] {
  return sqsMock
    .commandCalls(SendMessageBatchCommand)
    .flatMap((call) => call.args[0].input.Entries ?? [])
    .map((entry) => JSON.parse(entry.MessageBody ?? '{}') as Record<string, unknown>);
}

const flags = {
  type: 'erasure',
  regulation: 'gdpr',
  primaryKey: PRIMARY_KEY,
  receivedAt: '2026-11-20T09:00:00Z',
  verificationMethod: 'email_link',
  verifiedBy: 'privacy-team',
  verifiedAt: '2026-11-20T09:05:00Z',
};

describe('svc-dsr submit, the sites a request covers', () => {
  it('sends the sites of --sites, comma-separated, as a list', async () => {
    // Act
    const { exitCode } = await runSubmit(
      { request: { ...flags, sites: 'news, shop-de' } },
      collectingIo(),
      connect,
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
    const { exitCode } = await runSubmit({ file: path }, collectingIo(), connect);

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
    const { exitCode, result } = await runSubmit({ file: path, dryRun: true }, io, connect);

    // Assess
    expect(exitCode).toBe(2);
    expect(result).toMatchObject({ valid: 1, sent: [] });
    expect(io.stderr()).toContain('line 2');
    expect(io.stderr()).toContain('sites.0: expected a site id');
    expect(sent()).toEqual([]);
  });
});
