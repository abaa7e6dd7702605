/**
 * A platform that allows fewer open exports than the stack's platformMaxOpenExports: served local
 * mode with its default cap, the emulator's lowered to one at run time (a new platform limit, a
 * second system sharing the account). Refused starts become waits for a slot, and the gate learns
 * the platform's cap.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { readLocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

let workdir: string;
let dataDir: string;
let server: ServingLocal | undefined;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-export-cap-'));
  dataDir = join(workdir, 'data');
  server = await serveLocal(dataDir);
}, 120_000);

afterAll(async () => {
  if (server) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

function accessRequest(primaryKey: string) {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: new Date(Date.now() - 3600_000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
  };
}

const statusSchema = z.looseObject({
  status: z.string(),
  outcome: z.string().nullish(),
  error: z.looseObject({ code: z.string() }).nullish(),
});

async function statusOf(requestId: string): Promise<z.infer<typeof statusSchema> | undefined> {
  const result = await runCli(['status', requestId, '--json', '--target', 'local', '--data-dir', dataDir]);
  if (result.code !== 0) return undefined;
  return statusSchema.parse(JSON.parse(result.stdout));
}

const TERMINAL = ['completed', 'failed', 'rejected', 'cancelled', 'denied'];

async function untilTerminal(requestId: string, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const current = await statusOf(requestId);
    if ((current && TERMINAL.includes(current.status)) || Date.now() > deadline) return current;
    await delay(500);
  }
}

const statsSchema = z.looseObject({
  max_open_exports: z.number(),
  throttled: z.looseObject({ open_exports: z.number(), total: z.number() }),
});

describe('a platform that allows fewer open exports than the configured cap', () => {
  it('completes every request, with few refused starts, and the gate keeps the cap the platform showed', async () => {
    // Prepare: the platform now allows one open export; the stack's cap is still its default.
    const { platform, region, credentials, endpoints } = await readLocalEndpoints(dataDir);
    const lowered = await fetch(`${platform.url}/_emulator/faults`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ rate_limit: { max_open_exports: 1 } }),
    });
    expect(lowered.status).toBe(200);
    const requests = ['u-alice', 'u-bruno', 'u-chloe'].map(accessRequest);
    const file = join(workdir, 'requests.jsonl');
    await writeFile(file, `${requests.map((line) => JSON.stringify(line)).join('\n')}\n`);

    // Act
    const submitted = await runCli(['submit', '--file', file, '--target', 'local', '--data-dir', dataDir]);
    expect(submitted.code, submitted.stderr).toBe(0);
    const outcomes = [];
    for (const request of requests) outcomes.push(await untilTerminal(request.request_id, 150_000));

    // Assess: every request answered, none failed for the platform's refusals.
    for (const outcome of outcomes) {
      expect(outcome).toMatchObject({ status: 'completed', outcome: 'exported' });
    }
    const stats = statsSchema.parse(await (await fetch(`${platform.url}/_emulator/stats`)).json());
    expect(stats.max_open_exports).toBe(1);
    // Each refusal lowers the gate's cap: the starts refused stay a handful, not dozens per request.
    expect(stats.throttled.open_exports).toBeGreaterThan(0);
    expect(stats.throttled.open_exports).toBeLessThanOrEqual(4);
    // The gate learned the platform's cap (the slots others held at a refusal: fewer than the
    // requests), and keeps it for a while.
    const dynamo = new DynamoDBClient({ region, credentials, endpoint: endpoints.dynamodb });
    try {
      const item = await dynamo.send(
        new GetItemCommand({
          TableName: LOCAL_NAMES.gateTable,
          Key: { gate: { S: 'exports' } },
          ConsistentRead: true,
        }),
      );
      const exportsItem = z
        .looseObject({ learned_cap: z.number(), learned_until: z.number(), refusals: z.number() })
        .parse(unmarshall(item.Item ?? {}));
      expect(exportsItem.learned_cap).toBeGreaterThanOrEqual(1);
      expect(exportsItem.learned_cap).toBeLessThan(requests.length);
      expect(exportsItem.learned_until).toBeGreaterThan(Date.now() + 30 * 60_000);
      expect(exportsItem.refusals).toBe(stats.throttled.open_exports);
    } finally {
      dynamo.destroy();
    }
  }, 240_000);
});
