/**
 * The emulator's state file (users, conversations, comments, tokens): its zod schema and loader, with
 * errors that name the field and the fix.
 */
import { z } from 'zod';
import { loadJsonFile, type ParseOutcome, parseWith } from './config-file.ts';
import {
  bioSchema,
  decodeUserMetadata,
  displayNameSchema,
  roleSchema,
  settingsSchema,
  unknownKeys,
  userNameSchema,
} from './rules.ts';

const identifier = z.string().min(1, { error: 'must be a non-empty string' });

const conversationShape = { id: identifier, url: z.string(), title: z.string() };
const conversationSchema = z.strictObject(conversationShape, {
  error: unknownKeys(Object.keys(conversationShape)),
});

const userShape = {
  primary_key: identifier,
  svc_user_id: identifier.optional(),
  user_name: userNameSchema.optional(),
  display_name: displayNameSchema.optional(),
  email: z.string().optional(),
  email_verified: z.boolean().optional(),
  image_url: z.string().optional(),
  location: z.string().optional(),
  private_profile: z.boolean().optional(),
  user_metadata: z
    .string()
    .superRefine((value, context) => {
      const decoded = decodeUserMetadata(value);
      if ('problem' in decoded) context.addIssue({ code: 'custom', message: decoded.problem });
    })
    .optional(),
  bio: bioSchema.optional(),
  role: roleSchema.optional(),
  settings: settingsSchema.optional(),
};
const stateUserSchema = z.strictObject(userShape, { error: unknownKeys(Object.keys(userShape)) });

const commentShape = {
  id: identifier,
  primary_key: identifier,
  conversation_id: identifier,
  text: z.string(),
  written_at: z
    .number()
    .int({ error: 'must be an integer (Unix seconds)' })
    .min(0, { error: 'must be Unix seconds, not negative' }),
  parent_id: identifier.nullable().optional(),
};
const commentSchema = z.strictObject(commentShape, { error: unknownKeys(Object.keys(commentShape)) });

const voteShape = {
  primary_key: identifier,
  comment_id: identifier,
  value: z.enum(['like', 'dislike'], { error: 'must be like or dislike' }),
};
const voteSchema = z.strictObject(voteShape, { error: unknownKeys(Object.keys(voteShape)) });

const siteContents = {
  conversations: z.array(conversationSchema).optional(),
  users: z.array(stateUserSchema).optional(),
  comments: z.array(commentSchema).optional(),
  votes: z.array(voteSchema).optional(),
};

const token = z.string().min(1, { error: 'must be a non-empty string (or leave it out for a random one)' });
const siteShape = {
  spot_id: identifier,
  sso_access_token: token.optional(),
  export_token: token.optional(),
  ...siteContents,
};
const siteSchema = z
  .strictObject(siteShape, { error: unknownKeys(Object.keys(siteShape)) })
  .superRefine((site, context) => checkSiteRules(site, context));

const stateShape = {
  spot_id: identifier.optional(),
  ...siteContents,
  sites: z.array(siteSchema).min(1, { error: 'must list at least one site' }).optional(),
};

/**
 * The emulator's seed data: the platform as it stands before the first request. Either one
 * account (spot_id and its users, conversations, comments and votes at the top) or several under
 * `sites`, each with its own spot_id, data and, optionally, tokens.
 */
export const emulatorStateSchema = z
  .strictObject(stateShape, { error: unknownKeys(Object.keys(stateShape)) })
  .superRefine((state, context) => {
    if (state.sites === undefined) {
      checkSiteRules(state, context);
      return;
    }
    for (const key of ['spot_id', 'conversations', 'users', 'comments', 'votes'] as const) {
      if (state[key] !== undefined) {
        context.addIssue({
          code: 'custom',
          path: [key],
          message: 'cannot stand beside sites; move it into the site it belongs to',
        });
      }
    }
    const spots = new Map<string, number>();
    state.sites.forEach((site, index) => {
      const earlier = spots.get(site.spot_id);
      if (earlier === undefined) spots.set(site.spot_id, index);
      else
        context.addIssue({
          code: 'custom',
          path: ['sites', index, 'spot_id'],
          message: `duplicates sites[${earlier}].spot_id; each site needs its own spot_id`,
        });
    });
  });

type SiteContents = {
  conversations?: z.infer<typeof conversationSchema>[] | undefined;
  users?: z.infer<typeof stateUserSchema>[] | undefined;
  comments?: z.infer<typeof commentSchema>[] | undefined;
  votes?: z.infer<typeof voteSchema>[] | undefined;
};

/** The rules within one account: unique ids and names, and references that name what exists. */
function checkSiteRules(state: SiteContents, context: z.RefinementCtx): void {
  const report = (path: PropertyKey[], message: string) =>
    context.addIssue({ code: 'custom', path, message });
  const firstIndex = <T>(
    items: readonly T[],
    key: (item: T) => string,
    field: string,
    collection: string,
  ) => {
    const seen = new Map<string, number>();
    items.forEach((item, index) => {
      const value = key(item);
      const earlier = seen.get(value);
      if (earlier === undefined) seen.set(value, index);
      else
        report(
          [collection, index, field],
          `duplicates ${collection}[${earlier}]; each ${field} must be unique`,
        );
    });
    return seen;
  };

  const conversations = state.conversations ?? [];
  const users = state.users ?? [];
  const comments = state.comments ?? [];
  const votes = state.votes ?? [];
  const conversationIds = firstIndex(conversations, (c) => c.id, 'id', 'conversations');
  const primaryKeys = firstIndex(users, (u) => u.primary_key, 'primary_key', 'users');
  firstIndex(
    users.filter((u) => u.svc_user_id !== undefined),
    (u) => u.svc_user_id ?? '',
    'svc_user_id',
    'users',
  );
  const named = users.flatMap((user, index) => (user.user_name ? [{ index, name: user.user_name }] : []));
  const userNames = new Map<string, number>();
  for (const { index, name } of named) {
    const key = name.toLowerCase();
    const earlier = userNames.get(key);
    if (earlier === undefined) userNames.set(key, index);
    else
      report(['users', index, 'user_name'], `duplicates users[${earlier}].user_name; user names are unique`);
  }
  const commentIndex = firstIndex(comments, (c) => c.id, 'id', 'comments');

  comments.forEach((comment, index) => {
    if (!primaryKeys.has(comment.primary_key)) {
      report(['comments', index, 'primary_key'], 'names no user in users; add the user or fix the key');
    }
    if (!conversationIds.has(comment.conversation_id)) {
      report(['comments', index, 'conversation_id'], 'names no conversation in conversations');
    }
    if (comment.parent_id === null || comment.parent_id === undefined) return;
    const parentIndex = commentIndex.get(comment.parent_id);
    const parent = parentIndex === undefined ? undefined : comments[parentIndex];
    if (!parent) {
      report(
        ['comments', index, 'parent_id'],
        'names no comment in comments; use null for a top-level comment',
      );
    } else if (parent.conversation_id !== comment.conversation_id) {
      report(['comments', index, 'parent_id'], 'names a comment in another conversation');
    } else if (repliesInACycle(comment.id, comments, commentIndex)) {
      report(
        ['comments', index, 'parent_id'],
        'forms a cycle of replies; one comment in the thread must have null',
      );
    }
  });

  const voteKeys = new Map<string, number>();
  votes.forEach((vote, index) => {
    if (!primaryKeys.has(vote.primary_key)) {
      report(['votes', index, 'primary_key'], 'names no user in users');
    }
    if (!commentIndex.has(vote.comment_id)) {
      report(['votes', index, 'comment_id'], 'names no comment in comments');
    }
    const key = `${vote.primary_key}\u0000${vote.comment_id}`;
    const earlier = voteKeys.get(key);
    if (earlier === undefined) voteKeys.set(key, index);
    else report(['votes', index], `duplicates votes[${earlier}]; a user votes once per comment`);
  });
}

function repliesInACycle(
  start: string,
  comments: readonly { id: string; parent_id?: string | null | undefined }[],
  index: Map<string, number>,
): boolean {
  const visited = new Set<string>();
  let current: string | null | undefined = start;
  while (current) {
    if (visited.has(current)) return true;
    visited.add(current);
    const position = index.get(current);
    current = position === undefined ? undefined : comments[position]?.parent_id;
  }
  return false;
}

/** A parsed state document (see docs/emulator.md, "State file"). */
export type EmulatorState = z.infer<typeof emulatorStateSchema>;
export type StateUser = NonNullable<EmulatorState['users']>[number];

/** Validates a state document already in memory (the control API's POST /_emulator/state). */
export function parseEmulatorState(document: unknown): ParseOutcome<EmulatorState> {
  return parseWith(emulatorStateSchema, document);
}

/** Reads and validates a state file; throws EmulatorConfigError naming each bad field. */
export function loadStateFile(path: string): Promise<EmulatorState> {
  return loadJsonFile(path, 'Emulator state file', emulatorStateSchema, 'State file');
}

/** One account of a state document: its spot_id and tokens where the document gives them, and its data. */
export interface StateSite {
  spotId: string | undefined;
  ssoAccessToken: string | undefined;
  exportToken: string | undefined;
  /** The account's data in the one-site form. */
  state: EmulatorState;
}

/** The accounts a parsed state document describes: those under `sites`, else the one at the top. */
export function stateSites(state: EmulatorState): StateSite[] {
  if (state.sites === undefined) {
    return [{ spotId: state.spot_id, ssoAccessToken: undefined, exportToken: undefined, state }];
  }
  return state.sites.map(({ spot_id, sso_access_token, export_token, ...contents }) => ({
    spotId: spot_id,
    ssoAccessToken: sso_access_token,
    exportToken: export_token,
    state: { spot_id, ...contents },
  }));
}
