import { describe, expect, it } from 'vitest';
import { fullUpdate } from '../../../../lambdas/correct-subject/correct-subject.ts';

const read = {
  primary_key: 'u-1',
  svc_user_id: 'svc-1',
  user_name: 'ada_l',
  display_name: 'Ada',
  email: 'ada@example.org',
  email_verified: true,
  image_url: 'https://cdn.example/ada.png',
  location: 'London',
  private_profile: true,
  user_metadata: { is_subscriber: true },
  bio: 'Mathematician',
  role: 'journalist',
  settings: { notifications: { email: { user_mentioned: 'never' } } },
};

describe('fullUpdate', () => {
  it('sends every field as read, with the corrections applied', () => {
    expect(fullUpdate(read, { display_name: 'Ada L.', image_url: '' })).toEqual({
      user_name: 'ada_l',
      display_name: 'Ada L.',
      email: 'ada@example.org',
      email_verified: true,
      image_url: '',
      location: 'London',
      private_profile: true,
      user_metadata: Buffer.from('{"is_subscriber":true}').toString('base64'),
      bio: 'Mathematician',
      role: 'journalist',
      settings: read.settings,
    });
  });

  it('sends a corrected e-mail as unverified, and the same e-mail with its verification kept', () => {
    expect(fullUpdate(read, { email: 'ada@new.example' })).toMatchObject({
      email: 'ada@new.example',
      email_verified: false,
    });
    expect(fullUpdate(read, { email: 'ada@example.org' })).toMatchObject({ email_verified: true });
  });

  it('refuses to build an update from a profile missing a field, since update-user would wipe it', () => {
    const { bio: _bio, role: _role, ...partial } = read;
    expect(() => fullUpdate(partial, { display_name: 'Ada L.' })).toThrow(
      expect.objectContaining({
        name: 'PlatformResponseInvalidError',
        message: expect.stringContaining(
          'the profile read has no bio, role; update-user wipes a field it is not sent',
        ),
      }),
    );
  });
});
