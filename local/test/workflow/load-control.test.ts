import { DynamoDBClient, QueryCommand } from '@aws-sdk/client-dynamodb';
import { SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it } from 'vitest';
import { platformStatsSchema } from '#local/emulator/limits';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { EXPORT_WAITERS_QUEUE, WAITERS_INDEX } from '../../../lambdas/shared/export-waiters.ts';
import { type Harness, requestFor, startHarness, usersState } from './harness.ts';

let harness: Harness | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** Sends the requests through the intake queue at once and waits until every execution ends. */
async function drop(h: Harness, requests: { request_id: string }[]) {
  for (let start = 0; start < requests.length; start += 10) {
    await h.workflow.sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: h.workflow.queueUrls.intake,
        Entries: requests.slice(start, start + 10).map((request, index) => ({
          Id: String(index),
          MessageBody: JSON.stringify(request),
        })),
      }),
    );
  }
  await h.poller.drain();
  return h.workflow.settled();
}

async function platformStats(h: Harness) {
  return platformStatsSchema.parse(await h.control('GET', 'stats'));
}

describe('platform load control (the shared gate)', () => {
  it('drops a burst of requests on a rate-limited platform and never passes its limits', async () => {
    // Prepare: a platform that takes 20 calls a second (burst 20) and 3 open exports.
    harness = await startHarness({
      state: usersState(24),
      faults: { rate_limit: { requests_per_second: 20, burst: 20, max_open_exports: 3 } },
    });
    const requests = Array.from({ length: 24 }, (_, index) =>
      requestFor(`u-${index}`, { type: index % 2 === 0 ? 'access' : 'erasure' }),
    );

    // Act
    const results = await drop(harness, requests);

    // Assess: every request completed, and the platform never had to say no.
    for (const request of requests) {
      expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
      expect(await harness.workflow.ledger.require(request.request_id)).toMatchObject({
        status: 'completed',
      });
    }
    const stats = await platformStats(harness);
    expect(stats.throttled.total).toBe(0);
    expect(stats.max_requests_per_second).toBeLessThanOrEqual(20);
    expect(stats.max_open_exports).toBeLessThanOrEqual(3);
    for (const subject of stats.subjects) {
      expect(subject.exports_started).toBe(1);
      expect(subject.deletes_succeeded).toBeLessThanOrEqual(1);
    }
    // Requests waited for export slots in Wait states, not in failures or retries.
    const waits = harness.logs.filter((line) => line.includes('"platform call waits"'));
    expect(waits.some((line) => line.includes('"reason":"exports"'))).toBe(true);
    expect(Object.keys(await harness.workflow.gate.exportHolders())).toEqual([]);
  }, 120_000);

  it('exports every request of a few dozen through two slots while exports are slow, with no 429 and never 3 open', async () => {
    // Prepare: a platform that allows 2 open exports, each ready only after 6 polls.
    harness = await startHarness({
      state: usersState(36),
      faults: {
        export_ready_after_polls: 6,
        rate_limit: { requests_per_second: 20, burst: 20, max_open_exports: 2 },
      },
    });
    const requests = Array.from({ length: 36 }, (_, index) => requestFor(`u-${index}`, { type: 'access' }));

    // Act
    const results = await drop(harness, requests);

    // Assess: every request exported, and the platform never had to turn one away.
    for (const request of requests) {
      expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
      expect(await harness.workflow.ledger.require(request.request_id)).toMatchObject({
        status: 'completed',
        outcome: 'exported',
      });
    }
    const stats = await platformStats(harness);
    expect(stats.throttled).toMatchObject({ total: 0, rate_limit: 0, open_exports: 0 });
    expect(stats.max_open_exports).toBeLessThanOrEqual(2);
    expect(stats.subjects.every((subject) => subject.exports_started === 1)).toBe(true);
  }, 300_000);

  it('hands a freed export slot to a waiting request at once, instead of leaving it to sleep', async () => {
    // Prepare: one export slot. The first request holds it until the second has written its wait.
    let dynamo: DynamoDBClient | undefined;
    const queued = async (h: Harness) => {
      dynamo ??= new DynamoDBClient(h.aws.clientConfig('dynamodb'));
      const { Items } = await dynamo.send(
        new QueryCommand({
          TableName: LOCAL_NAMES.gateTable,
          IndexName: WAITERS_INDEX,
          KeyConditionExpression: '#queue = :queue',
          FilterExpression: 'attribute_exists(#token)',
          ExpressionAttributeNames: { '#queue': 'queue', '#token': 'token' },
          ExpressionAttributeValues: { ':queue': { S: EXPORT_WAITERS_QUEUE } },
        }),
      );
      return Items?.length ?? 0;
    };
    let held = false;
    harness = await startHarness({
      state: usersState(2),
      faults: { rate_limit: { requests_per_second: 50, burst: 50, max_open_exports: 1 } },
      stepOverrides: {
        ArchiveExport: (real) => async (event) => {
          if (!held && harness !== undefined) {
            held = true;
            const deadline = Date.now() + 20_000;
            while ((await queued(harness)) === 0 && Date.now() < deadline) {
              await new Promise((resolve) => setTimeout(resolve, 20));
            }
          }
          return real(event);
        },
      },
    });
    const requests = [requestFor('u-0'), requestFor('u-1')];

    // Act
    const results = await drop(harness, requests);

    // Assess: both completed; the one that waited was woken, long before its backoff ran out.
    const waited = requests
      .map((request) => results.get(request.request_id))
      .find((result) =>
        result?.events.some((event) => Object(event.state).name === 'StartExportWaitsForSlot'),
      );
    for (const request of requests) expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(waited).toBeDefined();
    const slotWait = (type: string) =>
      (waited?.events ?? []).filter(
        (event) => event.type === type && Object(event.state).name === 'StartExportWaitsForSlot',
      );
    const [entered] = slotWait('StateEntered');
    const [exited] = slotWait('StateExited');
    expect(slotWait('StateFailed')).toEqual([]);
    // The first backoff for a slot is at least 2 s (step-handler.ts); the wake-up came well within it.
    expect(Number(exited?.timestamp) - Number(entered?.timestamp)).toBeLessThan(900);
    // The woken waiter's item went with its wake-up: no one waits.
    expect(await queued(harness)).toBe(0);
    dynamo?.destroy();
    const stats = await platformStats(harness);
    expect(stats.max_open_exports).toBe(1);
    for (const subject of stats.subjects) expect(subject.exports_started).toBe(1);
  }, 60_000);

  it('waits out a platform outage behind the shared circuit, and then completes', async () => {
    // Prepare: the platform is down for its first 8 seconds.
    harness = await startHarness({
      state: usersState(6),
      faults: { outage: { after_seconds: 0, duration_seconds: 8 } },
    });
    const requests = Array.from({ length: 6 }, (_, index) => requestFor(`u-${index}`));

    // Act
    const results = await drop(harness, requests);

    // Assess: all completed; the circuit kept the calls during the outage to a handful.
    for (const request of requests) {
      expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    }
    const stats = await platformStats(harness);
    expect(stats.outage_answers).toBeGreaterThan(0);
    // Without the circuit each request would retry on its own: 6 requests, an attempt a second or more.
    expect(stats.outage_answers).toBeLessThan(20);
    expect(harness.logs.some((line) => line.includes('platform circuit open'))).toBe(true);
    expect(harness.logs.some((line) => line.includes('"reason":"outage"'))).toBe(true);
    expect(await harness.workflow.gate.state()).toMatchObject({ opened_at: 0, failures: 0 });
  }, 60_000);

  it('fails a request as platform_outage once the outage outlasts the horizon', async () => {
    // Prepare: a platform down for a minute, and a horizon of 3 seconds.
    harness = await startHarness({
      faults: { outage: { after_seconds: 0, duration_seconds: 60 } },
      env: { OUTAGE_HORIZON_SECONDS: '3' },
    });
    const request = requestFor('u-alice');

    // Act
    await drop(harness, [request]);

    // Assess
    expect(await harness.workflow.ledger.require(request.request_id)).toMatchObject({
      status: 'failed',
      error: { code: 'platform_outage' },
    });
  });
});
