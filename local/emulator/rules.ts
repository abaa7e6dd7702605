/**
 * The platform's documented vocabularies and field rules: roles, notification kinds and values, and
 * the checks of user fields that the state file and the API share.
 */
import { z } from 'zod';

/** Roles from the spec's role table. */
export const ROLES = [
  'admin',
  'moderator',
  'community-moderator',
  'journalist',
  'viewer',
  'registered',
] as const;
export type Role = (typeof ROLES)[number];

/** Notification kinds; the spec's one-off spelling used_mentioned is a typo for user_mentioned. */
export const NOTIFICATION_KINDS = [
  'liked_your_message',
  'message_approved',
  'message_rejected',
  'replied_to_message',
  'user_mentioned',
] as const;
export type NotificationKind = (typeof NOTIFICATION_KINDS)[number];
export const NOTIFICATION_VALUES = ['immediately', 'never'] as const;
export type NotificationValue = (typeof NOTIFICATION_VALUES)[number];
export type NotificationChannel = Record<NotificationKind, NotificationValue>;

export const USER_NAME_MIN_EXCLUSIVE = 3;
export const USER_NAME_MAX_EXCLUSIVE = 30;
export const DISPLAY_NAME_MAX = 30;
export const BIO_MAX = 200;
export const DEFAULT_DISPLAY_NAME = 'Guest';

/** Counts Unicode code points, so that a name in a non-Latin script is measured as a person reads it. */
export function codePointLength(value: string): number {
  return [...value].length;
}

// ASCII punctuation that acts as a delimiter in URLs, mentions, CSV or shells; '_', '-' and '.' stay allowed.
const FORBIDDEN_USER_NAME_ASCII = new Set('!"#$%&\'()*+,/:;<=>?@[\\]^`{|}~');

/** Returns why a user_name breaks the spec's rules, or undefined when it is acceptable. */
export function userNameProblem(value: string): string | undefined {
  const length = codePointLength(value);
  if (length <= USER_NAME_MIN_EXCLUSIVE || length >= USER_NAME_MAX_EXCLUSIVE) {
    return `must be longer than ${USER_NAME_MIN_EXCLUSIVE} and shorter than ${USER_NAME_MAX_EXCLUSIVE} characters (got ${length})`;
  }
  for (const character of value) {
    if (character === '<' || character === '>') return 'must not contain < or >';
    if (/[\s\p{Cc}\p{Cf}]/u.test(character)) {
      return 'must not contain whitespace or control characters (space, tab, CR, LF)';
    }
    if (FORBIDDEN_USER_NAME_ASCII.has(character)) {
      return 'must not contain delimiters such as , ; : / \\ | " \' and other ASCII punctuation except _ - .';
    }
  }
  return undefined;
}

/** Strips what a user_name may not hold, for names derived from a display_name. */
export function userNameBase(displayName: string): string {
  const kept = [...displayName].filter(
    (character) =>
      !FORBIDDEN_USER_NAME_ASCII.has(character) &&
      character !== '<' &&
      character !== '>' &&
      !/[\s\p{Cc}\p{Cf}]/u.test(character),
  );
  return kept.join('');
}

export const userNameSchema = z.string().superRefine((value, context) => {
  const problem = userNameProblem(value);
  if (problem) context.addIssue({ code: 'custom', message: problem });
});

export const displayNameSchema = z.string().refine((value) => codePointLength(value) <= DISPLAY_NAME_MAX, {
  error: `must be at most ${DISPLAY_NAME_MAX} characters`,
});

export const bioSchema = z
  .string()
  .refine((value) => codePointLength(value) <= BIO_MAX, { error: `must be at most ${BIO_MAX} characters` });

export const roleSchema = z.enum(ROLES, { error: `must be one of ${ROLES.join(', ')}` });

const notificationValueSchema = z
  .enum(NOTIFICATION_VALUES, { error: 'must be immediately or never' })
  .optional();
const notificationChannelSchema = z.strictObject(
  {
    liked_your_message: notificationValueSchema,
    message_approved: notificationValueSchema,
    message_rejected: notificationValueSchema,
    replied_to_message: notificationValueSchema,
    user_mentioned: notificationValueSchema,
  },
  { error: unknownKeys(NOTIFICATION_KINDS, 'unknown notification kind') },
);

/** The settings object as sent; omitted kinds default to immediately when stored. */
export const settingsSchema = z.strictObject(
  {
    notifications: z
      .strictObject(
        { email: notificationChannelSchema.optional(), in_app: notificationChannelSchema.optional() },
        { error: unknownKeys(['email', 'in_app']) },
      )
      .optional(),
  },
  { error: unknownKeys(['notifications']) },
);
export type SettingsInput = z.infer<typeof settingsSchema>;

export interface StoredSettings {
  email: NotificationChannel;
  in_app: NotificationChannel;
}

export function completeSettings(input: SettingsInput | undefined): StoredSettings {
  const channel = (
    given: Partial<Record<NotificationKind, NotificationValue>> | undefined,
  ): NotificationChannel => {
    const filled = {} as NotificationChannel;
    for (const kind of NOTIFICATION_KINDS) filled[kind] = given?.[kind] ?? 'immediately';
    return filled;
  };
  return { email: channel(input?.notifications?.email), in_app: channel(input?.notifications?.in_app) };
}

export interface UserMetadata {
  is_subscriber: boolean;
}

/** Decodes user_metadata: base64 of a JSON object holding exactly one boolean is_subscriber. */
export function decodeUserMetadata(value: string): { metadata: UserMetadata } | { problem: string } {
  const problem = 'must be base64 of a JSON object {"is_subscriber": true|false}';
  const normalized = value.replace(/-/g, '+').replace(/_/g, '/');
  if (normalized.length === 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(normalized)) return { problem };
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(normalized, 'base64').toString('utf8'));
  } catch {
    return { problem };
  }
  const result = z.strictObject({ is_subscriber: z.boolean() }).safeParse(parsed);
  return result.success ? { metadata: result.data } : { problem };
}

export const userMetadataSchema = z.string().transform((value, context) => {
  const decoded = decodeUserMetadata(value);
  if ('problem' in decoded) {
    context.addIssue({ code: 'custom', message: decoded.problem });
    return z.NEVER;
  }
  return decoded.metadata;
});

/** The query-string form of a boolean, as the spec sends email_verified and private_profile. */
export const queryBooleanSchema = z
  .enum(['true', 'false'], { error: 'must be true or false' })
  .transform((v) => v === 'true');

/** An error-map for strict objects that names the allowed fields, so a typo is easy to fix. */
export function unknownKeys(
  allowed: readonly string[],
  what = 'unknown field',
): (issue: { code?: string }) => string | undefined {
  return (issue) =>
    issue.code === 'unrecognized_keys' ? `${what}; allowed: ${allowed.join(', ')}` : undefined;
}

/** Turns a zod path into the dotted form used in error messages, e.g. users[0].user_name. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out;
}

export interface FieldProblem {
  field: string;
  message: string;
}

/** Flattens zod issues into one entry per field, naming unknown keys individually. */
export function fieldProblems(
  issues: readonly z.core.$ZodIssue[],
  prefix: readonly PropertyKey[] = [],
): FieldProblem[] {
  const problems: FieldProblem[] = [];
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys)
        problems.push({ field: formatPath([...path, key]), message: issue.message });
      continue;
    }
    if (issue.code === 'invalid_union') {
      problems.push({ field: formatPath(path) || '(root)', message: issue.message });
      continue;
    }
    problems.push({ field: formatPath(path) || '(root)', message: friendlyMessage(issue) });
  }
  return problems;
}

function friendlyMessage(issue: z.core.$ZodIssue): string {
  if (issue.code === 'invalid_type' && issue.message.startsWith('Invalid input')) {
    return issue.message.includes('received undefined')
      ? `is required (${issue.expected})`
      : `must be ${article(issue.expected)}`;
  }
  return issue.message;
}

function article(expected: string): string {
  const names: Record<string, string> = {
    string: 'a string',
    number: 'a number',
    int: 'an integer',
    boolean: 'a boolean (true or false)',
    object: 'an object',
    record: 'an object',
    array: 'an array',
    null: 'null',
  };
  return names[expected] ?? expected;
}
