/**
 * What the operator function is asked to do, and what it answers: the contract between the CLI and
 * the function, checked with zod on both sides. A command names no operator: who acts is the
 * caller's IAM principal, which the function reads from its invocation (docs/security.md).
 */
import { z } from 'zod';
import { DENIAL_CODES, NOTICE_KINDS } from '#shared/ledger';
import { noticeContentSchema } from '#shared/notice-content';
import { identifierProblem } from '#shared/redact';
import { CONTROL_CHARACTERS_MESSAGE, hasControlCharacters, rfc3339Instant } from '#shared/request';
import { runRequestIdSchema } from '#shared/sites';

/** Text kept in an audit record: short, no control characters, no e-mail address or link. */
export const auditTextSchema = (max: number) =>
  z
    .string({ message: 'is required' })
    .trim()
    .min(1, 'must not be empty')
    .max(max, `must be at most ${max} characters`)
    .refine((value) => !hasControlCharacters(value), CONTROL_CHARACTERS_MESSAGE)
    .refine((value) => identifierProblem(value) === undefined, {
      message: 'must not hold an e-mail address or a link: it is kept in the audit record',
    });

/** A request id; a site's part too (sites.ts), which the commands that act on a whole request refuse by name. */
const requestId = runRequestIdSchema;
const reason = auditTextSchema(256);
const instant = z.string().refine((value) => rfc3339Instant(value) !== undefined, {
  message: 'must be an RFC 3339 date-time',
});
/**
 * The longest a hand-out link lives, in seconds. The function signs it with its role's session,
 * which Lambda renews on its own schedule (a link cannot outlive the session that signed it), and
 * a link to a subject's data is a bearer credential: an hour, to be sent on at once.
 */
export const MAX_LINK_SECONDS = 3600;

/** How long the link of a download to a file (`package --out`) lives: the CLI starts it at once. */
export const DOWNLOAD_LINK_SECONDS = 300;

/**
 * The operator function's timeout, in seconds: `check_stored` streams a whole archive through a
 * SHA-256, and reading is never slower than ArchiveExport's copy of it, which has 15 minutes.
 */
export const OPERATOR_TIMEOUT_SECONDS = 900;

/** The stored objects of a request `check_stored` re-hashes. */
export const STORED_OBJECTS = ['archive', 'subject_package'] as const;
export type StoredObject = (typeof STORED_OBJECTS)[number];

const linkSeconds = z
  .number({ message: 'must be a number of seconds' })
  .int('must be a whole number of seconds')
  .min(1, 'must be at least 1 second')
  .max(MAX_LINK_SECONDS, `must be at most ${MAX_LINK_SECONDS} seconds (1 hour)`);
const notice = z.object({
  channel: auditTextSchema(64),
  at: instant,
  reference: auditTextSchema(128).optional(),
});

/**
 * One operator command. Objects are not strict on purpose: a field the contract does not name (an
 * `operator` the caller would like recorded, say) is dropped here and never read.
 */
export const operatorCommandSchema = z.discriminatedUnion('command', [
  z.object({ command: z.literal('cancel'), request_id: requestId, reason }),
  z.object({
    command: z.literal('deny'),
    request_id: requestId,
    reason_code: z.enum(DENIAL_CODES),
    reason,
  }),
  z.object({ command: z.literal('extend'), request_id: requestId, reason, notice }),
  z.object({ command: z.literal('retry'), request_id: requestId, reason: reason.optional() }),
  z.object({
    command: z.literal('notice'),
    request_id: requestId,
    kind: z.enum(NOTICE_KINDS),
    notice,
    /** What the notice said: the template and the values filled in. */
    content: noticeContentSchema.optional(),
  }),
  z.object({
    command: z.literal('hand_out_package'),
    request_id: requestId,
    /** The platform's raw export zip instead of the subject package. */
    raw: z.boolean(),
    /**
     * How it goes out: a link the operator sends on, valid for `expires_in` seconds, or a file the
     * CLI downloads at once, through a link of {@link DOWNLOAD_LINK_SECONDS}, and writes mode 0600.
     */
    hand_out: z.discriminatedUnion('delivery', [
      z.object({ delivery: z.literal('link'), expires_in: linkSeconds }),
      z.object({ delivery: z.literal('file') }),
    ]),
    reason: reason.optional(),
  }),
  z.object({
    command: z.literal('check_stored'),
    request_id: requestId,
    /** Which stored object of the request to re-hash: its platform archive or its subject package. */
    object: z.enum(STORED_OBJECTS),
  }),
]);
export type OperatorCommand = z.infer<typeof operatorCommandSchema>;
export type OperatorCommandName = OperatorCommand['command'];

/** Every command this function knows, by name. */
export const OPERATOR_COMMANDS: readonly OperatorCommandName[] = operatorCommandSchema.options.map(
  (option) => option.shape.command.value,
);

const endedRuns = {
  stopped: z.array(z.string()),
  stop_errors: z.array(z.object({ execution: z.string(), error: z.string() })),
  archive_versions_removed: z.number().int(),
};

/**
 * What a change to a request in parts (one part per site) did to each part: done, or why not (a
 * part that completed keeps what it did, and is not cancelled, denied or run again).
 */
const parts = {
  parts: z
    .array(z.object({ request_id: z.string(), site: z.string(), done: z.boolean(), detail: z.string() }))
    .optional(),
};

/** What each command answers. */
export const operatorResultSchemas = {
  cancel: z.object({
    request_id: z.string(),
    status: z.literal('cancelled'),
    previous_status: z.string(),
    step: z.string().nullable(),
    reason: z.string(),
    /** `closed` when the workflow had already closed the chain with its own record of the cancel. */
    recorded: z.enum(['appended', 'closed']),
    ...endedRuns,
    ...parts,
  }),
  deny: z.object({
    request_id: z.string(),
    status: z.literal('denied'),
    previous_status: z.string(),
    reason_code: z.enum(DENIAL_CODES),
    reason: z.string(),
    notice_due: z.literal('denial'),
    ...endedRuns,
    ...parts,
  }),
  extend: z.object({
    request_id: z.string(),
    regulation: z.string().nullable(),
    previous_due_at: z.string(),
    due_at: z.string(),
    reason: z.string(),
    notice: z.object({ channel: z.string(), at: z.string(), reference: z.string().nullable() }),
    ...parts,
  }),
  retry: z.object({
    request_id: z.string(),
    execution: z.string(),
    execution_arn: z.string().nullable(),
    status: z.enum(['received', 'running']),
    previous_error: z.object({ code: z.string(), message: z.string() }).nullable(),
    started: z.boolean(),
    ...parts,
  }),
  notice: z.object({
    request_id: z.string(),
    kind: z.enum(NOTICE_KINDS),
    channel: z.string(),
    at: z.string(),
    reference: z.string().nullable(),
    content: noticeContentSchema.nullable(),
    platform_keeps: z.string().optional(),
  }),
  hand_out_package: z.object({
    request_id: z.string(),
    package: z.enum(['subject_package', 'platform_archive']),
    /** The name the browser saves it under (the subject package's `your-data-<date>.zip`). */
    file_name: z.string(),
    /** A presigned GET of the recorded version: a bearer credential until `expires_at`. */
    url: z.string(),
    expires_at: z.string(),
    key: z.string(),
    version_id: z.string().nullable(),
    bytes: z.number().int(),
    sha256: z.string(),
    /** The `package_handed_out` record was written before the link was answered. */
    recorded: z.literal(true),
  }),
  check_stored: z.object({
    request_id: z.string(),
    object: z.enum(STORED_OBJECTS),
    /** The key the ledger records, or null when it records no such object. */
    key: z.string().nullable(),
    /** What the bucket holds under that key, re-hashed; null when it holds nothing there. */
    stored: z.object({ bytes: z.number().int(), sha256: z.string() }).nullable(),
  }),
} as const satisfies Record<OperatorCommandName, z.ZodType>;
export type OperatorResult<C extends OperatorCommandName> = z.infer<(typeof operatorResultSchemas)[C]>;

/**
 * Why the function refused: `unknown_request` (no such request), `refused` (a ledger rule),
 * `running` (retry of a request an execution runs), `unrecorded` (the change stands, its audit
 * record is missing), `not_started` (a retry whose execution could not start).
 */
export const REFUSAL_CODES = ['unknown_request', 'refused', 'running', 'unrecorded', 'not_started'] as const;
export type RefusalCode = (typeof REFUSAL_CODES)[number];

/** The function's answer, as the body of its HTTP response. */
export const operatorAnswerSchema = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), result: z.unknown() }),
  z.object({
    ok: z.literal(false),
    code: z.enum([...REFUSAL_CODES, 'invalid', 'forbidden', 'internal']),
    message: z.string(),
  }),
]);
export type OperatorAnswer = z.infer<typeof operatorAnswerSchema>;
