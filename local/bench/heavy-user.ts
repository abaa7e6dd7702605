/**
 * A deterministic heavy user for the package benches: their messages one at a time (so an export
 * of a million comments can be written as a stream), likes, profile and activity context.
 */
import type { ActivityContext } from '../../lambdas/build-package/normalise.ts';

const WORDS =
  'the council budget library pool derby match referee goal season city park bus tram rent school teacher vote mayor river bridge festival music weather storm train station'.split(
    ' ',
  );

/** The messages of a deterministic heavy user, one at a time: `comments` over `comments / 25` conversations, a fifth of them replies. */
export function* heavyMessages(comments: number): Generator<Record<string, unknown>> {
  let seed = 42;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const conversations = heavyConversations(comments);
  for (let index = 0; index < comments; index++) {
    const conversation = `conv-${index % conversations}`;
    const words = 8 + Math.floor(random() * 90);
    const text = Array.from({ length: words }, () => WORDS[Math.floor(random() * WORDS.length)]).join(' ');
    const reply = index >= conversations && random() < 0.2;
    yield {
      manually_resolved: false,
      author_id: 'u-heavy',
      moderator_id: null,
      spot_id: 'sp_bench',
      state: 'approved',
      parent_comment_id: reply ? `m-${index - conversations}` : null,
      conversation_id: conversation,
      published: true,
      conv_message_id: `${conversation}_m-${index}`,
      written_at: 1_704_103_200 + index * 1_800,
      content: [{ id: `c-${index}`, text, type: 'text' }],
      stars: 0,
      metadata: {},
      tags: [],
      tags_metadata: {},
      type: reply ? 'reply' : 'comment',
      never_hard_delete: false,
      additional_data: { labels: {} },
      anonymous_user_id: null,
      anonymous_user_name: null,
      anonymous_image_id: null,
      ip: `192.0.2.${(index % 250) + 1}`,
      edited: random() < 0.05,
      token: `token-${index}`,
      id: `m-${index}`,
    };
  }
}

export function heavyConversations(comments: number): number {
  return Math.max(1, Math.floor(comments / 25));
}

/** The heavy user's likes (a fifth of the comments, on others' comments); dislikes are the first quarter of them. */
export function heavyLikes(comments: number): number {
  return Math.floor(comments / 5);
}

export const HEAVY_PROFILE = {
  user_id: 'u-heavy',
  registered: true,
  social_ids: [],
  sso: { primary_key: 'heavy' },
  roles: [{ role: 'registered', stage: 'system' }],
  basic: { user_name: 'heavy_user', display_name: 'Heavy User', email: 'heavy@example.test' },
};

/**
 * The activity context of the heavy user. The activity call reads at most 200 pages of 100
 * (activity.ts), so a real context never names more than 20,000 conversations: `cap` keeps a
 * large bench honest about that.
 */
export function heavyActivity(comments: number, cap = Number.POSITIVE_INFINITY): ActivityContext {
  const conversations = Math.min(heavyConversations(comments), cap);
  return {
    details: { status: 'complete', reason: null, pages: Math.ceil(comments / 100) },
    conversations: new Map(
      Array.from({ length: conversations }, (_, index) => [
        `conv-${index}`,
        {
          title: `Article number ${index}: what happened in the city`,
          url: `https://news.example.test/a/${index}`,
        },
      ]),
    ),
    messages: new Map(),
  };
}

/** A deterministic export of `comments` comments over `comments / 25` conversations, a fifth of them replies. */
export function heavyExport(comments: number): {
  raw: Record<'dislikes.json' | 'likes.json' | 'messages.json' | 'profile.json', Buffer>;
  activity: ActivityContext;
} {
  const messages = [...heavyMessages(comments)];
  const json = (value: unknown) => Buffer.from(JSON.stringify(value, null, 2));
  const likes = Array.from({ length: heavyLikes(comments) }, (_, index) => `other-${index}`);
  return {
    raw: {
      'dislikes.json': json(likes.slice(0, Math.floor(likes.length / 4))),
      'likes.json': json(likes),
      'messages.json': json(messages),
      'profile.json': json(HEAVY_PROFILE),
    },
    activity: heavyActivity(comments),
  };
}
