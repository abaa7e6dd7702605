import { createHash } from 'node:crypto';
import { z } from 'zod';

/** Largest accepted SQS message body, in bytes. */
export const MAX_REQUEST_BYTES = 16 * 1024;

const uuid = z.uuid('must be a UUID, e.g. 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f');
const rfc3339 = z.iso.datetime({
  offset: true,
  message: 'must be an RFC 3339 date-time, e.g. 2026-11-02T09:30:00Z',
});
const noControlChars = (value: string) =>
  ![...value].some((char) => {
    const code = char.codePointAt(0) ?? 0;
    return code < 0x20 || code === 0x7f;
  });

/** The data-subject request as it arrives on the intake queue (DESIGN.md section 2). */
export const dsrRequestSchema = z.strictObject({
  request_id: uuid,
  type: z.enum(['access', 'erasure'], { message: 'must be "access" or "erasure"' }),
  regulation: z.enum(['gdpr', 'ccpa'], { message: 'must be "gdpr" or "ccpa"' }),
  primary_key: z
    .string({ message: 'must be a string' })
    .min(1, 'must not be empty')
    .max(256, 'must be at most 256 characters')
    .refine(noControlChars, 'must not contain control characters'),
  received_at: rfc3339,
  verification: z.strictObject({
    method: z.string().min(1, 'must not be empty').max(128, 'must be at most 128 characters'),
    verified_by: z.string().min(1, 'must not be empty').max(128, 'must be at most 128 characters'),
    verified_at: rfc3339,
  }),
  reference: z.string().max(128, 'must be at most 128 characters').optional(),
  submitted_by: z.string().max(128, 'must be at most 128 characters').optional(),
});
export type DsrRequest = z.infer<typeof dsrRequestSchema>;
export type RequestType = DsrRequest['type'];
export type Regulation = DsrRequest['regulation'];

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
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { kind: 'unusable', reason: 'message body is not JSON' };
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    return { kind: 'unusable', reason: 'message body is not a JSON object' };
  }
  const parsed = dsrRequestSchema.safeParse(json);
  if (parsed.success) {
    return { kind: 'valid', request: parsed.data, fingerprint: fingerprint(parsed.data) };
  }
  const requestId = uuid.safeParse('request_id' in json ? json.request_id : undefined);
  if (!requestId.success) {
    return {
      kind: 'unusable',
      reason: 'request_id is missing or not a UUID, so the message cannot be recorded',
    };
  }
  return {
    kind: 'invalid',
    requestId: requestId.data,
    errors: formatIssues(parsed.error.issues),
    fingerprint: fingerprint(json),
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
    if (issue.code === 'invalid_type' && issue.input === undefined) return `${path}: is required`;
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
