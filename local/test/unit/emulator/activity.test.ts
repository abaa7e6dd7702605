import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type RunningEmulator, startEmulator } from '#local/emulator/server';
import {
  EXPORT_TOKEN,
  errorBodySchema,
  getJson,
  putJson,
  SPOT_ID,
  SSO_TOKEN,
  testOptions,
} from './helpers.ts';

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startEmulator({ ...testOptions, port: 0 });
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(async () => {
  await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
});

const activityHeaders = { 'content-type': 'application/json', apikey: EXPORT_TOKEN, 'x-spot-id': SPOT_ID };

function activity(body: unknown, headers: Record<string, string> = activityHeaders) {
  return getJson(`${emulator.url}/v1/user/activity`, { method: 'POST', headers, body: JSON.stringify(body) });
}

const pageSchema = z.object({
  cursor: z.object({ offset: z.number(), count: z.number(), has_next: z.boolean() }),
  items: z.array(
    z.object({
      data: z.object({
        spot_id: z.string(),
        conversation_id: z.string(),
        conversation: z.record(z.string(), z.unknown()),
        messages: z.array(z.record(z.string(), z.unknown())),
      }),
    }),
  ),
  users: z.record(z.string(), z.record(z.string(), z.unknown())),
});

describe('user activity (endpoint 8)', () => {
  it('pages over the user messages, newest first, with has_next while more remain', async () => {
    // Act
    const first = pageSchema.parse(
      (await activity({ profile_user_id: 'u_alice', count: 2, offset: 0 })).body,
    );
    const second = pageSchema.parse(
      (await activity({ profile_user_id: 'u_alice', count: 2, offset: 2 })).body,
    );

    // Assess
    expect(first.cursor).toEqual({ offset: 0, count: 2, has_next: true });
    expect(first.items.flatMap((item) => item.data.messages.map((message) => message.id))).toEqual([
      'c-4',
      'c-3',
    ]);
    expect(second.cursor).toEqual({ offset: 2, count: 1, has_next: false });
    expect(second.items.flatMap((item) => item.data.messages.map((message) => message.id))).toEqual(['c-1']);
  });

  it('groups the page per conversation with the conversation info', async () => {
    // Act
    const page = pageSchema.parse(
      (await activity({ profile_user_id: 'u_alice', count: 10, offset: 0 })).body,
    );

    // Assess
    expect(page.items.map((item) => item.data.conversation_id)).toEqual(['conv-b', 'conv-a']);
    expect(page.items[1]?.data).toMatchObject({ spot_id: SPOT_ID });
    expect(page.items[1]?.data.conversation).toEqual({
      url: 'https://site.example/a',
      type: 'link',
      title: 'Article A',
      width: 0,
      height: 0,
      service: 'link',
      metadata: {},
      description: '',
      thumbnail_url: '',
    });
  });

  it('describes each message with every documented field', async () => {
    // Act
    const page = pageSchema.parse(
      (await activity({ profile_user_id: 'u_alice', count: 10, offset: 0 })).body,
    );

    // Assess
    const reply = page.items[1]?.data.messages.find((message) => message.id === 'c-3');
    expect(Object.keys(reply ?? {}).sort()).toEqual(
      [
        'root_comment',
        'parent_id',
        'depth',
        'id',
        'user_id',
        'written_at',
        'time',
        'replies_count',
        'offset',
        'has_next',
        'edited',
        'status',
        'rank',
        'replies',
        'content',
        'deleted',
        'published',
        'rank_score',
        'type',
        'metadata',
        'flags',
        'featured',
        'top_featured',
      ].sort(),
    );
    expect(reply).toMatchObject({
      root_comment: 'c-1',
      parent_id: 'c-2',
      depth: 2,
      user_id: 'u_alice',
      type: 'reply',
    });
    const root = page.items[1]?.data.messages.find((message) => message.id === 'c-1');
    expect(root).toMatchObject({
      depth: 0,
      replies_count: 1,
      rank: { ranks_up: 1, ranks_down: 1 },
      rank_score: 0,
    });
  });

  it('answers a users map keyed by user id', async () => {
    // Act
    const page = pageSchema.parse((await activity({ profile_user_id: 'u_alice', count: 1, offset: 0 })).body);

    // Assess
    expect(page.users).toEqual({
      u_alice: {
        id: 'u_alice',
        display_name: 'Alice',
        image_url: '',
        user_name: 'alice_w',
        registered: true,
        sso_primary_key: 'pk-alice',
      },
    });
  });

  it('answers 401 without apikey and 403 with the SSO token', async () => {
    // Act
    const missing = await activity(
      { profile_user_id: 'u_alice' },
      { 'content-type': 'application/json', 'x-spot-id': SPOT_ID },
    );
    const wrong = await activity({ profile_user_id: 'u_alice' }, { ...activityHeaders, apikey: SSO_TOKEN });

    // Assess
    expect(missing.status).toBe(401);
    expect(wrong.status).toBe(403);
    expect(errorBodySchema.parse(wrong.body).error.code).toBe('invalid_token');
  });

  it('answers 403 for another x-spot-id and 400 without one', async () => {
    // Act
    const wrong = await activity(
      { profile_user_id: 'u_alice' },
      { ...activityHeaders, 'x-spot-id': 'sp_other' },
    );
    const missing = await activity(
      { profile_user_id: 'u_alice' },
      { 'content-type': 'application/json', apikey: EXPORT_TOKEN },
    );

    // Assess
    expect(wrong.status).toBe(403);
    expect(errorBodySchema.parse(wrong.body).error.code).toBe('invalid_spot_id');
    expect(missing.status).toBe(400);
  });

  it('answers 403 activity_not_enabled once the control API disables it', async () => {
    // Prepare
    await putJson(`${emulator.url}/_emulator/activity`, { enabled: false });

    // Act
    const result = await activity({ profile_user_id: 'u_alice', count: 1, offset: 0 });

    // Assess
    expect(result.status).toBe(403);
    expect(errorBodySchema.parse(result.body).error.code).toBe('activity_not_enabled');
  });

  it('answers 404 for an unknown profile_user_id', async () => {
    // Act
    const result = await activity({ profile_user_id: 'u_nobody', count: 1, offset: 0 });

    // Assess
    expect(result.status).toBe(404);
  });

  it.each([
    [{ profile_user_id: 'u_alice', count: 0, offset: 0 }, 'count'],
    [{ profile_user_id: 'u_alice', count: 1, offset: -1 }, 'offset'],
    [{ profile_user_id: 'u_alice', count: 1.5, offset: 0 }, 'count'],
    [{ count: 1, offset: 0 }, 'profile_user_id'],
  ])('answers 400 for %j naming %s', async (body, field) => {
    // Act
    const result = await activity(body);

    // Assess
    expect(result.status).toBe(400);
    expect(errorBodySchema.parse(result.body).error.field).toBe(field);
  });

  it('answers 415 when Content-Type is not JSON', async () => {
    // Act
    const result = await activity(
      { profile_user_id: 'u_alice' },
      { ...activityHeaders, 'content-type': 'text/plain' },
    );

    // Assess
    expect(result.status).toBe(415);
  });
});
