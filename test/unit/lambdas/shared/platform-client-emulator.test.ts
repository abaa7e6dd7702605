import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningEmulator, startEmulator } from '#local/emulator/server';
import { DsrError } from '#shared/errors';
import { PlatformClient } from '#shared/platform-client';

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
