/**
 * The export archive's contents: the platform's four documented JSON files for one user, built from
 * the emulator's data in the order the platform writes them.
 */
import { createHash } from 'node:crypto';
import type { CommentRecord, PlatformData, UserRecord } from './platform.ts';
import { type DeflatedEntry, deflatePieces } from './zip.ts';

/** The four documented files of an export archive, in the order they are written. */
export const EXPORT_FILE_NAMES = ['dislikes.json', 'likes.json', 'messages.json', 'profile.json'] as const;

/** Short stable identifiers derived from a comment id, standing in for the platform's own. */
export function derivedId(kind: string, id: string, length = 12): string {
  return createHash('sha256').update(`${kind}\u0000${id}`).digest('hex').slice(0, length);
}

/** An address from the documentation range (RFC 5737), stable per message. */
function documentationIp(commentId: string): string {
  const digest = createHash('sha256').update(`ip\u0000${commentId}`).digest();
  return `192.0.2.${(digest[0] ?? 0) % 254 || 1}`;
}

export function messageContent(comment: CommentRecord): { id: string; text: string; type: 'text' }[] {
  return [{ id: derivedId('content', comment.id, 8), text: comment.text, type: 'text' }];
}

function exportedMessage(data: PlatformData, comment: CommentRecord): Record<string, unknown> {
  return {
    manually_resolved: false,
    author_id: comment.authorId,
    moderator_id: null,
    spot_id: data.spotId,
    state: 'approved',
    parent_comment_id: comment.parentId,
    conversation_id: comment.conversationId,
    published: true,
    conv_message_id: `${comment.conversationId}_${comment.id}`,
    written_at: comment.writtenAt,
    content: messageContent(comment),
    stars: 0,
    metadata: {},
    tags: [],
    tags_metadata: {},
    type: comment.parentId === null ? 'comment' : 'reply',
    never_hard_delete: false,
    additional_data: { labels: {} },
    anonymous_user_id: null,
    anonymous_user_name: null,
    anonymous_image_id: null,
    ip: documentationIp(comment.id),
    edited: false,
    token: derivedId('token', comment.id, 24),
    id: comment.id,
  };
}

function profile(data: PlatformData, user: UserRecord): Record<string, unknown> {
  const roles: { role: string; stage: string }[] = [{ role: 'registered', stage: 'system' }];
  if (user.role !== 'registered') roles.push({ role: user.role, stage: data.spotId });
  return {
    user_id: user.svcUserId,
    registered: user.registered,
    social_ids: [],
    sso: user.primaryKey === null ? null : { primary_key: user.primaryKey },
    roles,
    basic: {
      user_name: user.userName,
      display_name: user.displayName,
      image_id: user.imageUrl,
      gender: null,
      birthday: null,
      about: user.bio,
      location: user.location,
      email: user.email,
      email_verified: user.emailVerified,
    },
  };
}

/**
 * Builds the archive's four entries from the user's data as it is now, deflated. The export keeps
 * these bytes, so a later change or deletion of the user does not change what the download holds.
 * messages.json is written a comment at a time into the deflater (zip.ts `deflatePieces`): a user
 * with a hundred thousand comments never has their JSON in memory whole, only its compressed form.
 * The JSON is what `JSON.stringify(value, null, 2)` writes.
 */
export function snapshotExportFiles(data: PlatformData, user: UserRecord): DeflatedEntry[] {
  const votes = [...(data.votes.get(user.svcUserId) ?? new Map()).entries()].sort(([a], [b]) =>
    a < b ? -1 : a > b ? 1 : 0,
  );
  const votedWith = (value: string) =>
    votes.filter(([, vote]) => vote === value).map(([commentId]) => commentId);
  const comments = data.commentsBy(user.svcUserId);
  const files: Record<(typeof EXPORT_FILE_NAMES)[number], () => Iterable<string>> = {
    'dislikes.json': () => [JSON.stringify(votedWith('dislike'), null, 2)],
    'likes.json': () => [JSON.stringify(votedWith('like'), null, 2)],
    'messages.json': () => prettyArray(comments, (comment) => exportedMessage(data, comment)),
    'profile.json': () => [JSON.stringify(profile(data, user), null, 2)],
  };
  return EXPORT_FILE_NAMES.map((name) => deflatePieces(name, files[name]()));
}

/**
 * A pretty-printed JSON array in pieces, its items made a batch at a time: each batch is written by
 * JSON.stringify itself (as an array, whose brackets are then dropped), so the text is the same as
 * the whole array's and the indentation costs nothing extra.
 */
function* prettyArray<T>(items: readonly T[], toJson: (item: T) => unknown): Generator<string> {
  if (items.length === 0) {
    yield '[]';
    return;
  }
  for (let start = 0; start < items.length; start += BATCH_ITEMS) {
    const batch = JSON.stringify(items.slice(start, start + BATCH_ITEMS).map(toJson), null, 2);
    // "[\n  {…},\n  {…}\n]": the items with their indentation, between the brackets' lines.
    const inner = batch.slice(2, -2);
    yield `${start === 0 ? '[\n' : ',\n'}${inner}${start + BATCH_ITEMS >= items.length ? '\n]' : ''}`;
  }
}

/**
 * Items written per piece: about 100 KB of comment JSON, so each piece and its copies stay small
 * enough for V8 to collect at once (larger strings go to its large-object space, which only a full
 * collection frees); deflating pieces apart costs about 2% of the ratio.
 */
const BATCH_ITEMS = 100;
