import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type PutObjectCommandInput,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { buildApp } from 'fauxqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type AuditEvent,
  AuditTrail,
  auditRecordKey,
  auditRecordSchema,
  canonicalJson,
  recordHash,
  subjectHash,
} from '#shared/audit';
import { AuditChainClosedError, ConfigurationError } from '#shared/errors';

const HMAC_KEY = 'test-audit-hmac-key-0123456789abcdef';
const PRIMARY_KEY = 'site-user-8472-unique-pk';
const SVC_USER_ID = 'svc-uid-5d41402abc4b2a76';
const FIXED_NOW = new Date('2026-03-01T10:00:00.000Z');

interface LocalS3 {
  readonly s3: S3Client;
  readonly bucket: string;
  stop(): Promise<void>;
}

/** fauxqs on a loopback port of its own (its startFauxqs binds every interface). */
async function startLocalS3(): Promise<LocalS3> {
  const app = buildApp({ logger: false });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address: AddressInfo | string | null = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('fauxqs did not bind a TCP port');
  const s3 = new S3Client({
    endpoint: `http://127.0.0.1:${address.port}`,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  const bucket = 'audit-test';
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  return {
    s3,
    bucket,
    async stop() {
      s3.destroy();
      await app.close();
    },
  };
}

function event(eventId: string, overrides: Partial<AuditEvent> = {}): AuditEvent {
  return { eventId, step: eventId.split(':')[0] ?? eventId, action: 'step_done', facts: {}, ...overrides };
}

/** The error a promise rejects with, so a test can assert on it after other awaits. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

async function objectKeys(local: LocalS3, prefix: string): Promise<string[]> {
  const page = await local.s3.send(new ListObjectsV2Command({ Bucket: local.bucket, Prefix: prefix }));
  return (page.Contents ?? []).flatMap((object) => (object.Key === undefined ? [] : [object.Key]));
}

async function readBody(local: LocalS3, key: string): Promise<string> {
  const answer = await local.s3.send(new GetObjectCommand({ Bucket: local.bucket, Key: key }));
  return (await answer.Body?.transformToString('utf-8')) ?? '';
}

async function overwrite(local: LocalS3, key: string, body: unknown): Promise<void> {
  await local.s3.send(new PutObjectCommand({ Bucket: local.bucket, Key: key, Body: JSON.stringify(body) }));
}

/** A finished access request: the chain most tests start from. */
async function appendAccessChain(trail: AuditTrail, requestId: string): Promise<void> {
  await trail.append(
    requestId,
    event('Intake:accepted', { action: 'request_accepted', facts: { type: 'access' } }),
  );
  await trail.append(
    requestId,
    event('ResolveSubject:found', {
      action: 'subject_resolved',
      facts: { found: true },
      subject: { primaryKey: PRIMARY_KEY, svcUserId: SVC_USER_ID },
    }),
  );
  await trail.append(
    requestId,
    event('StartExport:attempt-1', { action: 'export_started', facts: { export_id: '98812', attempt: 1 } }),
  );
  await trail.append(
    requestId,
    event('ArchiveExport:verified', {
      action: 'archive_verified',
      facts: { archive_key: `archives/${requestId}/export.zip`, bytes: 48213, sha256: 'ab'.repeat(32) },
    }),
  );
  await trail.append(
    requestId,
    event('RecordOutcome:exported', {
      action: 'request_completed',
      facts: { outcome: 'exported' },
      final: true,
    }),
  );
}

describe('canonicalJson', () => {
  it('gives the same text whatever the key order, at every depth', () => {
    const a = canonicalJson({ b: 1, a: { y: [3, { d: true, c: null }], x: 'é' } });
    const b = canonicalJson({ a: { x: 'é', y: [3, { c: null, d: true }] }, b: 1 });
    expect(a).toBe(b);
    expect(a).toBe('{"a":{"x":"é","y":[3,{"c":null,"d":true}]},"b":1}');
  });

  it('keeps array order, because order in an array is meaning', () => {
    expect(canonicalJson([2, 1])).not.toBe(canonicalJson([1, 2]));
  });

  it('refuses values JSON cannot carry without loss', () => {
    expect(() => canonicalJson({ n: Number.NaN })).toThrow(TypeError);
    expect(() => canonicalJson({ when: new Date(0) })).toThrow(TypeError);
    expect(() => canonicalJson([undefined])).toThrow(TypeError);
  });
});

describe('subjectHash', () => {
  it('is an hmac-sha256 hex digest that depends on the key and on the kind of identifier', () => {
    const hash = subjectHash(HMAC_KEY, 'primary_key', PRIMARY_KEY);
    expect(hash).toMatch(/^hmac-sha256:[0-9a-f]{64}$/);
    expect(subjectHash(HMAC_KEY, 'primary_key', PRIMARY_KEY)).toBe(hash);
    expect(subjectHash(`${HMAC_KEY}x`, 'primary_key', PRIMARY_KEY)).not.toBe(hash);
    expect(subjectHash(HMAC_KEY, 'svc_user_id', PRIMARY_KEY)).not.toBe(hash);
  });
});

describe('AuditTrail against fauxqs S3', () => {
  let local: LocalS3;
  let trail: AuditTrail;

  beforeAll(async () => {
    local = await startLocalS3();
  });

  afterAll(async () => {
    await local.stop();
  });

  beforeEach(() => {
    trail = new AuditTrail(
      { s3: local.s3, bucket: local.bucket },
      { hmacKey: () => HMAC_KEY, clock: () => FIXED_NOW },
    );
  });

  it('writes a linked chain of records that verifies, one object per step under the request prefix', async () => {
    // Prepare
    const requestId = randomUUID();

    // Act
    await appendAccessChain(trail, requestId);
    const records = await trail.list(requestId);
    const verdict = await trail.verify(requestId);

    // Assess
    expect(records.map((record) => record.seq)).toEqual([0, 1, 2, 3, 4]);
    expect(records[0]?.prev_hash).toBeNull();
    for (const [index, record] of records.entries()) {
      expect(record.hash).toBe(recordHash(record));
      if (index > 0) expect(record.prev_hash).toBe(records[index - 1]?.hash);
    }
    expect(records.map((record) => record.final)).toEqual([false, false, false, false, true]);
    expect(await objectKeys(local, `audit/${requestId}/`)).toEqual([
      `audit/${requestId}/000000.json`,
      `audit/${requestId}/000001.json`,
      `audit/${requestId}/000002.json`,
      `audit/${requestId}/000003.json`,
      `audit/${requestId}/000004.json`,
    ]);
    expect(verdict).toEqual({
      ok: true,
      records: 5,
      head: records[4]?.hash,
      final: true,
      hashes: records.map((record) => record.hash),
      chain: records,
      // When S3 stored each record, from the listing (no writer sets it).
      stored_at: records.map(() => expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)),
    });
  });

  it('stores records that pass the schema, as application/json, with the clock time', async () => {
    // Prepare
    const requestId = randomUUID();
    await trail.append(requestId, event('Intake:accepted', { facts: { type: 'erasure', poll_count: 0 } }));
    const key = auditRecordKey(requestId, 0);

    // Act
    const answer = await local.s3.send(new GetObjectCommand({ Bucket: local.bucket, Key: key }));
    const stored = auditRecordSchema.parse(JSON.parse((await answer.Body?.transformToString('utf-8')) ?? ''));

    // Assess
    expect(answer.ContentType).toBe('application/json');
    expect(stored).toMatchObject({
      schema: 'svc-dsr.audit/1',
      request_id: requestId,
      seq: 0,
      event_id: 'Intake:accepted',
      at: FIXED_NOW.toISOString(),
      facts: { type: 'erasure', poll_count: 0 },
      final: false,
      prev_hash: null,
    });
  });

  it('returns the existing record and writes nothing when the same eventId is appended again', async () => {
    // Prepare
    const requestId = randomUUID();
    const first = await trail.append(
      requestId,
      event('StartExport:attempt-1', { facts: { export_id: '1' } }),
    );

    // Act
    const again = await trail.append(
      requestId,
      event('StartExport:attempt-1', { facts: { export_id: '1' } }),
    );

    // Assess
    expect(again).toEqual(first);
    expect(await objectKeys(local, `audit/${requestId}/`)).toHaveLength(1);
  });

  it('reports the seq of a record whose facts were overwritten in the bucket', async () => {
    // Prepare
    const requestId = randomUUID();
    await appendAccessChain(trail, requestId);
    const key = auditRecordKey(requestId, 2);
    const record = auditRecordSchema.parse(JSON.parse(await readBody(local, key)));
    await overwrite(local, key, { ...record, facts: { ...record.facts, export_id: '666' } });

    // Act
    const verdict = await trail.verify(requestId);

    // Assess
    expect(verdict).toEqual({ ok: false, problem: 'hash does not match the record content', at: 2 });
  });

  it('reports the next seq when a tampered record was also given a fresh hash', async () => {
    // Prepare
    const requestId = randomUUID();
    await appendAccessChain(trail, requestId);
    const key = auditRecordKey(requestId, 1);
    const record = auditRecordSchema.parse(JSON.parse(await readBody(local, key)));
    const forged = { ...record, facts: { found: false } };
    await overwrite(local, key, { ...forged, hash: recordHash(forged) });

    // Act
    const verdict = await trail.verify(requestId);

    // Assess
    expect(verdict).toEqual({ ok: false, problem: 'prev_hash does not match the hash of record 1', at: 2 });
  });

  it('reports a deleted middle record by its seq', async () => {
    // Prepare
    const requestId = randomUUID();
    await appendAccessChain(trail, requestId);
    await local.s3.send(new DeleteObjectCommand({ Bucket: local.bucket, Key: auditRecordKey(requestId, 3) }));

    // Act
    const verdict = await trail.verify(requestId);

    // Assess
    expect(verdict).toEqual({ ok: false, problem: 'record 3 is missing', at: 3 });
  });

  it('reports a record copied in from another request', async () => {
    // Prepare
    const requestId = randomUUID();
    const otherId = randomUUID();
    await trail.append(requestId, event('Intake:accepted'));
    const other = await trail.append(otherId, event('Intake:accepted'));
    await trail.append(otherId, event('ResolveSubject:found'));
    await overwrite(local, auditRecordKey(requestId, 1), {
      ...other,
      seq: 1,
    });

    // Act
    const verdict = await trail.verify(requestId);

    // Assess
    expect(verdict).toEqual({ ok: false, problem: 'belongs to another request', at: 1 });
  });

  it('reports a record added after the final record', async () => {
    // Prepare
    const requestId = randomUUID();
    await appendAccessChain(trail, requestId);
    const last = (await trail.list(requestId)).at(-1);
    if (last === undefined) throw new Error('the chain is empty');
    const extra = {
      ...last,
      seq: 5,
      event_id: 'RecordFailure:late',
      step: 'RecordFailure',
      final: false,
      prev_hash: last.hash,
    };
    await overwrite(local, auditRecordKey(requestId, 5), {
      ...extra,
      hash: recordHash(extra),
    });

    // Act
    const verdict = await trail.verify(requestId);

    // Assess
    expect(verdict).toEqual({
      ok: false,
      problem: "a record follows the final record 4 (only an operator's retry of a failure may)",
      at: 5,
    });
  });

  it('reports a request without records instead of calling it verified', async () => {
    expect(await trail.verify(randomUUID())).toEqual({
      ok: false,
      problem: 'no audit records for this request',
      at: 0,
    });
  });

  it('never stores a raw identifier, only HMACs that match subjectHash and verify against the subject', async () => {
    // Prepare
    const requestId = randomUUID();

    // Act
    await appendAccessChain(trail, requestId);
    const keys = await objectKeys(local, 'audit/');
    const bodies = await Promise.all(keys.map((key) => readBody(local, key)));
    const resolved = (await trail.list(requestId))[1];

    // Assess
    expect(bodies.length).toBeGreaterThanOrEqual(5);
    for (const [index, body] of bodies.entries()) {
      expect(body, keys[index]).not.toContain(PRIMARY_KEY);
      expect(body, keys[index]).not.toContain(SVC_USER_ID);
    }
    expect(keys.join('\n')).not.toContain(PRIMARY_KEY);
    expect(resolved?.subject_hashes).toEqual({
      primary_key: subjectHash(HMAC_KEY, 'primary_key', PRIMARY_KEY),
      svc_user_id: subjectHash(HMAC_KEY, 'svc_user_id', SVC_USER_ID),
    });
    expect(
      await trail.verify(requestId, { subject: { primaryKey: PRIMARY_KEY, svcUserId: SVC_USER_ID } }),
    ).toMatchObject({
      ok: true,
    });
  });

  it('fails verification for a different subject or a different HMAC key', async () => {
    // Prepare
    const requestId = randomUUID();
    await appendAccessChain(trail, requestId);

    // Act
    const otherSubject = await trail.verify(requestId, { subject: { primaryKey: 'someone-else-entirely' } });
    const otherKey = await trail.verify(requestId, {
      hmacKey: `${HMAC_KEY}-rotated`,
      subject: { svcUserId: SVC_USER_ID },
    });

    // Assess
    expect(otherSubject).toEqual({
      ok: false,
      problem: 'the primary_key hash does not match the given subject',
      at: 1,
    });
    expect(otherKey).toEqual({
      ok: false,
      problem: 'the svc_user_id hash does not match the given subject',
      at: 1,
    });
  });

  it('fails verification against a subject when no record carries that identifier', async () => {
    // Prepare
    const requestId = randomUUID();
    await trail.append(requestId, event('Intake:accepted'));

    // Act
    const verdict = await trail.verify(requestId, { subject: { primaryKey: PRIMARY_KEY } });

    // Assess
    expect(verdict).toEqual({
      ok: false,
      problem: 'no record carries a primary_key hash to compare',
      at: -1,
    });
  });

  it.each([
    ['an e-mail address', { note: 'contact jane.doe@example.com' }, /fact "note" looks like an e-mail/],
    ['a value over 256 characters', { detail: 'x'.repeat(257) }, /fact "detail" is longer than 256/],
    ['a download link', { source: 'https://cdn.example.com/e.zip?sig=abc' }, /fact "source" holds a URL/],
    [
      'an identifier under its own name',
      { primary_key: 'abc' },
      /fact "primary_key" would hold an identifier/,
    ],
  ])('rejects a fact holding %s and writes nothing', async (_label, facts, message) => {
    // Prepare
    const requestId = randomUUID();

    // Act
    const appending = trail.append(requestId, event('StartExport:attempt-1', { facts }));

    // Assess
    await expect(appending).rejects.toThrow(message);
    expect(await objectKeys(local, `audit/${requestId}/`)).toEqual([]);
  });

  it('keeps the rejected value out of the error message', async () => {
    // Act
    const error = await rejectionOf(
      trail.append(randomUUID(), event('Intake:accepted', { facts: { note: 'jane.doe@example.com' } })),
    );

    // Assess
    expect(String(error)).toMatch(/fact "note"/);
    expect(String(error)).not.toContain('jane');
  });

  it('rejects an append after the final record, yet replays the final record itself', async () => {
    // Prepare
    const requestId = randomUUID();
    await appendAccessChain(trail, requestId);

    // Act
    const late = await rejectionOf(
      trail.append(requestId, event('RecordFailure:late', { action: 'request_failed' })),
    );
    const replay = await trail.append(
      requestId,
      event('RecordOutcome:exported', {
        action: 'request_completed',
        facts: { outcome: 'exported' },
        final: true,
      }),
    );

    // Assess
    expect(late).toBeInstanceOf(AuditChainClosedError);
    expect(String(late)).toMatch(/closed by its final record \(seq 4, request_completed\)/);
    expect(replay.seq).toBe(4);
    expect(await objectKeys(local, `audit/${requestId}/`)).toHaveLength(5);
  });

  it("opens a new segment after a failure's final record only for an operator's action on the failed request, and verifies it", async () => {
    // Prepare
    const requestId = randomUUID();
    await trail.append(requestId, event('Intake', { action: 'request_received' }));
    await trail.append(
      requestId,
      event('RecordFailure:1:export_failed', { action: 'request_failed', final: true }),
    );

    // Act
    const other = await rejectionOf(
      trail.append(requestId, event('ResolveSubject', { action: 'subject_resolved' })),
    );
    const extended = await trail.append(
      requestId,
      event('Operator:extend', { step: 'Operator', action: 'deadline_extended' }),
    );
    const retried = await trail.append(
      requestId,
      event('Operator:retry-2', { step: 'Operator', action: 'request_retried' }),
    );
    await trail.append(requestId, event('RecordOutcome', { action: 'request_completed', final: true }));
    const afterSuccess = await rejectionOf(
      trail.append(requestId, event('Operator:retry-3', { step: 'Operator', action: 'request_retried' })),
    );
    const verdict = await trail.verify(requestId);

    // Assess
    expect(other).toBeInstanceOf(AuditChainClosedError);
    expect(extended.seq).toBe(2);
    expect(retried.seq).toBe(3);
    expect(afterSuccess).toBeInstanceOf(AuditChainClosedError);
    expect(verdict).toMatchObject({ ok: true, records: 5, final: true });
  });

  it('appends after a chain another writer reopened, though this trail remembers it closed', async () => {
    // Prepare
    const requestId = randomUUID();
    await trail.append(requestId, event('Intake', { action: 'request_received' }));
    await trail.append(requestId, event('RecordFailure:1:x', { action: 'request_failed', final: true }));
    const operator = new AuditTrail({ s3: local.s3, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    await operator.append(
      requestId,
      event('Operator:retry-2', { step: 'Operator', action: 'request_retried' }),
    );

    // Act
    const resumed = await trail.append(requestId, event('ResolveSubject', { action: 'subject_resolved' }));

    // Assess
    expect(resumed.seq).toBe(3);
    expect(await trail.verify(requestId)).toMatchObject({ ok: true, records: 4, final: false });
  });

  it('tells the head store the new head after every append, and again when a repeated event finds it written', async () => {
    // Prepare
    const heads: { requestId: string; hash: string; count: number }[] = [];
    const withHeads = new AuditTrail(
      { s3: local.s3, bucket: local.bucket },
      {
        hmacKey: () => HMAC_KEY,
        clock: () => FIXED_NOW,
        heads: {
          recordAuditHead: async (requestId, head) => {
            heads.push({ requestId, hash: head.hash, count: head.count });
          },
        },
      },
    );
    const requestId = randomUUID();

    // Act
    const first = await withHeads.append(requestId, event('Intake'));
    const second = await withHeads.append(requestId, event('RecordOutcome', { final: true }));
    await withHeads.append(requestId, event('RecordOutcome', { final: true }));

    // Assess
    expect(heads).toEqual([
      { requestId, hash: first.hash, count: 1 },
      { requestId, hash: second.hash, count: 2 },
      { requestId, hash: second.hash, count: 2 },
    ]);
  });

  it('refuses a request id that could escape its prefix', async () => {
    await expect(trail.append('../other', event('Intake:accepted'))).rejects.toThrow(/request id/);
  });

  it('refuses to list a chain holding an object that is not a record', async () => {
    // Prepare
    const requestId = randomUUID();
    await trail.append(requestId, event('Intake:accepted'));
    await overwrite(local, auditRecordKey(requestId, 1), { schema: 'something-else' });

    // Act
    const listing = await rejectionOf(trail.list(requestId));
    const verdict = await trail.verify(requestId);

    // Assess
    expect(String(listing)).toMatch(/000001\.json does not match svc-dsr\.audit\/1/);
    expect(verdict).toMatchObject({ ok: false, at: 1 });
  });

  it('refuses a short HMAC key with a ConfigurationError before writing', async () => {
    // Prepare
    const requestId = randomUUID();
    const weak = new AuditTrail({ s3: local.s3, bucket: local.bucket }, { hmacKey: async () => 'short' });

    // Act
    const appending = weak.append(
      requestId,
      event('ResolveSubject:found', { subject: { primaryKey: PRIMARY_KEY } }),
    );

    // Assess
    await expect(appending).rejects.toBeInstanceOf(ConfigurationError);
    expect(await objectKeys(local, `audit/${requestId}/`)).toEqual([]);
  });
});

describe('AuditTrail S3 requests', () => {
  let local: LocalS3;
  /** The client under test: mocked, forwarding to fauxqs unless a test scripts otherwise. */
  const client = new S3Client({ region: 'us-east-1' });
  const s3Mock = mockClient(client);

  beforeAll(async () => {
    local = await startLocalS3();
  });

  afterAll(async () => {
    await local.stop();
  });

  beforeEach(() => {
    s3Mock.reset();
    s3Mock.on(ListObjectsV2Command).callsFake((input) => local.s3.send(new ListObjectsV2Command(input)));
    s3Mock.on(GetObjectCommand).callsFake((input) => local.s3.send(new GetObjectCommand(input)));
    s3Mock.on(PutObjectCommand).callsFake(forwardPut);
  });

  function forwardPut(input: PutObjectCommandInput) {
    return local.s3.send(new PutObjectCommand(input));
  }

  function conflict(name: 'PreconditionFailed' | 'ConditionalRequestConflict'): S3ServiceException {
    return new S3ServiceException({
      name,
      $fault: 'client',
      $metadata: { httpStatusCode: name === 'PreconditionFailed' ? 412 : 409 },
      message: 'At least one of the pre-conditions you specified did not hold',
    });
  }

  it('writes conditionally, with a SHA-256 checksum, SSE-KMS and compliance retention when configured', async () => {
    // Prepare
    const retainUntil = new Date('2029-03-01T10:00:00.000Z');
    const trail = new AuditTrail(
      { s3: client, bucket: local.bucket, kmsKeyId: 'alias/audit', retainUntil: () => retainUntil },
      { hmacKey: () => HMAC_KEY, clock: () => FIXED_NOW },
    );
    const requestId = randomUUID();

    // Act
    await trail.append(requestId, event('Intake:accepted'));

    // Assess
    expect(s3Mock).toHaveReceivedCommandWith(PutObjectCommand, {
      Bucket: local.bucket,
      Key: `audit/${requestId}/000000.json`,
      ContentType: 'application/json',
      IfNoneMatch: '*',
      ChecksumAlgorithm: 'SHA256',
      ServerSideEncryption: 'aws:kms',
      SSEKMSKeyId: 'alias/audit',
      ObjectLockMode: 'COMPLIANCE',
      ObjectLockRetainUntilDate: retainUntil,
    });
  });

  it('leaves encryption and retention to the bucket defaults when not configured', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });

    // Act
    await trail.append(randomUUID(), event('Intake:accepted'));

    // Assess
    const input = s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input;
    expect(input).toMatchObject({ IfNoneMatch: '*', ChecksumAlgorithm: 'SHA256' });
    expect(input).not.toHaveProperty('ObjectLockMode');
    expect(input).not.toHaveProperty('SSEKMSKeyId');
  });

  it('refuses a per-object retention shorter than 24 months', async () => {
    // Prepare
    const trail = new AuditTrail(
      { s3: client, bucket: local.bucket, retainUntil: (now) => new Date(now.getTime() + 365 * 86_400_000) },
      { hmacKey: () => HMAC_KEY, clock: () => FIXED_NOW },
    );

    // Act
    const appending = trail.append(randomUUID(), event('Intake:accepted'));

    // Assess
    await expect(appending).rejects.toBeInstanceOf(ConfigurationError);
    expect(s3Mock).not.toHaveReceivedCommand(PutObjectCommand);
  });

  it('re-reads after losing a race for a seq and appends after the winner', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const rival = new AuditTrail({ s3: local.s3, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();
    await rival.append(requestId, event('Intake:accepted'));
    s3Mock
      .on(PutObjectCommand)
      .callsFakeOnce(async () => {
        await rival.append(requestId, event('ResolveSubject:found'));
        throw conflict('PreconditionFailed');
      })
      .callsFake(forwardPut);

    // Act
    const record = await trail.append(
      requestId,
      event('CancelRequest:requested', { action: 'cancel_requested' }),
    );

    // Assess
    expect(record.seq).toBe(2);
    expect(s3Mock).toHaveReceivedNthCommandWith(PutObjectCommand, 1, {
      Key: `audit/${requestId}/000001.json`,
    });
    expect(s3Mock).toHaveReceivedNthCommandWith(PutObjectCommand, 2, {
      Key: `audit/${requestId}/000002.json`,
    });
    expect(await trail.verify(requestId)).toMatchObject({ ok: true, records: 3 });
  });

  it('keeps an open chain in memory between appends, and lets a chain go once its final record is written', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();

    // Act
    await trail.append(requestId, event('Intake:accepted'), { newChain: true });
    await trail.append(requestId, event('ResolveSubject:found'));
    const whileOpen = trail.chainsInMemory;
    await trail.append(
      requestId,
      event('RecordOutcome:exported', { action: 'request_completed', final: true }),
    );

    // Assess: the second append read no bucket listing; the closed chain is gone from memory.
    expect(s3Mock).toHaveReceivedCommandTimes(ListObjectsV2Command, 0);
    expect(whileOpen).toBe(1);
    expect(trail.chainsInMemory).toBe(0);
    expect(await trail.verify(requestId)).toMatchObject({ ok: true, records: 3 });
    await expect(trail.append(requestId, event('Late:step'))).rejects.toBeInstanceOf(AuditChainClosedError);
  });

  it('writes the first record of a new chain without listing the bucket', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();

    // Act
    const record = await trail.append(requestId, event('Intake:accepted'), { newChain: true });

    // Assess
    expect(record).toMatchObject({ seq: 0, prev_hash: null });
    expect(s3Mock).toHaveReceivedCommandTimes(ListObjectsV2Command, 0);
    expect(s3Mock).toHaveReceivedCommandWith(PutObjectCommand, {
      Key: `audit/${requestId}/000000.json`,
      IfNoneMatch: '*',
    });
    expect(await trail.verify(requestId)).toMatchObject({ ok: true, records: 1 });
  });

  it('reads the chain and appends after it when a chain said to be new is not', async () => {
    // Prepare: another writer already holds seq 0; the bucket refuses the overwrite.
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const rival = new AuditTrail({ s3: local.s3, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();
    await rival.append(requestId, event('Intake:accepted'));
    s3Mock.on(PutObjectCommand).rejectsOnce(conflict('PreconditionFailed')).callsFake(forwardPut);

    // Act
    const record = await trail.append(requestId, event('ResolveSubject:found'), { newChain: true });

    // Assess
    expect(record.seq).toBe(1);
    expect(s3Mock).toHaveReceivedCommandTimes(ListObjectsV2Command, 1);
    expect(await trail.verify(requestId)).toMatchObject({ ok: true, records: 2 });
  });

  it('returns the stored record, writing nothing new, when a new-chain append repeats its event', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const rival = new AuditTrail({ s3: local.s3, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();
    const first = await rival.append(requestId, event('Intake:accepted'));
    s3Mock.on(PutObjectCommand).rejectsOnce(conflict('PreconditionFailed')).callsFake(forwardPut);

    // Act
    const again = await trail.append(requestId, event('Intake:accepted'), { newChain: true });

    // Assess
    expect(again).toEqual(first);
    expect(s3Mock).toHaveReceivedCommandTimes(PutObjectCommand, 1);
    expect(await trail.verify(requestId)).toMatchObject({ ok: true, records: 1 });
  });

  it('returns the rival record when the race was lost to a retry of the same event', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const rival = new AuditTrail({ s3: local.s3, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();
    s3Mock
      .on(PutObjectCommand)
      .callsFakeOnce(async () => {
        await rival.append(requestId, event('StartExport:attempt-1'));
        throw conflict('ConditionalRequestConflict');
      })
      .callsFake(forwardPut);

    // Act
    const record = await trail.append(requestId, event('StartExport:attempt-1'));

    // Assess
    expect(record.seq).toBe(0);
    expect(s3Mock).toHaveReceivedCommandTimes(PutObjectCommand, 1);
    expect(await objectKeys(local, `audit/${requestId}/`)).toHaveLength(1);
  });

  it('gives up after three retries of a conflicting write', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    s3Mock.on(PutObjectCommand).rejects(conflict('PreconditionFailed'));

    // Act
    const appending = trail.append(randomUUID(), event('Intake:accepted'));

    // Assess
    await expect(appending).rejects.toThrow(/after 3 retries/);
    expect(s3Mock).toHaveReceivedCommandTimes(PutObjectCommand, 4);
  });

  it('passes other S3 errors through without retrying', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const denied = new S3ServiceException({
      name: 'AccessDenied',
      $fault: 'client',
      $metadata: { httpStatusCode: 403 },
      message: 'Access Denied',
    });
    s3Mock.on(PutObjectCommand).rejects(denied);

    // Act
    const appending = trail.append(randomUUID(), event('Intake:accepted'));

    // Assess
    await expect(appending).rejects.toBe(denied);
    expect(s3Mock).toHaveReceivedCommandTimes(PutObjectCommand, 1);
  });

  it('follows ListObjectsV2 pagination to find the end of a long chain', async () => {
    // Prepare
    const trail = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const requestId = randomUUID();
    for (const attempt of [1, 2, 3]) await trail.append(requestId, event(`CheckExport:poll-${attempt}`));
    s3Mock
      .on(ListObjectsV2Command)
      .callsFake((input) => local.s3.send(new ListObjectsV2Command({ ...input, MaxKeys: 2 })));

    // Act: a new trail, as in a fresh Lambda container, has to read the chain from the bucket
    const fresh = new AuditTrail({ s3: client, bucket: local.bucket }, { hmacKey: () => HMAC_KEY });
    const record = await fresh.append(requestId, event('CheckExport:poll-4'));

    // Assess
    expect(record.seq).toBe(3);
    expect(s3Mock).toHaveReceivedCommandWith(ListObjectsV2Command, { ContinuationToken: expect.any(String) });
    expect(await trail.verify(requestId)).toMatchObject({ ok: true, records: 4 });
  });
});
