// What the API takes in and answers, as zod schemas: the handler validates with them and the OpenAPI document is generated from them.
import { z } from 'zod';
import { manifestSchema } from '#shared/audit-manifest';
import { timeZoneSchema } from '#shared/config';
import { VERIFY_ALL_CHECKS } from '#shared/evidence/chains';
import { RESPONSE_CATEGORIES } from '#shared/evidence/report';
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
  /** CCPA: the date the receipt confirmation is due by; null otherwise. */
  confirm_by: z.string().nullable(),
  /** What intake warned of when it accepted the request (e.g. `primary_key_mixed_scripts`). */
  intake_warnings: z.array(z.string()),
  /** The notices given to the subject, by kind (the latest of each): how and when. */
  notices: z.partialRecord(
    z.enum(['receipt', 'extension', 'response', 'denial']),
    z.object({ channel: z.string(), at: z.string(), recorded_at: z.string() }),
  ),
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

/** The counts' query: with `due_to`, how many of the open requests are due by then, beside the counts by status. */
export const countsQuerySchema = z.strictObject({
  due_to: instantParameter.optional(),
});

/** How many requests are open, by status, and (with `due_to`) how many of them are due by then. */
export const countsAnswerSchema = z.object({
  by_status: z.object({ received: z.number().int(), running: z.number().int(), failed: z.number().int() }),
  due_to: z.string().nullable(),
  due: z.number().int().nullable(),
});

/** One request in a list: what the open index holds, and the subject's key only masked. */
export const listedRequestSchema = z.object({
  request_id: z.string(),
  /** The subject's primary_key masked (its first and last characters): the key itself only when the request is opened. */
  masked_key: z.string().nullable(),
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

/** A bound of the report's range: a local date (the whole day in the time zone) or an instant. */
const dateOrInstantParameter = z.union([z.iso.date(), z.iso.datetime({ offset: true })], {
  message: 'must be a date (2026-01-31) or an RFC 3339 instant (2026-01-31T12:00:00Z)',
});

/** The report's range and choices, as `svc-dsr report` takes them. */
export const reportQuerySchema = z.strictObject({
  from: dateOrInstantParameter.optional(),
  to: dateOrInstantParameter.optional(),
  regulation: z.enum(['gdpr', 'ccpa'], { message: 'must be "gdpr" or "ccpa"' }).optional(),
  time_zone: timeZoneSchema.optional(),
});

const findingSchema = z.object({ check: z.enum(VERIFY_ALL_CHECKS), detail: z.string() });

/** One request as CCPA regulations section 7101 asks it recorded: no subject identifier. */
const reportRecordSchema = z.object({
  request_id: z.string(),
  regulation: z.string().nullable(),
  type: z.string().nullable(),
  received_at: z.string(),
  channel: z.string().nullable(),
  verification_method: z.string().nullable(),
  status: z.string(),
  response: z.string(),
  response_category: z.enum(RESPONSE_CATEGORIES),
  response_date: z.string().nullable(),
  notice_given_at: z.string().nullable(),
  notice_recorded_at: z.string().nullable(),
  ended_at: z.string().nullable(),
  days_to_respond: z.number().nullable(),
  denial_basis: z.string().nullable(),
  due_at: z.string().nullable(),
  notice_due_at: z.string().nullable(),
  extended: z.boolean(),
  on_time: z.boolean().nullable(),
  notice_recorded_late: z.boolean().nullable(),
  date_problem: z.string().nullable(),
  reference: z.string().nullable(),
  sites: z.string().nullable(),
  site_outcomes: z.record(z.string(), z.string()).nullable(),
});

const count = z.number().int().nonnegative();

/** The report: section 7101 records, section 7102 metrics, and the requests whose records did not back them. */
export const reportAnswerSchema = z.object({
  generated_at: z.string(),
  time_zone: z.string(),
  from: z.string().nullable(),
  to: z.string().nullable(),
  regulation: z.string().nullable(),
  records: z.array(reportRecordSchema),
  metrics: z.array(
    z.object({
      regulation: z.string(),
      type: z.string(),
      received: count,
      complied: count,
      denied: count,
      denied_unverifiable: count,
      denied_other: count,
      withdrawn: count,
      open: count,
      failed: count,
      late: count,
      notice_missing: count,
      median_days_to_respond: z.number().nullable(),
      mean_days_to_respond: z.number().nullable(),
      date_problems: count,
    }),
  ),
  sites: z.array(
    z.object({
      site: z.string(),
      requests: count,
      exported: count,
      erased: count,
      corrected: count,
      no_data: count,
      failed: count,
      other: count,
    }),
  ),
  intake_errors: count,
  skipped: count,
  checked: count,
  refused: z.array(z.object({ request_id: z.string(), findings: z.array(findingSchema) })),
});

const storedCheckSchema = z.object({
  status: z.enum(['match', 'mismatch', 'missing', 'expired', 'none']),
  key: z.string().nullable(),
  expected: z.object({ bytes: count, sha256: z.string() }).nullable(),
  actual: z.object({ bytes: count, sha256: z.string() }).nullable(),
  retention_ends_at: z.string().optional(),
});

/** One request verified, as `svc-dsr verify --json` gives it, its chain's state without its records (the timeline has them). */
export const verifyAnswerSchema = z.object({
  request_id: z.string(),
  ok: z.boolean(),
  archive: storedCheckSchema,
  subject_package: storedCheckSchema,
  audit: z.union([
    z.object({ ok: z.literal(true), records: count, head: z.string(), final: z.boolean() }),
    z.object({ ok: z.literal(false), problem: z.string(), at: z.number().int() }),
  ]),
  findings: z.array(findingSchema),
  side_chains: z.array(
    z.object({
      kind: z.string(),
      chain: z.string(),
      records: count,
      head: z.string().nullable(),
      findings: z.array(findingSchema),
    }),
  ),
  parts: z.array(z.object({ request_id: z.string(), site: z.string(), ok: z.boolean() })).optional(),
});

/** Which manifest to give whole, by its day. */
export const manifestsQuerySchema = z.strictObject({
  day: z.iso.date({ message: 'must be a date (2026-01-31)' }).optional(),
});

/** The daily manifests as `verify --all` reads them: each day's hash chained to the one before. */
export const manifestsAnswerSchema = z.object({
  /** Whether every manifest reads, hashes to its own hash and links to the day before. */
  ok: z.boolean(),
  problem: z.string().nullable(),
  manifests: z.array(
    z.object({
      day: z.string(),
      schema: z.string(),
      written_at: z.string(),
      /** How many records (or, in the first layout, chain heads) the manifest locks. */
      locked: count,
      hash: z.string(),
      prev_hash: z.string().nullable(),
    }),
  ),
  /** The manifest of the day asked for, whole. */
  manifest: manifestSchema.optional(),
});
