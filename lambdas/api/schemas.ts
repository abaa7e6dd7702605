// What the API takes in and answers, as zod schemas: the handler validates with them and the OpenAPI document is generated from them.
import { z } from 'zod';
import { ledgerItemSchema, MAX_OPEN_PAGE, OWED_STATUSES } from '#shared/ledger';
import { REQUEST_TYPES, rfc3339Instant } from '#shared/request';
import { SUBMISSION_FORMATS } from '#shared/submission';
import { auditTextSchema, MAX_LINK_SECONDS } from '../operator/commands.ts';

/**
 * A request as the API shows it when it is opened: its facts, deadlines and per-site results.
 * The subject's primary_key only for the privacy team, and only here: no list, URL or log holds it.
 */
export const requestDetailSchema = z.object({
  request_id: z.string(),
  status: ledgerItemSchema.shape.status,
  step: z.string().nullable(),
  type: z.string().nullable(),
  regulation: z.string().nullable(),
  outcome: z.string().nullable(),
  received_at: z.string().nullable(),
  due_at: z.string().nullable(),
  extended: z.boolean(),
  completed_at: z.string().nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  reference: z.string().nullable(),
  sites: z.array(z.string()).nullable(),
  site_results: z
    .record(z.string(), z.object({ status: z.string(), outcome: z.string().optional(), at: z.string() }))
    .nullable(),
  primary_key: z.string().optional(),
});
export type RequestDetail = z.infer<typeof requestDetailSchema>;

/** Every error the API answers, in one shape: a code the CLI shares and a sentence that says the fix. */
export const apiErrorSchema = z.object({
  error: z.object({ code: z.string(), message: z.string() }),
});

/** A comma-separated list of values of `values`, as a query string gives it. */
function listOf<const T extends readonly [string, ...string[]]>(name: string, values: T) {
  return z
    .string()
    .transform((text) => text.split(',').map((value) => value.trim().toLowerCase()))
    .pipe(
      z.array(
        z.enum(values, { message: `${name}: must be one or more of ${values.join(', ')}, comma-separated` }),
      ),
    );
}

const instantParameter = z.string().refine((value) => rfc3339Instant(value) !== undefined, {
  message: 'must be an RFC 3339 date-time, e.g. 2026-12-31T23:59:59Z',
});

/**
 * The filters of the list of open requests, as query parameters: no parameter names or holds a
 * subject identifier (a primary_key, an e-mail address, a user id), and one not listed is refused.
 */
export const listQuerySchema = z.strictObject({
  status: listOf('status', OWED_STATUSES).optional(),
  type: listOf('type', REQUEST_TYPES).optional(),
  regulation: listOf('regulation', ['gdpr', 'ccpa']).optional(),
  due_from: instantParameter.optional(),
  due_to: instantParameter.optional(),
  reference: auditTextSchema(128).optional(),
  limit: z.coerce
    .number({ message: 'must be a number' })
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(MAX_OPEN_PAGE, `must be at most ${MAX_OPEN_PAGE}`)
    .optional(),
  cursor: z.string().max(4096, 'is not a cursor this API gave').optional(),
});

/** One request in a list: what the open index holds, never a subject identifier. */
export const listedRequestSchema = z.object({
  request_id: z.string(),
  status: z.string(),
  step: z.string().nullable(),
  type: z.string().nullable(),
  regulation: z.string().nullable(),
  outcome: z.string().nullable(),
  reference: z.string().nullable(),
  received_at: z.string().nullable(),
  due_at: z.string().nullable(),
  extended: z.boolean(),
});

export const listAnswerSchema = z.object({
  requests: z.array(listedRequestSchema),
  /** The `cursor` of the next page, with the same filters; null after the last. */
  next: z.string().nullable(),
});

/** The largest batch text the API takes: 5 MiB, under Lambda's 6 MB payload. */
export const MAX_BATCH_BYTES = 5 * 1024 * 1024;

/** A batch of requests: a CSV, JSONL or JSON text, judged line by line as `svc-dsr submit --file` does. */
export const batchBodySchema = z.strictObject({
  format: z.enum(SUBMISSION_FORMATS, { message: 'must be "csv", "jsonl" or "json"' }),
  content: z.string({ message: 'must be the text of the file' }).min(1, 'must not be empty'),
  /** Judge every line and send nothing: the verdicts a person reads before sending. */
  dry_run: z.boolean().optional(),
});

const line = { line: z.number().int(), request_id: z.string() };
/** What a submit did with each line, as `svc-dsr submit --json` reports it; never a primary_key. */
export const submitAnswerSchema = z.object({
  dry_run: z.boolean(),
  lines: z.number().int(),
  valid: z.number().int(),
  bad_lines: z.array(
    z.object({ line: z.number().int(), request_id: z.string().nullable(), errors: z.array(z.string()) }),
  ),
  warnings: z.array(z.object({ ...line, code: z.string(), message: z.string() })),
  duplicates: z.array(z.object({ ...line, first_line: z.number().int() })),
  already_submitted: z.array(z.object({ ...line, status: z.string() })),
  conflicts: z.array(z.object({ ...line, status: z.string() })),
  sent: z.array(z.object(line)),
  failed: z.array(z.object({ ...line, code: z.string(), message: z.string() })),
});
export type SubmitAnswer = z.infer<typeof submitAnswerSchema>;

/** A package hand-out through the API: always a link, valid for `expires_in` seconds. */
export const packageBodySchema = z.strictObject({
  raw: z.boolean().optional(),
  expires_in: z
    .number({ message: 'must be a number of seconds' })
    .int('must be a whole number of seconds')
    .min(60, 'must be at least 60 seconds')
    .max(MAX_LINK_SECONDS, `must be at most ${MAX_LINK_SECONDS} seconds (1 hour)`),
  reason: auditTextSchema(256).optional(),
});

const chainStateSchema = z.union([
  z.object({
    ok: z.literal(true),
    records: z.number().int(),
    head: z.string(),
    /** Whether the ledger's head of the chain is the chain's own: false when one of them was changed. */
    matches_ledger: z.boolean(),
  }),
  z.object({ ok: z.literal(false), problem: z.string(), at: z.number().int() }),
]);

/** A request's timeline: each of its audit chains, its state and its records. */
export const timelineAnswerSchema = z.object({
  request_id: z.string(),
  chains: z.array(
    z.object({
      chain: z.string(),
      kind: z.enum(['request', 'notices', 'packages', 'effects']),
      state: chainStateSchema,
      records: z.array(
        z.object({
          seq: z.number().int(),
          step: z.string(),
          action: z.string(),
          at: z.string(),
          final: z.boolean(),
          facts: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null()])),
        }),
      ),
    }),
  ),
});
