import { createHash } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type RunningEmulator, startEmulator } from '#local/emulator/server';
import {
  EXPORT_TOKEN,
  entryJson,
  errorBodySchema,
  exportUntilLink,
  getJson,
  postJson,
  putJson,
  query,
  SPOT_ID,
  SSO_TOKEN,
  ssoHeaders,
  testOptions,
  unzip,
} from './helpers.ts';

let clock = Date.UTC(2026, 0, 1);
let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startEmulator({ ...testOptions, port: 0, now: () => clock });
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(async () => {
  clock = Date.UTC(2026, 0, 1);
  await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
});

const exportCredentials = { access_token: EXPORT_TOKEN, spot_id: SPOT_ID };

function startExport(body: Record<string, unknown>) {
  return postJson(`${emulator.url}/gdpr/export`, body);
}

function status(id: string, params: Record<string, string> = exportCredentials) {
  return getJson(`${emulator.url}/gdpr/export/status/${encodeURIComponent(id)}?${query(params)}`);
}

async function download(
  link: string,
): Promise<{ status: number; length: string | null; bytes: Buffer; type: string | null }> {
  const response = await fetch(link);
  const bytes = Buffer.from(await response.arrayBuffer());
  return {
    status: response.status,
    length: response.headers.get('content-length'),
    type: response.headers.get('content-type'),
    bytes,
  };
}

describe('start export (endpoint 6)', () => {
  it('answers sequential numeric ids in the id field by default', async () => {
    // Act
    const first = await startExport({ ...exportCredentials, user_id: 'u_alice' });
    const second = await startExport({ ...exportCredentials, user_id: 'u_bob' });

    // Assess
    expect(first).toEqual({ status: 200, body: { id: 1 } });
    expect(second).toEqual({ status: 200, body: { id: 2 } });
  });

  it('answers 401 without access_token and 403 with the SSO token instead of the export token', async () => {
    // Act
    const missing = await startExport({ spot_id: SPOT_ID, user_id: 'u_alice' });
    const wrong = await startExport({ access_token: SSO_TOKEN, spot_id: SPOT_ID, user_id: 'u_alice' });

    // Assess
    expect(missing.status).toBe(401);
    expect(errorBodySchema.parse(missing.body).error.code).toBe('missing_token');
    expect(wrong.status).toBe(403);
    expect(errorBodySchema.parse(wrong.body).error.code).toBe('invalid_token');
    expect(JSON.stringify(wrong.body)).not.toContain(SSO_TOKEN);
  });

  it('answers 403 for another spot_id and 400 when spot_id is missing', async () => {
    // Act
    const wrong = await startExport({ access_token: EXPORT_TOKEN, spot_id: 'sp_other', user_id: 'u_alice' });
    const missing = await startExport({ access_token: EXPORT_TOKEN, user_id: 'u_alice' });

    // Assess
    expect(wrong.status).toBe(403);
    expect(errorBodySchema.parse(wrong.body).error.code).toBe('invalid_spot_id');
    expect(missing.status).toBe(400);
    expect(errorBodySchema.parse(missing.body).error.field).toBe('spot_id');
  });

  it('answers 404 for an unknown user_id and 400 without one', async () => {
    // Act
    const unknown = await startExport({ ...exportCredentials, user_id: 'u_nobody' });
    const missing = await startExport({ ...exportCredentials });

    // Assess
    expect(unknown.status).toBe(404);
    expect(errorBodySchema.parse(unknown.body).error.code).toBe('user_not_found');
    expect(missing.status).toBe(400);
    expect(errorBodySchema.parse(missing.body).error.field).toBe('user_id');
  });

  it('answers 400 for a body that is not JSON', async () => {
    // Act
    const result = await getJson(`${emulator.url}/gdpr/export`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: 'access_token=x',
    });

    // Assess
    expect(result.status).toBe(400);
    expect(errorBodySchema.parse(result.body).error.code).toBe('invalid_json');
  });

  it.each([
    ['id_number', { id: 1 }, '1'],
    ['id_string', { id: '1' }, '1'],
    ['export_id', { export_id: '1' }, '1'],
    ['exportId', { exportId: '1' }, '1'],
    ['data.id', { data: { id: '1' } }, '1'],
    ['bare_number', 1, '1'],
    ['bare_string', 'exp_000001', 'exp_000001'],
  ])(
    'answers the %s id shape, and that id works for the status call',
    async (shape, expectedBody, statusId) => {
      // Prepare
      await putJson(`${emulator.url}/_emulator/faults`, { export_id_shape: shape });

      // Act
      const started = await startExport({ ...exportCredentials, user_id: 'u_alice' });
      const polled = await status(statusId);

      // Assess
      expect(started.body).toEqual(expectedBody);
      expect(polled).toEqual({ status: 200, body: { status: 'pending' } });
    },
  );
});

describe('export status (endpoint 7)', () => {
  it('answers pending for export_ready_after_polls polls, then completed with a link', async () => {
    // Prepare
    await putJson(`${emulator.url}/_emulator/faults`, { export_ready_after_polls: 3 });
    await startExport({ ...exportCredentials, user_id: 'u_alice' });

    // Act
    const answers = [];
    for (let poll = 0; poll < 5; poll += 1) answers.push((await status('1')).body);

    // Assess
    expect(answers.slice(0, 3)).toEqual([
      { status: 'pending' },
      { status: 'pending' },
      { status: 'pending' },
    ]);
    const completed = z.object({ status: z.literal('completed'), link: z.string() }).parse(answers[3]);
    expect(completed.link).toMatch(new RegExp(`^${emulator.url}/_downloads/[A-Za-z0-9_-]{32}\\.zip$`));
    expect(answers[4]).toEqual(answers[3]);
  });

  it('is pending twice by default', async () => {
    // Act
    const result = await exportUntilLink(emulator.url, 'u_alice');

    // Assess
    expect(result.polls).toBe(3);
  });

  it('completes on the first poll when export_ready_after_polls is 0', async () => {
    // Prepare
    await putJson(`${emulator.url}/_emulator/faults`, { export_ready_after_polls: 0 });

    // Act
    const result = await exportUntilLink(emulator.url, 'u_alice');

    // Assess
    expect(result.polls).toBe(1);
  });

  it('ends failed without a link when the export fails', async () => {
    // Prepare
    await putJson(`${emulator.url}/_emulator/faults`, {
      export_failure_rate: 1,
      export_ready_after_polls: 1,
    });
    await startExport({ ...exportCredentials, user_id: 'u_alice' });

    // Act
    const first = await status('1');
    const second = await status('1');

    // Assess
    expect(first.body).toEqual({ status: 'pending' });
    expect(second.body).toEqual({ status: 'failed' });
  });

  it('answers 404 for an unknown export id', async () => {
    // Act
    const result = await status('999');

    // Assess
    expect(result.status).toBe(404);
    expect(errorBodySchema.parse(result.body).error.code).toBe('export_not_found');
  });

  it('refuses a missing token (401), a wrong token (403), a wrong spot_id (403) and a missing spot_id (400)', async () => {
    // Prepare
    await startExport({ ...exportCredentials, user_id: 'u_alice' });

    // Act
    const missing = await status('1', { spot_id: SPOT_ID });
    const wrong = await status('1', { access_token: SSO_TOKEN, spot_id: SPOT_ID });
    const wrongSpot = await status('1', { access_token: EXPORT_TOKEN, spot_id: 'sp_other' });
    const noSpot = await status('1', { access_token: EXPORT_TOKEN });

    // Assess
    expect([missing.status, wrong.status, wrongSpot.status, noSpot.status]).toEqual([401, 403, 403, 400]);
  });
});

describe('download link', () => {
  it('answers a Range request with 206, its Content-Range and exactly those bytes', async () => {
    // Prepare
    const { link } = await exportUntilLink(emulator.url, 'u_alice');
    const whole = await download(link);
    const size = whole.bytes.length;

    // Act
    const from = await fetch(link, { headers: { range: 'bytes=100-' } });
    const middle = await fetch(link, { headers: { range: 'bytes=10-19' } });
    const suffix = await fetch(link, { headers: { range: 'bytes=-22' } });
    const past = await fetch(link, { headers: { range: `bytes=${size}-` } });
    const several = await fetch(link, { headers: { range: 'bytes=0-1,5-6' } });

    // Assess
    expect(whole.status).toBe(200);
    expect(from.status).toBe(206);
    expect(from.headers.get('content-range')).toBe(`bytes 100-${size - 1}/${size}`);
    expect(from.headers.get('accept-ranges')).toBe('bytes');
    expect(Buffer.from(await from.arrayBuffer())).toEqual(whole.bytes.subarray(100));
    expect(middle.headers.get('content-range')).toBe(`bytes 10-19/${size}`);
    expect(Buffer.from(await middle.arrayBuffer())).toEqual(whole.bytes.subarray(10, 20));
    expect(Buffer.from(await suffix.arrayBuffer())).toEqual(whole.bytes.subarray(size - 22));
    expect(past.status).toBe(416);
    expect(past.headers.get('content-range')).toBe(`bytes */${size}`);
    await past.arrayBuffer();
    // Several ranges at once are not served: the whole archive is, as RFC 9110 allows.
    expect(several.status).toBe(200);
    expect(Buffer.from(await several.arrayBuffer())).toEqual(whole.bytes);
  });

  it('serves a zip with Content-Length holding exactly the four documented files', async () => {
    // Prepare
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const result = await download(link);

    // Assess
    expect(result.status).toBe(200);
    expect(result.type).toBe('application/zip');
    expect(Number(result.length)).toBe(result.bytes.length);
    const entries = await unzip(result.bytes);
    expect([...entries.keys()].sort()).toEqual([
      'dislikes.json',
      'likes.json',
      'messages.json',
      'profile.json',
    ]);
  });

  it('holds likes, dislikes and messages that match the state', async () => {
    // Prepare
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const entries = await unzip((await download(link)).bytes);

    // Assess
    expect(entryJson(entries, 'likes.json')).toEqual(['c-2']);
    expect(entryJson(entries, 'dislikes.json')).toEqual(['c-5']);
    const messages = z.array(z.record(z.string(), z.unknown())).parse(entryJson(entries, 'messages.json'));
    expect(messages.map((message) => message.id)).toEqual(['c-1', 'c-3', 'c-4']);
    const documented = [
      'manually_resolved',
      'author_id',
      'moderator_id',
      'spot_id',
      'state',
      'parent_comment_id',
      'conversation_id',
      'published',
      'conv_message_id',
      'written_at',
      'content',
      'stars',
      'metadata',
      'tags',
      'tags_metadata',
      'type',
      'never_hard_delete',
      'additional_data',
      'anonymous_user_id',
      'anonymous_user_name',
      'anonymous_image_id',
      'ip',
      'edited',
      'token',
      'id',
    ];
    for (const message of messages) expect(Object.keys(message).sort()).toEqual([...documented].sort());
    expect(messages[1]).toMatchObject({
      author_id: 'u_alice',
      spot_id: SPOT_ID,
      state: 'approved',
      parent_comment_id: 'c-2',
      conversation_id: 'conv-a',
      published: true,
      written_at: 1_700_000_200,
      type: 'reply',
      additional_data: { labels: {} },
    });
    expect(messages[1]?.content).toEqual([{ id: expect.any(String), text: 'Reply to Bob', type: 'text' }]);
    expect(messages[0]?.type).toBe('comment');
  });

  it('holds a profile with the documented fields built from the user', async () => {
    // Prepare
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const profile = entryJson(await unzip((await download(link)).bytes), 'profile.json');

    // Assess
    expect(profile).toEqual({
      user_id: 'u_alice',
      registered: true,
      social_ids: [],
      sso: { primary_key: 'pk-alice' },
      roles: [
        { role: 'registered', stage: 'system' },
        { role: 'moderator', stage: SPOT_ID },
      ],
      basic: {
        user_name: 'alice_w',
        display_name: 'Alice',
        image_id: null,
        gender: null,
        birthday: null,
        about: 'Reads everything.',
        location: 'Porto',
        email: 'alice@example.com',
        email_verified: true,
      },
    });
  });

  it('keeps serving the data as it was at export start after the user is deleted', async () => {
    // Prepare
    await startExport({ ...exportCredentials, user_id: 'u_alice' });
    await getJson(`${emulator.url}/sso/v1/user/pk-alice`, { method: 'DELETE', headers: ssoHeaders });
    await status('1');
    await status('1');

    // Act
    const completed = z.object({ link: z.string() }).parse((await status('1')).body);
    const result = await download(completed.link);

    // Assess
    expect(result.status).toBe(200);
    const entries = await unzip(result.bytes);
    expect(entryJson(entries, 'profile.json')).toMatchObject({
      user_id: 'u_alice',
      basic: { user_name: 'alice_w' },
    });
    expect(entryJson(entries, 'likes.json')).toEqual(['c-2']);
  });

  it('answers 410 once the link has expired (control API)', async () => {
    // Prepare
    const { id, link } = await exportUntilLink(emulator.url, 'u_alice');
    await fetch(`${emulator.url}/_emulator/exports/${id}/expire`, { method: 'POST' });

    // Act
    const result = await getJson(link);

    // Assess
    expect(result.status).toBe(410);
    expect(errorBodySchema.parse(result.body).error.code).toBe('link_expired');
  });

  it('answers 410 after link_ttl_seconds have passed and serves the zip just before', async () => {
    // Prepare
    await putJson(`${emulator.url}/_emulator/faults`, { link_ttl_seconds: 60 });
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    clock += 59_000;
    const before = await download(link);
    clock += 1_000;
    const after = await download(link);

    // Assess
    expect(before.status).toBe(200);
    expect(after.status).toBe(410);
  });

  it('keeps links valid for 60 days by default', async () => {
    // Prepare
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    clock += 60 * 86_400_000 - 1_000;
    const lastDay = await download(link);
    clock += 1_000;
    const expired = await download(link);

    // Assess
    expect(lastDay.status).toBe(200);
    expect(expired.status).toBe(410);
  });

  it('answers HEAD with the archive size and no body', async () => {
    // Prepare
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const head = await fetch(link, { method: 'HEAD' });
    const full = await download(link);

    // Assess
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(full.bytes.length));
    expect((await head.arrayBuffer()).byteLength).toBe(0);
  });

  it('answers 404 for an unknown link', async () => {
    // Act
    const result = await getJson(`${emulator.url}/_downloads/not-a-real-token.zip`);

    // Assess
    expect(result.status).toBe(404);
    expect(errorBodySchema.parse(result.body).error.code).toBe('link_not_found');
  });

  it('produces the same zip bytes for the same state and seed', async () => {
    // Prepare
    const other = await startEmulator({ ...testOptions, now: () => clock + 12_345 });
    try {
      // Act
      const here = await download((await exportUntilLink(emulator.url, 'u_alice')).link);
      const there = await download((await exportUntilLink(other.url, 'u_alice')).link);

      // Assess
      const digest = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
      expect(digest(here.bytes)).toBe(digest(there.bytes));
    } finally {
      await other.close();
    }
  });
});

describe('padding (export_padding_bytes)', () => {
  const paddingBytes = 3 * 1024 * 1024 + 17;

  it('adds a stored padding.bin of that many bytes and a correct Content-Length', async () => {
    // Prepare
    await putJson(`${emulator.url}/_emulator/faults`, { export_padding_bytes: paddingBytes });
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const result = await download(link);

    // Assess
    expect(Number(result.length)).toBe(result.bytes.length);
    const entries = await unzip(result.bytes);
    const padding = entries.get('padding.bin');
    expect(padding?.data.length).toBe(paddingBytes);
    expect(padding?.compressionMethod).toBe(0);
    expect(entries.size).toBe(5);
  });

  it('sends the same pseudo-random padding on every download', async () => {
    // Prepare
    await putJson(`${emulator.url}/_emulator/faults`, { export_padding_bytes: 100_000 });
    const { link } = await exportUntilLink(emulator.url, 'u_alice');

    // Act
    const first = await download(link);
    const second = await download(link);

    // Assess
    expect(first.bytes.equals(second.bytes)).toBe(true);
    const padding = (await unzip(first.bytes)).get('padding.bin')?.data ?? Buffer.alloc(0);
    expect(new Set(padding.subarray(0, 4096)).size).toBeGreaterThan(200);
  });

  it('streams a 1 GiB archive: the size is known at once and the first bytes arrive without building it', async () => {
    // Prepare
    const oneGiB = 1024 * 1024 * 1024;
    await putJson(`${emulator.url}/_emulator/faults`, { export_padding_bytes: oneGiB });
    const { link } = await exportUntilLink(emulator.url, 'u_alice');
    const exportsBody = z
      .object({ exports: z.array(z.object({ byte_size: z.number() })) })
      .parse((await getJson(`${emulator.url}/_emulator/exports`)).body);
    const controller = new AbortController();
    const started = performance.now();

    // Act
    const response = await fetch(link, { signal: controller.signal });
    const reader = response.body?.getReader();
    let received = 0;
    while (reader && received < 4 * 1024 * 1024) {
      const chunk = await reader.read();
      if (chunk.done) break;
      received += chunk.value.length;
    }
    controller.abort();
    const elapsed = performance.now() - started;

    // Assess
    expect(Number(response.headers.get('content-length'))).toBe(exportsBody.exports[0]?.byte_size);
    expect(Number(response.headers.get('content-length'))).toBeGreaterThan(oneGiB);
    expect(received).toBeGreaterThanOrEqual(4 * 1024 * 1024);
    expect(elapsed).toBeLessThan(2_000);
  });
});
