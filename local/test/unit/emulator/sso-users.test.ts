import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type RunningEmulator, startEmulator } from '#local/emulator/server';
import {
  EXPORT_TOKEN,
  errorBodySchema,
  getJson,
  query,
  rawRequest,
  retrievalSchema,
  SPOT_ID,
  SSO_TOKEN,
  ssoHeaders,
  testOptions,
} from './helpers.ts';

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startEmulator({ ...testOptions, port: 0, faults: { seed: 11 } });
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(async () => {
  await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
});

function createUser(
  params: Record<string, string>,
  body?: unknown,
  headers: Record<string, string> = ssoHeaders,
) {
  return getJson(`${emulator.url}/sso/v1/user?${query({ spot_id: SPOT_ID, ...params })}`, {
    method: 'POST',
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

function retrieve(primaryKey: string, headers: Record<string, string> = ssoHeaders) {
  return getJson(`${emulator.url}/sso/v1/user/${encodeURIComponent(primaryKey)}`, { headers });
}

async function retrievedUser(primaryKey: string) {
  const { body } = await retrieve(primaryKey);
  return retrievalSchema.parse(body).user;
}

function updateUser(params: Record<string, string>, body?: unknown) {
  return rawRequest(`${emulator.url}/sso/v1/update-user?${query(params)}`, {
    headers: { ...ssoHeaders, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

function expectFieldError(result: { status: number; body: unknown }, field: string) {
  expect(result.status).toBe(400);
  const parsed = errorBodySchema.parse(result.body);
  expect(parsed.error.code).toBe('invalid_field');
  expect(parsed.error.field).toBe(field);
}

describe('register-user (endpoint 1)', () => {
  it('answers code_b as raw text and registers the user when the SSO token is in the query', async () => {
    // Prepare
    const url = `${emulator.url}/sso/v1/register-user?${query({
      access_token: SSO_TOKEN,
      code_a: 'code-a-123',
      primary_key: 'pk-new',
      user_name: 'newcomer',
      display_name: 'New Comer',
      email: 'new@example.com',
      email_verified: 'true',
    })}`;

    // Act
    const response = await fetch(url);
    const text = await response.text();

    // Assess
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(text).toMatch(/^[0-9a-f]{32}$/);
    const user = await retrievedUser('pk-new');
    expect(user).toMatchObject({ user_name: 'newcomer', display_name: 'New Comer', email_verified: true });
  });

  it('takes bio, role and settings from a JSON body sent with the GET', async () => {
    // Prepare
    const url = `${emulator.url}/sso/v1/register-user?${query({
      access_token: SSO_TOKEN,
      code_a: 'code-a',
      primary_key: 'pk-body',
      user_name: 'bodyuser',
    })}`;
    const body = {
      bio: 'Hello there',
      role: 'journalist',
      settings: { notifications: { in_app: { user_mentioned: 'never' } } },
    };

    // Act
    const response = await rawRequest(url, {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

    // Assess
    expect(response.status).toBe(200);
    const user = await retrievedUser('pk-body');
    expect(user).toMatchObject({ bio: 'Hello there', role: 'journalist' });
    expect(user.settings).toMatchObject({
      notifications: { in_app: { user_mentioned: 'never', liked_your_message: 'immediately' } },
    });
  });

  it('refuses a missing access_token with 401 and a wrong one with 403, never echoing it', async () => {
    // Prepare
    const base = { code_a: 'a', primary_key: 'pk-x', user_name: 'xavier' };

    // Act
    const missing = await getJson(`${emulator.url}/sso/v1/register-user?${query(base)}`);
    const wrong = await getJson(
      `${emulator.url}/sso/v1/register-user?${query({ ...base, access_token: EXPORT_TOKEN })}`,
    );

    // Assess
    expect(missing.status).toBe(401);
    expect(errorBodySchema.parse(missing.body).error.code).toBe('missing_token');
    expect(wrong.status).toBe(403);
    expect(errorBodySchema.parse(wrong.body).error.code).toBe('invalid_token');
    expect(JSON.stringify(wrong.body)).not.toContain(EXPORT_TOKEN);
    expect((await retrieve('pk-x')).status).toBe(404);
  });

  it('requires code_a', async () => {
    // Act
    const result = await getJson(
      `${emulator.url}/sso/v1/register-user?${query({ access_token: SSO_TOKEN, primary_key: 'pk-y', user_name: 'yvonne' })}`,
    );

    // Assess
    expectFieldError(result, 'code_a');
  });

  it('updates an existing user on re-registration and keeps its svc_user_id', async () => {
    // Prepare
    const before = await retrievedUser('pk-bob');

    // Act
    const response = await fetch(
      `${emulator.url}/sso/v1/register-user?${query({
        access_token: SSO_TOKEN,
        code_a: 'again',
        primary_key: 'pk-bob',
        user_name: 'bobby',
        display_name: 'Robert',
      })}`,
    );

    // Assess
    expect(response.status).toBe(200);
    const after = await retrievedUser('pk-bob');
    expect(after.svc_user_id).toBe(before.svc_user_id);
    expect(after.display_name).toBe('Robert');
    expect(after.user_name).toBe('bobby');
  });

  it('derives a user_name from display_name with a random suffix when user_name is omitted', async () => {
    // Act
    const response = await fetch(
      `${emulator.url}/sso/v1/register-user?${query({
        access_token: SSO_TOKEN,
        code_a: 'c',
        primary_key: 'pk-derived',
        display_name: 'Mary Ann',
      })}`,
    );

    // Assess
    expect(response.status).toBe(200);
    expect((await retrievedUser('pk-derived')).user_name).toMatch(/^MaryAnn[a-z0-9]{6}$/);
  });
});

describe('create user (endpoint 2)', () => {
  it('creates a user and answers success with the retrieval shape', async () => {
    // Act
    const result = await createUser({ primary_key: 'pk-dave', user_name: 'dave_d' }, { bio: 'Dave here' });

    // Assess
    expect(result.status).toBe(200);
    const parsed = retrievalSchema.parse(result.body);
    expect(parsed.user).toMatchObject({
      primary_key: 'pk-dave',
      user_name: 'dave_d',
      bio: 'Dave here',
      role: 'registered',
    });
    expect(parsed.user.svc_user_id).toMatch(/^u_[0-9a-f]{20}$/);
  });

  it('answers 401 without the header and 403 with a wrong token, creating nothing', async () => {
    // Act
    const missing = await createUser({ primary_key: 'pk-e', user_name: 'eve_e' }, undefined, {});
    const wrong = await createUser({ primary_key: 'pk-e', user_name: 'eve_e' }, undefined, {
      'x-svc-sso-access-token': 'not-the-token',
    });

    // Assess
    expect(missing.status).toBe(401);
    expect(errorBodySchema.parse(missing.body).error.code).toBe('missing_token');
    expect(wrong.status).toBe(403);
    expect(errorBodySchema.parse(wrong.body).error.code).toBe('invalid_token');
    expect((await retrieve('pk-e')).status).toBe(404);
  });

  it('answers 403 when the export token is sent instead of the SSO token', async () => {
    // Act
    const result = await createUser({ primary_key: 'pk-e', user_name: 'eve_e' }, undefined, {
      'x-svc-sso-access-token': EXPORT_TOKEN,
    });

    // Assess
    expect(result.status).toBe(403);
  });

  it('answers 400 without spot_id and 403 with another account spot_id', async () => {
    // Act
    const missing = await getJson(
      `${emulator.url}/sso/v1/user?${query({ primary_key: 'pk-f', user_name: 'frank' })}`,
      {
        method: 'POST',
        headers: ssoHeaders,
      },
    );
    const wrong = await createUser({ primary_key: 'pk-f', user_name: 'frank', spot_id: 'sp_other' });

    // Assess
    expectFieldError(missing, 'spot_id');
    expect(wrong.status).toBe(403);
    expect(errorBodySchema.parse(wrong.body).error.code).toBe('invalid_spot_id');
  });

  it('answers 409 for an existing primary_key', async () => {
    // Act
    const result = await createUser({ primary_key: 'pk-alice', user_name: 'another' });

    // Assess
    expect(result.status).toBe(409);
    expect(errorBodySchema.parse(result.body).error.code).toBe('user_exists');
  });
});

describe('field rules', () => {
  it.each([
    ['abc', 'three characters'],
    ['a'.repeat(30), 'thirty characters'],
    ['has space', 'a space'],
    ['has\ttab', 'a tab'],
    ['line\nbreak', 'a line feed'],
    ['carriage\rreturn', 'a carriage return'],
    ['comma,name', 'a comma'],
    ['semi;colon', 'a semicolon'],
    ['colon:name', 'a colon'],
    ['slash/name', 'a slash'],
    ['back\\slash', 'a backslash'],
    ['pipe|name', 'a pipe'],
    ['quote"name', 'a double quote'],
    ["apos'name", 'an apostrophe'],
    ['less<name', 'a <'],
    ['more>name', 'a >'],
  ])('refuses user_name %j (%s)', async (userName) => {
    // Act
    const result = await createUser({ primary_key: 'pk-rule', user_name: userName });

    // Assess
    expectFieldError(result, 'user_name');
  });

  it.each([
    ['abcd', 'four characters'],
    ['a'.repeat(29), 'twenty-nine characters'],
    ['Zoë_Ünïcødé', 'accented letters'],
    ['名前テスト', 'Japanese letters'],
    ['😀'.repeat(15), '15 code points that are 30 UTF-16 units'],
    ['dots.and-dash_ok', 'dot, dash and underscore'],
  ])('accepts user_name %j (%s)', async (userName) => {
    // Act
    const result = await createUser({ primary_key: 'pk-ok', user_name: userName });

    // Assess
    expect(result.status).toBe(200);
    expect(retrievalSchema.parse(result.body).user.user_name).toBe(userName);
  });

  it('counts user_name length in code points', async () => {
    // Act: three emoji are six UTF-16 units but only three characters
    const result = await createUser({ primary_key: 'pk-emoji', user_name: '😀😀😀' });

    // Assess
    expectFieldError(result, 'user_name');
  });

  it('registers a taken user_name with random letters or digits appended, ignoring case', async () => {
    // Act
    const result = await createUser({ primary_key: 'pk-dup', user_name: 'ALICE_W' });

    // Assess
    expect(result.status).toBe(200);
    expect(retrievalSchema.parse(result.body).user.user_name).toMatch(/^ALICE_W[a-z0-9]{4}$/);
    expect((await retrievedUser('pk-alice')).user_name).toBe('alice_w');
  });

  it('trims a long taken user_name so the unique version stays under 30 characters', async () => {
    // Prepare
    const long = 'l'.repeat(29);
    await createUser({ primary_key: 'pk-long-1', user_name: long });

    // Act
    const result = await createUser({ primary_key: 'pk-long-2', user_name: long });

    // Assess
    const userName = retrievalSchema.parse(result.body).user.user_name;
    expect([...userName].length).toBe(29);
    expect(userName).not.toBe(long);
  });

  it('refuses a display_name over 30 characters, accepts 30 and defaults to Guest', async () => {
    // Act
    const tooLong = await createUser({
      primary_key: 'pk-d1',
      user_name: 'dname1',
      display_name: 'd'.repeat(31),
    });
    const exact = await createUser({
      primary_key: 'pk-d2',
      user_name: 'dname2',
      display_name: 'd'.repeat(30),
    });
    const absent = await createUser({ primary_key: 'pk-d3', user_name: 'dname3' });

    // Assess
    expectFieldError(tooLong, 'display_name');
    expect(exact.status).toBe(200);
    expect(retrievalSchema.parse(absent.body).user.display_name).toBe('Guest');
  });

  it('refuses a bio over 200 characters and accepts 200', async () => {
    // Act
    const tooLong = await createUser(
      { primary_key: 'pk-b1', user_name: 'bio_one' },
      { bio: 'b'.repeat(201) },
    );
    const exact = await createUser({ primary_key: 'pk-b2', user_name: 'bio_two' }, { bio: 'b'.repeat(200) });

    // Assess
    expectFieldError(tooLong, 'bio');
    expect(exact.status).toBe(200);
  });

  it.each(['admin', 'moderator', 'community-moderator', 'journalist', 'viewer', 'registered'])(
    'accepts role %s',
    async (role) => {
      // Act
      const result = await createUser(
        { primary_key: `pk-role-${role}`, user_name: `role_${role}` },
        { role },
      );

      // Assess
      expect(retrievalSchema.parse(result.body).user.role).toBe(role);
    },
  );

  it('refuses an unknown role and defaults to registered', async () => {
    // Act
    const unknown = await createUser({ primary_key: 'pk-r1', user_name: 'role_bad' }, { role: 'owner' });
    const absent = await createUser({ primary_key: 'pk-r2', user_name: 'role_none' });

    // Assess
    expectFieldError(unknown, 'role');
    expect(retrievalSchema.parse(absent.body).user.role).toBe('registered');
  });

  it('fills every unspecified notification kind with immediately on both channels', async () => {
    // Act
    const result = await createUser(
      { primary_key: 'pk-s1', user_name: 'settings1' },
      { settings: { notifications: { email: { message_rejected: 'never' } } } },
    );

    // Assess
    const kinds = [
      'liked_your_message',
      'message_approved',
      'message_rejected',
      'replied_to_message',
      'user_mentioned',
    ];
    const settings = z
      .object({
        notifications: z.object({
          email: z.record(z.string(), z.string()),
          in_app: z.record(z.string(), z.string()),
        }),
      })
      .parse(retrievalSchema.parse(result.body).user.settings);
    expect(Object.keys(settings.notifications.email).sort()).toEqual(kinds);
    expect(Object.keys(settings.notifications.in_app).sort()).toEqual(kinds);
    expect(settings.notifications.email.message_rejected).toBe('never');
    expect(settings.notifications.email.user_mentioned).toBe('immediately');
    expect(Object.values(settings.notifications.in_app).every((value) => value === 'immediately')).toBe(true);
  });

  it.each([
    [{ notifications: { email: { bogus_kind: 'never' } } }, 'settings.notifications.email.bogus_kind'],
    [
      { notifications: { in_app: { user_mentioned: 'sometimes' } } },
      'settings.notifications.in_app.user_mentioned',
    ],
    [{ notifications: { sms: {} } }, 'settings.notifications.sms'],
    [{ theme: 'dark' }, 'settings.theme'],
  ])('refuses settings %j naming %s', async (settings, field) => {
    // Act
    const result = await createUser({ primary_key: 'pk-s2', user_name: 'settings2' }, { settings });

    // Assess
    expectFieldError(result, field);
  });

  it.each([
    ['email_verified', 'yes'],
    ['private_profile', 'maybe'],
  ])('refuses %s=%s (must be true or false)', async (field, value) => {
    // Act
    const result = await createUser({ primary_key: 'pk-bool', user_name: 'boolean', [field]: value });

    // Assess
    expectFieldError(result, field);
  });

  it('stores private_profile=true from the query string', async () => {
    // Act
    const result = await createUser({
      primary_key: 'pk-priv',
      user_name: 'private',
      private_profile: 'true',
    });

    // Assess
    expect(retrievalSchema.parse(result.body).user.private_profile).toBe(true);
  });

  it.each([
    ['not base64 at all!', 'invalid base64'],
    [Buffer.from('not json').toString('base64'), 'base64 of text that is not JSON'],
    [Buffer.from('{"is_subscriber":"yes"}').toString('base64'), 'a non-boolean is_subscriber'],
    [Buffer.from('{}').toString('base64'), 'no is_subscriber'],
  ])('refuses user_metadata %j (%s)', async (metadata) => {
    // Act
    const result = await createUser({
      primary_key: 'pk-meta',
      user_name: 'metadata',
      user_metadata: metadata,
    });

    // Assess
    expectFieldError(result, 'user_metadata');
  });

  it('decodes a valid user_metadata into the is_subscriber object', async () => {
    // Act
    const result = await createUser({
      primary_key: 'pk-sub',
      user_name: 'subscriber',
      user_metadata: Buffer.from('{"is_subscriber":true}').toString('base64'),
    });

    // Assess
    expect(retrievalSchema.parse(result.body).user.user_metadata).toEqual({ is_subscriber: true });
  });

  it('refuses a body field sent in the query and a query field sent in the body', async () => {
    // Act
    const bioInQuery = await createUser({ primary_key: 'pk-q', user_name: 'query_bio', bio: 'hi' });
    const nameInBody = await createUser(
      { primary_key: 'pk-q', user_name: 'body_name' },
      { user_name: 'other' },
    );

    // Assess
    expectFieldError(bioInQuery, 'bio');
    expectFieldError(nameInBody, 'user_name');
  });

  it('refuses a body that is not JSON', async () => {
    // Act
    const result = await getJson(
      `${emulator.url}/sso/v1/user?${query({ spot_id: SPOT_ID, primary_key: 'pk-j', user_name: 'jsonless' })}`,
      {
        method: 'POST',
        headers: { ...ssoHeaders, 'content-type': 'application/json' },
        body: '{not json',
      },
    );

    // Assess
    expect(result.status).toBe(400);
    expect(errorBodySchema.parse(result.body).error.code).toBe('invalid_json');
  });
});

describe('retrieve user (endpoint 3)', () => {
  it('answers exactly the documented retrieval fields', async () => {
    // Act
    const result = await retrieve('pk-alice');

    // Assess
    expect(result.status).toBe(200);
    expect(result.body).toEqual({
      success: true,
      user: {
        primary_key: 'pk-alice',
        svc_user_id: 'u_alice',
        user_name: 'alice_w',
        display_name: 'Alice',
        bio: 'Reads everything.',
        role: 'moderator',
        location: 'Porto',
        private_profile: false,
        image_url: '',
        email: 'alice@example.com',
        email_verified: true,
        legacy_user_id: null,
        user_metadata: { is_subscriber: false },
        settings: {
          notifications: {
            email: {
              liked_your_message: 'immediately',
              message_approved: 'immediately',
              message_rejected: 'immediately',
              replied_to_message: 'immediately',
              user_mentioned: 'immediately',
            },
            in_app: {
              liked_your_message: 'immediately',
              message_approved: 'immediately',
              message_rejected: 'immediately',
              replied_to_message: 'immediately',
              user_mentioned: 'immediately',
            },
          },
        },
      },
    });
  });

  it('answers 404 with success false for an unknown primary_key', async () => {
    // Act
    const result = await retrieve('pk-nobody');

    // Assess
    expect(result.status).toBe(404);
    expect(result.body).toEqual({ success: false });
  });

  it('answers 401 without the header and 403 with a wrong token', async () => {
    // Act
    const missing = await retrieve('pk-alice', {});
    const wrong = await retrieve('pk-alice', { 'x-svc-sso-access-token': 'wrong' });

    // Assess
    expect(missing.status).toBe(401);
    expect(wrong.status).toBe(403);
    expect(JSON.stringify([missing.body, wrong.body])).not.toContain('alice_w');
  });

  it('does not accept the SSO token in the query instead of the header', async () => {
    // Act
    const result = await getJson(`${emulator.url}/sso/v1/user/pk-alice?access_token=${SSO_TOKEN}`);

    // Assess
    expect(result.status).toBe(401);
  });
});

describe('update user (endpoint 4)', () => {
  it('expects the full user data: a field not sent takes its default, as the spec warns', async () => {
    // Prepare
    const before = await retrievedUser('pk-alice');

    // Act
    const response = await updateUser(
      { primary_key: 'pk-alice', user_name: 'alice_w', display_name: 'Alice W.', location: 'Braga' },
      { bio: 'Changed' },
    );

    // Assess
    expect(response.status).toBe(200);
    expect(before).toMatchObject({ email: 'alice@example.com', role: 'moderator', email_verified: true });
    const user = await retrievedUser('pk-alice');
    expect(user).toMatchObject({
      user_name: 'alice_w',
      display_name: 'Alice W.',
      location: 'Braga',
      bio: 'Changed',
      role: 'registered',
      email: '',
      image_url: '',
      private_profile: false,
      user_metadata: { is_subscriber: false },
    });
    // Not sent with an e-mail, email_verified keeps its value.
    expect(user.email_verified).toBe(true);
  });

  it('keeps every field when the full user data is sent back as read', async () => {
    // Prepare
    const before = await retrievedUser('pk-alice');
    const full = z
      .object({
        display_name: z.string(),
        email: z.string(),
        email_verified: z.boolean(),
        image_url: z.string(),
        location: z.string(),
        private_profile: z.boolean(),
        bio: z.string(),
        role: z.string(),
        settings: z.unknown(),
        user_metadata: z.unknown(),
      })
      .parse(before);
    const metadata = Buffer.from(JSON.stringify(full.user_metadata)).toString('base64');

    // Act
    await updateUser(
      {
        primary_key: 'pk-alice',
        user_name: before.user_name,
        display_name: full.display_name,
        email: full.email,
        email_verified: String(full.email_verified),
        image_url: full.image_url,
        location: full.location,
        private_profile: String(full.private_profile),
        user_metadata: metadata,
      },
      { bio: full.bio, role: full.role, settings: full.settings },
    );

    // Assess
    expect(await retrievedUser('pk-alice')).toEqual(before);
  });

  it('deletes a set image when image_url is sent empty', async () => {
    // Prepare
    await updateUser({ primary_key: 'pk-bob', user_name: 'bobby', image_url: 'https://cdn.example/bob.png' });
    const withImage = await retrievedUser('pk-bob');

    // Act
    await updateUser({ primary_key: 'pk-bob', user_name: 'bobby', image_url: '' });

    // Assess
    expect(withImage.image_url).toBe('https://cdn.example/bob.png');
    expect((await retrievedUser('pk-bob')).image_url).toBe('');
  });

  it('requires user_name', async () => {
    // Act
    const response = await updateUser({ primary_key: 'pk-alice', display_name: 'No Name' });

    // Assess
    expectFieldError({ status: response.status, body: JSON.parse(response.text) }, 'user_name');
  });

  it('changes email_verified only when email is sent in the same request', async () => {
    // Act
    await updateUser({ primary_key: 'pk-alice', user_name: 'alice_w', email_verified: 'false' });
    const withoutEmail = await retrievedUser('pk-alice');
    await updateUser({
      primary_key: 'pk-alice',
      user_name: 'alice_w',
      email: 'new@example.com',
      email_verified: 'false',
    });
    const withEmail = await retrievedUser('pk-alice');

    // Assess
    expect(withoutEmail.email_verified).toBe(true);
    expect(withEmail).toMatchObject({ email: 'new@example.com', email_verified: false });
  });

  it('sets email_verified to false when an e-mail is sent without it', async () => {
    // Act
    await updateUser({ primary_key: 'pk-alice', user_name: 'alice_w', email: 'other@example.com' });

    // Assess
    expect(await retrievedUser('pk-alice')).toMatchObject({
      email: 'other@example.com',
      email_verified: false,
    });
  });

  it('replaces settings with the ones sent, unspecified kinds back to immediately', async () => {
    // Prepare
    await updateUser(
      { primary_key: 'pk-bob', user_name: 'bobby' },
      { settings: { notifications: { email: { liked_your_message: 'never', user_mentioned: 'never' } } } },
    );

    // Act
    await updateUser(
      { primary_key: 'pk-bob', user_name: 'bobby' },
      { settings: { notifications: { email: { user_mentioned: 'never' } } } },
    );

    // Assess
    expect((await retrievedUser('pk-bob')).settings).toMatchObject({
      notifications: { email: { liked_your_message: 'immediately', user_mentioned: 'never' } },
    });
  });

  it("makes a user_name taken by someone else unique, and keeps the user's own", async () => {
    // Act
    await updateUser({ primary_key: 'pk-bob', user_name: 'alice_w' });
    const taken = (await retrievedUser('pk-bob')).user_name;
    await updateUser({ primary_key: 'pk-alice', user_name: 'ALICE_W' });

    // Assess
    expect(taken).toMatch(/^alice_w[a-z0-9]{4}$/);
    expect((await retrievedUser('pk-alice')).user_name).toBe('ALICE_W');
  });

  it('answers 404 for an unknown user and 401/403 for bad credentials', async () => {
    // Act
    const unknown = await updateUser({ primary_key: 'pk-ghost', user_name: 'ghost_user' });
    const missing = await rawRequest(
      `${emulator.url}/sso/v1/update-user?${query({ primary_key: 'pk-bob', user_name: 'bobby' })}`,
    );
    const wrong = await rawRequest(
      `${emulator.url}/sso/v1/update-user?${query({ primary_key: 'pk-bob', user_name: 'bobby' })}`,
      {
        headers: { 'x-svc-sso-access-token': 'nope' },
      },
    );

    // Assess
    expect(unknown.status).toBe(404);
    expect(missing.status).toBe(401);
    expect(wrong.status).toBe(403);
  });
});

describe('delete user (endpoint 5)', () => {
  const usersSchema = z.object({
    users: z.array(
      z.object({
        svc_user_id: z.string(),
        primary_key: z.string().nullable(),
        registered: z.boolean(),
        display_name: z.string(),
        user_name: z.string(),
      }),
    ),
  });
  const commentsSchema = z.object({
    comments: z.array(
      z.object({ id: z.string(), author_svc_user_id: z.string(), likes: z.number(), dislikes: z.number() }),
    ),
  });

  it('deletes the user, re-links their comments to a new guest and removes their votes', async () => {
    // Act
    const result = await getJson(`${emulator.url}/sso/v1/user/pk-alice`, {
      method: 'DELETE',
      headers: ssoHeaders,
    });

    // Assess
    expect(result.status).toBe(200);
    expect(result.body).toEqual({ success: true });
    expect((await retrieve('pk-alice')).status).toBe(404);
    const users = usersSchema.parse((await getJson(`${emulator.url}/_emulator/users`)).body).users;
    const guest = users.find((user) => !user.registered);
    expect(guest).toMatchObject({ primary_key: null, display_name: 'Guest' });
    expect(guest?.user_name).toMatch(/^Guest[a-z0-9]{8}$/);
    const comments = commentsSchema.parse(
      (await getJson(`${emulator.url}/_emulator/comments`)).body,
    ).comments;
    const byId = new Map(comments.map((comment) => [comment.id, comment]));
    for (const id of ['c-1', 'c-3', 'c-4']) expect(byId.get(id)?.author_svc_user_id).toBe(guest?.svc_user_id);
    expect(byId.get('c-2')?.author_svc_user_id).toBe('u_bob');
    expect(byId.get('c-2')?.likes).toBe(0);
    expect(byId.get('c-5')?.dislikes).toBe(0);
  });

  it('answers 404 with success false for an unknown user', async () => {
    // Act
    const result = await getJson(`${emulator.url}/sso/v1/user/pk-nobody`, {
      method: 'DELETE',
      headers: ssoHeaders,
    });

    // Assess
    expect(result.status).toBe(404);
    expect(result.body).toEqual({ success: false });
  });

  it('answers 401 and 403 for bad credentials and keeps the user', async () => {
    // Act
    const missing = await getJson(`${emulator.url}/sso/v1/user/pk-bob`, { method: 'DELETE' });
    const wrong = await getJson(`${emulator.url}/sso/v1/user/pk-bob`, {
      method: 'DELETE',
      headers: { 'x-svc-sso-access-token': EXPORT_TOKEN },
    });

    // Assess
    expect(missing.status).toBe(401);
    expect(wrong.status).toBe(403);
    expect((await retrieve('pk-bob')).status).toBe(200);
  });
});

describe('unknown routes', () => {
  it('answers 404 for an unknown path and 405 with Allow for a wrong method', async () => {
    // Act
    const unknown = await fetch(`${emulator.url}/sso/v2/user/pk-bob`, { headers: ssoHeaders });
    const wrongMethod = await fetch(`${emulator.url}/sso/v1/user/pk-bob`, {
      method: 'PUT',
      headers: ssoHeaders,
    });

    // Assess
    expect(unknown.status).toBe(404);
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('GET, DELETE');
  });
});
