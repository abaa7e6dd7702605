import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  DsrError,
  ExportStartUncertainError,
  PlatformAuthError,
  PlatformConnectionResetError,
  PlatformExportsFullError,
  PlatformNotFoundError,
  PlatformRejectedError,
  PlatformResponseInvalidError,
  PlatformThrottledError,
  PlatformTimeoutError,
  PlatformUnavailableError,
} from '#shared/errors';
import { namesOpenExports, PlatformClient, parseRetryAfter } from '#shared/platform-client';
import { json, type StubServer, startStubServer } from '../../../helpers/stub-server.ts';

const SSO_TOKEN = 'sso-secret-token-4f1c9a';
const EXPORT_TOKEN = 'export-secret-token-77be02';
const PRIMARY_KEY = 'subject-primary-key-91';
const SVC_USER_ID = 'svc-user-id-5531';

let stub: StubServer;
const logLines: string[] = [];

function makeClient(
  overrides: { timeoutMs?: number; baseUrl?: string; ssoTokenHeader?: string; userIdField?: string } = {},
) {
  const url = overrides.baseUrl ?? stub.url;
  return new PlatformClient(
    {
      baseUrl: url,
      exportUrl: url,
      activityUrl: url,
      spotId: 'sp_test',
      timeoutMs: overrides.timeoutMs ?? 2_000,
      ...(overrides.ssoTokenHeader ? { ssoTokenHeader: overrides.ssoTokenHeader } : {}),
      ...(overrides.userIdField ? { userIdField: overrides.userIdField } : {}),
    },
    {
      credentials: { ssoAccessToken: () => SSO_TOKEN, exportToken: () => EXPORT_TOKEN },
      logger: {
        debug: (message, attributes) => logLines.push(JSON.stringify({ message, ...attributes })),
        warn: (message, attributes) => logLines.push(JSON.stringify({ message, ...attributes })),
      },
    },
  );
}

async function caught(promise: Promise<unknown>): Promise<DsrError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof DsrError) return error;
    throw error;
  }
  throw new Error('expected the call to fail');
}

beforeAll(async () => {
  stub = await startStubServer();
});
afterAll(async () => {
  await stub.close();
});
beforeEach(() => {
  stub.requests.length = 0;
});

describe('PlatformClient.retrieveUser', () => {
  it('sends the SSO token in the documented header and returns the svc_user_id', async () => {
    // Prepare
    stub.handle((_req, res) =>
      json(res, 200, {
        success: true,
        user: { primary_key: PRIMARY_KEY, svc_user_id: SVC_USER_ID, user_name: 'alice' },
      }),
    );
    // Act
    const result = await makeClient().retrieveUser(PRIMARY_KEY);
    // Assess
    expect(result).toMatchObject({ found: true, svcUserId: SVC_USER_ID });
    const [request] = stub.requests;
    expect(request?.method).toBe('GET');
    expect(request?.url).toBe(`/sso/v1/user/${PRIMARY_KEY}`);
    expect(request?.headers['x-svc-sso-access-token']).toBe(SSO_TOKEN);
  });

  it('returns not-found when the platform answers 404', async () => {
    stub.handle((_req, res) => json(res, 404, { success: false }));
    await expect(makeClient().retrieveUser(PRIMARY_KEY)).resolves.toEqual({ found: false });
  });

  it('returns not-found when the platform answers 200 with success false', async () => {
    stub.handle((_req, res) => json(res, 200, { success: false }));
    await expect(makeClient().retrieveUser(PRIMARY_KEY)).resolves.toEqual({ found: false });
  });

  it('uses the configured header and user id field names', async () => {
    stub.handle((_req, res) => json(res, 200, { success: true, user: { acme_user_id: 42 } }));
    const client = makeClient({ ssoTokenHeader: 'x-acme-sso-access-token', userIdField: 'acme_user_id' });
    const result = await client.retrieveUser(PRIMARY_KEY);
    expect(result).toMatchObject({ found: true, svcUserId: '42' });
    expect(stub.requests[0]?.headers['x-acme-sso-access-token']).toBe(SSO_TOKEN);
    expect(stub.requests[0]?.headers['x-svc-sso-access-token']).toBeUndefined();
  });

  it('escapes a primary_key that holds path characters', async () => {
    stub.handle((_req, res) => json(res, 404, { success: false }));
    await makeClient().retrieveUser('a/b?c');
    expect(stub.requests[0]?.url).toBe('/sso/v1/user/a%2Fb%3Fc');
  });

  it('throws PlatformResponseInvalidError when the user has no svc_user_id', async () => {
    stub.handle((_req, res) => json(res, 200, { success: true, user: { primary_key: PRIMARY_KEY } }));
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformResponseInvalidError);
    expect(error.message).toContain('svc_user_id');
  });

  it('throws PlatformResponseInvalidError on a body that is not JSON', async () => {
    stub.handle((_req, res) =>
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>'),
    );
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error.name).toBe('PlatformResponseInvalidError');
    expect(error.retryable).toBe(false);
  });

  it('throws PlatformResponseInvalidError when success is not a boolean', async () => {
    stub.handle((_req, res) => json(res, 200, { success: 'yes', user: { svc_user_id: 'x' } }));
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformResponseInvalidError);
    expect(error.message).toContain('success');
  });
});

describe('PlatformClient error classes', () => {
  const statusCases: [number, string, boolean][] = [
    [500, 'PlatformUnavailableError', true],
    [502, 'PlatformUnavailableError', true],
    [503, 'PlatformUnavailableError', true],
    [429, 'PlatformThrottledError', true],
    [401, 'PlatformAuthError', false],
    [403, 'PlatformAuthError', false],
    [400, 'PlatformRejectedError', false],
    [409, 'PlatformRejectedError', false],
    [302, 'PlatformRejectedError', false],
  ];
  it.each(statusCases)('maps status %i to %s (retryable %s)', async (status, name, retryable) => {
    stub.handle((_req, res) =>
      json(res, status, { success: false }, status === 302 ? { location: 'http://127.0.0.2/' } : {}),
    );
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error.name).toBe(name);
    expect(error.retryable).toBe(retryable);
  });

  it('surfaces Retry-After seconds on a 429', async () => {
    stub.handle((_req, res) => json(res, 429, {}, { 'retry-after': '7' }));
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformThrottledError);
    expect((error as PlatformThrottledError).retryAfterSeconds).toBe(7);
  });

  it('leaves Retry-After undefined when the 429 has none', async () => {
    stub.handle((_req, res) => json(res, 429, {}));
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect((error as PlatformThrottledError).retryAfterSeconds).toBeUndefined();
  });

  it('throws PlatformTimeoutError when no answer comes in time', async () => {
    stub.handle(() => {
      // never answers
    });
    const error = await caught(makeClient({ timeoutMs: 150 }).retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformTimeoutError);
    expect(error.retryable).toBe(true);
  });

  it('throws PlatformConnectionResetError when the socket is dropped', async () => {
    stub.handle((req, res) => {
      void req;
      res.socket?.destroy();
    });
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformConnectionResetError);
  });

  it('throws PlatformConnectionResetError when the body is cut short', async () => {
    stub.handle((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
      res.write('{"success": true, "user": {');
      setTimeout(() => res.socket?.destroy(), 20);
    });
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformConnectionResetError);
  });

  it('throws PlatformUnavailableError when nothing listens', async () => {
    const closed = await startStubServer();
    await closed.close();
    const error = await caught(makeClient({ baseUrl: closed.url }).retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformUnavailableError);
    expect(error.message).toContain('ECONNREFUSED');
  });

  it('names the error code and field of a rejection but never echoes free text', async () => {
    stub.handle((_req, res) =>
      json(res, 400, {
        success: false,
        error: { code: 'invalid_field', field: 'user_name', message: `bad ${PRIMARY_KEY}` },
      }),
    );
    const error = await caught(makeClient().retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformRejectedError);
    expect(error.message).toContain('invalid_field user_name');
    expect(error.message).not.toContain(PRIMARY_KEY);
  });

  it('refuses empty credentials before calling the platform', async () => {
    const client = new PlatformClient(
      { baseUrl: stub.url, exportUrl: stub.url, activityUrl: stub.url, spotId: 'sp' },
      { credentials: { ssoAccessToken: () => '', exportToken: () => EXPORT_TOKEN } },
    );
    const error = await caught(client.retrieveUser(PRIMARY_KEY));
    expect(error).toBeInstanceOf(PlatformAuthError);
    expect(stub.requests).toHaveLength(0);
  });
});

describe('PlatformClient with a rotated token', () => {
  const ROTATED = 'rotated-export-token-19ad7c';
  /** A token source whose cache still holds the old token until asked to refresh. */
  function rotatingSource(current: () => string) {
    const reads: string[] = [];
    const source = (options?: { refresh?: boolean }) => {
      reads.push(options?.refresh === true ? 'refresh' : 'cached');
      return options?.refresh === true ? current() : EXPORT_TOKEN;
    };
    return { reads, source };
  }
  const client = (source: (options?: { refresh?: boolean }) => string) =>
    new PlatformClient(
      { baseUrl: stub.url, exportUrl: stub.url, activityUrl: stub.url, spotId: 'sp' },
      { credentials: { ssoAccessToken: () => SSO_TOKEN, exportToken: source } },
    );

  it('refreshes the secret once on a 401 and starts the export with the new token', async () => {
    stub.handle((req, res) =>
      req.body.includes(ROTATED) ? json(res, 200, { id: 42 }) : json(res, 401, { success: false }),
    );
    const { reads, source } = rotatingSource(() => ROTATED);

    const started = await client(source).startExport(SVC_USER_ID);

    expect(started).toEqual({ exportId: '42' });
    expect(reads).toEqual(['cached', 'refresh']);
    expect(stub.requests).toHaveLength(2);
  });

  it('throws PlatformAuthError without a second call when the refreshed token is the same', async () => {
    stub.handle((_req, res) => json(res, 403, { success: false }));
    const { reads, source } = rotatingSource(() => EXPORT_TOKEN);

    const error = await caught(client(source).exportStatus('e-1'));

    expect(error).toBeInstanceOf(PlatformAuthError);
    expect(reads).toEqual(['cached', 'refresh']);
    expect(stub.requests).toHaveLength(1);
  });
});

describe('PlatformClient.deleteUser', () => {
  it('deletes with the token header', async () => {
    stub.handle((_req, res) => json(res, 200, { success: true }));
    await expect(makeClient().deleteUser(PRIMARY_KEY)).resolves.toEqual({ outcome: 'deleted', status: 200 });
    expect(stub.requests[0]?.method).toBe('DELETE');
    expect(stub.requests[0]?.headers['x-svc-sso-access-token']).toBe(SSO_TOKEN);
  });

  it('treats an empty 204 as deleted', async () => {
    stub.handle((_req, res) => res.writeHead(204).end());
    await expect(makeClient().deleteUser(PRIMARY_KEY)).resolves.toEqual({ outcome: 'deleted', status: 204 });
  });

  it('reports a 404 as already absent', async () => {
    stub.handle((_req, res) => json(res, 404, { success: false }));
    await expect(makeClient().deleteUser(PRIMARY_KEY)).resolves.toEqual({
      outcome: 'already_absent',
      status: 404,
    });
  });

  it('reports success false as already absent', async () => {
    stub.handle((_req, res) => json(res, 200, { success: false }));
    await expect(makeClient().deleteUser(PRIMARY_KEY)).resolves.toMatchObject({ outcome: 'already_absent' });
  });
});

describe('PlatformClient.startExport', () => {
  const shapes: [string, unknown][] = [
    ['id as a number', { id: 123 }],
    ['id as a string', { id: '123' }],
    ['export_id', { export_id: 123 }],
    ['exportId', { exportId: '123' }],
    ['data.id', { data: { id: 123 } }],
    ['a bare number', 123],
    ['a bare string', '123'],
  ];
  it.each(shapes)('accepts %s and keeps the id as a string', async (_label, body) => {
    stub.handle((_req, res) => json(res, 200, body));
    await expect(makeClient().startExport(SVC_USER_ID)).resolves.toEqual({ exportId: '123' });
  });

  it('posts the export token, spot id and user id in the JSON body', async () => {
    stub.handle((_req, res) => json(res, 200, { id: 9 }));
    await makeClient().startExport(SVC_USER_ID);
    const [request] = stub.requests;
    expect(request?.method).toBe('POST');
    expect(request?.url).toBe('/gdpr/export');
    expect(JSON.parse(request?.body ?? '')).toEqual({
      access_token: EXPORT_TOKEN,
      spot_id: 'sp_test',
      user_id: SVC_USER_ID,
    });
  });

  it.each([
    ['an empty id', { id: '' }],
    ['a blank bare string', '  '],
  ])('rejects %s', async (_label, body) => {
    stub.handle((_req, res) => json(res, 200, body));
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformResponseInvalidError);
  });

  it('rejects an answer with no id at all', async () => {
    stub.handle((_req, res) => json(res, 200, { ok: true }));
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformResponseInvalidError);
  });

  it('calls a 5xx uncertain and sends the POST only once', async () => {
    stub.handle((_req, res) => json(res, 500, {}));
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(ExportStartUncertainError);
    expect(stub.requests).toHaveLength(1);
  });

  it('keeps a 503 a plain outage: the platform did not take the request on', async () => {
    stub.handle((_req, res) => json(res, 503, {}));
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformUnavailableError);
    expect(stub.requests).toHaveLength(1);
  });

  it('calls a refused connection a plain outage: nothing reached the platform', async () => {
    // A port that was just free and is now closed: the connection is refused.
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    const error = await caught(makeClient({ baseUrl: `http://127.0.0.1:${port}/` }).startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformUnavailableError);
  });

  it('calls a 404 on the export start not-found: the platform does not know the user', async () => {
    stub.handle((_req, res) => json(res, 404, { success: false }));
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformNotFoundError);
  });

  it('calls a timeout after sending uncertain', async () => {
    stub.handle(() => {
      // never answers
    });
    const error = await caught(makeClient({ timeoutMs: 150 }).startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(ExportStartUncertainError);
  });

  it('calls a dropped connection uncertain', async () => {
    stub.handle((_req, res) => res.socket?.destroy());
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(ExportStartUncertainError);
  });

  it('keeps a 429 a plain throttle: the platform did not take the request', async () => {
    stub.handle((_req, res) => json(res, 429, {}, { 'retry-after': '2' }));
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformThrottledError);
  });

  it('tells a 429 for too many open exports from a rate limit: its own error, with Retry-After', async () => {
    stub.handle((_req, res) =>
      json(
        res,
        429,
        { success: false, error: { code: 'too_many_open_exports', message: 'too many open exports' } },
        { 'retry-after': '3' },
      ),
    );
    const error = await caught(makeClient().startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformExportsFullError);
    expect(error).not.toBeInstanceOf(PlatformThrottledError);
    expect(error).toMatchObject({ code: 'platform_exports_full', retryAfterSeconds: 3, retryable: true });
    expect(error.message).not.toContain(SVC_USER_ID);
    expect(error.message).not.toContain(EXPORT_TOKEN);
  });

  it('keeps a rate-limit 429 a throttle, and the open-exports code a throttle on any call but the start', async () => {
    stub.handle((_req, res) => json(res, 429, { success: false, error: { code: 'rate_limited' } }));
    expect(await caught(makeClient().startExport(SVC_USER_ID))).toBeInstanceOf(PlatformThrottledError);
    stub.handle((_req, res) => json(res, 429, { success: false, error: { code: 'too_many_open_exports' } }));
    expect(await caught(makeClient().exportStatus('e-1'))).toBeInstanceOf(PlatformThrottledError);
  });

  it('recognises the open-exports code as a string or an object code, and nothing else', () => {
    expect(namesOpenExports('{"error":"too_many_open_exports"}')).toBe(true);
    expect(namesOpenExports('{"success":false,"error":{"code":"TOO_MANY_OPEN_EXPORTS"}}')).toBe(true);
    expect(namesOpenExports('{"error":{"code":"rate_limited","message":"too many open exports"}}')).toBe(
      false,
    );
    expect(namesOpenExports('too_many_open_exports')).toBe(false);
    expect(namesOpenExports('')).toBe(false);
    expect(namesOpenExports('{"error":{"message":"x"}}')).toBe(false);
  });

  it('keeps a refused connection a plain unavailable: nothing was sent', async () => {
    const closed = await startStubServer();
    await closed.close();
    const error = await caught(makeClient({ baseUrl: closed.url }).startExport(SVC_USER_ID));
    expect(error).toBeInstanceOf(PlatformUnavailableError);
  });
});

describe('PlatformClient.exportStatus', () => {
  it('sends the export token and spot id in the query', async () => {
    stub.handle((_req, res) => json(res, 200, { status: 'pending' }));
    await makeClient().exportStatus('77');
    const url = new URL(stub.requests[0]?.url ?? '', stub.url);
    expect(url.pathname).toBe('/gdpr/export/status/77');
    expect(url.searchParams.get('access_token')).toBe(EXPORT_TOKEN);
    expect(url.searchParams.get('spot_id')).toBe('sp_test');
  });

  it('compares status values case-insensitively', async () => {
    stub.handle((_req, res) =>
      json(res, 200, { status: 'COMPLETED', link: 'https://cdn.example.com/x.zip' }),
    );
    const status = await makeClient().exportStatus('1');
    expect(status.status).toBe('completed');
    expect(status.status === 'completed' && status.link.href).toBe('https://cdn.example.com/x.zip');
  });

  it('treats completed without a link as pending', async () => {
    stub.handle((_req, res) => json(res, 200, { status: 'completed' }));
    await expect(makeClient().exportStatus('1')).resolves.toEqual({
      status: 'pending',
      reported: 'completed_without_link',
    });
  });

  it('treats an unknown status as pending', async () => {
    stub.handle((_req, res) => json(res, 200, { status: 'Processing' }));
    await expect(makeClient().exportStatus('1')).resolves.toEqual({
      status: 'pending',
      reported: 'processing',
    });
  });

  it('reports failed', async () => {
    stub.handle((_req, res) => json(res, 200, { status: 'Failed' }));
    await expect(makeClient().exportStatus('1')).resolves.toEqual({ status: 'failed' });
  });

  it('rejects a link that is not a URL', async () => {
    stub.handle((_req, res) => json(res, 200, { status: 'completed', link: 'not a url' }));
    const error = await caught(makeClient().exportStatus('1'));
    expect(error).toBeInstanceOf(PlatformResponseInvalidError);
  });

  it('throws PlatformNotFoundError for an unknown export', async () => {
    stub.handle((_req, res) => json(res, 404, { success: false }));
    const error = await caught(makeClient().exportStatus('404'));
    expect(error).toBeInstanceOf(PlatformNotFoundError);
  });

  it('never puts the token from the query into an error message', async () => {
    stub.handle((_req, res) => json(res, 500, {}));
    const error = await caught(makeClient().exportStatus('1'));
    expect(error).toBeInstanceOf(PlatformUnavailableError);
    expect(error.message).not.toContain(EXPORT_TOKEN);
    expect(error.message).not.toContain('access_token');
  });
});

describe('PlatformClient.userActivity', () => {
  it('sends x-spot-id and apikey headers and validates the page', async () => {
    stub.handle((_req, res) =>
      json(res, 200, {
        cursor: { offset: 0, count: 1, has_next: false },
        items: [
          {
            data: {
              spot_id: 'sp_test',
              conversation_id: 'conv-1',
              messages: [
                {
                  id: 'm1',
                  user_id: SVC_USER_ID,
                  written_at: 1,
                  content: [{ id: 'c', text: 'hi', type: 'text' }],
                },
              ],
            },
          },
        ],
        users: { [SVC_USER_ID]: { id: SVC_USER_ID, user_name: 'alice' } },
      }),
    );
    const page = await makeClient().userActivity(SVC_USER_ID, { count: 10, offset: 0 });
    expect(page.items[0]?.data.messages[0]?.id).toBe('m1');
    const [request] = stub.requests;
    expect(request?.headers['x-spot-id']).toBe('sp_test');
    expect(request?.headers.apikey).toBe(EXPORT_TOKEN);
    expect(JSON.parse(request?.body ?? '')).toEqual({ profile_user_id: SVC_USER_ID, count: 10, offset: 0 });
  });

  it('rejects a page without a cursor', async () => {
    stub.handle((_req, res) => json(res, 200, { items: [], users: {} }));
    const error = await caught(makeClient().userActivity(SVC_USER_ID, { count: 10, offset: 0 }));
    expect(error).toBeInstanceOf(PlatformResponseInvalidError);
    expect(error.message).toContain('cursor');
  });
});

describe('parseRetryAfter', () => {
  it('reads delta seconds', () => {
    expect(parseRetryAfter('30')).toBe(30);
  });
  it('reads an HTTP date relative to now', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:00:12 GMT', now)).toBe(12);
  });
  it('ignores garbage', () => {
    expect(parseRetryAfter('soon')).toBeUndefined();
    expect(parseRetryAfter(null)).toBeUndefined();
  });
});

describe('PlatformClient logs', () => {
  it('logs operations and statuses but never tokens or identifiers', async () => {
    logLines.length = 0;
    stub.handle((_req, res) => json(res, 503, {}));
    const client = makeClient();
    await caught(client.retrieveUser(PRIMARY_KEY));
    await caught(client.startExport(SVC_USER_ID));
    await caught(client.exportStatus('5'));
    expect(logLines.length).toBeGreaterThanOrEqual(3);
    const all = logLines.join('\n');
    expect(all).toContain('retrieveUser');
    for (const secret of [SSO_TOKEN, EXPORT_TOKEN, PRIMARY_KEY, SVC_USER_ID])
      expect(all).not.toContain(secret);
  });
});
