import { randomUUID } from 'node:crypto';
import type { SQSEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AuditEvent } from '#shared/audit';
import { computeDeadlines } from '#shared/deadlines';
import { Ledger } from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import { parseRequestMessage } from '#shared/request';
import { verificationPolicySchema } from '#shared/verification';
import { makeIntakeHandler } from '../../../../lambdas/intake/handler.ts';
import { type IntakeDeps, intakeMessage } from '../../../../lambdas/intake/intake.ts';
import { startDynamo } from '../../../helpers/dynamo.ts';

let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let ledger: Ledger;

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'intake');
  ledger = new Ledger(dynamo.client, 'intake');
});
afterAll(async () => {
  await dynamo.close();
});

interface Appended {
  readonly requestId: string;
  readonly event: AuditEvent;
  readonly newChain: boolean | undefined;
}

let appended: Appended[];
let started: string[];
let deps: IntakeDeps;

beforeEach(() => {
  appended = [];
  started = [];
  deps = {
    ledger,
    audit: {
      append: vi.fn(async (requestId: string, event: AuditEvent, options?: { newChain?: boolean }) => {
        appended.push({ requestId, event, newChain: options?.newChain });
        return {} as never;
      }),
    },
    quarantine: vi.fn(async () => {}),
    startExecution: vi.fn(async (name: string) => {
      started.push(name);
      return 'started' as const;
    }),
    logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
  };
});

function message(requestId: string = randomUUID(), method = 'email_link'): string {
  return JSON.stringify({
    request_id: requestId,
    type: 'access',
    regulation: 'gdpr',
    primary_key: 'subject-pk-31',
    received_at: '2026-11-20T00:00:00Z',
    verification: { method, verified_by: 'privacy-team', verified_at: '2026-11-20T00:00:00Z' },
  });
}

describe('intakeMessage', () => {
  it('records a new request as the first record of a new chain and starts its execution', async () => {
    const body = message();

    const result = await intakeMessage(body, deps);

    expect(result.kind).toBe('accepted');
    const requestId = result.kind === 'accepted' ? result.requestId : '';
    expect(appended).toEqual([
      expect.objectContaining({
        requestId,
        newChain: true,
        event: expect.objectContaining({ eventId: 'Intake' }),
      }),
    ]);
    expect(started).toEqual([requestId]);
    expect(await ledger.require(requestId)).toMatchObject({ status: 'received', executions: 1 });
  });

  it('accepts a primary_key that mixes scripts with the warning primary_key_mixed_scripts, logged without the key', async () => {
    // Prepare: a Cyrillic а among Latin letters.
    const key = 'u-p\u0430ul28';
    const logged: unknown[] = [];
    const watched = { ...deps, logger: { ...deps.logger, warn: (...args: unknown[]) => logged.push(args) } };
    const body = message().replace('"subject-pk-31"', JSON.stringify(key));

    // Act
    const result = await intakeMessage(body, watched);

    // Assess: accepted and started, the warning in the ledger, the key in no log line.
    expect(result.kind).toBe('accepted');
    const requestId = result.kind === 'accepted' ? result.requestId : '';
    expect(started).toEqual([requestId]);
    expect(await ledger.require(requestId)).toMatchObject({
      status: 'received',
      intake_warnings: ['primary_key_mixed_scripts'],
    });
    expect(logged).toEqual([
      ['request accepted with warnings', { request_id: requestId, warnings: ['primary_key_mixed_scripts'] }],
    ]);
    expect(JSON.stringify(logged)).not.toContain(key);
  });

  it('records no warning for a key in one script, in ASCII or not', async () => {
    for (const key of ['subject-pk-31', 'Jos\u00e9-7', '\u03a0\u03b1\u03cd\u03bb\u03bf\u03c2']) {
      const result = await intakeMessage(message().replace('"subject-pk-31"', JSON.stringify(key)), deps);
      const requestId = result.kind === 'accepted' ? result.requestId : '';
      expect((await ledger.require(requestId)).intake_warnings).toBeUndefined();
    }
  });

  it('accepts a request already past its due date, flags it overdue and counts it for the alarm', async () => {
    // Prepare: received on 1 September, a GDPR month is over on 1 October; intake runs on 23 November.
    const counted: { name: string; value: number }[] = [];
    const warnings: string[] = [];
    const late = {
      ...deps,
      clock: () => new Date('2026-11-23T09:00:00Z'),
      countMetric: (name: string, value: number) => counted.push({ name, value }),
      logger: { ...deps.logger, warn: (message: string) => warnings.push(message) },
    };
    const body = message().replace(
      '"received_at":"2026-11-20T00:00:00Z"',
      '"received_at":"2026-09-01T10:00:00Z"',
    );

    // Act
    const result = await intakeMessage(body, late);

    // Assess: accepted and started like any other, flagged in the ledger and the intake record, counted.
    expect(result.kind).toBe('accepted');
    const requestId = result.kind === 'accepted' ? result.requestId : '';
    expect(started).toEqual([requestId]);
    expect(await ledger.require(requestId)).toMatchObject({
      status: 'received',
      due_at: '2026-10-01T23:59:59.999Z',
      overdue_at_intake: true,
    });
    expect(appended[0]?.event.facts).toMatchObject({ overdue_at_intake: true });
    expect(counted).toEqual([{ name: 'OverdueAtIntake', value: 1 }]);
    expect(warnings).toEqual(['request was already overdue at intake']);
  });

  it('keeps the channel in the ledger and the intake record, with keyed-hash slots for who verified and who submitted', async () => {
    // Prepare
    const requestId = randomUUID();
    const body = JSON.stringify({
      ...JSON.parse(message(requestId)),
      submitted_by: 'agent-ltd',
      channel: 'authorized_agent',
    });

    // Act
    const result = await intakeMessage(body, deps);

    // Assess: the channel in clear (a closed list, no person), the people only as the subject the trail hashes.
    expect(result.kind).toBe('accepted');
    expect(await ledger.require(requestId)).toMatchObject({ channel: 'authorized_agent' });
    expect(appended[0]?.event.facts).toMatchObject({ channel: 'authorized_agent' });
    expect(appended[0]?.event.subject).toEqual({
      primaryKey: 'subject-pk-31',
      verifiedBy: 'privacy-team',
      submittedBy: 'agent-ltd',
    });
    expect(JSON.stringify(appended[0]?.event.facts)).not.toMatch(/privacy-team|agent-ltd/);
  });

  it('does not flag a request still within its deadline', async () => {
    const counted: string[] = [];
    const result = await intakeMessage(message(), {
      ...deps,
      clock: () => new Date('2026-11-23T09:00:00Z'),
      countMetric: (name) => counted.push(name),
    });

    const requestId = result.kind === 'accepted' ? result.requestId : '';
    expect((await ledger.require(requestId)).overdue_at_intake).toBeUndefined();
    expect(counted).toEqual([]);
  });

  it("counts the deadlines in the controller's configured time zone", async () => {
    // 2026-11-20T00:00Z is still 19 November in Los Angeles: due at the end of 19 December there.
    const result = await intakeMessage(message(), { ...deps, timeZone: 'America/Los_Angeles' });

    const requestId = result.kind === 'accepted' ? result.requestId : '';
    expect((await ledger.require(requestId)).due_at).toBe('2026-12-20T07:59:59.999Z');
    expect(appended[0]?.event.facts).toMatchObject({ time_zone: 'America/Los_Angeles' });
  });

  it('finishes the intake of a request whose first delivery stopped after the ledger write', async () => {
    // Prepare: the first delivery wrote the ledger item, then its Lambda died.
    const requestId = randomUUID();
    const body = message(requestId);
    const parsed = parseRequestMessage(body);
    if (parsed.kind !== 'valid') throw new Error('the test message should be valid');
    await ledger.createReceived(
      parsed.request,
      parsed.fingerprint,
      computeDeadlines('gdpr', new Date(parsed.request.received_at)),
    );

    // Act: SQS delivers the message again.
    const result = await intakeMessage(body, deps);

    // Assess: the intake record is written (by its eventId, after whatever the chain holds) and the execution started.
    expect(result).toEqual({ kind: 'duplicate', requestId });
    expect(appended).toEqual([
      expect.objectContaining({
        requestId,
        newChain: false,
        event: expect.objectContaining({ eventId: 'Intake' }),
      }),
    ]);
    expect(started).toEqual([requestId]);
    expect(await ledger.require(requestId)).toMatchObject({ duplicates: 1, executions: 1 });
  });

  it('counts one run when StartExecution answers success for a redelivery, as it does for a running execution of the same input', async () => {
    // Prepare: the first delivery started the execution; the request is still received.
    const body = message();
    const first = await intakeMessage(body, deps);
    const requestId = first.kind === 'accepted' ? first.requestId : '';

    // Act: SQS delivers it again, and StartExecution answers success again (idempotent).
    await intakeMessage(body, deps);

    // Assess: still one run, so the running execution is not taken for a superseded one.
    expect(started).toEqual([requestId, requestId]);
    expect(await ledger.require(requestId)).toMatchObject({ executions: 1 });
  });

  it('does nothing but count a duplicate of a request already running', async () => {
    const body = message();
    const first = await intakeMessage(body, deps);
    const requestId = first.kind === 'accepted' ? first.requestId : '';
    await ledger.update(requestId, { status: 'running' }, ['received']);
    appended = [];
    started = [];

    const again = await intakeMessage(body, deps);

    expect(again).toEqual({ kind: 'duplicate', requestId });
    expect(appended).toEqual([]);
    expect(started).toEqual([]);
    expect(await ledger.require(requestId)).toMatchObject({ status: 'running', duplicates: 1 });
  });

  it('treats the same request with its id in upper case as a duplicate, never a second request', async () => {
    const requestId = randomUUID();
    const first = await intakeMessage(message(requestId), deps);
    await ledger.update(requestId, { status: 'running' }, ['received']);
    started = [];

    const twin = await intakeMessage(message(requestId.toUpperCase()), deps);

    expect(first).toEqual({ kind: 'accepted', requestId });
    expect(twin).toEqual({ kind: 'duplicate', requestId });
    expect(started).toEqual([]);
    expect(await ledger.require(requestId.toUpperCase())).toMatchObject({
      request_id: requestId,
      duplicates: 1,
    });
  });

  it('rejects an e-mail address as verification.method before anything is written as received', async () => {
    const requestId = randomUUID();
    const body = message(requestId, 'jane@example.com');

    const result = await intakeMessage(body, deps);

    expect(result).toMatchObject({ kind: 'rejected', requestId });
    expect(await ledger.require(requestId)).toMatchObject({
      status: 'rejected',
      rejection_errors: [expect.stringContaining('verification.method')],
    });
    expect(appended.map((entry) => entry.event.action)).toEqual(['request_rejected']);
    expect(started).toEqual([]);
  });

  it('quarantines a message whose intake fails unexpectedly, and closes the request it created', async () => {
    const requestId = randomUUID();
    deps = {
      ...deps,
      audit: {
        append: async () => {
          throw new RangeError('Maximum call stack size exceeded');
        },
      },
    };

    const result = await intakeMessage(message(requestId), deps);

    expect(result).toEqual({
      kind: 'quarantined',
      reason: expect.stringContaining('RangeError: Maximum call stack size exceeded'),
    });
    expect(deps.quarantine).toHaveBeenCalledWith(message(requestId), result.reason, requestId);
    expect(await ledger.require(requestId)).toMatchObject({
      status: 'rejected',
      rejection_errors: [expect.stringContaining('RangeError')],
    });
    expect(started).toEqual([]);
  });

  it('lets a failing AWS service through, so the message returns to the queue', async () => {
    const unavailable = Object.assign(new Error('Service unavailable'), {
      name: 'ServiceUnavailable',
      $metadata: { httpStatusCode: 503 },
    });
    deps = {
      ...deps,
      startExecution: async () => {
        throw unavailable;
      },
    };

    await expect(intakeMessage(message(), deps)).rejects.toBe(unavailable);
    expect(deps.quarantine).not.toHaveBeenCalled();
  });
});

describe('the intake handler', () => {
  it('quarantines a deeply nested message with its reason and accepts the rest of the batch', async () => {
    const nested = `{"request_id":"${randomUUID()}","reference":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    const bodies = [message(), nested, message()];
    const event: SQSEvent = {
      Records: bodies.map((body, index) => ({
        messageId: `m-${index}`,
        receiptHandle: `r-${index}`,
        body,
        attributes: {
          ApproximateReceiveCount: '1',
          SentTimestamp: '0',
          SenderId: 'test',
          ApproximateFirstReceiveTimestamp: '0',
        },
        messageAttributes: {},
        md5OfBody: '',
        eventSource: 'aws:sqs',
        eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:intake',
        awsRegion: 'us-east-1',
      })),
    };
    const kinds = new Map<string, string>();

    const response = await makeIntakeHandler(
      () => deps,
      (record, result) => kinds.set(record.messageId, result.kind),
    )(event);

    expect(response.batchItemFailures).toEqual([]);
    expect(['m-0', 'm-1', 'm-2'].map((id) => kinds.get(id))).toEqual(['accepted', 'quarantined', 'accepted']);
    expect(deps.quarantine).toHaveBeenCalledWith(nested, 'message body is nested more than 32 levels deep');
  });
});

describe('intakeMessage verification gate', () => {
  it('rejects a method with a soft hyphen in it: free text holds no invisible character', async () => {
    const requestId = randomUUID();

    const result = await intakeMessage(message(requestId, 'no\u00adne'), deps);

    expect(result).toMatchObject({ kind: 'rejected', requestId });
    expect(started).toEqual([]);
    expect(await ledger.require(requestId)).toMatchObject({ status: 'rejected' });
  });

  it.each(['none', 'NONE', ' unverified ', ' ', 'n\u043ene', 'n\u03bfne', 'none\u200d', 'Un-Verified'])(
    'denies a request verified by "%s" as identity_not_verified: recorded, closed in the audit trail, never run',
    async (method) => {
      const requestId = randomUUID();

      const result = await intakeMessage(message(requestId, method), deps);

      expect(result).toMatchObject({ kind: 'denied', requestId });
      expect(started).toEqual([]);
      expect(await ledger.require(requestId)).toMatchObject({
        status: 'denied',
        denial: {
          code: 'identity_not_verified',
          reason: 'the verification method says the identity was not verified',
        },
        // A denied request keeps its deadlines: the end of the due day (UTC here).
        due_at: '2026-12-20T23:59:59.999Z',
        executions: 0,
      });
      expect(appended.map((entry) => [entry.event.action, entry.event.final === true])).toEqual([
        ['request_received', false],
        ['request_denied', true],
      ]);
      expect(appended[1]?.event.facts).toMatchObject({
        reason_code: 'identity_not_verified',
        verification_problem: 'not_verified',
      });
    },
  );

  it.each(['pending', 'not_verified', 'id_check_failed', '\u0435mail_link', 'email\u200dlink', '*'])(
    'rejects a request verified by "%s", a method the stack does not name, with the list of known methods',
    async (method) => {
      const requestId = randomUUID();

      const result = await intakeMessage(message(requestId, method), deps);

      expect(result).toMatchObject({ kind: 'rejected', requestId });
      expect(result.kind === 'rejected' ? result.reason : '').toContain(
        'this stack knows account_login, authorized_agent, email_link, id_document',
      );
      expect(started).toEqual([]);
      expect(await ledger.require(requestId)).toMatchObject({
        status: 'rejected',
        rejection_errors: [expect.stringMatching(/^verification\.method: .*email_link, id_document/)],
        executions: 0,
      });
      expect(appended.map((entry) => entry.event.action)).toEqual(['request_rejected']);
      expect(deps.quarantine).toHaveBeenCalledWith(
        expect.any(String),
        expect.stringContaining('verification.method'),
        requestId,
      );
    },
  );

  it('rejects with every field error at once: an unknown method beside a schema error', async () => {
    const requestId = randomUUID();
    const body = message(requestId, 'pending').replace('"regulation":"gdpr"', '"regulation":"lgpd"');

    const result = await intakeMessage(body, deps);

    expect(result).toMatchObject({ kind: 'rejected', requestId });
    expect(await ledger.require(requestId)).toMatchObject({
      rejection_errors: [
        expect.stringMatching(/^regulation: /),
        expect.stringMatching(/^verification\.method: not a method this stack knows/),
      ],
    });
  });

  it('judges the method beside an unknown field of verification', async () => {
    const requestId = randomUUID();
    const body = message(requestId, 'pending').replace('"verified_by"', '"checked":true,"verified_by"');

    await intakeMessage(body, deps);

    expect((await ledger.require(requestId)).rejection_errors).toEqual([
      expect.stringMatching(/^verification: unknown field\(s\) "checked"/),
      expect.stringMatching(/^verification\.method: not a method this stack knows/),
    ]);
  });

  it('judges the method of an invalid request only when the schema found nothing wrong with it', async () => {
    const requestId = randomUUID();
    const body = message(requestId, 'jane@example.com').replace('"regulation":"gdpr"', '"regulation":"lgpd"');

    await intakeMessage(body, deps);

    expect((await ledger.require(requestId)).rejection_errors).toEqual([
      expect.stringMatching(/^regulation: /),
      expect.stringMatching(/^verification\.method: must name the method/),
    ]);
  });

  it('accepts a known method in any case, with "-" for "_", and with surrounding white space', async () => {
    const results = await Promise.all(
      ['Email-Link', ' ACCOUNT_LOGIN ', 'id-document', 'authorized_agent'].map((method) =>
        intakeMessage(message(randomUUID(), method), deps),
      ),
    );

    expect(results.map((result) => result.kind)).toEqual(['accepted', 'accepted', 'accepted', 'accepted']);
  });

  it('accepts only the methods the stack lists for the request type, and denies the others', async () => {
    const gated = {
      ...deps,
      verification: verificationPolicySchema.parse({
        methods: {
          id_document: { acceptedFor: ['access', 'erasure'] },
          email_link: { acceptedFor: ['erasure'] },
        },
      }),
    };
    const emailId = randomUUID();

    const email = await intakeMessage(message(emailId, 'email_link'), gated);
    const document = await intakeMessage(message(randomUUID(), 'ID_Document'), gated);

    expect(email).toEqual({
      kind: 'denied',
      requestId: emailId,
      reason:
        'identity_not_verified: verification method "email_link" is not accepted for access requests; this stack accepts id_document for access requests: verify the identity with one of them and submit again (stack config "verification", docs/deploy.md)',
    });
    expect(await ledger.require(emailId)).toMatchObject({
      status: 'denied',
      denial: { code: 'identity_not_verified', reason: expect.stringContaining('not accepted for access') },
    });
    expect(
      appended.find((entry) => entry.requestId === emailId && entry.event.action === 'request_denied')?.event
        .facts,
    ).toMatchObject({
      verification_problem: 'not_accepted_for_type',
    });
    expect(document.kind).toBe('accepted');
    expect(started).toHaveLength(1);
  });

  it('denies a request verified more than the maximum age before it was received', async () => {
    const requestId = randomUUID();
    const body = message(requestId).replace(
      '"verified_at":"2026-11-20T00:00:00Z"',
      '"verified_at":"2025-11-20T00:00:00Z"',
    );

    const result = await intakeMessage(body, deps);

    expect(result).toMatchObject({ kind: 'denied', requestId });
    expect(started).toEqual([]);
    expect(await ledger.require(requestId)).toMatchObject({
      status: 'denied',
      denial: {
        code: 'identity_not_verified',
        reason: expect.stringContaining('more than 30 days before received_at'),
      },
    });
    expect(appended[1]?.event.facts).toMatchObject({ verification_problem: 'verified_too_early' });
  });

  it('accepts a verification exactly the maximum age before receipt', async () => {
    const body = message().replace(
      '"verified_at":"2026-11-20T00:00:00Z"',
      '"verified_at":"2026-10-21T00:00:00Z"',
    );

    expect((await intakeMessage(body, deps)).kind).toBe('accepted');
  });

  it('completes the audit record of a denial whose first delivery stopped after the ledger write', async () => {
    const requestId = randomUUID();
    const body = message(requestId, 'none');
    const parsed = parseRequestMessage(body);
    if (parsed.kind !== 'valid') throw new Error('the test message should be valid');
    await ledger.createDenied(
      parsed.request,
      parsed.fingerprint,
      computeDeadlines('gdpr', new Date(parsed.request.received_at)),
      { code: 'identity_not_verified' },
    );

    const result = await intakeMessage(body, deps);

    expect(result).toEqual({ kind: 'duplicate', requestId });
    expect(appended.map((entry) => entry.event.eventId)).toEqual(['Intake', 'Intake:denied']);
    expect(started).toEqual([]);
  });
});
