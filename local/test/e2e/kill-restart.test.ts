/**
 * Local mode killed with SIGKILL and started again, as a user would run it: `svc-dsr local --serve`
 * and the operator commands as processes, the state under one data dir.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import {
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { readLocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

let workdir: string;
const servers: ServingLocal[] = [];

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-kill-'));
});

afterAll(async () => {
  for (const server of servers) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

async function serve(dataDir: string, args: string[] = []): Promise<ServingLocal> {
  const server = await serveLocal(dataDir, args);
  servers.push(server);
  return server;
}

function request(requestId: string, reference = 'DSR-1', primaryKey?: string) {
  return {
    request_id: requestId,
    type: 'access',
    regulation: 'gdpr',
    // No such user: a cheap request that still runs the workflow to a recorded answer (no_data).
    primary_key: primaryKey ?? `u-nobody-${requestId.slice(0, 8)}`,
    received_at: new Date(Date.now() - 3600_000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
    reference,
  };
}

async function submitFile(
  dataDir: string,
  name: string,
  lines: readonly object[],
  flags: readonly string[] = [],
) {
  const file = join(workdir, name);
  await writeFile(file, `${lines.map((line) => JSON.stringify(line)).join('\n')}\n`);
  const submitted = await runCli([
    'submit',
    '--file',
    file,
    '--target',
    'local',
    '--data-dir',
    dataDir,
    ...flags,
  ]);
  expect(submitted.code, submitted.stderr).toBe(0);
}

/** The request ids `svc-dsr list --status <status> --json` prints. */
async function listed(dataDir: string, status: string): Promise<string[]> {
  const result = await runCli([
    'list',
    '--status',
    status,
    '--json',
    '--target',
    'local',
    '--data-dir',
    dataDir,
  ]);
  expect(result.code, result.stderr).toBe(0);
  return z
    .object({ requests: z.array(z.object({ request_id: z.string() })) })
    .parse(JSON.parse(result.stdout))
    .requests.map((item) => item.request_id);
}

/** An SQS client for the serving local mode, from the endpoints file it wrote (as any SQS tool would use). */
async function localSqs(dataDir: string): Promise<SQSClient> {
  const { region, credentials, endpoints } = await readLocalEndpoints(dataDir);
  return new SQSClient({ region, credentials, endpoint: endpoints.sqs });
}

async function queueDepth(sqs: SQSClient, name: string): Promise<number> {
  const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: name }));
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return (
    Number(Attributes?.ApproximateNumberOfMessages) +
    Number(Attributes?.ApproximateNumberOfMessagesNotVisible)
  );
}

/** Probes until `done` holds of the answer or the time is up; returns the last answer either way. */
async function poll<T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() > deadline) return value;
    await delay(300);
  }
}

describe('local mode killed right after submit (SIGKILL) and started again', () => {
  it('keeps every request submit reported as sent, and what the quarantine and dead-letter queues held', async () => {
    // Prepare: a running local mode that has quarantined conflicting lines and holds a dead letter
    const dataDir = join(workdir, 'queues');
    let server = await serve(dataDir);
    const originals = Array.from({ length: 5 }, () => request(randomUUID()));
    await submitFile(dataDir, 'originals.jsonl', originals);
    const first = await poll(
      () => listed(dataDir, 'completed'),
      (ids) => ids.length === originals.length,
      30_000,
    );
    expect(first).toHaveLength(originals.length);
    // Valid messages whose ids intake has already seen with other content: quarantined as
    // conflicts. Sent straight to the queue, since `submit` holds back a conflict it finds in the ledger.
    let sqs = await localSqs(dataDir);
    const { QueueUrl: intakeUrl } = await sqs.send(
      new GetQueueUrlCommand({ QueueName: LOCAL_NAMES.intakeQueue }),
    );
    for (const original of originals) {
      await sqs.send(
        new SendMessageCommand({
          QueueUrl: intakeUrl,
          MessageBody: JSON.stringify(request(original.request_id, 'DSR-changed')),
        }),
      );
    }
    const quarantined = await poll(
      () => queueDepth(sqs, LOCAL_NAMES.quarantineQueue),
      (depth) => depth === originals.length,
      30_000,
    );
    expect(quarantined).toBe(originals.length);
    const { QueueUrl: deadLetterUrl } = await sqs.send(
      new GetQueueUrlCommand({ QueueName: LOCAL_NAMES.intakeDeadLetterQueue }),
    );
    await sqs.send(
      new SendMessageCommand({ QueueUrl: deadLetterUrl, MessageBody: '{"request_id":"dead-letter"}' }),
    );
    sqs.destroy();
    const batch = Array.from({ length: 150 }, () => request(randomUUID()));

    // Act: the kill comes the moment submit has said every line was sent (not waiting for intake)
    await submitFile(dataDir, 'batch.jsonl', batch, ['--wait', '0']);
    await killServer(server, 'SIGKILL');
    server = await serve(dataDir);

    // Assess
    const expected = [...originals, ...batch].map((item) => item.request_id).sort();
    const completed = await poll(
      () => listed(dataDir, 'completed'),
      (ids) => ids.length >= expected.length,
      // 40 s alone on two cores; the whole suite running beside it can more than double that.
      150_000,
    );
    expect(completed.length, 'requests completed of those submit reported as sent').toBe(expected.length);
    expect(completed.sort()).toEqual(expected);
    sqs = await localSqs(dataDir);
    expect(await queueDepth(sqs, LOCAL_NAMES.quarantineQueue)).toBe(originals.length);
    const { QueueUrl } = await sqs.send(
      new GetQueueUrlCommand({ QueueName: LOCAL_NAMES.intakeDeadLetterQueue }),
    );
    const dead = await sqs.send(new ReceiveMessageCommand({ QueueUrl, VisibilityTimeout: 0 }));
    expect(dead.Messages?.map((message) => message.Body)).toEqual(['{"request_id":"dead-letter"}']);
    sqs.destroy();
  }, 240_000);
});

const ledgerView = z.looseObject({
  status: z.string(),
  step: z.string().nullish(),
  export_attempts: z.number(),
  export_start: z.string().nullish(),
  archive: z.unknown().optional(),
});

async function statusOf(dataDir: string, requestId: string): Promise<z.infer<typeof ledgerView>> {
  const result = await runCli(['status', requestId, '--json', '--target', 'local', '--data-dir', dataDir]);
  expect(result.code, result.stderr).toBe(0);
  return ledgerView.parse(JSON.parse(result.stdout));
}

const auditRecord = z.looseObject({
  action: z.string(),
  facts: z.record(z.string(), z.unknown()).optional(),
});

/** The request's audit records, read from the files under the data dir as an auditor would open them. */
async function auditTrail(dataDir: string, requestId: string): Promise<z.infer<typeof auditRecord>[]> {
  const folder = join(dataDir, 's3', LOCAL_NAMES.auditBucket, 'audit', requestId);
  const files = (await readdir(folder).catch(() => [])).filter((name) => name.endsWith('.json')).sort();
  return Promise.all(
    files.map(async (name) => auditRecord.parse(JSON.parse(await readFile(join(folder, name), 'utf8')))),
  );
}

/** What the data dir's `s3/` holds of the request's archive: objects, their metadata, unfinished uploads. */
async function archiveFiles(dataDir: string, requestId: string): Promise<string[]> {
  const entries = await readdir(join(dataDir, 's3'), { recursive: true });
  return entries.filter(
    (path) =>
      (path.includes(requestId) && path.includes(LOCAL_NAMES.archiveBucket)) ||
      (path.startsWith('.uploads/') && path.length > '.uploads/'.length),
  );
}

describe('an export start cut by SIGKILL, then a cancel while the export is archived', () => {
  const dataDir = () => join(workdir, 'crash-windows');
  const subject = request(randomUUID(), 'DSR-2', 'u-alice');

  it('counts the interrupted start once, records it as uncertain, and starts no export it did not count', async () => {
    // Prepare: the platform holds every export POST open, so the start is in flight when the kill comes
    const hanging = join(workdir, 'hanging-export.json');
    await writeFile(
      hanging,
      JSON.stringify({ error_rate: 1, errors: ['timeout'], timeout_ms: 120_000, paths: ['/gdpr/export'] }),
    );
    const server = await serve(dataDir(), ['--faults', hanging]);
    await submitFile(dataDir(), 'subject.jsonl', [subject]);
    const inFlight = await poll(
      () => statusOf(dataDir(), subject.request_id),
      (view) => view.export_start === 'in_flight',
      30_000,
    );
    expect(inFlight).toMatchObject({ export_attempts: 1, export_start: 'in_flight' });

    // Act: kill it mid-POST, then start again with a platform that answers (and makes a large export,
    // whose copy the next test cancels; waits of 2 s keep it pending a while first)
    await killServer(server, 'SIGKILL');
    const answering = join(workdir, 'large-export.json');
    await writeFile(
      answering,
      JSON.stringify({ export_padding_bytes: 250_000_000, export_ready_after_polls: 2 }),
    );
    const restarted = await serve(dataDir(), ['--faults', answering, '--wait-ms', '2000']);

    // Assess
    const resumed = await poll(
      () => statusOf(dataDir(), subject.request_id),
      (view) => view.export_start === 'accepted',
      30_000,
    );
    expect(resumed).toMatchObject({ export_attempts: 2, export_start: 'accepted' });
    const uncertain = (await auditTrail(dataDir(), subject.request_id)).filter(
      (record) => record.action === 'export_start_uncertain',
    );
    expect(uncertain.map((record) => record.facts)).toEqual([{ attempt: 1, cause: 'interrupted' }]);
    const { platform } = await readLocalEndpoints(dataDir());
    const exports = z
      .object({ exports: z.array(z.object({ primary_key: z.string() })) })
      .parse(await (await fetch(`${platform.url}/_emulator/exports`)).json())
      .exports.filter((item) => item.primary_key === 'u-alice');
    // The killed POST never reached the platform; the one it did reach is the second, counted attempt.
    expect(exports.length).toBeLessThanOrEqual(resumed.export_attempts);
    expect(exports).toHaveLength(1);
    expect(restarted.child.exitCode).toBeNull();
  }, 90_000);

  it('cancelled while ArchiveExport copies the export: exit 0, and no archive left under s3/', async () => {
    // Prepare: the copy is under way once a multipart upload exists in the data dir
    const uploads = join(dataDir(), 's3', '.uploads');
    const copying = await poll(
      async () => (await readdir(uploads).catch(() => [])).length,
      (count) => count > 0,
      40_000,
    );
    expect(copying).toBeGreaterThan(0);

    // Act
    const cancelled = await runCli([
      'cancel',
      subject.request_id,
      '--reason',
      'withdrawn by the subject',
      '--target',
      'local',
      '--data-dir',
      dataDir(),
    ]);

    // Assess: the step finishes its copy, finds the request cancelled and removes what it wrote;
    // the cancel's final record ends the chain
    expect(cancelled.code, cancelled.stderr).toBe(0);
    await poll(
      async () => [
        ...(await readdir(uploads).catch(() => [])),
        ...(await archiveFiles(dataDir(), subject.request_id)),
      ],
      (left) => left.length === 0,
      40_000,
    );
    const trail = await auditTrail(dataDir(), subject.request_id);
    expect(trail.at(-1)).toMatchObject({ action: 'request_cancelled', final: true });
    expect(await statusOf(dataDir(), subject.request_id)).toMatchObject({ status: 'cancelled' });
  }, 90_000);
});
