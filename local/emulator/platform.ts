/**
 * The platform's data: users, conversations, comments and votes, with the operations the endpoints
 * apply to them (create, update and delete a user) and what the activity and export answers read.
 */
import { createHash } from 'node:crypto';
import type { Random } from './prng.ts';
import {
  codePointLength,
  completeSettings,
  DEFAULT_DISPLAY_NAME,
  decodeUserMetadata,
  type Role,
  type SettingsInput,
  type StoredSettings,
  USER_NAME_MAX_EXCLUSIVE,
  type UserMetadata,
  userNameBase,
} from './rules.ts';
import type { PlatformSnapshot } from './snapshot-schema.ts';
import type { EmulatorState } from './state.ts';

export interface UserRecord {
  svcUserId: string;
  /** null for guest users, who exist only to own the comments of deleted users. */
  primaryKey: string | null;
  registered: boolean;
  userName: string;
  displayName: string;
  email: string | null;
  emailVerified: boolean;
  imageUrl: string | null;
  location: string | null;
  privateProfile: boolean;
  userMetadata: UserMetadata;
  bio: string;
  role: Role;
  settings: StoredSettings;
  createdAt: number;
  updatedAt: number;
}

/** Validated user fields from an API call or a state file; absent means "not sent". */
export interface UserFields {
  user_name?: string | undefined;
  display_name?: string | undefined;
  email?: string | undefined;
  email_verified?: boolean | undefined;
  image_url?: string | undefined;
  location?: string | undefined;
  private_profile?: boolean | undefined;
  user_metadata?: UserMetadata | undefined;
  bio?: string | undefined;
  role?: Role | undefined;
  settings?: SettingsInput | undefined;
}

export interface ConversationRecord {
  id: string;
  url: string;
  title: string;
}

export interface CommentRecord {
  id: string;
  conversationId: string;
  authorId: string;
  text: string;
  writtenAt: number;
  parentId: string | null;
}

export type VoteValue = 'like' | 'dislike';

const TAKEN_SUFFIX_LENGTH = 4;
const DERIVED_SUFFIX_LENGTH = 6;
const GUEST_SUFFIX_LENGTH = 8;
const COMMA = Buffer.from(',');

/** The platform's data: users, conversations, comments and votes of one account (spot). */
export class PlatformData {
  readonly users = new Map<string, UserRecord>();
  readonly conversations = new Map<string, ConversationRecord>();
  readonly comments = new Map<string, CommentRecord>();
  /** svc_user_id -> comment id -> vote. */
  readonly votes = new Map<string, Map<string, VoteValue>>();
  private readonly byPrimaryKey = new Map<string, string>();
  private readonly byUserName = new Map<string, string>();
  private userCounter = 0;
  /** Counts changes, so that the snapshot JSON is made again only after one. */
  private revision = 0;
  private saved: { revision: number; bytes: Buffer } | null = null;
  /** Snapshot JSON of each user and comment, forgotten when the record changes. */
  private readonly recordBytes = new WeakMap<UserRecord | CommentRecord, Buffer>();

  constructor(
    readonly spotId: string,
    private names: Random,
    private readonly now: () => number,
  ) {}

  /** Switches the stream that user name suffixes are drawn from (after a new seed). */
  useNames(names: Random): void {
    this.names = names;
  }

  /** Loads a validated state document; the schema has already checked every cross reference. */
  static fromState(spotId: string, state: EmulatorState, names: Random, now: () => number): PlatformData {
    const data = new PlatformData(spotId, names, now);
    for (const conversation of state.conversations ?? [])
      data.conversations.set(conversation.id, { ...conversation });
    for (const user of state.users ?? []) {
      const metadata = user.user_metadata === undefined ? undefined : decodeUserMetadata(user.user_metadata);
      data.createUser(
        user.primary_key,
        {
          ...user,
          user_metadata: metadata && 'metadata' in metadata ? metadata.metadata : undefined,
        },
        user.svc_user_id,
      );
    }
    for (const comment of state.comments ?? []) {
      const author = data.userByPrimaryKey(comment.primary_key);
      if (!author) continue;
      data.comments.set(comment.id, {
        id: comment.id,
        conversationId: comment.conversation_id,
        authorId: author.svcUserId,
        text: comment.text,
        writtenAt: comment.written_at,
        parentId: comment.parent_id ?? null,
      });
    }
    for (const vote of state.votes ?? []) {
      const voter = data.userByPrimaryKey(vote.primary_key);
      if (voter) data.setVote(voter.svcUserId, vote.comment_id, vote.value);
    }
    return data;
  }

  /** Everything needed to rebuild this data exactly, user counter included (see fromSnapshot). */
  toSnapshot(): PlatformSnapshot {
    const votes: PlatformSnapshot['votes'] = [];
    for (const [svcUserId, byComment] of this.votes) {
      for (const [commentId, value] of byComment) votes.push({ svcUserId, commentId, value });
    }
    return {
      userCounter: this.userCounter,
      conversations: [...this.conversations.values()],
      users: [...this.users.values()],
      comments: [...this.comments.values()],
      votes,
    };
  }

  /** JSON.stringify(toSnapshot()) as UTF-8, kept until the data changes: most saves follow no change to it. */
  toSnapshotBytes(): Buffer {
    if (this.saved?.revision !== this.revision) {
      const { userCounter, conversations, votes } = this.toSnapshot();
      const parts = [
        Buffer.from(
          `{"userCounter":${userCounter},"conversations":${JSON.stringify(conversations)},"users":[`,
        ),
        ...this.listBytes(this.users.values()),
        Buffer.from('],"comments":['),
        ...this.listBytes(this.comments.values()),
        Buffer.from(`],"votes":${JSON.stringify(votes)}}`),
      ];
      this.saved = { revision: this.revision, bytes: Buffer.concat(parts) };
    }
    return this.saved.bytes;
  }

  private *listBytes(records: Iterable<UserRecord | CommentRecord>): Generator<Buffer> {
    let first = true;
    for (const record of records) {
      if (!first) yield COMMA;
      first = false;
      let bytes = this.recordBytes.get(record);
      if (bytes === undefined) {
        bytes = Buffer.from(JSON.stringify(record));
        this.recordBytes.set(record, bytes);
      }
      yield bytes;
    }
  }

  /** Rebuilds data saved by toSnapshot; the snapshot schema has checked every cross reference. */
  static fromSnapshot(
    spotId: string,
    snapshot: PlatformSnapshot,
    names: Random,
    now: () => number,
  ): PlatformData {
    const data = new PlatformData(spotId, names, now);
    data.userCounter = snapshot.userCounter;
    for (const conversation of snapshot.conversations)
      data.conversations.set(conversation.id, { ...conversation });
    for (const user of snapshot.users) {
      const copy = structuredClone(user);
      data.users.set(copy.svcUserId, copy);
      if (copy.primaryKey !== null) data.byPrimaryKey.set(copy.primaryKey, copy.svcUserId);
      data.byUserName.set(copy.userName.toLowerCase(), copy.svcUserId);
    }
    for (const comment of snapshot.comments) data.comments.set(comment.id, { ...comment });
    for (const vote of snapshot.votes) data.setVote(vote.svcUserId, vote.commentId, vote.value);
    return data;
  }

  userByPrimaryKey(primaryKey: string): UserRecord | undefined {
    const svcUserId = this.byPrimaryKey.get(primaryKey);
    return svcUserId === undefined ? undefined : this.users.get(svcUserId);
  }

  setVote(svcUserId: string, commentId: string, value: VoteValue): void {
    this.revision += 1;
    const votes = this.votes.get(svcUserId) ?? new Map<string, VoteValue>();
    votes.set(commentId, value);
    this.votes.set(svcUserId, votes);
  }

  /** Creates an SSO user; a taken or missing user_name is made unique as the spec describes. */
  createUser(primaryKey: string, fields: UserFields, svcUserId?: string): UserRecord {
    this.revision += 1;
    const timestamp = this.now();
    const displayName = fields.display_name || DEFAULT_DISPLAY_NAME;
    const id = svcUserId ?? this.nextSvcUserId(primaryKey);
    const user: UserRecord = {
      svcUserId: id,
      primaryKey,
      registered: true,
      userName: '',
      displayName,
      email: fields.email || null,
      emailVerified: fields.email_verified ?? false,
      imageUrl: fields.image_url || null,
      location: fields.location ?? null,
      privateProfile: fields.private_profile ?? false,
      userMetadata: fields.user_metadata ?? { is_subscriber: false },
      bio: fields.bio ?? '',
      role: fields.role ?? 'registered',
      settings: completeSettings(fields.settings),
      createdAt: timestamp,
      updatedAt: timestamp,
    };
    this.assignUserName(user, fields.user_name);
    this.users.set(id, user);
    this.byPrimaryKey.set(primaryKey, id);
    return user;
  }

  /**
   * Applies an update. Fields not sent keep their value, except that a settings object replaces
   * the stored one (unnamed kinds fall back to immediately). email_verified only changes together
   * with email, as the spec requires.
   */
  updateUser(user: UserRecord, fields: UserFields): UserRecord {
    this.revision += 1;
    this.recordBytes.delete(user);
    if (fields.user_name !== undefined) this.assignUserName(user, fields.user_name);
    if (fields.display_name !== undefined) user.displayName = fields.display_name || DEFAULT_DISPLAY_NAME;
    if (fields.email !== undefined) {
      user.email = fields.email || null;
      if (fields.email_verified !== undefined) user.emailVerified = fields.email_verified;
    }
    if (fields.image_url !== undefined) user.imageUrl = fields.image_url || null;
    if (fields.location !== undefined) user.location = fields.location;
    if (fields.private_profile !== undefined) user.privateProfile = fields.private_profile;
    if (fields.user_metadata !== undefined) user.userMetadata = fields.user_metadata;
    if (fields.bio !== undefined) user.bio = fields.bio;
    if (fields.role !== undefined) user.role = fields.role;
    if (fields.settings !== undefined) user.settings = completeSettings(fields.settings);
    user.updatedAt = this.now();
    return user;
  }

  /**
   * Applies an update-user call (endpoint 4), which expects the full user data every time: a field
   * not sent takes its default, as on a new user (display_name Guest, no e-mail, image or location,
   * an empty bio, role registered, public profile, not a subscriber, every notification
   * immediately). The exception is email_verified, which changes only when email is in the same
   * call (then to the value sent, false when none). A user_name taken by another user gets random
   * characters appended.
   */
  replaceUser(user: UserRecord, fields: UserFields): UserRecord {
    this.revision += 1;
    this.recordBytes.delete(user);
    user.displayName = fields.display_name || DEFAULT_DISPLAY_NAME;
    this.assignUserName(user, fields.user_name);
    if (fields.email !== undefined) user.emailVerified = fields.email_verified ?? false;
    user.email = fields.email || null;
    user.imageUrl = fields.image_url || null;
    user.location = fields.location ?? null;
    user.privateProfile = fields.private_profile ?? false;
    user.userMetadata = fields.user_metadata ?? { is_subscriber: false };
    user.bio = fields.bio ?? '';
    user.role = fields.role ?? 'registered';
    user.settings = completeSettings(fields.settings);
    user.updatedAt = this.now();
    return user;
  }

  /**
   * Deletes an SSO user. Their comments stay, now owned by a newly created guest; their own
   * votes go with them.
   */
  deleteUser(user: UserRecord): UserRecord {
    this.revision += 1;
    const guest = this.createGuest();
    for (const comment of this.comments.values()) {
      if (comment.authorId === user.svcUserId) {
        comment.authorId = guest.svcUserId;
        this.recordBytes.delete(comment);
      }
    }
    this.votes.delete(user.svcUserId);
    this.users.delete(user.svcUserId);
    if (user.primaryKey !== null) this.byPrimaryKey.delete(user.primaryKey);
    this.byUserName.delete(user.userName.toLowerCase());
    return guest;
  }

  /** Comments written by a user, oldest first. */
  commentsBy(svcUserId: string): CommentRecord[] {
    return [...this.comments.values()]
      .filter((comment) => comment.authorId === svcUserId)
      .sort((a, b) => a.writtenAt - b.writtenAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** Counts of likes and dislikes a comment received. */
  rankOf(commentId: string): { up: number; down: number } {
    let up = 0;
    let down = 0;
    for (const votes of this.votes.values()) {
      const value = votes.get(commentId);
      if (value === 'like') up += 1;
      else if (value === 'dislike') down += 1;
    }
    return { up, down };
  }

  /** The comment at the top of a thread, and how deep a comment sits in it. */
  threadPosition(comment: CommentRecord): { root: string; depth: number } {
    let current = comment;
    let depth = 0;
    const seen = new Set<string>([comment.id]);
    while (current.parentId !== null) {
      const parent = this.comments.get(current.parentId);
      if (!parent || seen.has(parent.id)) break;
      seen.add(parent.id);
      current = parent;
      depth += 1;
    }
    return { root: current.id, depth };
  }

  repliesTo(commentId: string): number {
    let replies = 0;
    for (const comment of this.comments.values()) if (comment.parentId === commentId) replies += 1;
    return replies;
  }

  private createGuest(): UserRecord {
    const timestamp = this.now();
    const id = this.nextSvcUserId(null);
    let userName = `Guest${this.names.suffix(GUEST_SUFFIX_LENGTH)}`;
    while (this.byUserName.has(userName.toLowerCase()))
      userName = `Guest${this.names.suffix(GUEST_SUFFIX_LENGTH)}`;
    const guest: UserRecord = {
      svcUserId: id,
      primaryKey: null,
      registered: false,
      userName,
      displayName: DEFAULT_DISPLAY_NAME,
      email: null,
      emailVerified: false,
      imageUrl: null,
      location: null,
      privateProfile: false,
      userMetadata: { is_subscriber: false },
      bio: '',
      role: 'registered',
      settings: completeSettings(undefined),
      createdAt: timestamp,
      updatedAt: timestamp,
    };
    this.users.set(id, guest);
    this.byUserName.set(userName.toLowerCase(), id);
    return guest;
  }

  private assignUserName(user: UserRecord, wanted: string | undefined): void {
    const next =
      wanted === undefined || wanted === ''
        ? this.uniqueName(
            userNameBase(user.displayName) || DEFAULT_DISPLAY_NAME,
            DERIVED_SUFFIX_LENGTH,
            true,
            user,
          )
        : this.uniqueName(wanted, TAKEN_SUFFIX_LENGTH, false, user);
    if (user.userName !== '') this.byUserName.delete(user.userName.toLowerCase());
    user.userName = next;
    this.byUserName.set(next.toLowerCase(), user.svcUserId);
  }

  /** User names are compared case-insensitively, so @Alice and @alice cannot both exist. */
  private uniqueName(base: string, suffixLength: number, alwaysSuffix: boolean, owner: UserRecord): string {
    const isFree = (name: string) => {
      const holder = this.byUserName.get(name.toLowerCase());
      return holder === undefined || holder === owner.svcUserId;
    };
    if (!alwaysSuffix && isFree(base)) return base;
    const room = USER_NAME_MAX_EXCLUSIVE - 1 - suffixLength;
    const trimmed = codePointLength(base) > room ? [...base].slice(0, room).join('') : base;
    for (;;) {
      const candidate = `${trimmed}${this.names.suffix(suffixLength)}`;
      if (isFree(candidate)) return candidate;
    }
  }

  private nextSvcUserId(primaryKey: string | null): string {
    for (;;) {
      this.userCounter += 1;
      const digest = createHash('sha256')
        .update(`${this.spotId}\u0000${this.userCounter}\u0000${primaryKey ?? 'guest'}`)
        .digest('hex');
      const id = `u_${digest.slice(0, 20)}`;
      if (!this.users.has(id)) return id;
    }
  }
}
