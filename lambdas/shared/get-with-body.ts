// Sends an HTTP request with a body on a method fetch refuses one for: the platform's update-user GET.
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';

/** One HTTP exchange's answer, as the platform client reads it. */
export interface BodyAnswer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

/** What a call that sends a body with GET needs. */
export interface BodyRequest {
  readonly method: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  readonly timeoutMs: number;
}

/**
 * Sends a request whose method fetch refuses a body for: the platform's update-user (endpoint 4) is
 * a GET with a JSON body (bio, role, settings). Never follows a redirect. A timeout fails with an
 * error named TimeoutError, as fetch's does; a socket error keeps its `code` (ECONNREFUSED...).
 */
export function sendWithBody(url: URL, spec: BodyRequest): Promise<BodyAnswer> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const request = send(
      url,
      {
        method: spec.method,
        headers: { ...spec.headers, 'content-length': String(Buffer.byteLength(spec.body)) },
        timeout: spec.timeoutMs,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('error', reject);
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            headers: toHeaders(response.headers),
            text: Buffer.concat(chunks).toString('utf8'),
          }),
        );
      },
    );
    request.on('timeout', () => {
      const timeout = new Error(`no answer within ${spec.timeoutMs} ms`);
      timeout.name = 'TimeoutError';
      request.destroy(timeout);
    });
    request.on('error', reject);
    request.end(spec.body);
  });
}

function toHeaders(raw: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
  }
  return headers;
}
