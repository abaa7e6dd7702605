// The platform's export and activity turned into the subject package's data: comments, votes, profile, links.
import type { AccountSettings } from './account.ts';
import type { ExportedMessage, ExportFiles } from './export-files.ts';
import type {
  ConversationDetails,
  PackageComment,
  PackageConversation,
  PackageInformation,
  PackageProfile,
  PackageVote,
  PlatformFile,
  SubjectPackageData,
} from './package-schema.ts';
import type { PackageHead } from './render.ts';

export type { ConversationDetails, PlatformFile, SubjectPackageData } from './package-schema.ts';

/** What the activity endpoint told about the subject's comments (activity.ts builds it). */
export interface ActivityContext {
  readonly details: ConversationDetails;
  readonly conversations: ReadonlyMap<string, { readonly title: string | null; readonly url: string | null }>;
  readonly messages: ReadonlyMap<
    string,
    {
      readonly deleted?: boolean | undefined;
      readonly edited?: boolean | undefined;
      readonly published?: boolean | undefined;
      readonly status?: string | undefined;
    }
  >;
}

export interface NormaliseInput {
  readonly files: ExportFiles;
  /** The account's settings from retrieve-user; null when they could not be read. @default null */
  readonly account?: AccountSettings | null;
  readonly platformFiles: readonly PlatformFile[];
  readonly activity: ActivityContext;
  readonly controller: { readonly name: string; readonly contact: string };
  readonly information: PackageInformation;
  readonly language: string;
  readonly timeZone: string;
  readonly request: SubjectPackageData['request'];
}

/** What the package states besides the subject's comments and votes. */
export interface HeadInput extends Omit<NormaliseInput, 'files'> {
  readonly profile: ExportFiles['profile.json'];
}

/** Builds the package content from the export and the activity context: pure, deterministic. */
export function normalisePackage(input: NormaliseInput): SubjectPackageData {
  const { files, activity } = input;
  const messages = files['messages.json'];
  const own = new Map(messages.map((message) => [message.id, message]));
  const conversations = groupByConversation(messages, activity, own);
  const vote = (id: string): PackageVote => voteOn(id, own.get(id)?.conversation_id ?? null, activity);
  const { conversation_details, platform_files, ...first } = packageHead({
    ...input,
    profile: files['profile.json'],
  });
  return {
    ...first,
    conversations,
    likes: unique(files['likes.json']).map(vote),
    dislikes: unique(files['dislikes.json']).map(vote),
    conversation_details,
    platform_files,
  };
}

/** The package without its lists (the streamed build writes the lists around it). */
export function packageHead(input: HeadInput): PackageHead {
  const account = input.account ?? null;
  return {
    format: 'svc-dsr-subject-package',
    format_version: 2,
    language: input.language,
    time_zone: input.timeZone,
    controller: { ...input.controller },
    request: { ...input.request },
    information:
      'gdpr' in input.information
        ? { gdpr: { ...input.information.gdpr } }
        : { ccpa: { ...input.information.ccpa } },
    profile: normaliseProfile(input.profile, account),
    roles: input.profile.roles.map(({ role, stage }) =>
      stage === undefined || stage === 'system'
        ? { role, scope: 'platform' as const, site: null }
        : { role, scope: 'site' as const, site: stage },
    ),
    ...normaliseSettings(input.profile, account),
    conversation_details: { ...input.activity.details },
    platform_files: input.platformFiles.map((file) => ({ ...file })),
  };
}

/** A like or dislike: the comment voted on, and its conversation when it is one of the subject's own. */
export function voteOn(
  messageId: string,
  ownConversationId: string | null,
  activity: ActivityContext,
): PackageVote {
  const title =
    ownConversationId === null ? null : (activity.conversations.get(ownConversationId)?.title ?? null);
  return { message_id: messageId, conversation_id: ownConversationId, conversation_title: title };
}

function normaliseProfile(
  profile: ExportFiles['profile.json'],
  account: AccountSettings | null,
): PackageProfile {
  const basic = profile.basic;
  const text = (value: string | null | undefined) =>
    value === undefined || value === null || value.trim() === '' ? null : value;
  return {
    platform_user_id: profile.user_id,
    user_name: text(basic.user_name),
    display_name: text(basic.display_name),
    about: text(basic.about),
    location: text(basic.location),
    email: text(basic.email),
    email_verified: basic.email_verified ?? null,
    gender: text(basic.gender),
    birthday: text(basic.birthday),
    image_id: text(basic.image_id),
    registered: profile.registered ?? null,
    single_sign_on: profile.sso !== null && profile.sso !== undefined,
    social_accounts: profile.social_ids.length,
    private_profile: account?.privateProfile ?? null,
    subscriber: account?.subscriber ?? null,
  };
}

/** The notification kinds docs/platform-api.md documents; one not set is sent immediately. */
export const NOTIFICATION_KINDS = [
  'liked_your_message',
  'message_approved',
  'message_rejected',
  'replied_to_message',
  'user_mentioned',
] as const;

function normaliseSettings(
  profile: ExportFiles['profile.json'],
  account: AccountSettings | null,
): Pick<SubjectPackageData, 'settings' | 'settings_source'> {
  const rows: { channel: 'email' | 'in_app'; kind: string; value: string; default: boolean }[] = [];
  if (account !== null) {
    // Every documented kind, then any other the platform reports, each with its value or the default.
    for (const channel of ['email', 'in_app'] as const) {
      const given = account.notifications[channel];
      const kinds = [...new Set([...NOTIFICATION_KINDS, ...Object.keys(given).sort()])];
      for (const kind of kinds) {
        const value = given[kind];
        rows.push({ channel, kind, value: value ?? 'immediately', default: value === undefined });
      }
    }
    return { settings: rows, settings_source: 'account' };
  }
  const notifications = profile.settings?.notifications;
  if (notifications === undefined) return { settings: [], settings_source: 'unavailable' };
  for (const channel of ['email', 'in_app'] as const) {
    for (const [kind, value] of Object.entries(notifications[channel] ?? {}).sort(([a], [b]) =>
      a.localeCompare(b),
    )) {
      rows.push({ channel, kind, value, default: false });
    }
  }
  return { settings: rows, settings_source: 'export' };
}

/** Two strings in code-unit order, as the package orders ids. */
export function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Comments grouped per conversation, oldest first within one; conversations newest first (by
 * their latest comment). A conversation's title and link come from the activity context.
 */
function groupByConversation(
  messages: readonly ExportedMessage[],
  activity: ActivityContext,
  own: ReadonlyMap<string, ExportedMessage>,
): PackageConversation[] {
  const groups = new Map<string, ExportedMessage[]>();
  for (const message of messages) {
    const group = groups.get(message.conversation_id);
    if (group === undefined) groups.set(message.conversation_id, [message]);
    else group.push(message);
  }
  const conversations = [...groups.entries()].map(([conversationId, group]) => {
    group.sort((a, b) => a.written_at - b.written_at || compareText(a.id, b.id));
    const context = activity.conversations.get(conversationId);
    return {
      latest: group.at(-1)?.written_at ?? 0,
      conversation: {
        conversation_id: conversationId,
        title: context?.title ?? null,
        url: safeLink(context?.url),
        comments: group.map((message) => normaliseComment(message, activity, (id) => own.has(id))),
      },
    };
  });
  conversations.sort(
    (a, b) =>
      b.latest - a.latest || compareText(a.conversation.conversation_id, b.conversation.conversation_id),
  );
  return conversations.map(({ conversation }) => conversation);
}

/** A comment as the package shows it; `isOwn` says whether a parent id is one of the subject's comments. */
export function normaliseComment(
  message: ExportedMessage,
  activity: ActivityContext,
  isOwn: (id: string) => boolean,
): PackageComment {
  const context = activity.messages.get(message.id);
  const parent = message.parent_comment_id;
  const kind = parent !== null || message.type === 'reply' ? 'reply' : 'comment';
  const published = context?.published ?? message.published ?? true;
  const deleted = context?.deleted === true || message.deleted === true;
  const moderation = context?.status ?? message.state ?? null;
  return {
    id: message.id,
    kind,
    reply_to: parent !== null && isOwn(parent) ? parent : null,
    parent_id: parent,
    written_at: new Date(message.written_at * 1000).toISOString(),
    text: message.content
      .map((part) => part.text ?? '')
      .filter((text) => text !== '')
      .join('\n\n'),
    state: deleted ? 'deleted' : published ? 'published' : 'unpublished',
    edited: context?.edited === true || message.edited === true,
    moderation,
    ip: message.ip === undefined || message.ip === null || message.ip === '' ? null : message.ip,
  };
}

function unique(ids: readonly string[]): string[] {
  return [...new Set(ids)];
}

/** An address the page may link to: http or https only; anything else (javascript:, data:) is dropped. */
export function safeLink(url: string | undefined | null): string | null {
  if (url === undefined || url === null || !URL.canParse(url)) return null;
  const parsed = new URL(url);
  return parsed.protocol === 'https:' || parsed.protocol === 'http:' ? parsed.href : null;
}
