import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createTlsServer, globalAgent, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyExportToS3, hashStoredObject } from '#shared/archive';
import { downloadPolicySchema } from '#shared/download-policy';
import {
  DownloadHostNotAllowedError,
  DownloadLinkExpiredError,
  PlatformConnectionResetError,
  PlatformRejectedError,
  PlatformThrottledError,
  PlatformTimeoutError,
  PlatformUnavailableError,
  TruncatedDownloadError,
} from '#shared/errors';
import {
  BUCKET,
  buildZip,
  commandNames,
  exportEntries,
  failure,
  headStatus,
  LINK_SECRET,
  MiB,
  mirror,
  origin,
  policy,
  pseudoRandomBytes,
  sendBody,
  serve,
  sha256,
  store,
  stranger,
  target,
  useArchiveStandIns,
} from './fixtures.ts';

useArchiveStandIns();

describe('copyExportToS3: the download', () => {
  it('stores the served zip byte for byte and reports its size and SHA-256', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const link = serve(origin, '/exports/1.zip', (response) => sendBody(response, zip));
    const stored = target();
    // Act
    const result = await copyExportToS3(link, stored, { policy });
    // Assess
    expect(result.bytes).toBe(zip.length);
    expect(result.sha256).toBe(sha256(zip));
    expect(result.etag).toMatch(/^"[0-9a-f]{32}"$/);
    const head = await store.s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: stored.key }));
    expect(head.ContentLength).toBe(zip.length);
    expect(head.ContentType).toBe('application/zip');
    const object = await store.s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: stored.key }));
    expect(
      Buffer.from(await (object.Body?.transformToByteArray() ?? Promise.resolve(new Uint8Array()))).equals(
        zip,
      ),
    ).toBe(true);
    expect(origin.requests).toHaveLength(1);
    expect(origin.requests[0]?.headers['accept-encoding']).toBe('identity');
  });

  it('accepts a body without Content-Length and counts the bytes itself', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const link = serve(origin, '/exports/chunked.zip', (response) =>
      sendBody(response, zip, { contentLength: null }),
    );
    const stored = target();
    // Act
    const result = await copyExportToS3(link, stored, { policy });
    // Assess
    expect(result).toMatchObject({ bytes: zip.length, sha256: sha256(zip) });
    expect(await headStatus(stored)).toBe(200);
  });

  it('stores the decoded zip when a server compresses the transfer despite being asked not to', async () => {
    // Prepare: Content-Length then counts the gzip bytes, not the bytes fetch hands over
    const zip = await buildZip(exportEntries());
    const gzipped = gzipSync(zip);
    const link = serve(origin, '/exports/gzip.zip', (response) => {
      response.writeHead(200, { 'content-encoding': 'gzip', 'content-length': String(gzipped.length) });
      response.end(gzipped);
    });
    const stored = target();
    // Act
    const result = await copyExportToS3(link, stored, { policy });
    // Assess
    expect(result).toMatchObject({ bytes: zip.length, sha256: sha256(zip) });
    expect(await hashStoredObject(stored)).toEqual({ bytes: zip.length, sha256: sha256(zip) });
  });

  it('fails with TruncatedDownloadError and aborts the multipart upload when the connection drops mid-body', async () => {
    // Prepare
    const body = pseudoRandomBytes(16 * MiB);
    const link = serve(origin, '/exports/cut.zip', (response) =>
      sendBody(response, body, { cutAfter: 11 * MiB }),
    );
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link, stored, { policy, partSizeBytes: 5 * MiB }));
    // Assess
    expect(error).toBeInstanceOf(TruncatedDownloadError);
    expect(error.message).toContain(`of the announced ${16 * MiB}`);
    expect(commandNames()).toContain('CreateMultipartUploadCommand');
    expect(commandNames()).toContain('AbortMultipartUploadCommand');
    expect(commandNames()).not.toContain('CompleteMultipartUploadCommand');
    expect(await headStatus(stored)).toBe(404);
  });

  it('leaves no object when a small download breaks off before its single part is complete', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const link = serve(origin, '/exports/cut-small.zip', (response) =>
      sendBody(response, zip, { cutAfter: Math.floor(zip.length / 2) }),
    );
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link, stored, { policy }));
    // Assess
    expect(error).toBeInstanceOf(TruncatedDownloadError);
    expect(commandNames()).not.toContain('PutObjectCommand');
    expect(await headStatus(stored)).toBe(404);
  });

  it('fails with TruncatedDownloadError when the body is longer than its Content-Length', async () => {
    // Prepare: real HTTP cannot deliver this, a misbehaving proxy or client library could.
    const body = pseudoRandomBytes(4096);
    const fakeFetch: typeof fetch = async () =>
      new Response(body, { status: 200, headers: { 'content-length': '1000' } });
    const stored = target();
    // Act
    const error = await failure(
      copyExportToS3(new URL(`https://exports.example.com/x.zip?sig=${LINK_SECRET}`), stored, {
        policy,
        fetch: fakeFetch,
      }),
    );
    // Assess
    expect(error).toBeInstanceOf(TruncatedDownloadError);
    expect(error.message).toContain('more than the announced 1000 bytes');
    expect(await headStatus(stored)).toBe(404);
  });

  it('fails with PlatformTimeoutError when the body stalls longer than the idle timeout', async () => {
    // Prepare
    const link = serve(origin, '/exports/stall.zip', (response) => {
      response.writeHead(200, { 'content-length': String(10_000) });
      response.write(Buffer.alloc(1000));
    });
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link, stored, { policy, idleTimeoutMs: 200 }));
    // Assess
    expect(error).toBeInstanceOf(PlatformTimeoutError);
    expect(error.message).toContain('no bytes arrived for 200 ms');
    expect(await headStatus(stored)).toBe(404);
  });

  it('fails with PlatformTimeoutError when no answer arrives within the idle timeout', async () => {
    // Prepare
    const link = serve(origin, '/exports/silent.zip', () => {});
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy, idleTimeoutMs: 200 }));
    // Assess
    expect(error).toBeInstanceOf(PlatformTimeoutError);
  });

  it.each([410, 403, 404])('fails with DownloadLinkExpiredError on %i', async (status) => {
    // Prepare
    const link = serve(origin, '/exports/gone.zip', (response) => {
      response.writeHead(status, { 'content-type': 'text/plain' }).end('expired');
    });
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link, stored, { policy }));
    // Assess
    expect(error).toBeInstanceOf(DownloadLinkExpiredError);
    expect(error.message).toContain(String(status));
    expect(store.commands).toHaveLength(0);
  });

  it('fails with PlatformThrottledError carrying Retry-After on 429', async () => {
    // Prepare
    const link = serve(origin, '/exports/busy.zip', (response) => {
      response.writeHead(429, { 'retry-after': '7' }).end();
    });
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy }));
    // Assess
    expect(error).toBeInstanceOf(PlatformThrottledError);
    expect(error).toMatchObject({ retryAfterSeconds: 7 });
  });

  it('fails with PlatformUnavailableError on 503', async () => {
    // Prepare
    const link = serve(origin, '/exports/down.zip', (response) => {
      response.writeHead(503).end();
    });
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy }));
    // Assess
    expect(error).toBeInstanceOf(PlatformUnavailableError);
    expect(error).toMatchObject({ status: 503 });
  });

  it('fails with PlatformConnectionResetError when the connection drops before an answer', async () => {
    // Prepare
    const link = serve(origin, '/exports/reset.zip', (response) => {
      response.socket?.destroy();
    });
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy }));
    // Assess
    expect(error).toBeInstanceOf(PlatformConnectionResetError);
  });

  it('fails with PlatformUnavailableError when nothing listens on the host', async () => {
    // Prepare: a port that was free a moment ago, listed as insecure so the policy lets it through
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const address = probe.address();
    if (address === null || typeof address === 'string') throw new Error('probe has no port');
    const { port } = address;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const closedPolicy = downloadPolicySchema.parse({
      allowedHosts: [],
      insecureHosts: [`127.0.0.1:${port}`],
    });
    // Act
    const error = await failure(
      copyExportToS3(new URL(`http://127.0.0.1:${port}/x.zip?sig=${LINK_SECRET}`), target(), {
        policy: closedPolicy,
      }),
    );
    // Assess
    expect(error).toBeInstanceOf(PlatformUnavailableError);
  });

  it('refuses a host on no list before any request is made', async () => {
    // Prepare
    const link = serve(stranger, '/exports/1.zip', (response) => response.writeHead(200).end('PK'));
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link, stored, { policy }));
    // Assess
    expect(error).toBeInstanceOf(DownloadHostNotAllowedError);
    expect(error.message).toContain(new URL(stranger.url).host);
    expect(stranger.requests).toHaveLength(0);
    expect(store.commands).toHaveLength(0);
  });

  it('refuses an https host off the allowlist without calling fetch', async () => {
    // Prepare
    let calls = 0;
    const countingFetch: typeof fetch = async () => {
      calls += 1;
      return new Response('PK');
    };
    // Act
    const error = await failure(
      copyExportToS3(new URL(`https://downloads.evil.example/x.zip?sig=${LINK_SECRET}`), target(), {
        policy,
        fetch: countingFetch,
      }),
    );
    // Assess
    expect(error).toBeInstanceOf(DownloadHostNotAllowedError);
    expect(calls).toBe(0);
  });

  it('refuses plain http to a host that is allowed only for https', async () => {
    // Prepare
    const httpsOnly = downloadPolicySchema.parse({
      allowedHosts: [new URL(origin.url).host],
      insecureHosts: [],
    });
    const link = serve(origin, '/exports/1.zip', (response) => response.writeHead(200).end('PK'));
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy: httpsOnly }));
    // Assess
    expect(error).toBeInstanceOf(DownloadHostNotAllowedError);
    expect(error.message).toContain('plain http');
    expect(origin.requests).toHaveLength(0);
  });

  it('follows a redirect to an allowed host', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const final = serve(mirror, '/cdn/1.zip', (response) => sendBody(response, zip));
    const link = serve(origin, '/exports/1.zip', (response) => {
      response.writeHead(302, { location: final.href }).end();
    });
    const stored = target();
    // Act
    const result = await copyExportToS3(link, stored, { policy });
    // Assess
    expect(result).toMatchObject({ bytes: zip.length, sha256: sha256(zip) });
    expect(origin.requests).toHaveLength(1);
    expect(mirror.requests.map((request) => request.url)).toEqual([`/cdn/1.zip${final.search}`]);
  });

  it('resolves a relative Location against the current URL', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    serve(origin, '/files/moved.zip', (response) => sendBody(response, zip));
    const link = serve(origin, '/exports/1.zip', (response) => {
      response.writeHead(307, { location: '/files/moved.zip' }).end();
    });
    // Act
    const result = await copyExportToS3(link, target(), { policy });
    // Assess
    expect(result.sha256).toBe(sha256(zip));
    expect(origin.requests.map((request) => request.url)).toEqual([
      `/exports/1.zip${link.search}`,
      '/files/moved.zip',
    ]);
  });

  it('refuses a redirect to a host off the list without fetching it', async () => {
    // Prepare
    const elsewhere = serve(stranger, '/steal.zip', (response) => response.writeHead(200).end('PK'));
    const link = serve(origin, '/exports/1.zip', (response) => {
      response.writeHead(302, { location: elsewhere.href }).end();
    });
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link, stored, { policy }));
    // Assess
    expect(error).toBeInstanceOf(DownloadHostNotAllowedError);
    expect(origin.requests).toHaveLength(1);
    expect(stranger.requests).toHaveLength(0);
    expect(await headStatus(stored)).toBe(404);
  });

  it('stops after maxRedirects hops', async () => {
    // Prepare
    const link = serve(origin, '/loop.zip', (response) => {
      response.writeHead(301, { location: '/loop.zip' }).end();
    });
    const oneHop = downloadPolicySchema.parse({ ...policy, maxRedirects: 1 });
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy: oneHop }));
    // Assess
    expect(error).toBeInstanceOf(PlatformRejectedError);
    expect(error.message).toContain('more than 1 redirects');
    expect(origin.requests).toHaveLength(2);
  });
});

describe('copyExportToS3: the download over https', () => {
  let tls: { server: Server; link: URL; dir: string };

  beforeAll(async () => {
    // A certificate for localhost, made for this run and trusted only by the agent below.
    const dir = mkdtempSync(join(tmpdir(), 'dsr-tls-'));
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=DNS:localhost',
      ],
      { stdio: 'ignore' },
    );
    const zip = await buildZip(exportEntries());
    const server = createTlsServer(
      { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
      (_request, response) => sendBody(response, zip, {}),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    tls = { server, link: new URL(`https://localhost:${port}/x.zip?sig=${LINK_SECRET}`), dir };
  });

  afterAll(async () => {
    await new Promise((resolve) => tls.server.close(resolve));
    rmSync(tls.dir, { recursive: true, force: true });
  });

  const tlsPolicy = () => downloadPolicySchema.parse({ ...policy, allowedHosts: [tls.link.host] });

  it('stores the zip from a server whose certificate the process trusts', async () => {
    // Prepare: the global agent is what the download uses when none is given
    const trusted = globalAgent.options.ca;
    globalAgent.options.ca = readFileSync(join(tls.dir, 'cert.pem'));
    const stored = target();
    try {
      // Act
      const result = await copyExportToS3(tls.link, stored, { policy: tlsPolicy(), verify: {} });
      // Assess
      expect(result.archive?.entries.map((entry) => entry.name)).toEqual(
        expect.arrayContaining(['profile.json', 'messages.json']),
      );
      expect(await hashStoredObject(stored)).toMatchObject({ bytes: result.bytes, sha256: result.sha256 });
    } finally {
      globalAgent.options.ca = trusted;
      globalAgent.destroy();
    }
  });

  it('refuses a server whose certificate nothing vouches for, and stores nothing', async () => {
    // Prepare
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(tls.link, stored, { policy: tlsPolicy() }));
    // Assess
    expect(error).toBeInstanceOf(PlatformConnectionResetError);
    expect(error.message).toMatch(/SELF_SIGNED|UNABLE_TO_VERIFY/);
    expect(error.message).not.toContain(LINK_SECRET);
    expect(await headStatus(stored)).toBe(404);
  });
});
