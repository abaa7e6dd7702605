import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import {
  DescribeExecutionCommand,
  SFNClient,
  StartExecutionCommand,
  StopExecutionCommand,
} from '@aws-sdk/client-sfn';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { auditRecordSchema } from '#shared/audit';
import { computeDeadlines } from '#shared/deadlines';
import {
  Ledger,
  type LedgerItem,
  type LedgerPatch,
  noticesDue,
  OWED_STATUSES,
  type OwedStatus,
  type Status,
} from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import { runCancel } from '../../../bin/cli/commands/cancel.ts';
import { runDeny } from '../../../bin/cli/commands/deny.ts';
import { runExtend } from '../../../bin/cli/commands/extend.ts';
import { runNotice } from '../../../bin/cli/commands/notice.ts';
import { runReport } from '../../../bin/cli/commands/report.ts';
import { runRetry } from '../../../bin/cli/commands/retry.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { inProcessOperator } from '../../../bin/cli/operator-client.ts';
import type { CliContext } from '../../../bin/cli/target.ts';
import { startDynamo } from '../../helpers/dynamo.ts';
import { NOW, PRIMARY_KEY, testContext } from './helpers.ts';
import { chainsFor, serveChains } from './locked-chains.ts';

/** The conditional writes run against dynalite, so their expressions are parsed and evaluated for real. */
const sfnMock = mockClient(SFNClient);
// Operator actions are appended to the audit chain; an empty chain takes seq 0.
const s3Mock = mockClient(S3Client);
let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let context: CliContext;

/** A ledger whose first read returns an older copy of the item: the state another writer has since changed. */
class StaleOnce extends Ledger {
  #stale: LedgerItem | undefined;
  constructor(db: DynamoDBClient, stale: LedgerItem) {
    super(db, 'ledger', () => NOW);
    this.#stale = stale;
  }
  override async get(requestId: string): Promise<LedgerItem | undefined> {
    const stale = this.#stale;
    this.#stale = undefined;
    return stale ?? super.get(requestId);
  }
}

/** The context with the operator function reading through a StaleOnce ledger (another writer went first). */
function staleContext(stale: LedgerItem): CliContext {
  const ledger = new StaleOnce(dynamo.client, stale);
  return {
    ...context,
    ledger,
    operatorFunction: inProcessOperator({ ...context, ledger }, context.operator),
  };
}

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  context = testContext({ dynamoClient: dynamo.client });
});
afterAll(async () => {
  await dynamo.close();
});
beforeEach(() => {
  s3Mock.reset();
  s3Mock.on(ListObjectsV2Command).resolves({});
  s3Mock.on(PutObjectCommand).resolves({});
  s3Mock.on(ListObjectVersionsCommand).resolves({});
  sfnMock.reset();
  sfnMock.on(StopExecutionCommand).resolves({ stopDate: NOW });
  sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });
});

/** A request in the ledger, moved to `patch` (from received). */
async function stored(patch: LedgerPatch = {}, from: Status[] = ['received']): Promise<LedgerItem> {
  const requestId = randomUUID();
  const receivedAt = '2026-11-20T09:00:00Z';
  await context.ledger.createReceived(
    {
      request_id: requestId,
      type: 'erasure',
      regulation: 'gdpr',
      primary_key: PRIMARY_KEY,
      received_at: receivedAt,
      verification: { method: 'email_link', verified_by: 'pt', verified_at: receivedAt },
    },
    'fp',
    computeDeadlines('gdpr', new Date(receivedAt)),
  );
  return Object.keys(patch).length === 0
    ? context.ledger.require(requestId)
    : context.ledger.update(requestId, patch, from);
}

describe('cancel against DynamoDB', () => {
  it('records cancelled with the reason and the time', async () => {
    const item = await stored({ status: 'running', step: 'exporting' });
    await runCancel(context, { requestId: item.request_id, reason: 'subject withdrew' }, collectingIo());
    expect(await context.ledger.require(item.request_id)).toMatchObject({
      status: 'cancelled',
      cancel_reason: 'subject withdrew',
      completed_at: NOW.toISOString(),
      step: 'exporting',
    });
  });

  it('is refused by the condition when the erasure started after the item was read', async () => {
    // Prepare: the table says erasing; the command first reads the older exporting copy
    const now = await stored({ status: 'running', step: 'erasing' });
    const stale = { ...now, step: 'exporting' as const };
    // Act
    const error = await runCancel(
      staleContext(stale),
      { requestId: now.request_id, reason: 'r' },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    // Assess
    expect(error).toMatchObject({ exitCode: 1, message: expect.stringContaining('erasure has started') });
    expect(await context.ledger.require(now.request_id)).toMatchObject({
      status: 'running',
      step: 'erasing',
    });
    expect(sfnMock.calls()).toHaveLength(0);
  });
});

describe('deny against DynamoDB', () => {
  it('records denied with the code and reason, closes the audit chain, deletes the copies and stops the executions', async () => {
    // Prepare
    const item = await stored({ status: 'running', step: 'exporting' });
    // Act
    const { exitCode, result } = await runDeny(
      context,
      { requestId: item.request_id, reasonCode: 'identity_not_verified', reason: 'ID check failed twice' },
      collectingIo(),
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(await context.ledger.require(item.request_id)).toMatchObject({
      status: 'denied',
      denial: { code: 'identity_not_verified', reason: 'ID check failed twice', at: NOW.toISOString() },
      completed_at: NOW.toISOString(),
    });
    for (const status of OWED_STATUSES) {
      for await (const open of context.ledger.openRequests(status))
        expect(open.request_id).not.toBe(item.request_id);
    }
    const record = JSON.parse(String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body));
    expect(record).toMatchObject({
      action: 'request_denied',
      final: true,
      facts: { reason_code: 'identity_not_verified' },
    });
    expect(s3Mock.commandCalls(ListObjectVersionsCommand)).toHaveLength(1);
    expect(sfnMock.commandCalls(StopExecutionCommand).length).toBeGreaterThan(0);
    expect(result).toMatchObject({ status: 'denied', previous_status: 'running', notice_due: 'denial' });
  });

  it('is refused once the erasure has started, and for an ended request', async () => {
    const erasing = await stored({ status: 'running', step: 'erasing' });
    const completed = await stored({ status: 'completed', outcome: 'exported' });
    const deny = (requestId: string) =>
      runDeny(context, { requestId, reasonCode: 'other', reason: 'r' }, collectingIo()).catch(
        (caught: unknown) => caught,
      );
    expect(await deny(erasing.request_id)).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('cannot be denied: its erasure has started'),
    });
    expect(await deny(completed.request_id)).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining(
        'is completed; only received, running or failed requests can be denied',
      ),
    });
    expect(await context.ledger.require(erasing.request_id)).toMatchObject({ status: 'running' });
    expect(sfnMock.calls()).toHaveLength(0);
  });

  it('refuses an unknown reason code with exit 2 before reading anything', async () => {
    const error = await runDeny(
      context,
      { requestId: randomUUID(), reasonCode: 'bored', reason: 'r' },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    expect(error).toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('--reason-code: must be one of identity_not_verified'),
    });
  });
});

describe('extend against DynamoDB', () => {
  it('sets the new due date once; a second operator working from the old copy is refused', async () => {
    // Prepare
    const item = await stored();
    // Act
    await runExtend(
      context,
      { requestId: item.request_id, reason: 'complex', notice: { channel: 'email' } },
      collectingIo(),
    );
    const second = await runExtend(
      staleContext(item),
      { requestId: item.request_id, reason: 'again', notice: { channel: 'letter' } },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    // Assess
    expect(await context.ledger.require(item.request_id)).toMatchObject({
      due_at: item.extension_limit_at,
      extended: true,
      extension_reason: 'complex',
      notice_extension: { channel: 'email', at: NOW.toISOString(), recorded_at: NOW.toISOString() },
    });
    expect(second).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('already been extended once'),
    });
  });
});

describe('notices against DynamoDB', () => {
  it('refuses an extension without a notice to the subject, before reading anything (exit 2)', async () => {
    const item = await stored();
    const error = await runExtend(
      context,
      { requestId: item.request_id, reason: 'complex', notice: {} },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    expect(error).toMatchObject({
      exitCode: 2,
      message: expect.stringContaining('--notice-channel: is required'),
    });
    expect((await context.ledger.require(item.request_id)).extended).toBe(false);
  });

  it('records a CCPA receipt confirmation, which is then no longer due, with an audit record of who recorded it', async () => {
    // Prepare: a CCPA request owes a receipt confirmation by its confirm_by date
    const requestId = randomUUID();
    await context.ledger.createReceived(
      {
        request_id: requestId,
        type: 'access',
        regulation: 'ccpa',
        primary_key: PRIMARY_KEY,
        received_at: '2026-11-20T09:00:00Z',
        verification: { method: 'email_link', verified_by: 'pt', verified_at: '2026-11-20T09:00:00Z' },
      },
      'fp',
      computeDeadlines('ccpa', new Date('2026-11-20T09:00:00Z')),
    );
    const before = await context.ledger.require(requestId);
    expect(noticesDue(before, NOW)).toEqual([{ kind: 'receipt', due_by: before.confirm_by, overdue: false }]);
    // Act
    const { exitCode } = await runNotice(
      context,
      { requestId, kind: 'receipt', channel: 'email', at: '2026-11-21T10:00:00Z', reference: 'DSR-7' },
      collectingIo(),
    );
    // Assess
    expect(exitCode).toBe(0);
    const after = await context.ledger.require(requestId);
    expect(after.notice_receipt).toEqual({
      channel: 'email',
      at: '2026-11-21T10:00:00.000Z',
      reference: 'DSR-7',
      recorded_at: NOW.toISOString(),
    });
    expect(noticesDue(after, NOW)).toEqual([]);
    // Notices follow the request's end, after its final record: they have a chain of their own.
    expect(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Key).toBe(
      `audit/${requestId}.notices/000000.json`,
    );
    const record = JSON.parse(String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body));
    expect(record).toMatchObject({
      action: 'notice_given',
      facts: {
        kind: 'receipt',
        channel: 'email',
        given_at: '2026-11-21T10:00:00.000Z',
        operator: expect.any(String),
      },
    });
  });

  it('owes a denial notice once denied, and refuses a response notice before the request is completed', async () => {
    const item = await stored({ status: 'running', step: 'exporting' });
    const early = await runNotice(
      context,
      { requestId: item.request_id, kind: 'response', channel: 'email' },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    expect(early).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('a response notice is recorded only for completed requests'),
    });
    await runDeny(
      context,
      { requestId: item.request_id, reasonCode: 'exempt', reason: 'trade secret' },
      collectingIo(),
    );
    const denied = await context.ledger.require(item.request_id);
    expect(noticesDue(denied, NOW)).toEqual([{ kind: 'denial', due_by: denied.due_at, overdue: false }]);
    await runNotice(
      context,
      { requestId: item.request_id, kind: 'denial', channel: 'letter' },
      collectingIo(),
    );
    expect(noticesDue(await context.ledger.require(item.request_id), NOW)).toEqual([]);
  });

  it('owes the denial of an extended GDPR request one month after receipt, not at the extended due date (Art. 12(4))', async () => {
    // Prepare: received 2026-11-20, due 2026-12-20, extended to 2027-02-20
    const item = await stored({ status: 'running', step: 'exporting' });
    await runExtend(
      context,
      { requestId: item.request_id, reason: 'complex', notice: { channel: 'email' } },
      collectingIo(),
    );
    // Act
    await runDeny(context, { requestId: item.request_id, reasonCode: 'exempt', reason: 'r' }, collectingIo());
    // Assess
    const denied = await context.ledger.require(item.request_id);
    expect(denied).toMatchObject({ due_at: item.extension_limit_at, original_due_at: item.due_at });
    expect(noticesDue(denied, NOW)).toEqual([{ kind: 'denial', due_by: item.due_at, overdue: false }]);
    expect(item.due_at).toBe('2026-12-20T23:59:59.999Z');
  });

  it('owes the denial of an extended CCPA request by its extended due date, as section 7021 allows', async () => {
    const requestId = randomUUID();
    await context.ledger.createReceived(
      {
        request_id: requestId,
        type: 'access',
        regulation: 'ccpa',
        primary_key: PRIMARY_KEY,
        received_at: '2026-11-20T09:00:00Z',
        verification: { method: 'email_link', verified_by: 'pt', verified_at: '2026-11-20T09:00:00Z' },
      },
      'fp',
      computeDeadlines('ccpa', new Date('2026-11-20T09:00:00Z')),
    );
    await runExtend(context, { requestId, reason: 'complex', notice: { channel: 'email' } }, collectingIo());
    await runDeny(context, { requestId, reasonCode: 'exempt', reason: 'r' }, collectingIo());
    const denied = await context.ledger.require(requestId);
    expect(noticesDue(denied, NOW)).toContainEqual({
      kind: 'denial',
      due_by: '2027-02-18T23:59:59.999Z',
      overdue: false,
    });
  });

  it('keeps what a denial notice said, its template and the values filled in, in its locked record', async () => {
    // Prepare
    const item = await stored({ status: 'running', step: 'exporting' });
    await runDeny(context, { requestId: item.request_id, reasonCode: 'exempt', reason: 'r' }, collectingIo());
    // Act
    const { result } = await runNotice(
      context,
      {
        requestId: item.request_id,
        kind: 'denial',
        channel: 'letter',
        template: 'gdpr-denial-v3',
        values: ['reason_code=exempt', 'complaint_authority=CNIL, 3 place de Fontenoy'],
      },
      collectingIo(),
    );
    // Assess
    expect(result.content).toEqual({
      template: 'gdpr-denial-v3',
      values: { reason_code: 'exempt', complaint_authority: 'CNIL, 3 place de Fontenoy' },
    });
    expect((await context.ledger.require(item.request_id)).notice_denial).toMatchObject({
      template: 'gdpr-denial-v3',
    });
    const put = s3Mock
      .commandCalls(PutObjectCommand)
      .find((call) => call.args[0].input.Key?.startsWith(`audit/${item.request_id}.notices/`));
    expect(JSON.parse(String(put?.args[0].input.Body))).toMatchObject({
      action: 'notice_given',
      facts: {
        kind: 'denial',
        template: 'gdpr-denial-v3',
        value_reason_code: 'exempt',
        value_complaint_authority: 'CNIL, 3 place de Fontenoy',
      },
    });
  });

  it.each([
    [['email=jane@example.com'], '--value: value "email" would hold an identifier'],
    [['contact=jane@example.com'], '--value: value "contact" looks like an e-mail address'],
    [['portal=https://example.com/x'], '--value: value "portal" holds a URL'],
    [['reason'], '--value: "reason" is not name=value'],
  ])(
    'refuses notice values the audit trail must not keep (%s) with exit 2, before writing',
    async (values, message) => {
      const item = await stored({ status: 'running', step: 'exporting' });
      await runDeny(
        context,
        { requestId: item.request_id, reasonCode: 'exempt', reason: 'r' },
        collectingIo(),
      );
      s3Mock.resetHistory();
      const error = await runNotice(
        context,
        { requestId: item.request_id, kind: 'denial', channel: 'letter', template: 'gdpr-denial-v3', values },
        collectingIo(),
      ).catch((caught: unknown) => caught);
      expect(error).toMatchObject({ exitCode: 2, message: expect.stringContaining(message) });
      expect((await context.ledger.require(item.request_id)).notice_denial).toBeUndefined();
      expect(s3Mock.commandCalls(PutObjectCommand)).toHaveLength(0);
    },
  );

  it('records in the response to an erased subject what the platform keeps, and tells the operator to say it', async () => {
    // Prepare
    const item = await stored(
      {
        status: 'completed',
        step: null,
        outcome: 'erased',
        erasure: { outcome: 'deleted', platform_status: 204, at: '2026-11-20T10:00:00Z' },
        completed_at: '2026-11-20T10:00:01Z',
      },
      ['received'],
    );
    const io = collectingIo();
    // Act
    const { result } = await runNotice(
      context,
      { requestId: item.request_id, kind: 'response', channel: 'email' },
      io,
    );
    // Assess
    expect(result.platform_keeps).toContain('re-linked to a random guest user');
    expect(io.stdout()).toContain('the response must say what the platform keeps');
    const record = JSON.parse(String(s3Mock.commandCalls(PutObjectCommand).at(-1)?.args[0].input.Body));
    expect(record).toMatchObject({
      action: 'notice_given',
      facts: { kind: 'response', platform_keeps: 'comments', comments_relinked_to: 'random_guest_user' },
    });
  });

  it('refuses a notice given in the future as an invalid flag (exit 2)', async () => {
    const item = await stored();
    const error = await runNotice(
      context,
      { requestId: item.request_id, kind: 'receipt', channel: 'email', at: '2027-01-01T00:00:00Z' },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    expect(error).toMatchObject({
      exitCode: 2,
      message:
        '--at: 2027-01-01T00:00:00Z is in the future; give the time the subject was told (clocks may differ by 5 minutes at most)',
    });
    expect(await context.ledger.require(item.request_id)).toEqual(item);
  });
});

describe('report on notices recorded through the command', () => {
  it('shows a response notice recorded after its due date with an earlier time claimed as late, and one recorded in time as on time', async () => {
    // Prepare: two GDPR requests received 2026-11-20, due 2026-12-20, completed the next day.
    const completed = {
      status: 'completed',
      step: null,
      outcome: 'exported',
      completed_at: NOW.toISOString(),
    } as const;
    const backdated = await stored(completed);
    const honest = await stored(completed);
    // The audit trail reads the system clock: it is set to the operator's, so each notice record
    // is written when the ledger says the notice was recorded, as on a real machine.
    vi.useFakeTimers({ toFake: ['Date'] });
    const january = new Date('2027-01-10T09:00:00Z');
    const late = testContext({ dynamoClient: dynamo.client }, () => january);
    try {
      vi.setSystemTime(NOW);
      await runNotice(
        context,
        { requestId: honest.request_id, kind: 'response', channel: 'email', at: '2026-11-21T10:00:00Z' },
        collectingIo(),
      );
      // Act: on 10 January the operator records a response claiming 15 December.
      vi.setSystemTime(january);
      await runNotice(
        late,
        { requestId: backdated.request_id, kind: 'response', channel: 'email', at: '2026-12-15T10:00:00Z' },
        collectingIo(),
      );
    } finally {
      vi.useRealTimers();
    }
    // The audit bucket holds the notice records the command wrote, and an own chain that locks
    // each item as the workflow would have (the items were stored straight into the ledger).
    const written = s3Mock
      .commandCalls(PutObjectCommand)
      .map((call) => auditRecordSchema.parse(JSON.parse(String(call.args[0].input.Body))));
    const noticeChains = [...new Set(written.map((record) => record.request_id))].map((chainId) => ({
      chainId,
      records: written.filter((record) => record.request_id === chainId),
    }));
    const items = await Promise.all(
      [backdated, honest].map((item) => context.ledger.require(item.request_id)),
    );
    s3Mock.reset();
    serveChains(s3Mock, [
      ...items.flatMap((item) => chainsFor(item).filter((chain) => chain.chainId === item.request_id)),
      ...noticeChains,
    ]);
    const { result } = await runReport(late, { json: true, recheckAfterMs: [0] }, collectingIo());
    // Assess
    // (The table holds the other tests' requests too, with no records: those are refused.)
    const refused = result.refused.map((entry) => entry.request_id);
    expect(refused).not.toContain(backdated.request_id);
    expect(refused).not.toContain(honest.request_id);
    const byId = new Map(result.records.map((record) => [record.request_id, record]));
    expect(byId.get(backdated.request_id)).toMatchObject({
      notice_given_at: '2026-12-15T10:00:00.000Z',
      notice_recorded_at: january.toISOString(),
      response_date: january.toISOString(),
      notice_due_at: backdated.due_at,
      on_time: false,
      notice_recorded_late: true,
    });
    expect(byId.get(honest.request_id)).toMatchObject({
      response_date: NOW.toISOString(),
      on_time: true,
      notice_recorded_late: false,
    });
  });
});

describe('retry against DynamoDB', () => {
  it('clears the error, keeps the attempt history, counts the execution; a concurrent retry is refused', async () => {
    // Prepare
    const running = await stored({ status: 'running', step: 'exporting', export_attempts: 3 });
    const failedItem = await context.ledger.update(
      running.request_id,
      { status: 'failed', error: { code: 'export_failed', message: 'gave up' }, executions: 1 },
      ['running'],
    );
    // The first retry's execution runs by the time the second retry looks at it.
    sfnMock.on(DescribeExecutionCommand).resolves({ status: 'RUNNING' });
    // Act
    const first = await runRetry(context, { requestId: failedItem.request_id }, collectingIo());
    const second = await runRetry(
      staleContext(failedItem),
      { requestId: failedItem.request_id },
      collectingIo(),
    ).catch((caught: unknown) => caught);
    // Assess
    expect(first.result.execution).toBe(`${failedItem.request_id}-retry-2`);
    const after = await context.ledger.require(failedItem.request_id);
    expect(after).toMatchObject({ status: 'received', executions: 2, export_attempts: 3 });
    expect(after.error).toBeUndefined();
    expect(second).toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('-retry-2 is running; it needs no retry'),
    });
    expect(sfnMock.commandCalls(StartExecutionCommand)).toHaveLength(1);
  });
});

describe('the open index through the operator commands', () => {
  /** The request ids the open index lists for a status, every shard. */
  async function open(status: OwedStatus): Promise<string[]> {
    const ids: string[] = [];
    for await (const item of context.ledger.openRequests(status)) ids.push(item.request_id);
    return ids;
  }

  it('drops a cancelled request, lists a retried one under its new status, and a request put back to failed under failed', async () => {
    // Prepare
    const cancelled = await stored({ status: 'running', step: 'exporting' });
    const retried = await stored({ status: 'failed', error: { code: 'export_failed', message: 'x' } });
    const restored = await stored({
      status: 'failed',
      svc_user_id: 'svc-1',
      error: { code: 'export_failed', message: 'x' },
    });
    expect(await open('running')).toContain(cancelled.request_id);
    expect(await open('failed')).toEqual(expect.arrayContaining([retried.request_id, restored.request_id]));
    // Act
    await runCancel(context, { requestId: cancelled.request_id, reason: 'withdrawn' }, collectingIo());
    await runRetry(context, { requestId: retried.request_id }, collectingIo());
    sfnMock
      .on(StartExecutionCommand)
      .rejects(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }));
    await runRetry(context, { requestId: restored.request_id }, collectingIo()).catch(() => undefined);
    // Assess
    for (const status of OWED_STATUSES) expect(await open(status)).not.toContain(cancelled.request_id);
    expect(await open('received')).toContain(retried.request_id);
    expect(await open('failed')).not.toContain(retried.request_id);
    expect(await context.ledger.require(restored.request_id)).toMatchObject({ status: 'failed' });
    expect(await open('failed')).toContain(restored.request_id);
    expect(await open('running')).not.toContain(restored.request_id);
  });
});
