/**
 * Redaction: secrets, download links and subject identifiers must never reach a log line, an error
 * message or Step Functions state. Code that handles them keeps a Redactor that knows the values in
 * play and scrubs any text before it leaves.
 */

export const REDACTED = '[redacted]';

const EMAIL_PATTERN = /[^\s@<>()[\]]+@[^\s@<>()[\]]+\.[^\s@<>()[\]]+/;
const URL_PATTERN = /\bhttps?:\/\//i;

/**
 * Why `text` must not be kept where identifiers are not allowed (the audit trail, workflow facts):
 * it looks like an e-mail address or holds a URL. Undefined when it shows neither. The audit trail
 * refuses such a value, and intake checks a request with this same predicate before its first write.
 */
export function identifierProblem(text: string): string | undefined {
  if (EMAIL_PATTERN.test(text)) return 'looks like an e-mail address, which is personal data';
  if (URL_PATTERN.test(text)) return 'holds a URL, and links are credentials';
  return undefined;
}

/** Query parameters whose values are credentials wherever they appear. */
const SECRET_QUERY_PARAMS = ['access_token', 'apikey', 'token', 'X-Amz-Signature', 'X-Amz-Credential'];

/** Replaces every occurrence of each known value in `text`. Values shorter than 4 chars are ignored. */
export function redactValues(text: string, values: Iterable<string | undefined>): string {
  let out = text;
  for (const value of values) {
    if (value === undefined || value.length < 4) continue;
    out = out.split(value).join(REDACTED);
    const encoded = encodeURIComponent(value);
    if (encoded !== value) out = out.split(encoded).join(REDACTED);
  }
  return out;
}

/** Scrubs credential query parameters from every URL-looking substring of `text`. */
export function redactQuerySecrets(text: string): string {
  const names = SECRET_QUERY_PARAMS.join('|');
  return text.replace(new RegExp(`([?&](?:${names})=)[^&#\\s"']*`, 'gi'), `$1${REDACTED}`);
}

/** Replaces whole URLs: a download link is itself a bearer credential. */
export function redactUrls(text: string): string {
  return text.replace(/\bhttps?:\/\/[^\s"'<>]+/gi, `${REDACTED}-url`);
}

/** A set of sensitive values that grows as they become known (tokens, identifiers, links). */
export class Redactor {
  readonly #values = new Set<string>();

  constructor(values: Iterable<string | undefined> = []) {
    this.add(...values);
  }

  /** Remembers more values to scrub. */
  add(...values: (string | undefined)[]): this {
    for (const value of values) if (value !== undefined && value.length >= 4) this.#values.add(value);
    return this;
  }

  /** Scrubs known values, credential query parameters and URLs from `text`. */
  text(text: string): string {
    return redactUrls(redactQuerySecrets(redactValues(text, this.#values)));
  }

  /** Deep copy of `value` with every string scrubbed; for log attributes and error details. */
  deep<T>(value: T): T {
    return scrub(value, (s) => this.text(s)) as T;
  }
}

function scrub(value: unknown, clean: (s: string) => string): unknown {
  if (typeof value === 'string') return clean(value);
  if (Array.isArray(value)) return value.map((item) => scrub(item, clean));
  if (value instanceof Error) return { name: value.name, message: clean(value.message) };
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, scrub(item, clean)]));
  }
  return value;
}
