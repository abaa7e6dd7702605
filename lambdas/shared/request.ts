// The request as submitted: its zod schema, request ids, RFC 3339 instants and the text checks on its fields.
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { correctionsSchema } from './profile-fields.ts';
import { identifierProblem } from './redact.ts';
import { mixesScripts } from './scripts.ts';
import { requestSitesSchema } from './sites.ts';
import { parseStrictJson } from './strict-json.ts';
import { INTAKE_WARNINGS, REQUEST_CHANNELS, REQUEST_TYPES } from './vocabulary.ts';

export { INTAKE_WARNINGS, REQUEST_CHANNELS, REQUEST_TYPES };

/** Largest accepted SQS message body, in bytes. */
export const MAX_REQUEST_BYTES = 16 * 1024;

/** How far in the future received_at and verified_at may lie: clock skew, not a date to come. */
export const MAX_CLOCK_SKEW_MS = 5 * 60 * 1000;

const UUID_EXAMPLE = '7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f';

/**
 * A request id: a UUID, which is case-insensitive, so it is kept in lower case. The same request in
 * another spelling is then the same request everywhere: intake, the ledger, execution names, the CLI.
 */
export const requestIdSchema = z
  .uuid(`must be a UUID, e.g. ${UUID_EXAMPLE}`)
  .transform((id) => id.toLowerCase());

/** The nil and max UUIDs (RFC 9562 sections 5.9 and 5.10): placeholders, never a chosen id. */
const PLACEHOLDER_UUIDS = new Set([
  '00000000-0000-0000-0000-000000000000',
  'ffffffff-ffff-ffff-ffff-ffffffffffff',
]);

/**
 * A request id as a submitter gives it: a UUID other than the nil and the max UUID, which a form or
 * a script leaves in place of an id and which two unrelated requests would share, the second then
 * quarantined as a conflict. Requests already recorded are read with requestIdSchema.
 */
export const submittedRequestIdSchema = z
  .uuid(`must be a UUID, e.g. ${UUID_EXAMPLE}`)
  .refine(
    (id) => !PLACEHOLDER_UUIDS.has(id.toLowerCase()),
    `must be a UUID of its own, not the nil or max UUID (a placeholder every request would share), e.g. ${UUID_EXAMPLE}`,
  )
  .transform((id) => id.toLowerCase());

/** The canonical spelling of a request id (lower case). */
export function normaliseRequestId(requestId: string): string {
  return requestId.toLowerCase();
}

// RFC 3339 section 5.6: "T" and "Z" may be lower case, and a leap second is written :60.
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

/** 400 Gregorian years: 146,097 days. */
const GREGORIAN_CYCLE_MS = 146_097 * 86_400_000;

/**
 * The instant an RFC 3339 date-time stands for, or undefined when `text` is not one. A leap second
 * (:60) is the instant after :59, as POSIX clocks count it.
 */
export function rfc3339Instant(text: string): Date | undefined {
  const match = RFC3339.exec(text);
  if (match === null) return undefined;
  const [, year, month, day, hour, minute, second, fraction, sign, offsetHour, offsetMinute] = match;
  const numbers = [year, month, day, hour, minute, second].map(Number);
  const [y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0] = numbers;
  const daysInMonth = new Date(Date.UTC(y + 400, mo, 0)).getUTCDate();
  if (mo < 1 || mo > 12 || d < 1 || d > daysInMonth || h > 23 || mi > 59 || s > 60) return undefined;
  const offsetMinutes =
    sign === undefined ? 0 : (sign === '-' ? -1 : 1) * (Number(offsetHour) * 60 + Number(offsetMinute));
  if (sign !== undefined && (Number(offsetHour) > 23 || Number(offsetMinute) > 59)) return undefined;
  const millis = fraction === undefined ? 0 : Math.floor(Number(`0${fraction}`) * 1000);
  // Date.UTC reads the years 0-99 as 1900-1999: 400 years later (one whole Gregorian cycle, with
  // the same calendar) and back again reads every year as itself.
  const utc = Date.UTC(y + 400, mo - 1, d, h, mi, s, millis) - GREGORIAN_CYCLE_MS;
  return new Date(utc - offsetMinutes * 60_000);
}

/** The earliest received_at and verified_at accepted: anything older is a mistyped year. */
export const EARLIEST_REQUEST_TIME = '2000-01-01T00:00:00Z';
const EARLIEST_REQUEST_MS = Date.parse(EARLIEST_REQUEST_TIME);

const rfc3339 = z.string().superRefine((value, context) => {
  const instant = rfc3339Instant(value);
  if (instant === undefined) {
    context.addIssue({ code: 'custom', message: 'must be an RFC 3339 date-time, e.g. 2026-11-02T09:30:00Z' });
  } else if (instant.getTime() < EARLIEST_REQUEST_MS) {
    context.addIssue({
      code: 'custom',
      message: 'is before 2000-01-01: give the time it happened (check the year)',
    });
  } else if (instant.getTime() > Date.now() + MAX_CLOCK_SKEW_MS) {
    context.addIssue({
      code: 'custom',
      message: 'is in the future: give the time it happened (clocks may differ by 5 minutes at most)',
    });
  }
});

/**
 * Characters a primary_key must not hold: controls (C0, DEL, C1) and lone surrogates, which are not
 * well-formed Unicode text and cannot be sent to the platform as UTF-8.
 */
function malformedText(value: string): boolean {
  for (const char of value) {
    const code = char.codePointAt(0) ?? 0;
    if (code < 0x20 || (code >= 0x7f && code <= 0x9f) || (code >= 0xd800 && code <= 0xdfff)) return true;
  }
  return false;
}

/**
 * The characters a reader cannot see, as a set for a regular expression with the `v` flag. Built from
 * Unicode properties (UCD, DerivedCoreProperties.txt, PropList.txt, UnicodeData.txt), so a new
 * Unicode version widens it by itself:
 * - Default_Ignorable_Code_Point: the soft hyphen, the combining grapheme joiner, zero-width
 *   characters, invisible operators (U+2061-U+2064), variation selectors, the Hangul fillers
 *   (U+115F, U+1160, U+3164, U+FFA0) and the tag characters;
 * - General_Category=Format (Cf): bidirectional marks, embeddings and isolates, the Mongolian vowel
 *   separator, the byte order mark, the Arabic number signs;
 * - Bidi_Control and Variation_Selector, named though the two above hold them, so neither depends on
 *   the other's definition;
 * - U+2800 BRAILLE PATTERN BLANK, which renders as a space but is a symbol (So) to every property.
 */
export const INVISIBLE_SET =
  '[\\p{Default_Ignorable_Code_Point}\\p{Cf}\\p{Bidi_Control}\\p{Variation_Selector}\\u2800]';
const INVISIBLE = new RegExp(INVISIBLE_SET, 'v');

/** True when `value` holds a character of INVISIBLE_SET. */
export function hasInvisibleCharacters(value: string): boolean {
  return INVISIBLE.test(value);
}

/**
 * What makes a primary_key look like another: the platform matches the key exactly, so a key copied
 * with a trailing space from a spreadsheet, or with a soft hyphen or a bidirectional mark from a
 * web page, finds no user, and an erasure would end as no_data while the subject's data stays. Refused:
 * any invisible character anywhere, white space other than U+0020 anywhere (a no-break or ideographic
 * space looks like a space), and white space at either end.
 */
const KEY_LOOKS_LIKE_ANOTHER = new RegExp(`${INVISIBLE_SET}|[\\p{White_Space}--[\\u0020]]|^\\s|\\s$`, 'v');

/**
 * The characters that can rewrite a terminal or fake what it shows, as a set for a regular expression
 * with the `v` flag: controls (C0 including tab and newline, DEL, C1), line and paragraph separators,
 * and every invisible character of INVISIBLE_SET except the ones emoji are made of (the zero-width
 * joiner, the emoji and text variation selectors U+FE0E and U+FE0F, and the tag characters of
 * subdivision flags), which free text may hold. JSON.stringify escapes the C0 controls itself, not
 * the others.
 */
const EMOJI_PARTS = '[\\u200d\\ufe0e\\ufe0f\\u{e0020}-\\u{e007f}]';
export const DISPLAY_CONTROLS_BEYOND_C0 = `[[\\u007f-\\u009f\\u2028\\u2029${INVISIBLE_SET}]--${EMOJI_PARTS}]`;
export const DISPLAY_CONTROLS = `[[\\u0000-\\u001f${DISPLAY_CONTROLS_BEYOND_C0}]]`;
const DISPLAY_CONTROL = new RegExp(DISPLAY_CONTROLS, 'v');

/** True when free text holds a character of DISPLAY_CONTROLS. */
export function hasControlCharacters(value: string): boolean {
  return DISPLAY_CONTROL.test(value);
}

/** What a free-text field with a control character is told. */
export const CONTROL_CHARACTERS_MESSAGE =
  'must be one line of plain text, without control characters (escape sequences, tabs, newlines, bidirectional marks and overrides, invisible characters)';

/** Free text that may appear in the audit trail must not carry an identifier or a link. */
const auditableText = (value: string) => identifierProblem(value) === undefined;

/** A free-text field that is shown on terminals: refused when it holds a control character. */
function plainText(schema: z.ZodString) {
  return schema.refine((value) => !hasControlCharacters(value), CONTROL_CHARACTERS_MESSAGE);
}

export type RequestChannel = (typeof REQUEST_CHANNELS)[number];

/** The data-subject request as it arrives on the intake queue (docs/design.md, "The request"). */
const requestShapeSchema = z.strictObject({
  request_id: submittedRequestIdSchema,
  type: z.enum(REQUEST_TYPES, { message: 'must be "access", "erasure" or "correction"' }),
  regulation: z.enum(['gdpr', 'ccpa'], { message: 'must be "gdpr" or "ccpa"' }),
  primary_key: z
    .string()
    .min(1, 'must not be empty')
    .max(256, 'must be at most 256 characters')
    .refine(
      (value) => !malformedText(value),
      'must be well-formed text without control characters (C0, DEL, C1) or lone surrogates',
    )
    .refine(
      // A malformed key has its own message above; this one is for keys that are well-formed text.
      (value) => malformedText(value) || !KEY_LOOKS_LIKE_ANOTHER.test(value),
      'holds an invisible character, a space other than a plain one, or a space at either end: the platform matches the key exactly, so type the key again without them',
    ),
  received_at: rfc3339,
  verification: z.strictObject({
    method: z
      .string()
      .min(1, 'must not be empty')
      .max(128, 'must be at most 128 characters')
      .refine(
        auditableText,
        'must name the method (e.g. email_link), not hold an e-mail address or a URL: it is kept in the audit trail',
      )
      .refine((value) => !hasControlCharacters(value), CONTROL_CHARACTERS_MESSAGE),
    verified_by: plainText(z.string().min(1, 'must not be empty').max(128, 'must be at most 128 characters')),
    verified_at: rfc3339,
  }),
  /** A correction's profile field -> new value; required for `correction`, refused otherwise. */
  corrections: correctionsSchema.optional(),
  reference: plainText(z.string().max(128, 'must be at most 128 characters')).optional(),
  submitted_by: plainText(z.string().max(128, 'must be at most 128 characters')).optional(),
  channel: z
    .enum(REQUEST_CHANNELS, { message: `must be one of ${REQUEST_CHANNELS.map((c) => `"${c}"`).join(', ')}` })
    .optional(),
  /** The sites the request covers, by id (sites.ts); left out, every configured site. */
  sites: requestSitesSchema.optional(),
});

/** Whether a payload with these type and corrections keys is consistent; checked with the other field errors. */
function typeOf(payload: { value: unknown }): unknown {
  const value = payload.value;
  return value !== null && typeof value === 'object' && 'type' in value ? value.type : undefined;
}
function hasCorrections(payload: { value: unknown }): boolean {
  const value = payload.value;
  return (
    value !== null && typeof value === 'object' && 'corrections' in value && value.corrections !== undefined
  );
}

/** The data-subject request as it arrives on the intake queue (docs/design.md, "The request"). */
export const dsrRequestSchema = requestShapeSchema
  .refine((request) => request.type !== 'correction' || request.corrections !== undefined, {
    message: 'is required for a correction request: the profile fields to change and their new values',
    path: ['corrections'],
    when: (payload) => typeOf(payload) === 'correction' && !hasCorrections(payload),
  })
  .refine((request) => request.type === 'correction' || request.corrections === undefined, {
    message: 'is only for a correction request: remove it, or set type to "correction"',
    path: ['corrections'],
    when: (payload) =>
      (typeOf(payload) === 'access' || typeOf(payload) === 'erasure') && hasCorrections(payload),
  });
export type DsrRequest = z.infer<typeof dsrRequestSchema>;
export type RequestType = DsrRequest['type'];
export type Regulation = DsrRequest['regulation'];

/** What a wrong-typed field says: what was expected and what came ("must be a string, got a number"). */
const requestErrorMap: z.core.$ZodErrorMap = (issue) => {
  if (issue.code !== 'invalid_type') return undefined;
  if (issue.input === undefined) return 'is required';
  return `must be ${article(issue.expected)}, got ${article(jsonTypeOf(issue.input))}`;
};

function jsonTypeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

function article(type: string): string {
  if (type === 'null') return 'null';
  return `${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}`;
}

/** Validates a request with the messages the submitter needs (see requestErrorMap). */
export function safeParseRequest(value: unknown) {
  return dsrRequestSchema.safeParse(value, { error: requestErrorMap });
}

export type IntakeWarning = (typeof INTAKE_WARNINGS)[number];

/** What each intake warning tells the operator; it never quotes the request's values. */
export const INTAKE_WARNING_TEXT: Readonly<Record<IntakeWarning, string>> = {
  primary_key_mixed_scripts:
    'primary_key mixes letters of more than one script (such as a Cyrillic "а" among Latin letters), so it may be a look-alike of the key the site meant: check it with the site. Should the platform know only a look-alike spelling of it, the request fails with subject_under_other_spelling instead of ending no_data',
};

/**
 * What intake warns of in a valid request: a primary_key that mixes scripts (UTS #39, see
 * mixesScripts), which the platform would look up as it is.
 */
export function requestWarnings(request: Pick<DsrRequest, 'primary_key'>): IntakeWarning[] {
  return mixesScripts(request.primary_key) ? ['primary_key_mixed_scripts'] : [];
}

/** How a raw message body was judged at intake. */
export type ParsedMessage =
  | { readonly kind: 'valid'; readonly request: DsrRequest; readonly fingerprint: string }
  /** Not JSON, too large, or no usable request_id: quarantine with this reason. */
  | { readonly kind: 'unusable'; readonly reason: string }
  /** A usable request_id but invalid fields: record as rejected with every error. */
  | {
      readonly kind: 'invalid';
      readonly requestId: string;
      readonly errors: readonly string[];
      readonly fingerprint: string;
    };

/** Parses and validates an intake message body. Never throws. */
export function parseRequestMessage(body: string): ParsedMessage {
  const bytes = Buffer.byteLength(body, 'utf8');
  if (bytes > MAX_REQUEST_BYTES) {
    return { kind: 'unusable', reason: `message is ${bytes} bytes; the limit is ${MAX_REQUEST_BYTES}` };
  }
  const read = parseStrictJson(body);
  if (!read.ok) return { kind: 'unusable', reason: `message body ${read.problem}` };
  const json = read.value;
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    return { kind: 'unusable', reason: 'message body is not a JSON object' };
  }
  const parsed = safeParseRequest(json);
  if (parsed.success) {
    return { kind: 'valid', request: parsed.data, fingerprint: fingerprint(parsed.data) };
  }
  const requestId = submittedRequestIdSchema.safeParse('request_id' in json ? json.request_id : undefined);
  if (!requestId.success) {
    const why = 'request_id' in json ? requestId.error.issues[0]?.message : undefined;
    return {
      kind: 'unusable',
      reason: `request_id ${why ?? 'is missing or not a UUID'}, so the message cannot be recorded`,
    };
  }
  return {
    kind: 'invalid',
    requestId: requestId.data,
    errors: formatIssues(parsed.error.issues),
    // The id in its canonical spelling, so the same invalid request in another spelling is a duplicate.
    fingerprint: fingerprint({ ...json, request_id: requestId.data }),
  };
}

/** `field.path: message` for each issue, naming unknown keys so a typo is obvious. */
export function formatIssues(issues: readonly z.core.$ZodIssue[]): string[] {
  return issues.map((issue) => {
    const path = issue.path.map(String).join('.');
    if (issue.code === 'unrecognized_keys') {
      const prefix = path === '' ? '' : `${path}: `;
      return `${prefix}unknown field(s) ${issue.keys.map((key) => `"${key}"`).join(', ')}: remove them or fix the spelling`;
    }
    return `${path || '(body)'}: ${issue.message}`;
  });
}

/** SHA-256 of the canonical JSON: the same request sent twice has the same fingerprint. */
export function fingerprint(value: unknown): string {
  return createHash('sha256').update(canonical(value)).digest('hex');
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value)
      .filter(([, item]) => item !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonical(item)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}
