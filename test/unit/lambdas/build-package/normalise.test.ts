import { describe, expect, it } from 'vitest';
import { InvalidArchiveError } from '#shared/errors';
import { parseExportFiles } from '../../../../lambdas/build-package/export-files.ts';
import { normalisePackage, safeLink } from '../../../../lambdas/build-package/normalise.ts';
import { exportedMessage, normaliseInput, PROFILE, rawFiles, T0 } from './fixtures.ts';

describe('normalisePackage', () => {
  it('turns epoch seconds into RFC 3339 times and groups comments per conversation, newest conversation first', () => {
    // Prepare
    const messages = [
      exportedMessage('m1', 'conv-a', T0, 'first in a'),
      exportedMessage('m2', 'conv-b', T0 + 7200, 'only in b'),
      exportedMessage('m3', 'conv-a', T0 + 3600, 'second in a', {
        parent_comment_id: 'm1',
        type: 'reply',
      }),
    ];

    // Act
    const data = normalisePackage(normaliseInput(messages));

    // Assess
    expect(data.conversations.map((c) => c.conversation_id)).toEqual(['conv-b', 'conv-a']);
    const convA = data.conversations[1];
    expect(convA?.comments.map((c) => [c.id, c.written_at, c.kind, c.reply_to])).toEqual([
      ['m1', '2024-01-01T10:00:00.000Z', 'comment', null],
      ['m3', '2024-01-01T11:00:00.000Z', 'reply', 'm1'],
    ]);
  });

  it('takes titles, links and deleted or edited states from the activity context', () => {
    // Prepare
    const messages = [
      exportedMessage('m1', 'conv-a', T0, 'kept'),
      exportedMessage('m2', 'conv-a', T0 + 1, 'removed later'),
      exportedMessage('m3', 'conv-a', T0 + 2, 'changed later'),
    ];
    const input = normaliseInput(messages, {
      activity: {
        details: { status: 'complete', reason: null, pages: 1 },
        conversations: new Map([
          ['conv-a', { title: 'Budget 2024', url: 'https://news.example.test/budget' }],
        ]),
        messages: new Map([
          ['m2', { deleted: true, status: 'deleted' }],
          ['m3', { edited: true }],
        ]),
      },
    });

    // Act
    const data = normalisePackage(input);

    // Assess
    const [conversation] = data.conversations;
    expect(conversation?.title).toBe('Budget 2024');
    expect(conversation?.url).toBe('https://news.example.test/budget');
    expect(conversation?.comments.map((c) => [c.id, c.state, c.edited])).toEqual([
      ['m1', 'published', false],
      ['m2', 'deleted', false],
      ['m3', 'published', true],
    ]);
    expect(data.conversation_details).toEqual({ status: 'complete', reason: null, pages: 1 });
  });

  it('marks a reply to someone else as such and an unpublished comment as not published', () => {
    const messages = [
      exportedMessage('m1', 'conv-a', T0, 'answering a stranger', {
        parent_comment_id: 'other-9',
        type: 'reply',
      }),
      exportedMessage('m2', 'conv-a', T0 + 1, 'held for moderation', { published: false, state: 'pending' }),
    ];

    const data = normalisePackage(normaliseInput(messages));

    const comments = data.conversations[0]?.comments ?? [];
    expect(comments[0]).toMatchObject({ kind: 'reply', reply_to: null, parent_id: 'other-9' });
    expect(comments[1]).toMatchObject({ state: 'unpublished', moderation: 'pending' });
  });

  it('gives likes of the subject’s own comments their conversation and leaves others as bare ids, once each', () => {
    const messages = [exportedMessage('m1', 'conv-a', T0, 'mine')];
    const input = normaliseInput(
      messages,
      {
        activity: {
          details: { status: 'complete', reason: null, pages: 1 },
          conversations: new Map([['conv-a', { title: 'Budget 2024', url: null }]]),
          messages: new Map(),
        },
      },
      { likes: ['m1', 'x-77', 'x-77'], dislikes: ['x-78'] },
    );

    const data = normalisePackage(input);

    expect(data.likes).toEqual([
      { message_id: 'm1', conversation_id: 'conv-a', conversation_title: 'Budget 2024' },
      { message_id: 'x-77', conversation_id: null, conversation_title: null },
    ]);
    expect(data.dislikes).toEqual([{ message_id: 'x-78', conversation_id: null, conversation_title: null }]);
  });

  it('explains the profile and roles, and leaves internal fields out of the normalised data', () => {
    const data = normalisePackage(normaliseInput([exportedMessage('m1', 'conv-a', T0, 'hello')]));

    expect(data.profile).toMatchObject({
      user_name: 'ada_l',
      display_name: 'Ada Lovelace',
      email: 'ada@example.test',
      email_verified: true,
      gender: null,
      single_sign_on: true,
      social_accounts: 0,
    });
    expect(data.roles).toEqual([
      { role: 'registered', scope: 'platform', site: null },
      { role: 'moderator', scope: 'site', site: 'sp_test' },
    ]);
    const json = JSON.stringify(data);
    for (const internal of [
      'tok-internal-0001',
      'never_hard_delete',
      'tags_metadata',
      'tag-secret',
      'site-user-42',
    ]) {
      expect(json).not.toContain(internal);
    }
  });

  it('keeps notification settings when the profile carries them', () => {
    const files = parseExportFiles(
      rawFiles([], {
        profile: {
          ...PROFILE,
          settings: {
            notifications: {
              email: { user_mentioned: 'never' },
              in_app: { liked_your_message: 'immediately' },
            },
          },
        },
      }),
    );
    const data = normalisePackage({ ...normaliseInput([]), files });
    expect(data.settings_source).toBe('export');
    expect(data.settings).toEqual([
      { channel: 'email', kind: 'user_mentioned', value: 'never', default: false },
      { channel: 'in_app', kind: 'liked_your_message', value: 'immediately', default: false },
    ]);
  });

  it("lists every notification kind of the account, marking the ones left at their default, and the profile's privacy and subscription", () => {
    const data = normalisePackage({
      ...normaliseInput([]),
      account: {
        notifications: { email: { user_mentioned: 'never', custom_kind: 'never' }, in_app: {} },
        privateProfile: true,
        subscriber: false,
      },
    });

    expect(data.settings_source).toBe('account');
    expect(data.settings.filter((row) => row.channel === 'email')).toEqual([
      { channel: 'email', kind: 'liked_your_message', value: 'immediately', default: true },
      { channel: 'email', kind: 'message_approved', value: 'immediately', default: true },
      { channel: 'email', kind: 'message_rejected', value: 'immediately', default: true },
      { channel: 'email', kind: 'replied_to_message', value: 'immediately', default: true },
      { channel: 'email', kind: 'user_mentioned', value: 'never', default: false },
      { channel: 'email', kind: 'custom_kind', value: 'never', default: false },
    ]);
    expect(data.settings.filter((row) => row.channel === 'in_app')).toHaveLength(5);
    expect(data.profile).toMatchObject({ private_profile: true, subscriber: false });
  });

  it('says the settings are unavailable when neither the account nor the export has them', () => {
    const data = normalisePackage(normaliseInput([]));
    expect(data).toMatchObject({ settings: [], settings_source: 'unavailable' });
    expect(data.profile).toMatchObject({ private_profile: null, subscriber: null });
  });
});

describe('parseExportFiles', () => {
  it('rejects a file that is not JSON, naming the file', () => {
    const raw = { ...rawFiles([]), 'likes.json': Buffer.from('[1, 2') };
    expect(() => parseExportFiles(raw)).toThrow(InvalidArchiveError);
    expect(() => parseExportFiles(raw)).toThrow(/likes\.json in the archive is not JSON/);
  });

  it('rejects a message without its documented fields, naming the path but never the value', () => {
    const raw = rawFiles([
      { ...exportedMessage('m1', 'conv-a', T0, 'secret words'), written_at: 'Tuesday secret' },
    ]);
    let error: unknown;
    try {
      parseExportFiles(raw);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(String(error)).toMatch(/messages\.json at 0\.written_at/);
    expect(String(error)).not.toContain('secret');
  });

  it('accepts numeric ids and keeps them as strings', () => {
    const files = parseExportFiles(
      rawFiles([{ ...exportedMessage('m1', 'conv-a', T0, 'x'), id: 12, conversation_id: 34 }], { likes: [] }),
    );
    expect(files['messages.json'][0]).toMatchObject({ id: '12', conversation_id: '34' });
  });
});

describe('safeLink', () => {
  it('keeps http and https addresses and drops every other scheme', () => {
    expect(safeLink('https://news.example.test/a?b=1')).toBe('https://news.example.test/a?b=1');
    expect(safeLink('javascript:alert(1)')).toBeNull();
    expect(safeLink('data:text/html,<script>alert(1)</script>')).toBeNull();
    expect(safeLink('not a url')).toBeNull();
    expect(safeLink(undefined)).toBeNull();
  });
});
