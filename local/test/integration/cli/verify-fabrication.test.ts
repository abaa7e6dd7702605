import { randomUUID } from 'node:crypto';
import { DeleteItemCommand } from '@aws-sdk/client-dynamodb';
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { VerifyAllCheck } from '#shared/evidence/chains';
import { runVerify } from '../../../../bin/cli/commands/verify.ts';
import { collectingIo } from '../../../../bin/cli/format.ts';
import {
  AUDIT_SCHEMA,
  type AuditRecord,
  auditRecordKey,
  auditRecordSchema,
  noticesChainOf,
  recordHash,
} from '../../../../lambdas/shared/audit.ts';
import { type EvidenceWorld, startEvidenceWorld } from './evidence-world.ts';

/**
 * The edits and fabrications of issue 32 ("Why" 3 and 4), each done on local data as an insider
 * with write access to the ledger and the audit bucket would do it; `verify --all` must exit 1
 * with a finding that names what is wrong. The world is shared, so each test looks at the findings
 * of its own request.
 */
const START = new Date('2026-11-20T08:00:00.000Z');
const HOUR_MS = 3600 * 1000;
const DAY_MS = 24 * HOUR_MS;

let world: EvidenceWorld;

beforeAll(async () => {
  world = await startEvidenceWorld(START);
});
afterAll(async () => {
  await world.close();
});

/** A CCPA access request answered by the workflow, and the next day's manifests written. */
async function answeredRequest(): Promise<string> {
  const { requestId } = await world.submit();
  world.advance(HOUR_MS);
  await world.complete(requestId);
  world.advance(DAY_MS);
  await world.manifests();
  return requestId;
}

/** Sets ledger fields directly, as the role that may write the ledger can. */
async function editLedger(requestId: string, fields: Record<string, unknown>): Promise<void> {
  const names = Object.keys(fields);
  await world.dynamo.doc.send(
    new UpdateCommand({
      TableName: world.names.LedgerTableName,
      Key: { request_id: requestId },
      UpdateExpression: `SET ${names.map((_, index) => `#f${index} = :v${index}`).join(', ')}`,
      ExpressionAttributeNames: Object.fromEntries(names.map((name, index) => [`#f${index}`, name])),
      ExpressionAttributeValues: Object.fromEntries(names.map((name, index) => [`:v${index}`, fields[name]])),
    }),
  );
}

async function readChain(chainId: string): Promise<AuditRecord[]> {
  const records: AuditRecord[] = [];
  for (let seq = 0; ; seq += 1) {
    const answer = await world.s3
      .send(new GetObjectCommand({ Bucket: world.names.AuditBucketName, Key: auditRecordKey(chainId, seq) }))
      .catch(() => undefined);
    if (answer === undefined) return records;
    records.push(auditRecordSchema.parse(JSON.parse((await answer.Body?.transformToString('utf-8')) ?? '')));
  }
}

/** Writes a record straight into the bucket, sealed with a correct hash, as a forger would. */
async function forgeRecord(record: Omit<AuditRecord, 'hash'>): Promise<AuditRecord> {
  const sealed = { ...record, hash: recordHash(record) };
  await world.s3.send(
    new PutObjectCommand({
      Bucket: world.names.AuditBucketName,
      Key: auditRecordKey(record.request_id, record.seq),
      Body: JSON.stringify(sealed),
    }),
  );
  return sealed;
}

/** `verify --all`: its exit code, and the findings about one request. */
async function findingsOf(requestId: string) {
  const { exitCode, result } = await world.verifyAll();
  const findings = result.findings.filter((finding) => finding.request_id === requestId);
  return { exitCode, findings, checks: [...new Set(findings.map((finding) => finding.check))].sort() };
}

function finding(check: VerifyAllCheck, detail: RegExp) {
  return expect.objectContaining({ check, detail: expect.stringMatching(detail) });
}

describe('svc-dsr verify --all against edits of ledger facts', () => {
  it('catches the due date moved: ledger_mismatch naming due_at and the intake record', async () => {
    const requestId = await answeredRequest();
    await editLedger(requestId, { due_at: '2027-06-01T00:00:00.000Z' });

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'ledger_mismatch',
        /^the ledger's due_at is "2027-06-01T00:00:00.000Z"; record 0 \(request_received\) locked/,
      ),
    ]);
  });

  it('catches the completion date moved back: ledger_mismatch naming completed_at and the final record', async () => {
    const requestId = await answeredRequest();
    const answeredAt = (await world.ledger.require(requestId)).completed_at ?? '';
    await editLedger(requestId, {
      completed_at: new Date(Date.parse(answeredAt) - 20 * DAY_MS).toISOString(),
    });

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'ledger_mismatch',
        new RegExp(
          `^the ledger's completed_at is .*; record \\d+ \\(request_completed\\) locked "${answeredAt}"`,
        ),
      ),
    ]);
  });

  it('catches the verification method changed: ledger_mismatch naming it', async () => {
    const requestId = await answeredRequest();
    const item = await world.ledger.require(requestId);
    await editLedger(requestId, { verification: { ...item.verification, method: 'id_document' } });

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'ledger_mismatch',
        /^the ledger's verification method is "id_document"; record 0 \(request_received\) locked "email_link"/,
      ),
    ]);
  });

  it('catches verified_at changed: ledger_mismatch naming it', async () => {
    const requestId = await answeredRequest();
    const item = await world.ledger.require(requestId);
    await editLedger(requestId, {
      verification: { ...item.verification, verified_at: '2026-11-01T00:00:00.000Z' },
    });

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'ledger_mismatch',
        /^the ledger's verified_at is "2026-11-01T00:00:00.000Z"; record 0 \(request_received\) locked/,
      ),
    ]);
  });
});

describe('svc-dsr verify --all against edits of the other facts a record locks', () => {
  it('catches the reference, the denial code and the extension flag changed: ledger_mismatch naming each', async () => {
    // Prepare: one request answered, one denied by an operator; then their ledger items edited.
    const answered = await answeredRequest();
    const { requestId: denied } = await world.submit();
    expect((await world.deny(denied)).exitCode).toBe(0);
    await editLedger(answered, { reference: 'DSR-9999', extended: true });
    await editLedger(denied, { denial: { code: 'identity_not_verified', at: new Date().toISOString() } });

    // Act
    const first = await findingsOf(answered);
    const second = await findingsOf(denied);

    // Assess
    expect(first.exitCode).toBe(1);
    expect(first.findings).toEqual([
      finding(
        'ledger_mismatch',
        /^the ledger's reference is not the one record 0 \(request_received\) locked$/,
      ),
      finding(
        'ledger_mismatch',
        /^the ledger says the deadline was extended, but no record locked an extension/,
      ),
    ]);
    expect(second.findings).toEqual([
      finding(
        'ledger_mismatch',
        /^the ledger's denial code is "identity_not_verified"; record \d+ \(request_denied\) locked "exempt"$/,
      ),
    ]);
  });
  it("catches the channel, the due date an extension replaced, and a notice's recorded time or template changed", async () => {
    // Prepare: an answered request with its response notice; one extended; then the ledger edited.
    const answered = await answeredRequest();
    expect((await world.notice(answered, 'response')).exitCode).toBe(0);
    const { requestId: extended } = await world.submit();
    expect((await world.extend(extended)).exitCode).toBe(0);
    const notice = (await world.ledger.require(answered)).notice_response;
    if (notice === undefined) throw new Error('the response notice was not recorded');
    await editLedger(answered, {
      channel: 'in_person',
      notice_response: {
        ...notice,
        recorded_at: new Date(Date.parse(notice.recorded_at) - 30 * DAY_MS).toISOString(),
        template: 'ccpa-response-v1',
      },
    });
    await editLedger(extended, { original_due_at: '2027-03-01T07:59:59.999Z' });

    // Act
    const first = await findingsOf(answered);
    const second = await findingsOf(extended);

    // Assess
    expect(first.exitCode).toBe(1);
    expect(first.findings).toEqual(
      expect.arrayContaining([
        finding(
          'ledger_mismatch',
          /^the ledger's channel is "in_person"; record 0 \(request_received\) locked null$/,
        ),
        finding(
          'ledger_mismatch',
          /^the ledger's response notice template is "ccpa-response-v1"; record 0 \(notice_given\) locked null$/,
        ),
        finding(
          'ledger_mismatch',
          /^the ledger's response notice was recorded at .*; record 0 \(notice_given\) was written at /,
        ),
      ]),
    );
    expect(first.findings).toHaveLength(3);
    expect(second.findings).toEqual([
      finding(
        'ledger_mismatch',
        /^the ledger's original due_at is "2027-03-01T07:59:59.999Z"; record \d+ \(deadline_extended\) locked "/,
      ),
    ]);
  });
});

describe('svc-dsr verify --all against fabrications', () => {
  it('catches a fake request, a ledger item and a chain made up with times ten days back: record_time', async () => {
    // Prepare: a real request to copy, and the fake one written straight into the ledger and bucket.
    const model = await world.ledger.require(await answeredRequest());
    const requestId = randomUUID();
    const back = (ms: number) => new Date(Date.now() - 10 * DAY_MS + ms).toISOString();
    let previous: AuditRecord | undefined;
    for (const [seq, action] of ['request_received', 'request_completed'].entries()) {
      previous = await forgeRecord({
        schema: AUDIT_SCHEMA,
        request_id: requestId,
        seq,
        event_id: action === 'request_received' ? 'Intake' : 'RecordOutcome',
        step: action === 'request_received' ? 'Intake' : 'RecordOutcome',
        action,
        at: back(seq * HOUR_MS),
        facts:
          action === 'request_received' ? { type: 'access', regulation: 'ccpa' } : { outcome: 'no_data' },
        final: action === 'request_completed',
        prev_hash: previous?.hash ?? null,
      });
    }
    await world.dynamo.doc.send(
      new PutCommand({
        TableName: world.names.LedgerTableName,
        Item: {
          ...model,
          request_id: requestId,
          received_at: back(-HOUR_MS),
          created_at: back(0),
          completed_at: back(HOUR_MS),
          audit_head: previous?.hash,
          audit_count: 2,
          audit_at: back(HOUR_MS),
        },
      }),
    );

    // Act
    const { exitCode, findings } = await findingsOf(requestId);

    // Assess
    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'record_time',
        /^record 0 \(request_received\) says it was written at .*, but S3 stored it at .* \(10 days later\)$/,
      ),
      finding(
        'record_time',
        /^record 1 \(request_completed\) says it was written at .*, but S3 stored it at .* \(10 days later\)$/,
      ),
    ]);
  });

  it('catches a fake request that is only a ledger item: chain_missing', async () => {
    const model = await world.ledger.require(await answeredRequest());
    const requestId = randomUUID();
    const { audit_head: _head, audit_count: _count, audit_at: _at, ...item } = model;
    await world.dynamo.doc.send(
      new PutCommand({ TableName: world.names.LedgerTableName, Item: { ...item, request_id: requestId } }),
    );

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding('chain_missing', /^the ledger has the request \(completed\) but the bucket has no records$/),
    ]);
  });

  it('catches a denial notice recorded days later with the time it claims: record_time on the notices chain', async () => {
    // Prepare: the request is denied; the denial notice is made up a week later, dated the day of the denial.
    const { requestId } = await world.submit();
    expect((await world.deny(requestId)).exitCode).toBe(0);
    const deniedAt = new Date().toISOString();
    world.advance(7 * DAY_MS);
    const notice = await forgeRecord({
      schema: AUDIT_SCHEMA,
      request_id: noticesChainOf(requestId),
      seq: 0,
      event_id: `Operator:notice-denial-${deniedAt}`,
      step: 'Operator',
      action: 'notice_given',
      at: deniedAt,
      facts: {
        kind: 'denial',
        channel: 'email',
        given_at: deniedAt,
        reference: null,
        operator: 'alice',
        reason: null,
      },
      final: false,
      prev_hash: null,
    });
    await editLedger(requestId, {
      notice_denial: { channel: 'email', at: deniedAt, recorded_at: deniedAt },
      notices_audit_head: notice.hash,
      notices_audit_count: 1,
      notices_audit_at: deniedAt,
    });

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'record_time',
        /^notices chain: record 0 \(notice_given\) says it was written at .*, but S3 stored it at .* \(7 days later\)$/,
      ),
    ]);
  });

  it('catches a response notice dated before the request was received: rule_broken, in verify and verify --all', async () => {
    // Prepare: answered; a response notice is recorded now (its record stored when it says), but
    // it claims a time a day before the request was received, which svc-dsr notice refuses.
    const requestId = await answeredRequest();
    const receivedAt = (await world.ledger.require(requestId)).received_at ?? '';
    const claimed = new Date(Date.parse(receivedAt) - DAY_MS).toISOString();
    const now = new Date().toISOString();
    const notice = await forgeRecord({
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
    });
    await editLedger(requestId, {
      notice_response: { channel: 'email', at: claimed, recorded_at: now },
      notices_audit_head: notice.hash,
      notices_audit_count: 1,
      notices_audit_at: now,
    });

    // Act
    const all = await findingsOf(requestId);
    const one = await runVerify(world.context, { requestId }, collectingIo());

    // Assess
    const broken = finding(
      'rule_broken',
      new RegExp(
        `^notices chain: record 0 \\(notice_given\\) says the response notice was given at ${claimed}, before the request was received \\(${receivedAt}, record 0 request_received\\)$`,
      ),
    );
    expect(all.exitCode).toBe(1);
    expect(all.findings).toEqual([broken]);
    expect(one.exitCode).toBe(1);
    expect(one.result.findings).toEqual([broken]);
  });

  it('catches an extension forged after the deadline and dated before it: record_time; dated honestly: rule_broken', async () => {
    // Prepare: two open requests whose deadline (45 days) passed without an extension.
    const backdated = (await world.submit()).requestId;
    const honest = (await world.submit()).requestId;
    world.advance(50 * DAY_MS);
    for (const requestId of [backdated, honest]) {
      const item = await world.ledger.require(requestId);
      const chain = await readChain(requestId);
      const last = chain.at(-1);
      const dueAt = item.due_at ?? '';
      const claimedAt =
        requestId === backdated
          ? new Date(Date.parse(dueAt) - DAY_MS).toISOString()
          : new Date().toISOString();
      const newDueAt = item.extension_limit_at ?? '';
      const forged = await forgeRecord({
        schema: AUDIT_SCHEMA,
        request_id: requestId,
        seq: chain.length,
        event_id: 'Operator:extend',
        step: 'Operator',
        action: 'deadline_extended',
        at: claimedAt,
        facts: {
          previous_due_at: dueAt,
          due_at: newDueAt,
          notice_channel: 'email',
          notice_at: claimedAt,
          notice_reference: null,
          operator: 'alice',
          reason: 'complex request',
        },
        final: false,
        prev_hash: last?.hash ?? null,
      });
      await editLedger(requestId, {
        due_at: newDueAt,
        extended: true,
        extension_reason: 'complex request',
        notice_extension: { channel: 'email', at: claimedAt, recorded_at: claimedAt },
        audit_head: forged.hash,
        audit_count: chain.length + 1,
        audit_at: claimedAt,
      });
    }

    // Act
    const first = await findingsOf(backdated);
    const second = await findingsOf(honest);

    // Assess
    expect(first.exitCode).toBe(1);
    expect(first.findings).toEqual([
      finding(
        'record_time',
        /^record 1 \(deadline_extended\) says it was written at .*, but S3 stored it at .* \(6 days later\)$/,
      ),
    ]);
    expect(second.findings).toEqual([
      finding(
        'rule_broken',
        /^record 1 \(deadline_extended\) was written at .*, after the deadline .* it extended$/,
      ),
    ]);
  });

  it("catches a request's ledger item deleted the same day, before any manifest: ledger_missing from the bucket", async () => {
    const { requestId } = await world.submit();
    await world.complete(requestId);
    await world.dynamo.client.send(
      new DeleteItemCommand({
        TableName: world.names.LedgerTableName,
        Key: { request_id: { S: requestId } },
      }),
    );

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'ledger_missing',
        new RegExp(`^the bucket holds the chain audit/${requestId}/, but the ledger has no such request$`),
      ),
    ]);
  });

  it("catches a request's ledger item deleted the next day, before that day's manifest: ledger_missing", async () => {
    // Prepare: answered; the next morning, before the sweep writes the day's manifest, its ledger item goes.
    const { requestId } = await world.submit();
    await world.complete(requestId);
    world.advance(DAY_MS);
    await world.dynamo.client.send(
      new DeleteItemCommand({
        TableName: world.names.LedgerTableName,
        Key: { request_id: { S: requestId } },
      }),
    );
    const days = await world.manifests();

    // Act
    const { exitCode, findings } = await findingsOf(requestId);

    // Assess: the manifest, built from the bucket, locked the chain all the same.
    expect(days.length).toBeGreaterThan(0);
    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'ledger_missing',
        /^manifest \d{4}-\d{2}-\d{2} locked its chain, but the ledger has no such request$/,
      ),
    ]);
  });

  it("catches a chain re-hashed with its ledger head rewritten before that day's manifest: record_time", async () => {
    // Prepare: answered; three hours later, the same day, its final record says another outcome
    // and the chain is re-hashed from there, its ledger head to match; the manifest follows.
    const { requestId } = await world.submit();
    await world.complete(requestId);
    world.advance(3 * HOUR_MS);
    const chain = await readChain(requestId);
    const last = chain.at(-1);
    if (last === undefined) throw new Error('no chain');
    const { hash: _old, ...unsealed } = last;
    const forged = await forgeRecord({ ...unsealed, facts: { ...last.facts, outcome: 'exported' } });
    await editLedger(requestId, { outcome: 'exported', audit_head: forged.hash });
    world.advance(DAY_MS);
    await world.manifests();

    const { exitCode, findings } = await findingsOf(requestId);

    expect(exitCode).toBe(1);
    expect(findings).toEqual([
      finding(
        'record_time',
        new RegExp(
          `^record ${last.seq} \\(request_completed\\) says it was written at .*, but S3 stored it at .* \\(3 hours later\\)$`,
        ),
      ),
    ]);
  });
});
