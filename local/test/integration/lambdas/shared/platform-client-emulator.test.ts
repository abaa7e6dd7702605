import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { DsrError, UnaddressableIdError } from '../../../../../lambdas/shared/errors.ts';
import { PlatformClient } from '../../../../../lambdas/shared/platform-client.ts';
import { emulatorControl, type RunningEmulator, startEmulator } from '../../../../emulator/server.ts';

const SSO_TOKEN = 'emu-sso-token-3c8e0d1f77';
const EXPORT_TOKEN = 'emu-export-token-52a9b4e610';

let emulator: RunningEmulator;
const logLines: string[] = [];

function client(timeoutMs = 300) {
  return new PlatformClient(
    {
      baseUrl: emulator.url,
      exportUrl: emulator.url,
      activityUrl: emulator.url,
      spotId: emulator.spotId,
      timeoutMs,
    },
    {
      credentials: { ssoAccessToken: () => SSO_TOKEN, exportToken: () => EXPORT_TOKEN },
      logger: {
        debug: (message, attributes) => logLines.push(JSON.stringify({ message, ...attributes })),
        warn: (message, attributes) => logLines.push(JSON.stringify({ message, ...attributes })),
      },
    },
  );
}

beforeAll(async () => {
  emulator = await startEmulator({
    ssoAccessToken: SSO_TOKEN,
    exportToken: EXPORT_TOKEN,
    state: {
      spot_id: 'sp_emu',
      conversations: [],
      users: [{ primary_key: 'subject-pk-1', user_name: 'subject_one', svc_user_id: 'svc-subject-1' }],
      comments: [],
      votes: [],
    },
  });
});
afterAll(async () => {
  await emulator.close();
});

describe('PlatformClient against the emulator', () => {
  it('walks retrieve, export, status and delete on a healthy platform', async () => {
    const platform = client(2_000);
    const user = await platform.retrieveUser('subject-pk-1');
    expect(user).toMatchObject({ found: true, svcUserId: 'svc-subject-1' });
    const { exportId } = await platform.startExport('svc-subject-1');
    const statuses = [];
    for (let poll = 0; poll < 3; poll += 1) statuses.push((await platform.exportStatus(exportId)).status);
    expect(statuses).toEqual(['pending', 'pending', 'completed']);
    expect(await platform.deleteUser('subject-pk-1')).toEqual({ outcome: 'deleted', status: 200 });
    expect(await platform.retrieveUser('subject-pk-1')).toEqual({ found: false });
    expect(await platform.deleteUser('subject-pk-1')).toMatchObject({ outcome: 'already_absent' });
  });

  it('maps every injected fault to a named error and never lets a token into logs or errors', async () => {
    await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
    await fetch(`${emulator.url}/_emulator/faults`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        seed: 42,
        error_rate: 0.7,
        errors: ['500', '503', '429', 'timeout', 'reset'],
        timeout_ms: 600,
      }),
    });
    logLines.length = 0;
    const platform = client(300);
    const names = new Set<string>();
    const messages: string[] = [];
    for (let call = 0; call < 40; call += 1) {
      const attempts = [
        () => platform.retrieveUser('subject-pk-1'),
        () => platform.exportStatus('1'),
        () => platform.startExport('svc-subject-1'),
      ];
      try {
        await attempts[call % attempts.length]?.();
      } catch (error) {
        if (!(error instanceof DsrError)) throw error;
        names.add(error.name);
        messages.push(`${error.name}: ${error.message} ${JSON.stringify(error)}`);
      }
    }
    expect(names).toEqual(
      new Set([
        'PlatformUnavailableError',
        'PlatformThrottledError',
        'PlatformTimeoutError',
        'PlatformConnectionResetError',
        'ExportStartUncertainError',
        'PlatformNotFoundError',
      ]),
    );
    const everything = [...logLines, ...messages].join('\n');
    expect(logLines.length).toBeGreaterThan(20);
    for (const secret of [SSO_TOKEN, EXPORT_TOKEN, 'subject-pk-1', 'svc-subject-1']) {
      expect(everything.includes(secret) ? secret : null).toBeNull();
    }
  });
});

describe('PlatformClient.updateUser against the emulator', () => {
  it('sends the full user data (query and GET body), and answers not-found for an unknown user', async () => {
    await fetch(`${emulator.url}/_emulator/reset`, { method: 'POST' });
    await fetch(`${emulator.url}/_emulator/faults`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ seed: 1, error_rate: 0 }),
    });
    logLines.length = 0;
    const platform = client(2_000);
    const update = {
      user_name: 'subject_renamed',
      display_name: 'Renamed Subject',
      email: 'renamed@example.org',
      email_verified: false,
      image_url: 'https://cdn.example/r.png',
      location: 'Porto',
      private_profile: true,
      user_metadata: Buffer.from('{"is_subscriber":true}').toString('base64'),
      bio: 'A bio sent in the body',
      role: 'journalist',
      settings: { notifications: { email: { user_mentioned: 'never' } } },
    };

    const answer = await platform.updateUser('subject-pk-1', update);
    const missing = await platform.updateUser('nobody-pk', update);

    expect(answer).toEqual({ found: true });
    expect(missing).toEqual({ found: false });
    const read = await platform.retrieveUser('subject-pk-1');
    expect(read.found && read.user).toMatchObject({
      ...update,
      user_metadata: { is_subscriber: true },
      settings: { notifications: { email: { user_mentioned: 'never', liked_your_message: 'immediately' } } },
    });
    const logged = logLines.join('\n');
    for (const value of ['subject_renamed', 'renamed@example.org', 'A bio sent', 'Porto', 'subject-pk-1']) {
      expect(logged.includes(value) ? value : null).toBeNull();
    }
  });
});

describe('PlatformClient path segments against the emulator', () => {
  const AWKWARD_KEYS = [
    'a/b',
    '%2e',
    '%2E%2E',
    '?',
    '#',
    'x?y#z',
    'é-名前-😀',
    'a\\b',
    ' sp ace',
    '+1',
    '..a',
  ];
  const DOT_KEYS = ['.', '..'];
  let platform: RunningEmulator;

  beforeAll(async () => {
    platform = await startEmulator({
      ssoAccessToken: SSO_TOKEN,
      exportToken: EXPORT_TOKEN,
      state: {
        spot_id: 'sp_paths',
        conversations: [],
        users: [...AWKWARD_KEYS, ...DOT_KEYS, 'a', 'b', 'user'].map((primaryKey, index) => ({
          primary_key: primaryKey,
          user_name: `path_user_${index}`,
          svc_user_id: `svc-path-${index}`,
        })),
        comments: [],
        votes: [],
      },
    });
  });
  afterAll(async () => {
    await platform.close();
  });

  function pathClient() {
    return new PlatformClient(
      {
        baseUrl: platform.url,
        exportUrl: platform.url,
        activityUrl: platform.url,
        spotId: platform.spotId,
        timeoutMs: 2_000,
      },
      { credentials: { ssoAccessToken: () => SSO_TOKEN, exportToken: () => EXPORT_TOKEN } },
    );
  }

  it('retrieves and deletes exactly the user whose primary_key holds /, %, ?, # or non-ASCII text', async () => {
    const client = pathClient();
    for (const [index, primaryKey] of AWKWARD_KEYS.entries()) {
      expect(await client.retrieveUser(primaryKey)).toMatchObject({
        found: true,
        svcUserId: `svc-path-${index}`,
      });
    }
    for (const primaryKey of AWKWARD_KEYS) {
      expect(await client.deleteUser(primaryKey)).toEqual({ outcome: 'deleted', status: 200 });
      expect(await client.retrieveUser(primaryKey)).toEqual({ found: false });
    }
    // The keys that a wrong decoding would have reached are untouched.
    for (const other of ['a', 'b', 'user', '.', '..']) {
      expect(emulatorControl(platform).user(other) !== undefined).toBe(true);
    }
  });

  it('refuses "." and ".." as primary_key with a terminal error, never a not-found', async () => {
    const client = pathClient();
    for (const primaryKey of DOT_KEYS) {
      const retrieve = await client.retrieveUser(primaryKey).catch((error: unknown) => error);
      expect(retrieve).toBeInstanceOf(UnaddressableIdError);
      expect(retrieve).toMatchObject({ retryable: false, code: 'unaddressable_id' });
      await expect(client.deleteUser(primaryKey)).rejects.toBeInstanceOf(UnaddressableIdError);
      expect(emulatorControl(platform).user(primaryKey) !== undefined).toBe(true);
    }
  });

  it('serves a percent-encoded segment as data, as an HTTP server routes it: %2E is the user "."', async () => {
    const answers = new Map<string, unknown>();
    for (const path of [
      '/sso/v1/user/%2E',
      '/sso/v1/user/%2e%2e',
      '/sso/v1/user/./user',
      '/sso/v1/user/x/../user',
    ]) {
      answers.set(path, await rawGet(platform.url, path));
    }
    expect(answers.get('/sso/v1/user/%2E')).toMatchObject({ status: 200, primaryKey: '.' });
    expect(answers.get('/sso/v1/user/%2e%2e')).toMatchObject({ status: 200, primaryKey: '..' });
    // Literal dot steps are resolved, as servers do.
    expect(answers.get('/sso/v1/user/./user')).toMatchObject({ status: 200, primaryKey: 'user' });
    expect(answers.get('/sso/v1/user/x/../user')).toMatchObject({ status: 200, primaryKey: 'user' });
  });
});

/** A GET whose path goes on the wire exactly as given (fetch would normalise %2E segments away). */
function rawGet(base: string, path: string): Promise<{ status: number; primaryKey: unknown }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      new URL(base),
      { path, headers: { 'x-svc-sso-access-token': SSO_TOKEN } },
      (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => {
          text += chunk.toString();
        });
        response.on('end', () => {
          const body: unknown = JSON.parse(text);
          const user = z.object({ user: z.object({ primary_key: z.string() }) }).safeParse(body);
          resolve({
            status: response.statusCode ?? 0,
            primaryKey: user.success ? user.data.user.primary_key : undefined,
          });
        });
      },
    );
    request.on('error', reject);
    request.end();
  });
}
