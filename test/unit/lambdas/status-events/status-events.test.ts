import { marshall } from '@aws-sdk/util-dynamodb';
import type { DynamoDBStreamEvent } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { changesOf, makeStatusEventsHandler } from '../../../../lambdas/status-events/handler.ts';
import {
  publishStatusChanges,
  STATUS_CHANGED,
  type StatusEventEntry,
  statusChangedDetailSchema,
  statusChangeOf,
} from '../../../../lambdas/status-events/status-events.ts';
import { ledgerRecord, PRIMARY_KEY, SVC_USER_ID } from '../../cli/helpers.ts';

const running = ledgerRecord({
  regulation: 'ccpa',
  confirm_by: '2026-12-04T07:59:59.999Z',
  extension_reason: 'complex request from jane@example.com',
  submitted_by: 'Jane Operator',
});

describe('statusChangeOf', () => {
  it('describes a status change with no identifier, name, reason text or link', () => {
    const detail = statusChangeOf({
      oldImage: { ...running, status: 'received' },
      newImage: { ...running, updated_at: '2026-11-20T09:11:00.000Z' },
    });

    expect(detail).toEqual({
      event_version: 1,
      event_id: `${running.request_id}:running:2026-11-20T09:11:00.000Z`,
      request_id: running.request_id,
      site: null,
      part_of: null,
      type: 'access',
      regulation: 'ccpa',
      status: 'running',
      previous_status: 'received',
      outcome: null,
      error_code: null,
      due_at: '2026-12-20T09:00:00.000Z',
      extension_limit_at: '2027-02-20T09:00:00.000Z',
      confirm_by: '2026-12-04T07:59:59.999Z',
      extended: false,
      overdue: false,
      notices_due: ['receipt'],
      changed_at: '2026-11-20T09:11:00.000Z',
    });
    const text = JSON.stringify(detail);
    for (const secret of [
      PRIMARY_KEY,
      SVC_USER_ID,
      'jane@example.com',
      'Jane Operator',
      'privacy-team',
      'DSR-1042',
    ])
      expect(text).not.toContain(secret);
  });

  it('announces a correction by its type and outcome, never its fields or values', () => {
    const correction = {
      ...running,
      type: 'correction' as const,
      correction_fields: ['email' as const],
      correction_values: { email: 'new-address@example.org' },
    };
    const detail = statusChangeOf({
      oldImage: correction,
      newImage: {
        ...correction,
        status: 'completed',
        outcome: 'corrected',
        correction_values: undefined,
        updated_at: '2026-11-20T09:12:00.000Z',
      },
    });

    expect(detail).toMatchObject({ type: 'correction', status: 'completed', outcome: 'corrected' });
    expect(statusChangedDetailSchema.safeParse(detail).success).toBe(true);
    expect(JSON.stringify(detail)).not.toContain('new-address@example.org');
    expect(JSON.stringify(detail)).not.toContain('email');
  });

  it('announces a new request, a completion with the response due, and a failure by its code only', () => {
    expect(statusChangeOf({ newImage: { ...running, status: 'received' } })).toMatchObject({
      status: 'received',
      previous_status: null,
    });
    expect(
      statusChangeOf({
        oldImage: running,
        newImage: { ...running, status: 'completed', outcome: 'exported' },
      }),
    ).toMatchObject({ status: 'completed', outcome: 'exported', notices_due: ['response'] });
    const failed = statusChangeOf({
      oldImage: running,
      newImage: {
        ...running,
        status: 'failed',
        error: { code: 'export_failed', message: 'gave up on https://export.example/x?token=abc' },
        updated_at: '2027-01-02T00:00:00.000Z',
      },
    });
    expect(failed).toMatchObject({ status: 'failed', error_code: 'export_failed', overdue: true });
    expect(JSON.stringify(failed)).not.toContain('token');
  });

  it('says nothing when the status did not change, or the item was deleted', () => {
    expect(statusChangeOf({ oldImage: running, newImage: { ...running, export_polls: 3 } })).toBeUndefined();
    expect(statusChangeOf({ oldImage: running })).toBeUndefined();
  });

  it('owes no notice on a withdrawal', () => {
    expect(
      statusChangeOf({ oldImage: running, newImage: { ...running, status: 'cancelled' } }),
    ).toMatchObject({
      notices_due: [],
    });
  });
});

describe('publishStatusChanges', () => {
  const changes = Array.from({ length: 12 }, (_, index) => ({
    oldImage: running,
    newImage: { ...running, request_id: `r-${index}`, status: 'completed', outcome: 'exported' },
  }));

  it('publishes each change on the bus, ten per call, in order', async () => {
    const calls: StatusEventEntry[][] = [];
    const details = await publishStatusChanges(changes, {
      bus: 'svc-dsr-events',
      put: async (entries) => {
        calls.push([...entries]);
        return 0;
      },
    });

    expect(calls.map((call) => call.length)).toEqual([10, 2]);
    expect(details.map((detail) => detail.request_id)).toEqual(
      changes.map((change) => change.newImage.request_id),
    );
    const [first] = calls[0] ?? [];
    expect(first).toMatchObject({
      Source: 'svc-dsr',
      DetailType: STATUS_CHANGED,
      EventBusName: 'svc-dsr-events',
    });
    expect(statusChangedDetailSchema.parse(JSON.parse(first?.Detail ?? '{}'))).toMatchObject({
      request_id: 'r-0',
    });
  });

  it('fails the batch when EventBridge refuses an entry, so the stream delivers it again', async () => {
    await expect(publishStatusChanges(changes, { bus: 'b', put: async () => 1 })).rejects.toMatchObject({
      name: 'StatusEventsNotPublishedError',
    });
  });
});

describe('the stream handler', () => {
  it('reads the stream images and publishes the status changes', async () => {
    const event: DynamoDBStreamEvent = {
      Records: [
        {
          eventName: 'MODIFY',
          dynamodb: {
            OldImage: marshall(running, { removeUndefinedValues: true }) as never,
            NewImage: marshall({ ...running, status: 'completed' }, { removeUndefinedValues: true }) as never,
          },
        },
      ],
    };
    expect(changesOf(event)[0]?.newImage).toMatchObject({ status: 'completed' });
    const put: StatusEventEntry[] = [];
    const handler = makeStatusEventsHandler(() => ({
      bus: 'b',
      put: async (entries) => {
        put.push(...entries);
        return 0;
      },
      logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
    }));

    await handler(event);

    expect(put.map((entry) => JSON.parse(entry.Detail).status)).toEqual(['completed']);
  });

  it("names the site and the request of a site's part, so each site's change is an event of its own", () => {
    // Prepare
    const part = {
      ...running,
      request_id: `${running.request_id}_shop`,
      site: 'shop',
      parent_request_id: running.request_id,
    };

    // Act
    const detail = statusChangeOf({
      oldImage: part,
      newImage: { ...part, status: 'failed', error: { code: 'platform_outage', message: 'down' } },
    });

    // Assess
    expect(detail).toMatchObject({
      request_id: `${running.request_id}_shop`,
      site: 'shop',
      part_of: running.request_id,
      status: 'failed',
      error_code: 'platform_outage',
    });
  });
});
