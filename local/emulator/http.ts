/**
 * The emulator's HTTP plumbing: the replies handlers return, a bounded body reader, and turning a
 * reply into bytes (or a streamed archive download).
 */
import type { ServerResponse } from 'node:http';
import type { ExportRecord } from './exports.ts';
import type { LimitAnswer } from './faults.ts';
import type { ZipPlan } from './zip.ts';

export type JsonReply = {
  kind: 'json';
  status: number;
  body: unknown;
  headers?: Record<string, string>;
  /** A refusal the profile's limits caused, for the call log. */
  limit?: LimitAnswer;
};
export type TextReply = { kind: 'text'; status: number; body: string };
export type DownloadReply = { kind: 'download'; record: ExportRecord; archive: ZipPlan; head: boolean };

/** What a handler answers; the server turns it into bytes (or a streamed archive). */
export type Reply = JsonReply | TextReply | DownloadReply;

export const MAX_BODY_BYTES = 1024 * 1024;

export function json(status: number, body: unknown, headers?: Record<string, string>): JsonReply {
  return headers ? { kind: 'json', status, body, headers } : { kind: 'json', status, body };
}

/** The error body shape used for every refusal; never carries a credential or submitted value. */
export function failure(
  status: number,
  code: string,
  message: string,
  extra: Record<string, unknown> = {},
): JsonReply {
  return json(status, { success: false, error: { code, message, ...extra } });
}

/**
 * A 429 with Retry-After, as the limits and the "429" fault answer it: `rate_limited`, or
 * `too_many_open_exports` for an export start refused by max_open_exports.
 */
export function tooManyRequests(
  message: string,
  retryAfterSeconds: number,
  limit?: LimitAnswer,
  code: 'rate_limited' | 'too_many_open_exports' = 'rate_limited',
): JsonReply {
  const reply = failure(429, code, message);
  return {
    ...reply,
    headers: { 'Retry-After': String(retryAfterSeconds) },
    ...(limit === undefined ? {} : { limit }),
  };
}

export function invalidField(field: string, message: string): JsonReply {
  return failure(400, 'invalid_field', `${field}: ${message}`, { field });
}

export type Query = { values: Map<string, string>; duplicate: string | null };

export function parseQuery(search: URLSearchParams): Query {
  const values = new Map<string, string>();
  let duplicate: string | null = null;
  for (const [key, value] of search) {
    if (values.has(key)) duplicate ??= key;
    values.set(key, value);
  }
  return { values, duplicate };
}

export function sendReply(response: ServerResponse, reply: JsonReply | TextReply): void {
  const isJson = reply.kind === 'json';
  const payload = isJson ? JSON.stringify(reply.body) : reply.body;
  const headers: Record<string, string | number> = {
    'Content-Type': isJson ? 'application/json; charset=utf-8' : 'text/plain; charset=utf-8',
    'Content-Length': Buffer.byteLength(payload),
    'Cache-Control': 'no-store',
    ...(reply.kind === 'json' ? reply.headers : {}),
  };
  response.writeHead(reply.status, headers);
  response.end(payload);
}

/** Resolves when the response can take more data, or when the client has gone away. */
export function writable(response: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      response.off('drain', done);
      response.off('close', done);
      resolve();
    };
    response.once('drain', done);
    response.once('close', done);
  });
}

/** Resolves once the chunk has been handed to the socket (or the socket is gone). */
export function flushed(response: ServerResponse, chunk: Buffer): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      response.off('close', done);
      resolve();
    };
    response.once('close', done);
    response.write(chunk, done);
  });
}

/**
 * The path of a request target as an HTTP server's router sees it: literal "." and ".." steps
 * resolved (RFC 3986 section 5.2.4), nothing decoded. An encoded "/" or "." (%2F, %2E) stays data
 * inside its segment, which the endpoint then decodes, so every value a client percent-encodes
 * into a segment arrives exactly. (The WHATWG URL parser would also drop %2E segments and read a
 * leading "//" as a host.)
 */
export function requestPath(target: string): string {
  const end = target.search(/[?#]/);
  const raw = end === -1 ? target : target.slice(0, end);
  // An absolute-form target (a proxy request) carries scheme and host before its path.
  const path = raw.startsWith('/') ? raw : URL.canParse(raw) ? new URL(raw).pathname : `/${raw}`;
  const segments: string[] = [];
  const steps = path.split('/').slice(1);
  steps.forEach((step, index) => {
    const last = index === steps.length - 1;
    if (step === '.' || step === '..') {
      if (step === '..') segments.pop();
      if (last) segments.push('');
      return;
    }
    segments.push(step);
  });
  return `/${segments.join('/')}`;
}
