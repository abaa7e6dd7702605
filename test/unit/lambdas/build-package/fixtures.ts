import { parseExportFiles } from '../../../../lambdas/build-package/export-files.ts';
import type { ActivityContext, NormaliseInput } from '../../../../lambdas/build-package/normalise.ts';

/** A message of messages.json as the platform exports it, internal fields included. */
export function exportedMessage(
  id: string,
  conversationId: string,
  writtenAt: number,
  text: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    manually_resolved: false,
    author_id: 'u-100',
    moderator_id: null,
    spot_id: 'sp_test',
    state: 'approved',
    parent_comment_id: null,
    conversation_id: conversationId,
    published: true,
    conv_message_id: `${conversationId}_${id}`,
    written_at: writtenAt,
    content: [{ id: `c-${id}`, text, type: 'text' }],
    stars: 0,
    metadata: {},
    tags: [],
    tags_metadata: { internal: 'tag-secret' },
    type: 'comment',
    never_hard_delete: false,
    additional_data: { labels: {} },
    anonymous_user_id: null,
    anonymous_user_name: null,
    anonymous_image_id: null,
    ip: '192.0.2.7',
    edited: false,
    token: 'tok-internal-0001',
    id,
    ...extra,
  };
}

export const PROFILE = {
  user_id: 'u-100',
  registered: true,
  social_ids: [],
  sso: { primary_key: 'site-user-42' },
  roles: [
    { role: 'registered', stage: 'system' },
    { role: 'moderator', stage: 'sp_test' },
  ],
  basic: {
    user_name: 'ada_l',
    display_name: 'Ada Lovelace',
    image_id: null,
    gender: null,
    birthday: null,
    about: 'Mathematician.',
    location: 'London',
    email: 'ada@example.test',
    email_verified: true,
  },
};

/** 2024-01-01T10:00:00Z and later. */
export const T0 = 1_704_103_200;

export function rawFiles(
  messages: Record<string, unknown>[],
  options: { likes?: string[]; dislikes?: string[]; profile?: unknown } = {},
): Record<'dislikes.json' | 'likes.json' | 'messages.json' | 'profile.json', Buffer> {
  const json = (value: unknown) => Buffer.from(JSON.stringify(value, null, 2));
  return {
    'dislikes.json': json(options.dislikes ?? []),
    'likes.json': json(options.likes ?? []),
    'messages.json': json(messages),
    'profile.json': json(options.profile ?? PROFILE),
  };
}

export const NO_ACTIVITY: ActivityContext = {
  details: { status: 'unavailable', reason: 'not_enabled', pages: 0 },
  conversations: new Map(),
  messages: new Map(),
};

export const GDPR_NOTICE = {
  purposes: 'To run the comment section of example.test.',
  categories: 'Your profile, comments, votes and the internet address of each comment.',
  recipients: 'The comment platform, as our processor.',
  retention: 'As long as your account exists.',
  rights: 'Access, rectification, erasure, restriction, objection and portability.',
  complaint: 'You may complain to your data protection authority.',
  source: 'You, when you wrote your comments.',
  automatedDecisions: 'No decision about you is automated.',
  transfers:
    'Our platform provider stores the data in the United States under the EU standard contractual clauses.',
};

export const CCPA_NOTICE = {
  categories: 'Identifiers (your user name and e-mail address), internet activity (your comments and votes).',
  sources: 'You, when you registered and commented.',
  purposes: 'To host the discussion under our articles; we do not sell or share it.',
  thirdParties: 'Our comment platform provider, as our service provider.',
};

/** The package information of a GDPR request (the fixtures' default). */
export const INFORMATION = { gdpr: GDPR_NOTICE };

export function normaliseInput(
  messages: Record<string, unknown>[],
  overrides: Partial<NormaliseInput> = {},
  options: { likes?: string[]; dislikes?: string[] } = {},
): NormaliseInput {
  return {
    files: parseExportFiles(rawFiles(messages, options)),
    platformFiles: [],
    activity: NO_ACTIVITY,
    controller: { name: 'Example News Ltd', contact: 'privacy@example.test' },
    information: INFORMATION,
    language: 'en-GB',
    timeZone: 'Europe/London',
    request: {
      request_id: '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f',
      regulation: 'gdpr',
      received_at: '2026-11-20T09:00:00.000Z',
      answered_at: '2026-11-23T12:00:00.000Z',
    },
    ...overrides,
  };
}
