/**
 * The activity endpoint's answer (docs/platform-api.md, endpoint 8): a user's comments and the conversations
 * they sit in, page by page, for accounts that have the endpoint enabled.
 */
import { messageContent } from './archive.ts';
import type { CommentRecord, PlatformData, UserRecord } from './platform.ts';

export interface ActivityPage {
  cursor: { offset: number; count: number; has_next: boolean };
  items: { data: Record<string, unknown> }[];
  users: Record<string, Record<string, unknown>>;
}

function activityMessage(data: PlatformData, comment: CommentRecord): Record<string, unknown> {
  const { root, depth } = data.threadPosition(comment);
  const rank = data.rankOf(comment.id);
  return {
    root_comment: root,
    parent_id: comment.parentId,
    depth,
    id: comment.id,
    user_id: comment.authorId,
    written_at: comment.writtenAt,
    time: comment.writtenAt,
    replies_count: data.repliesTo(comment.id),
    offset: 0,
    has_next: false,
    edited: false,
    status: 'approved',
    rank: { ranks_up: rank.up, ranks_down: rank.down },
    replies: [],
    content: messageContent(comment),
    deleted: false,
    published: true,
    rank_score: rank.up - rank.down,
    type: comment.parentId === null ? 'comment' : 'reply',
    metadata: {},
    flags: [],
    featured: false,
    top_featured: false,
  };
}

/**
 * One page of a user's messages, newest first. Paging counts messages; the page is then grouped
 * per conversation in the order the conversations first appear on it.
 */
export function activityPage(
  data: PlatformData,
  user: UserRecord,
  count: number,
  offset: number,
): ActivityPage {
  const all = data.commentsBy(user.svcUserId).reverse();
  const page = all.slice(offset, offset + count);
  const groups = new Map<string, CommentRecord[]>();
  for (const comment of page) {
    const group = groups.get(comment.conversationId) ?? [];
    group.push(comment);
    groups.set(comment.conversationId, group);
  }
  const items = [...groups.entries()].map(([conversationId, comments]) => {
    const conversation = data.conversations.get(conversationId);
    return {
      data: {
        spot_id: data.spotId,
        conversation_id: conversationId,
        conversation: {
          url: conversation?.url ?? '',
          type: 'link',
          title: conversation?.title ?? '',
          width: 0,
          height: 0,
          service: 'link',
          metadata: {},
          description: '',
          thumbnail_url: '',
        },
        messages: comments.map((comment) => activityMessage(data, comment)),
      },
    };
  });
  const users: ActivityPage['users'] = {
    [user.svcUserId]: {
      id: user.svcUserId,
      display_name: user.displayName,
      image_url: user.imageUrl ?? '',
      user_name: user.userName,
      registered: user.registered,
      sso_primary_key: user.primaryKey,
    },
  };
  return {
    cursor: { offset, count: page.length, has_next: offset + page.length < all.length },
    items,
    users,
  };
}
