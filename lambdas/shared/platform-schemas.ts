// The platform's settings and responses as zod schemas: users, exports, activity pages and error bodies.
import { z } from 'zod';

/** Platform connection settings, validated once where they are read. */
export const platformConfigSchema = z.object({
  baseUrl: z.url({ protocol: /^https?$/ }),
  exportUrl: z.url({ protocol: /^https?$/ }),
  activityUrl: z.url({ protocol: /^https?$/ }),
  spotId: z.string().min(1, 'spot id is empty: set it to the spot_id from the admin dashboard'),
  timeoutMs: z.number().int().positive().default(10_000),
  /** Header that carries the SSO access token on endpoints 2 to 5. */
  ssoTokenHeader: z.string().min(1).default('x-svc-sso-access-token'),
  /** Field of the retrieval response that holds the platform's own user id. */
  userIdField: z.string().min(1).default('svc_user_id'),
});
export type PlatformConfig = z.infer<typeof platformConfigSchema>;
export type PlatformConfigInput = z.input<typeof platformConfigSchema>;

/** The two secrets the platform issues. */
/** The two platform tokens; each function is given only the one its calls need. */
export type PlatformToken = 'ssoAccessToken' | 'exportToken';

const notificationKinds = z.record(z.string(), z.string());

/** A user as retrieve-user returns it. Only the fields the workflow relies on are required. */
export const retrievedUserSchema = z.looseObject({
  primary_key: z.string().optional(),
  user_name: z.string().optional(),
  display_name: z.string().optional(),
  bio: z.string().optional(),
  role: z.string().optional(),
  location: z.string().optional(),
  private_profile: z.boolean().optional(),
  image_url: z.string().optional(),
  email: z.string().optional(),
  email_verified: z.boolean().optional(),
  legacy_user_id: z.string().nullable().optional(),
  user_metadata: z.union([z.looseObject({ is_subscriber: z.boolean().optional() }), z.string()]).optional(),
  settings: z
    .looseObject({
      notifications: z.looseObject({
        email: notificationKinds.optional(),
        in_app: notificationKinds.optional(),
      }),
    })
    .optional(),
});
export type RetrievedUser = z.infer<typeof retrievedUserSchema>;

export const retrieveResponseSchema = z.looseObject({
  success: z.boolean(),
  user: retrievedUserSchema.optional(),
});

/** Accepts every export-id shape seen: `id`, `export_id`, `exportId`, `data.id`, or a bare value. */
const exportIdValue = z.union([z.string(), z.number().finite()]);
export const exportStartResponseSchema = z.union([
  exportIdValue,
  z.looseObject({ id: exportIdValue }),
  z.looseObject({ export_id: exportIdValue }),
  z.looseObject({ exportId: exportIdValue }),
  z.looseObject({ data: z.looseObject({ id: exportIdValue }) }),
]);

export const exportStatusResponseSchema = z.looseObject({
  status: z.string(),
  link: z.string().optional().nullable(),
});

/** Export state after normalisation: unknown values and `completed` without a link are pending. */
export type ExportStatus =
  | { readonly status: 'pending'; readonly reported: string }
  | { readonly status: 'completed'; readonly link: URL }
  | { readonly status: 'failed' };

const contentItem = z.looseObject({
  id: z.string().optional(),
  text: z.string().optional(),
  type: z.string(),
});

export const activityMessageSchema = z.looseObject({
  id: z.string(),
  user_id: z.string(),
  parent_id: z.string().nullable().optional(),
  root_comment: z.string().nullable().optional(),
  depth: z.number().optional(),
  written_at: z.number(),
  time: z.number().optional(),
  replies_count: z.number().optional(),
  edited: z.boolean().optional(),
  status: z.string().optional(),
  content: z.array(contentItem),
  deleted: z.boolean().optional(),
  published: z.boolean().optional(),
  type: z.string().optional(),
});

export const activityResponseSchema = z.looseObject({
  cursor: z.looseObject({ offset: z.number(), count: z.number(), has_next: z.boolean() }),
  items: z.array(
    z.looseObject({
      data: z.looseObject({
        spot_id: z.string(),
        conversation_id: z.string(),
        conversation: z.looseObject({ url: z.string().optional(), title: z.string().optional() }).optional(),
        messages: z.array(activityMessageSchema),
      }),
    }),
  ),
  users: z.record(
    z.string(),
    z.looseObject({
      id: z.string(),
      display_name: z.string().optional(),
      image_url: z.string().optional(),
      user_name: z.string().optional(),
      registered: z.boolean().optional(),
      sso_primary_key: z.string().optional(),
    }),
  ),
});
export type ActivityPage = z.infer<typeof activityResponseSchema>;

/** Error bodies the platform may send; only the code and field are ever surfaced (never free text). */
export const platformErrorBodySchema = z.looseObject({
  error: z
    .union([z.string(), z.looseObject({ code: z.string().optional(), field: z.string().optional() })])
    .optional(),
});
