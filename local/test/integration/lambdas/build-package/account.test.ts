import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectAccount } from '../../../../../lambdas/build-package/account.ts';
import { PlatformCapacityError } from '../../../../../lambdas/shared/errors.ts';
import { PlatformClient } from '../../../../../lambdas/shared/platform-client.ts';
import { type RunningEmulator, startEmulator } from '../../../../emulator/server.ts';

const SSO_TOKEN = 'emu-sso-token-account-1';
let emulator: RunningEmulator;

function client(token = SSO_TOKEN) {
  return new PlatformClient(
    { baseUrl: emulator.url, exportUrl: emulator.url, activityUrl: emulator.url, spotId: emulator.spotId },
    { credentials: { ssoAccessToken: () => token } },
  );
}

beforeAll(async () => {
  emulator = await startEmulator({
    ssoAccessToken: SSO_TOKEN,
    exportToken: 'emu-export-token-account-2',
    state: {
      spot_id: 'sp_emu',
      conversations: [],
      users: [
        {
          primary_key: 'subject-pk-1',
          user_name: 'subject_one',
          private_profile: true,
          // {"is_subscriber":true}, as the register call takes it.
          user_metadata: 'eyJpc19zdWJzY3JpYmVyIjp0cnVlfQ==',
          settings: { notifications: { email: { user_mentioned: 'never' } } },
        },
      ],
      comments: [],
      votes: [],
    },
  });
});
afterAll(async () => {
  await emulator.close();
});

describe('collectAccount against the emulator', () => {
  it("reads the account's notification settings, privacy and subscription", async () => {
    const { settings, failure } = await collectAccount(client(), 'subject-pk-1');

    expect(failure).toBeNull();
    expect(settings).toMatchObject({
      privateProfile: true,
      subscriber: true,
      notifications: { email: { user_mentioned: 'never' } },
    });
  });

  it('answers SubjectNotFound for a subject the platform no longer knows', async () => {
    expect(await collectAccount(client(), 'nobody-here')).toEqual({
      settings: null,
      failure: 'SubjectNotFound',
    });
  });

  it('answers the error name, not its message, when the platform refuses', async () => {
    expect(await collectAccount(client('wrong-token'), 'subject-pk-1')).toEqual({
      settings: null,
      failure: 'PlatformAuthError',
    });
  });

  it('lets a wait for platform capacity through', async () => {
    const waiting = {
      retrieveUser: async () => {
        throw new PlatformCapacityError('rate', 2);
      },
    };
    await expect(collectAccount(waiting, 'subject-pk-1')).rejects.toBeInstanceOf(PlatformCapacityError);
  });
});
