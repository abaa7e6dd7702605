/**
 * The auditor's tamper cases against `svc-dsr report`, done as an insider with write access to the
 * ledger and the audit bucket would do them to a served local mode's data (the dynalite ledger and
 * the disk S3, through the endpoints local mode serves), and `report` and `verify` run as processes
 * as a user runs them: each edit makes `report` exit 1 naming the request; the data put back, it
 * reports as before with exit 0.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import {
  DeleteCommand,
  DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { readLocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { AUDIT_SCHEMA, auditRecordKey, noticesChainOf, recordHash } from '../../../lambdas/shared/audit.ts';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

let workdir: string;
let dataDir: string;
let server: ServingLocal | undefined;
let doc: DynamoDBDocumentClient;
let s3: S3Client;
let names: { LedgerTableName: string; AuditBucketName: string };

const target = () => ['--target', 'local', '--data-dir', dataDir];
const DAY_MS = 24 * 3600 * 1000;

function request(primaryKey: string, method = 'email_link') {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'ccpa',
    primary_key: primaryKey,
    received_at: new Date(Date.now() - DAY_MS).toISOString(),
    verification: { method, verified_by: 'privacy-team', verified_at: new Date().toISOString() },
  };
}

/** Answered and told so; denied at intake (identity not verified) and told so; answered, no notice yet. */
const answered = request('u-alice');
const denied = request('u-bruno', 'none');
const unanswered = request('u-chloe');

const reportSchema = z.object({
  records: z.array(z.looseObject({ request_id: z.string(), on_time: z.boolean().nullable() })),
  refused: z.array(
    z.object({
      request_id: z.string(),
      findings: z.array(z.object({ check: z.string(), detail: z.string() })),
    }),
  ),
  checked: z.number(),
});
type Report = z.infer<typeof reportSchema>;

/** `svc-dsr report --json`, as a user runs it. */
async function report(): Promise<{ code: number | null; stderr: string; result: Report }> {
  const run = await runCli(['report', '--json', ...target()]);
  return { code: run.code, stderr: run.stderr, result: reportSchema.parse(JSON.parse(run.stdout)) };
}

async function untilStatus(requestId: string, status: string): Promise<void> {
  for (let attempt = 0; attempt < 240; attempt += 1) {
    const run = await runCli(['status', requestId, '--json', ...target()]);
    if (run.code === 0 && z.object({ status: z.string() }).parse(JSON.parse(run.stdout)).status === status)
      return;
    await delay(250);
  }
  throw new Error(`request ${requestId} never became ${status}`);
}

async function ledgerItem(requestId: string): Promise<Record<string, unknown>> {
  const answer = await doc.send(
    new GetCommand({ TableName: names.LedgerTableName, Key: { request_id: requestId } }),
  );
  if (answer.Item === undefined) throw new Error(`no ledger item ${requestId}`);
  return answer.Item;
}

/** Sets ledger fields directly, as the role that may write the ledger can. */
async function editLedger(requestId: string, fields: Record<string, unknown>): Promise<void> {
  const keys = Object.keys(fields);
  await doc.send(
    new UpdateCommand({
      TableName: names.LedgerTableName,
      Key: { request_id: requestId },
      UpdateExpression: `SET ${keys.map((_, index) => `#f${index} = :v${index}`).join(', ')}`,
      ExpressionAttributeNames: Object.fromEntries(keys.map((key, index) => [`#f${index}`, key])),
      ExpressionAttributeValues: Object.fromEntries(keys.map((key, index) => [`:v${index}`, fields[key]])),
    }),
  );
}

/** The report of the untouched data dir, as the first test read it. */
let untouched: Report;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-report-evidence-'));
  dataDir = join(workdir, 'data');
  server = await serveLocal(dataDir);
  const local = await readLocalEndpoints(dataDir);
  names = local.outputs;
  doc = DynamoDBDocumentClient.from(
    new DynamoDBClient({
      region: local.region,
      credentials: local.credentials,
      endpoint: local.endpoints.dynamodb,
    }),
  );
  s3 = new S3Client({
    region: local.region,
    credentials: local.credentials,
    endpoint: local.endpoints.s3,
    forcePathStyle: true,
  });
  const file = join(workdir, 'requests.jsonl');
  await writeFile(file, [answered, denied, unanswered].map((line) => JSON.stringify(line)).join('\n'));
  const submitted = await runCli(['submit', '--file', file, ...target()]);
  expect(submitted.code, submitted.stderr).toBe(0);
  await untilStatus(answered.request_id, 'completed');
  await untilStatus(denied.request_id, 'denied');
  await untilStatus(unanswered.request_id, 'completed');
  for (const [requestId, kind] of [
    [answered.request_id, 'response'],
    [denied.request_id, 'denial'],
  ] as const) {
    const notice = await runCli(['notice', requestId, '--kind', kind, '--channel', 'email', ...target()]);
    expect(notice.code, notice.stderr).toBe(0);
  }
}, 240_000);

afterAll(async () => {
  doc?.destroy();
  s3?.destroy();
  if (server !== undefined) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

describe('svc-dsr report against an edited ledger', () => {
  it('reports an untouched data dir with exit 0, every request checked against its records', async () => {
    const { code, stderr, result } = await report();

    expect(code, stderr).toBe(0);
    expect(stderr).toBe('');
    expect(result.refused).toEqual([]);
    expect(result.checked).toBe(3);
    expect(result.records.map((record) => record.request_id).sort()).toEqual(
      [answered.request_id, denied.request_id, unanswered.request_id].sort(),
    );
    untouched = result;
  }, 60_000);

  it.each([
    [
      'due_at',
      () => answered.request_id,
      () => ({ due_at: new Date(Date.now() + 90 * DAY_MS).toISOString() }),
      /the ledger's due_at is/,
    ],
    [
      'outcome',
      () => answered.request_id,
      () => ({ outcome: 'no_data' }),
      /the ledger's outcome is "no_data"; record \d+ \(request_completed\) locked "exported"/,
    ],
    [
      'verification method',
      () => answered.request_id,
      () => ({ 'verification.method': 'in_person' }),
      /the ledger's verification method is "in_person"; record 0 \(request_received\) locked "email_link"/,
    ],
    [
      'denial code',
      () => denied.request_id,
      () => ({ 'denial.code': 'exempt' }),
      /the ledger's denial code is "exempt"; record \d+ \(request_denied\) locked "identity_not_verified"/,
    ],
    [
      'response date',
      () => answered.request_id,
      () => ({ 'notice_response.at': new Date(Date.now() - DAY_MS / 2).toISOString() }),
      /the ledger's response notice time is/,
    ],
  ])(
    'exits 1 naming the request when its ledger %s was edited, and reports as before once it is put back',
    async (_field, requestIdOf, editOf, detail) => {
      // Prepare: the item as it was, then the edit (a dotted name sets a nested field).
      const requestId = requestIdOf();
      const original = await ledgerItem(requestId);
      const edit = editOf();
      for (const [name, value] of Object.entries(edit)) {
        const [top = '', nested] = name.split('.');
        const current = original[top];
        await editLedger(
          requestId,
          nested === undefined
            ? { [top]: value }
            : { [top]: { ...(typeof current === 'object' ? current : {}), [nested]: value } },
        );
      }

      // Act
      const tampered = await report();
      const verified = await runCli(['verify', requestId, ...target()]);
      await doc.send(new PutCommand({ TableName: names.LedgerTableName, Item: original }));
      const restored = await report();

      // Assess: no figure of the edited request is printed; the others are, as before.
      expect(tampered.code).toBe(1);
      expect(tampered.result.refused.map((refused) => refused.request_id)).toEqual([requestId]);
      expect(tampered.result.refused[0]?.findings).toContainEqual({
        check: 'ledger_mismatch',
        detail: expect.stringMatching(detail),
      });
      expect(tampered.stderr).toContain(`${requestId} ledger_mismatch: `);
      expect(tampered.result.records).toEqual(
        untouched.records.filter((record) => record.request_id !== requestId),
      );
      expect(verified.code).toBe(1);
      expect(verified.stdout).toContain('FAILED ledger_mismatch');
      expect(restored.code, restored.stderr).toBe(0);
      expect(restored.result.records).toEqual(untouched.records);
    },
    90_000,
  );

  it('exits 1 naming a fabricated request, a ledger item with no records: chain_missing', async () => {
    // Prepare: a copy of an answered request's item under a new id, as if it had been answered in time.
    const fake = randomUUID();
    await doc.send(
      new PutCommand({
        TableName: names.LedgerTableName,
        Item: { ...(await ledgerItem(answered.request_id)), request_id: fake, fingerprint: fake },
      }),
    );

    // Act
    const tampered = await report();
    const verified = await runCli(['verify', fake, ...target()]);
    await doc.send(new DeleteCommand({ TableName: names.LedgerTableName, Key: { request_id: fake } }));
    const restored = await report();

    // Assess
    expect(tampered.code).toBe(1);
    expect(tampered.result.refused).toEqual([
      {
        request_id: fake,
        findings: expect.arrayContaining([
          {
            check: 'chain_missing',
            detail: 'the ledger has the request (completed) but the bucket has no records',
          },
        ]),
      },
    ]);
    expect(tampered.stderr).toContain(`${fake} chain_missing`);
    expect(tampered.result.records).toEqual(untouched.records);
    expect(verified.code).toBe(1);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.result.records).toEqual(untouched.records);
  }, 90_000);

  it('names a response notice dated before receipt in verify and report, and never prints it as on time', async () => {
    // Prepare: a response notice recorded now (its record stored when it says), claiming a time
    // a day before the request was received, which svc-dsr notice refuses.
    const requestId = unanswered.request_id;
    const item = await ledgerItem(requestId);
    const claimed = new Date(Date.parse(String(item.received_at)) - DAY_MS).toISOString();
    const now = new Date().toISOString();
    const unsealed = {
      schema: AUDIT_SCHEMA,
      request_id: noticesChainOf(requestId),
      seq: 0,
      event_id: `Operator:notice-response-${claimed}`,
      step: 'Operator',
      action: 'notice_given',
      at: now,
      facts: { kind: 'response', channel: 'email', given_at: claimed, reference: null, operator: 'alice' },
      final: false,
      prev_hash: null,
    };
    const record = { ...unsealed, hash: recordHash(unsealed) };
    await s3.send(
      new PutObjectCommand({
        Bucket: names.AuditBucketName,
        Key: auditRecordKey(noticesChainOf(requestId), 0),
        Body: JSON.stringify(record),
      }),
    );
    await editLedger(requestId, {
      notice_response: { channel: 'email', at: claimed, recorded_at: now },
      notices_audit_head: record.hash,
      notices_audit_count: 1,
      notices_audit_at: now,
    });

    // Act
    const verified = await runCli(['verify', requestId, ...target()]);
    const tampered = await report();

    // Assess
    expect(verified.code).toBe(1);
    expect(verified.stdout).toContain(
      `FAILED rule_broken: notices chain: record 0 (notice_given) says the response notice was given at ${claimed}, before the request was received`,
    );
    expect(tampered.code).toBe(1);
    expect(tampered.result.refused).toEqual([
      { request_id: requestId, findings: [expect.objectContaining({ check: 'rule_broken' })] },
    ]);
    expect(tampered.result.records.find((row) => row.request_id === requestId)).toBeUndefined();
    expect(
      tampered.result.records
        .filter((row) => row.on_time === true)
        .map((row) => row.request_id)
        .sort(),
    ).toEqual([answered.request_id, denied.request_id].sort());
  }, 60_000);
});
