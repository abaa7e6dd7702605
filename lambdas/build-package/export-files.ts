// The four files of the platform's export as the subject package reads them: their schemas and parsing.
import { z } from 'zod';
import { InvalidArchiveError } from '#shared/errors';

/**
 * The four files of the platform's export (docs/platform-api.md, "The export archive"), as the
 * subject package reads them. Only what the package shows is required; everything else passes
 * through, so a field the platform adds later does not break a package (the original files travel
 * untouched in `platform/` anyway).
 */

const contentItemSchema = z.looseObject({
  id: z.union([z.string(), z.number()]).optional(),
  text: z.string().nullable().optional(),
  type: z.string().optional(),
});

const idSchema = z.union([z.string().min(1), z.number().finite()]).transform(String);
const optionalId = z
  .union([z.string(), z.number().finite(), z.null()])
  .optional()
  .transform((value) => (value === null || value === undefined || value === '' ? null : String(value)));

/** One entry of messages.json. */
export const exportedMessageSchema = z.looseObject({
  id: idSchema,
  conversation_id: idSchema,
  parent_comment_id: optionalId,
  written_at: z.number().finite().nonnegative(),
  content: z.array(contentItemSchema).default([]),
  type: z.string().optional(),
  state: z.string().optional(),
  published: z.boolean().optional(),
  edited: z.boolean().optional(),
  deleted: z.boolean().optional(),
  ip: z.string().nullable().optional(),
  stars: z.number().optional(),
  anonymous_user_name: z.string().nullable().optional(),
});
export type ExportedMessage = z.infer<typeof exportedMessageSchema>;

const nullableText = z.string().nullable().optional();

/** profile.json. */
export const exportedProfileSchema = z.looseObject({
  user_id: optionalId,
  registered: z.boolean().optional(),
  social_ids: z.array(z.unknown()).default([]),
  sso: z.looseObject({ primary_key: z.string().optional() }).nullable().optional(),
  roles: z.array(z.looseObject({ role: z.string(), stage: z.string().optional() })).default([]),
  basic: z
    .looseObject({
      user_name: nullableText,
      display_name: nullableText,
      image_id: nullableText,
      gender: nullableText,
      birthday: nullableText,
      about: nullableText,
      location: nullableText,
      email: nullableText,
      email_verified: z.boolean().nullable().optional(),
    })
    .default({}),
  /** Not in the documented shape; shown when a platform includes the notification settings. */
  settings: z
    .looseObject({
      notifications: z
        .looseObject({
          email: z.record(z.string(), z.string()).optional(),
          in_app: z.record(z.string(), z.string()).optional(),
        })
        .optional(),
    })
    .optional(),
});
export type ExportedProfile = z.infer<typeof exportedProfileSchema>;

/** likes.json and dislikes.json: message ids. */
export const votesSchema = z.array(idSchema);

export const exportFilesSchema = z.object({
  'dislikes.json': votesSchema,
  'likes.json': votesSchema,
  'messages.json': z.array(exportedMessageSchema),
  'profile.json': exportedProfileSchema,
});
export type ExportFiles = z.infer<typeof exportFilesSchema>;

/** The names of the four files, in the order the archive documents them. */
export const EXPORT_FILES = ['dislikes.json', 'likes.json', 'messages.json', 'profile.json'] as const;
export type ExportFileName = (typeof EXPORT_FILES)[number];

/**
 * Parses the four files' bytes. A file that is not JSON or does not have its documented shape is
 * an InvalidArchiveError naming the file and the field paths; never the values, which are the
 * subject's data.
 */
export function parseExportFiles(raw: Readonly<Record<ExportFileName, Buffer>>): ExportFiles {
  const json: Record<string, unknown> = {};
  for (const name of EXPORT_FILES) {
    try {
      json[name] = JSON.parse(raw[name].toString('utf8'));
    } catch {
      throw new InvalidArchiveError(`${name} in the archive is not JSON`);
    }
  }
  const parsed = exportFilesSchema.safeParse(json);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.slice(0, 5).map((issue) => {
    const [file, ...path] = issue.path.map(String);
    return `${file}${path.length === 0 ? '' : ` at ${path.join('.')}`}: ${issue.code}`;
  });
  throw new InvalidArchiveError(
    `the archive's files do not have their documented shape (${problems.join('; ')}${parsed.error.issues.length > 5 ? `; ${parsed.error.issues.length - 5} more` : ''})`,
  );
}
