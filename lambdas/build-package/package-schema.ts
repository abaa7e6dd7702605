// The schema of data.json in the subject package, from which docs/subject-package.schema.json is generated.
import { z } from 'zod';

/**
 * The content of data.json in the subject package. docs/subject-package.schema.json is generated
 * from this schema (`packageJsonSchema`), and a test keeps the two equal, so the documentation
 * cannot drift from what the packages hold. `format_version` changes when a field changes meaning.
 */

const text = (description: string) => z.string().nullable().describe(description);
const instant = (description: string) => z.iso.datetime().describe(`${description} (RFC 3339, UTC)`);

export const detailsReasonSchema = z
  .enum(['not_enabled', 'refused', 'unavailable', 'invalid_response', 'no_user'])
  .describe(
    'Why the conversation details are missing: the activity call is not enabled for the account (not_enabled), the platform refused it (refused), it kept failing after retries (unavailable), its answer could not be read (invalid_response), or the platform id of the subject was not known (no_user)',
  );

const gdprInformationSchema = z
  .strictObject({
    purposes: z.string().describe('Art. 15(1)(a): the purposes of the processing'),
    categories: z.string().describe('Art. 15(1)(b): the categories of personal data concerned'),
    recipients: z.string().describe('Art. 15(1)(c): the recipients or categories of recipient'),
    retention: z.string().describe('Art. 15(1)(d): how long the data is kept, or the criteria'),
    rights: z
      .string()
      .describe('Art. 15(1)(e): the rights to rectification, erasure, restriction and objection'),
    complaint: z.string().describe('Art. 15(1)(f): the right to complain to a supervisory authority'),
    source: z.string().describe('Art. 15(1)(g): where the data came from, when not from the subject'),
    automatedDecisions: z
      .string()
      .describe('Art. 15(1)(h): automated decision-making, including profiling, its logic and consequences'),
    transfers: z
      .string()
      .describe(
        'Art. 15(2): transfers to a third country or an international organisation, and their Art. 46 safeguards',
      ),
  })
  .describe(
    'The information GDPR Art. 15(1) and 15(2) require, as the controller wrote it in the stack config',
  );

const ccpaInformationSchema = z
  .strictObject({
    categories: z.string().describe('§1798.110(a)(1): the categories of personal information collected'),
    sources: z.string().describe('§1798.110(a)(2): the categories of sources it is collected from'),
    purposes: z
      .string()
      .describe('§1798.110(a)(3): the business or commercial purpose for collecting, selling or sharing it'),
    thirdParties: z.string().describe('§1798.110(a)(4): the categories of third parties it is disclosed to'),
  })
  .describe(
    'The information Cal. Civ. Code §1798.110 requires, as the business wrote it in the stack config',
  );

/** The notice of the request's law: `gdpr` for a GDPR request, `ccpa` for a CCPA one, never both. */
export const packageInformationSchema = z
  .union([z.strictObject({ gdpr: gdprInformationSchema }), z.strictObject({ ccpa: ccpaInformationSchema })])
  .describe("What the law of the request (request.regulation) says the subject is told, in that law's terms");
export type PackageInformation = z.infer<typeof packageInformationSchema>;

export const packageCommentSchema = z.strictObject({
  id: z.string().describe("The comment's id at the platform"),
  kind: z.enum(['comment', 'reply']),
  reply_to: z
    .string()
    .nullable()
    .describe("The subject's own comment this reply answers; null for a comment, or a reply to someone else"),
  parent_id: z.string().nullable().describe('The comment a reply answers, whoever wrote it'),
  written_at: instant('When the comment was written'),
  text: z.string().describe('The text, its parts joined by blank lines; may be empty'),
  state: z
    .enum(['published', 'unpublished', 'deleted'])
    .describe('Visible to others, held back (pending or rejected), or deleted'),
  edited: z.boolean().describe('Changed after it was written'),
  moderation: text('The platform\'s moderation word, e.g. "approved"'),
  ip: text('The internet address recorded with the comment'),
});

export const packageConversationSchema = z.strictObject({
  conversation_id: z.string(),
  title: text('The title of the page the conversation belongs to, from the activity endpoint'),
  url: text('Its address (http or https only), from the activity endpoint'),
  comments: z.array(packageCommentSchema).describe('Oldest first'),
});

export const packageVoteSchema = z.strictObject({
  message_id: z.string().describe('The comment voted on'),
  conversation_id: z.string().nullable().describe("Set when that comment is one of the subject's own"),
  conversation_title: z.string().nullable(),
});

export const platformFileSchema = z.strictObject({
  name: z.string().describe('Path inside the package, e.g. platform/messages.json'),
  bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});

export const subjectPackageDataSchema = z
  .strictObject({
    format: z.literal('svc-dsr-subject-package'),
    format_version: z.literal(2),
    language: z.string().describe('BCP 47 language tag of the page and its dates'),
    time_zone: z.string().describe('IANA time zone the page writes dates in'),
    controller: z.strictObject({
      name: z.string().describe('Who answers the request (the controller)'),
      contact: z.string().describe('How to reach them about it'),
    }),
    request: z.strictObject({
      request_id: z.string().describe('The reference of the request'),
      regulation: z.enum(['gdpr', 'ccpa']),
      received_at: instant('When the request was received'),
      answered_at: instant('When this package was built'),
    }),
    information: packageInformationSchema,
    profile: z.strictObject({
      platform_user_id: text("The subject's id at the platform"),
      user_name: text('Unique user name (shown with a leading @)'),
      display_name: text('Name shown with the comments'),
      about: text('Profile text'),
      location: text('Location given in the profile'),
      email: text('E-mail address'),
      email_verified: z.boolean().nullable(),
      gender: text('Gender, if recorded'),
      birthday: text('Birthday, if recorded'),
      image_id: text("The platform's reference to the profile picture"),
      registered: z.boolean().nullable(),
      single_sign_on: z.boolean().describe("The account is linked to the site's own account"),
      social_accounts: z.number().int().nonnegative().describe('Linked social media accounts'),
      private_profile: z
        .boolean()
        .nullable()
        .describe('Comment history and profile hidden from others; null when the platform did not say'),
      subscriber: z
        .boolean()
        .nullable()
        .describe("The site's subscriber status; null when the platform did not say"),
    }),
    roles: z.array(
      z.strictObject({
        role: z.string(),
        scope: z.enum(['platform', 'site']).describe('The whole platform ("system"), or one site'),
        site: z.string().nullable().describe('The site (spot id) a site role applies to'),
      }),
    ),
    settings: z
      .array(
        z.strictObject({
          channel: z.enum(['email', 'in_app']),
          kind: z.string().describe('Notification kind, e.g. replied_to_message'),
          value: z.string().describe('"immediately" or "never"'),
          default: z.boolean().describe('Not set by the subject: the platform sends this kind immediately'),
        }),
      )
      .describe('Notification settings: every kind from the platform account, or those the export holds'),
    settings_source: z
      .enum(['account', 'export', 'unavailable'])
      .describe(
        'Where the settings come from: the platform account (retrieve-user), the export, or nowhere (the account could not be read)',
      ),
    conversations: z.array(packageConversationSchema).describe('Newest conversation first'),
    likes: z.array(packageVoteSchema),
    dislikes: z.array(packageVoteSchema),
    conversation_details: z.strictObject({
      status: z
        .enum(['complete', 'partial', 'unavailable'])
        .describe('Whether titles, links and states came from the activity endpoint for every comment'),
      reason: detailsReasonSchema.nullable(),
      pages: z.number().int().nonnegative().describe('Activity pages read'),
    }),
    platform_files: z
      .array(platformFileSchema)
      .describe("The platform's original files, untouched under platform/, with their SHA-256"),
  })
  .describe("A data subject's access package: the platform's export, normalised and explained");

export type SubjectPackageData = z.infer<typeof subjectPackageDataSchema>;
export type PackageComment = z.infer<typeof packageCommentSchema>;
export type PackageConversation = z.infer<typeof packageConversationSchema>;
export type PackageVote = z.infer<typeof packageVoteSchema>;
export type PlatformFile = z.infer<typeof platformFileSchema>;
export type ConversationDetails = SubjectPackageData['conversation_details'];
export type PackageProfile = SubjectPackageData['profile'];

/** The JSON Schema of data.json, as docs/subject-package.schema.json publishes it. */
export function packageJsonSchema(): Record<string, unknown> {
  const { $schema, ...schema } = z.toJSONSchema(subjectPackageDataSchema, { target: 'draft-2020-12' });
  return {
    $schema,
    $id: 'https://svc-dsr.invalid/schemas/subject-package.schema.json',
    title: 'svc-dsr subject access package (data.json)',
    ...schema,
  };
}
