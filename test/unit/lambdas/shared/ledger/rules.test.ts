import { randomUUID } from 'node:crypto';
import { PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { marshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CAN_CANCEL,
  CAN_DENY,
  CAN_EXTEND,
  CAN_MINIMISE,
  CAN_NOTICE,
  CAN_RETRY,
  isConditionalFailure,
  type LedgerItem,
  type LedgerRule,
  noticeDueBy,
} from '#shared/ledger';
import { createLedgerTable } from '#shared/ledger/table';
import { startDynamo } from '../../../../helpers/dynamo.ts';
import { ledgerRecord, NOW } from '../../../cli/helpers.ts';

/**
 * Each ledger rule, once: what its refusal says about an item as read, and whether its condition
 * lets DynamoDB write that item (evaluated by dynalite, so the expression is parsed for real).
 */
let dynamo: Awaited<ReturnType<typeof startDynamo>>;

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
});
afterAll(async () => {
  await dynamo.close();
});

interface Case {
  readonly name: string;
  readonly item: Partial<LedgerItem>;
  /** A part of the refusal, or undefined when the rule allows the change. */
  readonly refusal: string | undefined;
  /** Whether the condition holds on the stored item (a rule on the clock holds in DynamoDB). */
  readonly holds: boolean;
}

/**
 * Whether DynamoDB lets a write guarded by the rule's condition through, with `stored` in the
 * table and the condition built from `read` (the item as the writer read it).
 */
async function conditionHolds<Input>(
  rule: LedgerRule<Input>,
  stored: LedgerItem,
  input: Input,
  read: LedgerItem = stored,
): Promise<boolean> {
  await dynamo.client.send(
    new PutItemCommand({ TableName: 'ledger', Item: marshall(stored, { removeUndefinedValues: true }) }),
  );
  const item = stored;
  const condition = rule.condition(read, input);
  try {
    await dynamo.client.send(
      new UpdateItemCommand({
        TableName: 'ledger',
        Key: marshall({ request_id: item.request_id }),
        UpdateExpression: 'SET #checked = :checked',
        ConditionExpression: `attribute_exists(request_id) AND ${condition.expression}`,
        ExpressionAttributeNames: { ...condition.names, '#checked': 'checked' },
        ExpressionAttributeValues: marshall({ ...condition.values, ':checked': true }),
      }),
    );
    return true;
  } catch (error) {
    if (isConditionalFailure(error)) return false;
    throw error;
  }
}

function checkRule<Input>(rule: LedgerRule<Input>, input: Input, cases: readonly Case[]): void {
  it.each(cases)('$name', async ({ item: overrides, refusal, holds }) => {
    // Prepare
    const item = ledgerRecord({ ...overrides, request_id: randomUUID() });
    // Act
    const said = rule.refusal(item, input);
    const held = await conditionHolds(rule, item, input);
    // Assess
    if (refusal === undefined) expect(said).toBeUndefined();
    else expect(said).toContain(refusal);
    expect(held).toBe(holds);
  });
}

const erasing = { type: 'erasure' as const, step: 'erasing' as const };
const erased = {
  type: 'erasure' as const,
  step: 'archiving' as const,
  erasure: { outcome: 'deleted' as const, platform_status: 200, at: '2026-11-20T10:00:00Z' },
};

describe('CAN_CANCEL', () => {
  checkRule(CAN_CANCEL, undefined, [
    {
      name: 'allows a received request',
      item: { status: 'received', step: undefined },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'allows a running export',
      item: { status: 'running', step: 'exporting' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'refuses once the erasure step is reached',
      item: erasing,
      refusal: 'its erasure has started',
      holds: false,
    },
    {
      name: 'refuses while the erasure is verified',
      item: { step: 'verifying' },
      refusal: 'its erasure has started',
      holds: false,
    },
    {
      name: 'refuses when an erasure is recorded, whatever the step',
      item: erased,
      refusal: 'its erasure has started',
      holds: false,
    },
    {
      name: 'refuses a completed request',
      item: { status: 'completed', step: undefined },
      refusal: 'is completed; only received or running',
      holds: false,
    },
    {
      name: 'refuses a failed request',
      item: { status: 'failed' },
      refusal: 'is failed; only received or running',
      holds: false,
    },
  ]);
});

describe('CAN_EXTEND', () => {
  const input = { reason: 'several accounts', now: NOW };
  checkRule(CAN_EXTEND, input, [
    { name: 'allows an open request before its deadline, once', item: {}, refusal: undefined, holds: true },
    {
      name: 'allows a failed request, still owed an answer',
      item: { status: 'failed' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'refuses a second extension',
      item: { extended: true },
      refusal: 'already been extended once',
      holds: false,
    },
    {
      name: 'refuses after the original deadline (a rule on the clock, not on the item)',
      item: { due_at: '2026-11-01T00:00:00.000Z' },
      refusal: 'has passed; extend only before it',
      holds: true,
    },
    {
      name: 'refuses an ended request',
      item: { status: 'completed' },
      refusal: 'is completed; only',
      holds: false,
    },
    {
      name: 'refuses a request without deadlines',
      item: { due_at: undefined, extension_limit_at: undefined },
      refusal: 'has no deadlines',
      holds: false,
    },
  ]);

  it('refuses an empty reason', () => {
    expect(CAN_EXTEND.refusal(ledgerRecord(), { reason: ' ', now: NOW })).toContain('needs a reason');
  });
});

describe('CAN_RETRY', () => {
  checkRule(CAN_RETRY, undefined, [
    { name: 'allows a failed request', item: { status: 'failed' }, refusal: undefined, holds: true },
    {
      name: 'allows an open request (the caller checks its execution)',
      item: { status: 'running' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'refuses a completed request',
      item: { status: 'completed' },
      refusal: 'is completed; only failed requests',
      holds: false,
    },
    {
      name: 'refuses a cancelled request',
      item: { status: 'cancelled' },
      refusal: 'is cancelled; only failed requests',
      holds: false,
    },
    {
      name: 'refuses a request with nothing to run it with',
      item: { status: 'failed', type: undefined },
      refusal: 'has no type or regulation',
      holds: true,
    },
    {
      name: 'refuses a failed request already minimised: the ledger no longer says whom it is about',
      item: { status: 'failed', minimised_at: '2026-11-02T00:00:00.000Z' },
      refusal: 'was minimised at 2026-11-02T00:00:00.000Z',
      holds: false,
    },
  ]);

  it('holds only while the executions count is the one read: two retries reset once', async () => {
    const item = ledgerRecord({ request_id: randomUUID(), status: 'failed', executions: 2 });
    const read = { ...item, executions: 1 };
    expect(await conditionHolds(CAN_RETRY, item, undefined, read)).toBe(false);
    expect(await conditionHolds(CAN_RETRY, item, undefined, item)).toBe(true);
  });
});

describe('CAN_DENY', () => {
  checkRule(CAN_DENY, undefined, [
    {
      name: 'allows a received request',
      item: { status: 'received', step: undefined },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'allows a running export',
      item: { status: 'running', step: 'exporting' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'allows a failed request, still owed an answer',
      item: { status: 'failed' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'refuses once the erasure step is reached',
      item: erasing,
      refusal: 'cannot be denied: its erasure has started',
      holds: false,
    },
    {
      name: 'refuses when an erasure is recorded, whatever the step',
      item: erased,
      refusal: 'its erasure has started',
      holds: false,
    },
    {
      name: 'refuses a completed request',
      item: { status: 'completed' },
      refusal: 'is completed; only received, running or failed',
      holds: false,
    },
    {
      name: 'refuses a request already denied',
      item: { status: 'denied' },
      refusal: 'is denied; only',
      holds: false,
    },
  ]);
});

describe('CAN_NOTICE', () => {
  const at = '2026-11-21T10:00:00Z';
  describe('receipt', () => {
    checkRule(CAN_NOTICE, { kind: 'receipt', at, now: NOW }, [
      { name: 'allows a receipt confirmation of an open request', item: {}, refusal: undefined, holds: true },
      {
        name: 'refuses one for a rejected request',
        item: { status: 'rejected' },
        refusal: 'is rejected; a receipt notice',
        holds: false,
      },
    ]);
  });
  describe('response', () => {
    checkRule(CAN_NOTICE, { kind: 'response', at, now: NOW }, [
      {
        name: 'allows the response once completed',
        item: { status: 'completed' },
        refusal: undefined,
        holds: true,
      },
      {
        name: 'refuses it while the request runs',
        item: { status: 'running' },
        refusal: 'only for completed requests',
        holds: false,
      },
    ]);
  });
  describe('extension', () => {
    checkRule(CAN_NOTICE, { kind: 'extension', at, now: NOW }, [
      { name: 'allows it once extended', item: { extended: true }, refusal: undefined, holds: true },
      {
        name: 'refuses it before any extension',
        item: { extended: false },
        refusal: 'has not been extended',
        holds: false,
      },
    ]);
  });
  describe('denial', () => {
    checkRule(CAN_NOTICE, { kind: 'denial', at, now: NOW }, [
      { name: 'allows it once denied', item: { status: 'denied' }, refusal: undefined, holds: true },
      {
        name: 'refuses it for a completed request',
        item: { status: 'completed' },
        refusal: 'only for denied',
        holds: false,
      },
    ]);
  });

  it('refuses a notice given in the future (a rule on the clock, not on the item)', () => {
    expect(
      CAN_NOTICE.refusal(ledgerRecord(), { kind: 'receipt', at: '2027-01-01T00:00:00Z', now: NOW }),
    ).toContain('is in the future');
  });

  it('words its refusal as a sentence: "an extension notice", a list with commas', () => {
    expect(
      CAN_NOTICE.refusal(ledgerRecord({ status: 'completed', extended: true }), {
        kind: 'extension',
        at,
        now: NOW,
      }),
    ).toContain(
      'is completed; an extension notice is recorded only for received, running or failed requests',
    );
  });

  it('refuses a notice given before the request was received (a mistyped year)', () => {
    const item = ledgerRecord({ received_at: '2026-11-20T09:00:00Z' });
    expect(CAN_NOTICE.refusal(item, { kind: 'receipt', at: '2020-01-01T00:00:00Z', now: NOW })).toBe(
      'the notice time 2020-01-01T00:00:00Z is before the request was received (2026-11-20T09:00:00Z); give the time the subject was told',
    );
    expect(
      CAN_NOTICE.refusal(item, { kind: 'receipt', at: '2026-11-20T09:00:00Z', now: NOW }),
    ).toBeUndefined();
    expect(
      CAN_EXTEND.refusal(item, { reason: 'complex', now: NOW, noticeAt: '2026-11-01T00:00:00Z' }),
    ).toContain('is before the request was received');
  });
});

describe('noticeDueBy', () => {
  const extendedGdpr = {
    regulation: 'gdpr',
    received_at: '2026-01-31T23:30:00Z',
    due_at: '2026-05-01T21:59:59.999Z',
    extended: true,
    confirm_by: null,
  } as const;

  it('dates a GDPR denial one month after receipt after an extension, the response at the extended date', () => {
    const item = { ...extendedGdpr, original_due_at: '2026-03-01T22:59:59.999Z' };
    expect(noticeDueBy(item, 'denial')).toBe('2026-03-01T22:59:59.999Z');
    expect(noticeDueBy(item, 'response')).toBe('2026-05-01T21:59:59.999Z');
  });

  it('counts the month in the time zone for a request extended before the original date was kept', () => {
    // 2026-01-31T23:30Z is 1 February in Berlin: one month later is the end of 1 March there.
    expect(noticeDueBy(extendedGdpr, 'denial', 'Europe/Berlin')).toBe('2026-03-01T22:59:59.999Z');
  });

  it('leaves a CCPA denial at the extended due date', () => {
    const item = {
      ...extendedGdpr,
      regulation: 'ccpa',
      original_due_at: '2026-03-17T23:59:59.999Z',
    } as const;
    expect(noticeDueBy(item, 'denial')).toBe('2026-05-01T21:59:59.999Z');
  });
});

describe('CAN_MINIMISE', () => {
  // Ended 2024-11-01, minimised after 730 days: due from 2026-11-01 (NOW is 2026-11-21).
  const ended = { status: 'completed' as const, completed_at: '2024-11-01T00:00:00.000Z' };
  checkRule(CAN_MINIMISE, { now: NOW, afterDays: 730 }, [
    { name: 'allows a completed request past its retention', item: ended, refusal: undefined, holds: true },
    {
      name: 'allows a denied request past its retention',
      item: { ...ended, status: 'denied' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'refuses a request whose retention has not passed',
      item: { ...ended, completed_at: '2025-06-01T00:00:00.000Z' },
      refusal: 'is kept until 2027-06-01T00:00:00.000Z (730 days after it ended)',
      holds: true,
    },
    {
      name: 'allows a failed request past its retention since it failed',
      item: { status: 'failed', failed_at: '2024-11-01T00:00:00.000Z' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'refuses a failed request whose retention since it failed has not passed',
      item: { status: 'failed', failed_at: '2025-06-01T00:00:00.000Z' },
      refusal: 'is kept until 2027-06-01T00:00:00.000Z (730 days after it ended)',
      holds: true,
    },
    {
      name: 'counts a failure recorded before failed_at existed from the last change',
      item: { status: 'failed', updated_at: '2024-11-01T00:00:00.000Z' },
      refusal: undefined,
      holds: true,
    },
    {
      name: 'refuses a running request',
      item: { status: 'running' },
      refusal: 'is running',
      holds: false,
    },
    {
      name: 'refuses a request minimised already (the pass is idempotent)',
      item: { ...ended, minimised_at: '2026-11-02T00:00:00.000Z' },
      refusal: 'was minimised at 2026-11-02T00:00:00.000Z',
      holds: false,
    },
  ]);

  it('holds only while the end time is the one read: a request given a new end meanwhile is left alone', async () => {
    // Prepare
    const read = ledgerRecord({ ...ended, request_id: randomUUID() });
    const stored = { ...read, completed_at: '2026-11-20T00:00:00.000Z' };
    // Act
    const held = await conditionHolds(CAN_MINIMISE, stored, { now: NOW, afterDays: 730 }, read);
    // Assess
    expect(held).toBe(false);
  });
});
