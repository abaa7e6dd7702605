/**
 * A platform that allows fewer open exports than the stack's platformMaxOpenExports: served local
 * mode with its default cap, the emulator's lowered to one at run time (a new platform limit, a
 * second system sharing the account). Refused starts become waits for a slot, and the gate learns
 * the platform's cap.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
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

/** How long the other system keeps its export open while the requests run. */
const HELD_MS = 6_000;
/** How often served local mode's reconciler passes, offering free export slots to waiters. */
const RECONCILE_PASS_MS = 60_000;

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

/** Another system on the same platform account: the export token, and its own export calls. */
async function otherSystem(platformUrl: string, spotId: string) {
  const tokens = z
    .object({ export_token: z.string() })
    .parse(JSON.parse(await readFile(join(dataDir, 'platform-tokens.json'), 'utf8')));
  const users = z
    .object({ users: z.array(z.object({ primary_key: z.string().nullish(), svc_user_id: z.string() })) })
    .parse(await (await fetch(`${platformUrl}/_emulator/users`)).json()).users;
  const user = users.find((candidate) => candidate.primary_key === 'u-dan');
  if (user === undefined) throw new Error('the emulator has no u-dan');
  return {
    async start(): Promise<string> {
      const answer = await fetch(`${platformUrl}/gdpr/export`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          access_token: tokens.export_token,
          spot_id: spotId,
          user_id: user.svc_user_id,
        }),
      });
      expect(answer.status).toBe(200);
      return String(z.looseObject({ id: z.union([z.string(), z.number()]) }).parse(await answer.json()).id);
    },
    /** Polls its export to its end and downloads it: the platform no longer counts it open. */
    async finish(exportId: string): Promise<void> {
      const status = `${platformUrl}/gdpr/export/status/${exportId}?access_token=${tokens.export_token}&spot_id=${spotId}`;
      for (let polls = 0; polls < 20; polls += 1) {
        const answer = z
          .object({ status: z.string(), link: z.string().optional() })
          .parse(await (await fetch(status)).json());
        if (answer.link !== undefined) {
          await (await fetch(answer.link)).arrayBuffer();
          return;
        }
      }
      throw new Error("the other system's export never completed");
    },
  };
}

describe('a platform that allows fewer open exports than the configured cap', () => {
  it('completes every request, with few refused starts, and the gate keeps the cap the platform showed', async () => {
    // Prepare: the platform now allows one open export, and another system on the account holds
    // it; the stack's cap is still its default.
    const { platform, region, credentials, endpoints } = await readLocalEndpoints(dataDir);
    const lowered = await fetch(`${platform.url}/_emulator/faults`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ rate_limit: { max_open_exports: 1 } }),
    });
    expect(lowered.status).toBe(200);
    const other = await otherSystem(platform.url, platform.spot_id);
    const held = await other.start();
    const requests = ['u-alice', 'u-bruno', 'u-chloe'].map(accessRequest);
    const file = join(workdir, 'requests.jsonl');
    await writeFile(file, `${requests.map((line) => JSON.stringify(line)).join('\n')}\n`);

    // Act: the requests run while the other system's export is open, then it is downloaded.
    const submitted = await runCli(['submit', '--file', file, '--target', 'local', '--data-dir', dataDir]);
    expect(submitted.code, submitted.stderr).toBe(0);
    await delay(HELD_MS);
    const whileHeld = await Promise.all(requests.map((request) => statusOf(request.request_id)));
    await other.finish(held);
    const freedAt = Date.now();
    const outcomes = [];
    for (const request of requests) outcomes.push(await untilTerminal(request.request_id, 150_000));
    const answeredWithinMs = Date.now() - freedAt;

    // Assess: no request failed while the platform was full; every one answered after.
    for (const status of whileHeld) expect(status).not.toMatchObject({ status: 'failed' });
    for (const outcome of outcomes) {
      expect(outcome).toMatchObject({ status: 'completed', outcome: 'exported' });
    }
    // The waiters take the freed slot in turn, woken or by their own short waits: no request waits
    // for the reconciler's next pass (a minute) to be offered one.
    expect(answeredWithinMs).toBeLessThan(RECONCILE_PASS_MS);
    const stats = statsSchema.parse(await (await fetch(`${platform.url}/_emulator/stats`)).json());
    expect(stats.max_open_exports).toBe(1);
    // Refused starts come at the pace of the waits for a slot (2 s and more), one request at a
    // time under the learned cap: a few per request while the other export is open, not dozens.
    expect(stats.throttled.open_exports).toBeGreaterThan(0);
    expect(stats.throttled.open_exports).toBeLessThanOrEqual(requests.length * Math.ceil(HELD_MS / 2_000));
    // The gate learned the platform's cap: one slot, the other system holding the platform's only
    // one at each refusal. It keeps it for a while.
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
      expect(exportsItem.learned_cap).toBe(1);
      expect(exportsItem.learned_until).toBeGreaterThan(Date.now() + 30 * 60_000);
      expect(exportsItem.refusals).toBe(stats.throttled.open_exports);
    } finally {
      dynamo.destroy();
    }
  }, 240_000);
});
