import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { crc32, gzipSync } from 'node:zlib';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { mockClient } from 'aws-sdk-client-mock';
import { type FauxqsServer, startFauxqs } from 'fauxqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import yazl from 'yazl';
import { z } from 'zod';
import { startDiskS3 } from '#local/s3-disk';
import {
  type ArchiveTarget,
  copyExportToS3,
  hashStoredObject,
  REQUIRED_ENTRIES,
  verifyStoredZip,
} from '#shared/archive';
import { type DownloadPolicy, downloadPolicySchema } from '#shared/download-policy';
import {
  ArchiveTooLargeError,
  ConfigurationError,
  DownloadHostNotAllowedError,
  DownloadLinkExpiredError,
  InvalidArchiveError,
  PlatformConnectionResetError,
  PlatformRejectedError,
  PlatformThrottledError,
  PlatformTimeoutError,
  PlatformUnavailableError,
  TruncatedDownloadError,
} from '#shared/errors';
import { type StubServer, startStubServer } from '../../../../helpers/stub-server.ts';

const MiB = 1024 * 1024;
const BUCKET = 'dsr-archive';
/** Part of every link: it must never show up in an error. */
const LINK_SECRET = 'link-signature-5f0c2e9b';

// ---------------------------------------------------------------------------------------------
// Stand-ins: fauxqs for S3, loopback HTTP servers for the platform's download hosts.

interface RecordedCommand {
  readonly name: string;
  readonly input: object;
}

interface S3StandIn {
  readonly fauxqs: FauxqsServer;
  readonly s3: S3Client;
  /** Every command the client sent, in order, as the middleware stack saw it. */
  readonly commands: RecordedCommand[];
}

function localS3Client(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
}

async function startS3StandIn(): Promise<S3StandIn> {
  const fauxqs = await startFauxqs({ port: 0, logger: false });
  fauxqs.createBucket(BUCKET);
  const s3 = localS3Client(fauxqs.address);
  const commands: RecordedCommand[] = [];
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      commands.push({ name: context.commandName ?? 'unknown', input: { ...args.input } });
      return next(args);
    },
    { step: 'initialize', name: 'recordCommands' },
  );
  return { fauxqs, s3, commands };
}

let store: S3StandIn;
let origin: StubServer;
let mirror: StubServer;
let stranger: StubServer;
let policy: DownloadPolicy;
let keyCounter = 0;

type Route = (response: ServerResponse) => unknown;
const routes = new Map<string, Route>();

function routeTo(server: StubServer): void {
  server.handle((request, response) => {
    const route = routes.get(`${server.url}${new URL(request.url, server.url).pathname}`);
    if (route === undefined) {
      response.writeHead(404).end();
      return;
    }
    // A route that fails mid-answer just drops the connection, as a broken server would.
    Promise.resolve(route(response)).catch(() => response.destroy());
  });
}

/** Serves `route` at `path` on `server` and returns a link to it that carries a secret. */
function serve(server: StubServer, path: string, route: Route): URL {
  routes.set(`${server.url}${path}`, route);
  return new URL(`${server.url}${path}?sig=${LINK_SECRET}&expires=1900000000`);
}

function target(overrides: Partial<ArchiveTarget> = {}): ArchiveTarget {
  keyCounter += 1;
  return { s3: store.s3, bucket: BUCKET, key: `archives/req-${keyCounter}.zip`, ...overrides };
}

/** A CRC32 as S3 writes it: base64 of the four big-endian bytes. */
function crc32Base64(data: Buffer): string {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(crc32(data));
  return bytes.toString('base64');
}

/** S3's COMPOSITE CRC32 of a multipart object, from its parts' bytes. */
function compositeCrc32(parts: readonly Buffer[]): string {
  const joined = Buffer.concat(parts.map((part) => Buffer.from(crc32Base64(part), 'base64')));
  return `${crc32Base64(joined)}-${parts.length}`;
}

function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Sends `body` in 64 KiB writes, honouring backpressure; optionally breaks the connection early. */
async function sendBody(
  response: ServerResponse,
  body: Buffer,
  options: { contentLength?: number | null; cutAfter?: number } = {},
): Promise<void> {
  const contentLength = options.contentLength === undefined ? body.length : options.contentLength;
  response.writeHead(200, {
    'content-type': 'application/zip',
    ...(contentLength === null ? {} : { 'content-length': String(contentLength) }),
  });
  const end = options.cutAfter ?? body.length;
  for (let offset = 0; offset < end; offset += 64 * 1024) {
    if (!response.write(body.subarray(offset, Math.min(end, offset + 64 * 1024)))) {
      await once(response, 'drain');
    }
  }
  if (options.cutAfter === undefined) {
    response.end();
    return;
  }
  // Let the client take what was sent, then drop the connection mid-body.
  await new Promise((resolve) => setTimeout(resolve, 100));
  response.socket?.destroy();
}

/** A deterministic, incompressible-looking body of `size` bytes. */
function pseudoRandomBytes(size: number, seed = 1): Buffer {
  const out = Buffer.alloc(size);
  let state = seed >>> 0 || 1;
  for (let index = 0; index < size; index += 4) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    out.writeUInt32LE(state >>> 0, Math.min(index, size - 4));
  }
  return out;
}

interface ZipEntrySpec {
  readonly name: string;
  readonly data: Buffer | string;
  readonly compress?: boolean;
}

async function buildZip(entries: readonly ZipEntrySpec[]): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  for (const entry of entries) {
    zip.addBuffer(Buffer.from(entry.data), entry.name, {
      compress: entry.compress ?? true,
      mtime: new Date('2020-01-01T00:00:00Z'),
    });
  }
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

const MESSAGES_MARKER = 'MESSAGES-MARKER-0123456789';

function exportEntries(overrides: { omit?: string; extra?: ZipEntrySpec[] } = {}): ZipEntrySpec[] {
  const entries: ZipEntrySpec[] = [
    { name: 'profile.json', data: JSON.stringify({ user_name: 'alice', bio: 'hello' }) },
    { name: 'likes.json', data: JSON.stringify([{ message_id: 'm1' }]) },
    { name: 'dislikes.json', data: JSON.stringify([]) },
    // Stored, so the test can find and damage its bytes without breaking a deflate stream.
    {
      name: 'messages.json',
      data: JSON.stringify([{ id: 'm1', text: `${MESSAGES_MARKER} first comment` }]),
      compress: false,
    },
  ];
  return [...entries.filter((entry) => entry.name !== overrides.omit), ...(overrides.extra ?? [])];
}

/** Offsets of every central-directory header, to patch flags or methods in place. */
function centralDirectoryHeaders(zip: Buffer): { offset: number; name: string }[] {
  const headers: { offset: number; name: string }[] = [];
  for (
    let offset = zip.indexOf('PK\x01\x02');
    offset !== -1;
    offset = zip.indexOf('PK\x01\x02', offset + 4)
  ) {
    const nameLength = zip.readUInt16LE(offset + 28);
    headers.push({ offset, name: zip.subarray(offset + 46, offset + 46 + nameLength).toString('utf8') });
  }
  return headers;
}

/** A copy of `zip` with the central-directory header of `entryName` changed by `patch`. */
function patchCentralDirectory(
  zip: Buffer,
  entryName: string,
  patch: (copy: Buffer, headerOffset: number) => void,
): Buffer {
  const copy = Buffer.from(zip);
  const header = centralDirectoryHeaders(copy).find((candidate) => candidate.name === entryName);
  if (header === undefined) throw new Error(`no central directory header for ${entryName}`);
  patch(copy, header.offset);
  return copy;
}

/** Serves `zip` from the origin and copies it into a fresh key, as ArchiveExport does. */
async function copyServed(zip: Buffer): Promise<{ stored: ArchiveTarget; bytes: number; sha256: string }> {
  keyCounter += 1;
  const link = serve(origin, `/exports/${keyCounter}.zip`, (response) => sendBody(response, zip));
  const stored = target();
  const result = await copyExportToS3(link, stored, { policy });
  return { stored, bytes: result.bytes, sha256: result.sha256 };
}

/** Awaits a failure and checks that it leaks nothing of the link. */
async function failure(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    if (!(error instanceof Error)) throw error;
    expect(error.message).not.toContain(LINK_SECRET);
    expect(error.message).not.toMatch(/https?:\/\//);
    expect(JSON.stringify(error)).not.toContain(LINK_SECRET);
    return error;
  }
  throw new Error('expected the call to fail');
}

async function headStatus(stored: ArchiveTarget): Promise<number> {
  try {
    await store.s3.send(new HeadObjectCommand({ Bucket: stored.bucket, Key: stored.key }));
    return 200;
  } catch (error) {
    if (error instanceof Error && error.name === 'NotFound') return 404;
    throw error;
  }
}

function commandNames(): string[] {
  return store.commands.map((command) => command.name);
}

beforeAll(async () => {
  [store, origin, mirror, stranger] = await Promise.all([
    startS3StandIn(),
    startStubServer(),
    startStubServer(),
    startStubServer(),
  ]);
  for (const server of [origin, mirror, stranger]) routeTo(server);
  // `stranger` is a reachable server on no list: nothing may ever be fetched from it.
  policy = downloadPolicySchema.parse({
    allowedHosts: ['exports.example.com'],
    insecureHosts: [new URL(origin.url).host, new URL(mirror.url).host],
  });
});

afterAll(async () => {
  store.s3.destroy();
  await Promise.all([store.fauxqs.stop(), origin.close(), mirror.close(), stranger.close()]);
});

beforeEach(() => {
  for (const server of [origin, mirror, stranger]) server.requests.length = 0;
  store.commands.length = 0;
  routes.clear();
});

// ---------------------------------------------------------------------------------------------
// Memory: first in the file, while this process is still small, so RSS growth reflects the copy.
// The platform and S3 run in a child process, so their copies of the archive are not counted.

const BIG_ARCHIVE_BYTES = 96 * MiB;

const CHILD_SCRIPT = `
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { Readable } from 'node:stream';
import { startFauxqs } from 'fauxqs';
import yazl from 'yazl';

const fauxqs = await startFauxqs({ port: 0, logger: false });
fauxqs.createBucket('big');
let served = null;

function* blocks(total) {
  const block = Buffer.alloc(1024 * 1024);
  for (let i = 0; i < block.length; i += 1) block[i] = (i * 7919 + (i >> 11)) & 0xff;
  for (let sent = 0, n = 0; sent < total; n += 1) {
    const chunk = Buffer.from(block.subarray(0, Math.min(block.length, total - sent)));
    chunk.writeUInt32LE(n, 0);
    sent += chunk.length;
    yield chunk;
  }
}

const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://child');
  if (url.pathname === '/served') return res.end(JSON.stringify(served));
  const total = Number(url.searchParams.get('bytes'));
  const zip = new yazl.ZipFile();
  const mtime = new Date('2020-01-01T00:00:00Z');
  for (const name of ['profile.json', 'likes.json', 'dislikes.json']) zip.addBuffer(Buffer.from('[]'), name, { mtime, compress: false });
  zip.addReadStream(Readable.from(blocks(total)), 'messages.json', { size: total, compress: false, mtime });
  zip.end({}, (size) => {
    res.writeHead(200, { 'content-type': 'application/zip', 'content-length': String(size) });
    const hash = createHash('sha256');
    let bytes = 0;
    zip.outputStream.on('data', (chunk) => { hash.update(chunk); bytes += chunk.length; });
    zip.outputStream.on('end', () => { served = { bytes, sha256: hash.digest('hex') }; });
    zip.outputStream.pipe(res);
  });
});
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ s3: fauxqs.address, download: 'http://127.0.0.1:' + server.address().port }));
});
`;

describe('memory', () => {
  let child: ChildProcess;
  let endpoints: { s3: string; download: string };

  beforeAll(async () => {
    child = spawn(process.execPath, ['--input-type=module', '-e', CHILD_SCRIPT], {
      cwd: fileURLToPath(new URL('../../../../../', import.meta.url)),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    if (child.stdout === null) throw new Error('child has no stdout');
    const [line] = await once(createInterface({ input: child.stdout }), 'line');
    endpoints = z.object({ s3: z.string(), download: z.string() }).parse(JSON.parse(String(line)));
  });

  afterAll(() => {
    child.kill();
  });

  async function peakRssGrowth<T>(work: () => Promise<T>): Promise<{ result: T; growth: number }> {
    const baseline = process.memoryUsage.rss();
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage.rss());
    }, 10);
    try {
      const result = await work();
      peak = Math.max(peak, process.memoryUsage.rss());
      return { result, growth: peak - baseline };
    } finally {
      clearInterval(sampler);
    }
  }

  // Holding the archive would cost at least its size (measured: a buffering copy grows RSS by ~170 MiB
  // here); streaming stays near 50 MiB whatever the size, which is why the bound is the archive size.
  it('copies and verifies a 96 MiB export while RSS grows by less than the archive', async () => {
    // Prepare
    const s3 = localS3Client(endpoints.s3);
    const bigPolicy = downloadPolicySchema.parse({
      allowedHosts: [],
      insecureHosts: [new URL(endpoints.download).host],
    });
    const archive = (bytes: number) => new URL(`${endpoints.download}/export.zip?bytes=${bytes}`);
    // One-time costs (code loaded and compiled on first use, the heap's first growth) are not the copy's.
    const warmTarget: ArchiveTarget = { s3, bucket: 'big', key: 'archives/warm.zip' };
    const warm = await copyExportToS3(archive(9 * MiB), warmTarget, { policy: bigPolicy });
    await verifyStoredZip(warmTarget, warm);
    const bigTarget: ArchiveTarget = { s3, bucket: 'big', key: 'archives/big.zip' };
    // Act
    const copy = await peakRssGrowth(() =>
      copyExportToS3(archive(BIG_ARCHIVE_BYTES), bigTarget, { policy: bigPolicy }),
    );
    const verify = await peakRssGrowth(() =>
      verifyStoredZip(bigTarget, { bytes: copy.result.bytes, sha256: copy.result.sha256 }),
    );
    // Assess
    const served: unknown = await (await fetch(`${endpoints.download}/served`)).json();
    expect(served).toEqual({ bytes: copy.result.bytes, sha256: copy.result.sha256 });
    expect(verify.result.entries.find((entry) => entry.name === 'messages.json')?.uncompressedSize).toBe(
      BIG_ARCHIVE_BYTES,
    );
    expect(copy.growth).toBeLessThan(BIG_ARCHIVE_BYTES);
    expect(verify.growth).toBeLessThan(BIG_ARCHIVE_BYTES);
    s3.destroy();
  });
});

// ---------------------------------------------------------------------------------------------

describe('copyExportToS3', () => {
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

  it('uploads a body larger than one part as a multipart upload and keeps the bytes in order', async () => {
    // Prepare
    const body = pseudoRandomBytes(11 * MiB + 123);
    const link = serve(origin, '/exports/big.zip', (response) => sendBody(response, body));
    const stored = target();
    // Act
    const result = await copyExportToS3(link, stored, { policy, partSizeBytes: 5 * MiB });
    // Assess
    expect(result).toMatchObject({ bytes: body.length, sha256: sha256(body) });
    expect(commandNames().filter((name) => name === 'UploadPartCommand')).toHaveLength(3);
    expect(commandNames()).toContain('CompleteMultipartUploadCommand');
    expect(await hashStoredObject(stored)).toEqual({ bytes: body.length, sha256: sha256(body) });
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

  it('passes an S3 failure through unchanged and hangs up on the platform', async () => {
    // Prepare: a body far longer than the copy will ever read, sent until the client hangs up
    const chunk = pseudoRandomBytes(64 * 1024);
    let hungUp: Promise<void> | undefined;
    const link = serve(origin, '/exports/nowhere.zip', async (response) => {
      const closed = once(response, 'close').then(() => undefined);
      hungUp = closed;
      response.writeHead(200, { 'content-length': String(1024 * MiB) });
      while (!response.destroyed) {
        if (!response.write(chunk)) await Promise.race([once(response, 'drain'), closed]);
      }
    });
    // Act
    const error = await failure(
      copyExportToS3(link, target({ bucket: 'no-such-bucket' }), { policy, partSizeBytes: 5 * MiB }),
    );
    // Assess
    expect(error.name).toBe('NoSuchBucket');
    expect(hungUp).toBeDefined();
    await hungUp;
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

  it('rejects a part size S3 would refuse before any request is made', async () => {
    // Prepare
    const link = serve(origin, '/exports/1.zip', (response) => response.writeHead(200).end('PK'));
    // Act
    const error = await failure(copyExportToS3(link, target(), { policy, partSizeBytes: MiB }));
    // Assess
    expect(error).toBeInstanceOf(ConfigurationError);
    expect(error.message).toContain('partSizeBytes');
    expect(origin.requests).toHaveLength(0);
  });

  it('asks S3 for composite CRC32 part checksums and SSE-KMS on the multipart upload', async () => {
    // Prepare: a mocked client, since no local stand-in checks or echoes checksums
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(CreateMultipartUploadCommand).resolves({ UploadId: 'upload-1' });
    s3Mock.on(UploadPartCommand).resolves({ ETag: '"part"' });
    s3Mock.on(CompleteMultipartUploadCommand).resolves({ ETag: '"whole-2"', VersionId: 'version-7' });
    const body = pseudoRandomBytes(6 * MiB);
    const fakeFetch: typeof fetch = async () =>
      new Response(body, { status: 200, headers: { 'content-length': String(body.length) } });
    const link = new URL(`https://exports.example.com/x.zip?sig=${LINK_SECRET}`);
    // Act
    const result = await copyExportToS3(
      link,
      {
        s3: client,
        bucket: BUCKET,
        key: 'archives/kms.zip',
        kmsKeyId: 'arn:aws:kms:us-east-1:111122223333:key/k-1',
        tags: { 'request-type': 'erasure' },
      },
      { policy, fetch: fakeFetch, partSizeBytes: 5 * MiB },
    );
    // Assess
    expect(s3Mock).toHaveReceivedCommandWith(CreateMultipartUploadCommand, {
      Bucket: BUCKET,
      Key: 'archives/kms.zip',
      ChecksumAlgorithm: 'CRC32',
      ChecksumType: 'COMPOSITE',
      ServerSideEncryption: 'aws:kms',
      SSEKMSKeyId: 'arn:aws:kms:us-east-1:111122223333:key/k-1',
      ContentType: 'application/zip',
      Tagging: 'request-type=erasure',
    });
    expect(s3Mock).toHaveReceivedCommandTimes(UploadPartCommand, 2);
    expect(s3Mock).toHaveReceivedCommandWith(UploadPartCommand, {
      UploadId: 'upload-1',
      PartNumber: 1,
      ChecksumAlgorithm: 'CRC32',
      ChecksumCRC32: crc32Base64(body.subarray(0, 5 * MiB)),
    });
    expect(s3Mock).toHaveReceivedCommandWith(UploadPartCommand, {
      PartNumber: 2,
      ChecksumCRC32: crc32Base64(body.subarray(5 * MiB)),
    });
    expect(s3Mock).toHaveReceivedCommandTimes(CompleteMultipartUploadCommand, 1);
    expect(result).toEqual({
      bytes: body.length,
      sha256: sha256(body),
      checksumCrc32: compositeCrc32([body.subarray(0, 5 * MiB), body.subarray(5 * MiB)]),
      etag: '"whole-2"',
      versionId: 'version-7',
    });
    s3Mock.restore();
  });

  it('leaves encryption to the bucket default when no KMS key is given', async () => {
    // Prepare
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(PutObjectCommand).resolves({ ETag: '"small"' });
    const fakeFetch: typeof fetch = async () => new Response(Buffer.from('PK small'), { status: 200 });
    // Act
    await copyExportToS3(
      new URL('https://exports.example.com/x.zip'),
      { s3: client, bucket: BUCKET, key: 'archives/plain.zip' },
      { policy, fetch: fakeFetch },
    );
    // Assess
    const [put] = s3Mock.commandCalls(PutObjectCommand);
    expect(put?.args[0].input).toMatchObject({
      ChecksumAlgorithm: 'CRC32',
      ChecksumCRC32: crc32Base64(Buffer.from('PK small')),
      ContentType: 'application/zip',
    });
    expect(put?.args[0].input).not.toHaveProperty('ServerSideEncryption');
    expect(put?.args[0].input).not.toHaveProperty('SSEKMSKeyId');
    expect(put?.args[0].input).not.toHaveProperty('Tagging');
    s3Mock.restore();
  });
});

describe('verifyStoredZip', () => {
  it('lists every entry of an intact export, checks the SHA-256, and reads a small one in one ranged GET after a HEAD where the store refuses suffix ranges', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const { stored, bytes, sha256: copiedSha } = await copyServed(zip);
    store.commands.length = 0;
    // Act
    const verified = await verifyStoredZip(stored, { bytes, sha256: copiedSha });
    // Assess
    expect(verified.entries.map((entry) => entry.name).sort()).toEqual([...REQUIRED_ENTRIES]);
    const messages = verified.entries.find((entry) => entry.name === 'messages.json');
    expect(messages?.uncompressedSize).toBeGreaterThan(MESSAGES_MARKER.length);
    const gets = store.commands.filter((command) => command.name === 'GetObjectCommand');
    const [rangedGets, wholeGets] = [
      gets.filter((command) => 'Range' in command.input),
      gets.filter((command) => !('Range' in command.input)),
    ];
    // This stand-in refuses the suffix range that would have brought size and tail in one GET, so
    // a HEAD finds the size; an export this small is then read in one ranged GET, whatever order
    // yauzl asks for its parts in.
    expect(bytes).toBeLessThan(256 * 1024);
    expect(commandNames().filter((name) => name === 'HeadObjectCommand')).toHaveLength(1);
    expect(rangedGets.map((command) => (command.input as { Range?: string }).Range)).toEqual([
      `bytes=-${256 * 1024}`,
      `bytes=0-${bytes - 1}`,
    ]);
    // That read, pinned to the ETag HEAD saw, also serves the SHA-256 pass: nothing is read twice.
    expect(wholeGets).toHaveLength(0);
    // Every read after the first is pinned to the ETag the first answer (here the HEAD) gave.
    for (const get of gets.slice(1)) expect(get.input).toHaveProperty('IfMatch');
  });

  it('verifies a large stored entry by streaming it through ranged reads', async () => {
    // Prepare
    const big = pseudoRandomBytes(6 * MiB, 7);
    const zip = await buildZip(
      exportEntries({
        omit: 'messages.json',
        extra: [{ name: 'messages.json', data: big, compress: false }],
      }),
    );
    const { stored, bytes } = await copyServed(zip);
    store.commands.length = 0;
    // Act
    const verified = await verifyStoredZip(stored, { bytes });
    // Assess
    expect(verified.entries.find((entry) => entry.name === 'messages.json')?.uncompressedSize).toBe(
      big.length,
    );
    const bigRange = store.commands.find(
      (command) =>
        command.name === 'GetObjectCommand' &&
        'Range' in command.input &&
        String(command.input.Range).length > 0,
    );
    expect(bigRange).toBeDefined();
  });

  it('detects an entry whose stored bytes were corrupted (CRC-32 mismatch) and names it', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const corrupted = Buffer.from(zip);
    const at = corrupted.indexOf(MESSAGES_MARKER);
    corrupted[at] = (corrupted[at] ?? 0) ^ 0x20;
    const { stored, bytes } = await copyServed(corrupted);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('messages.json');
    expect(error.message).toContain('CRC-32');
  });

  it('detects a corrupted deflated entry and names it', async () => {
    // Prepare
    const profile = JSON.stringify({
      bio: 'x'.repeat(2000),
      pseudo: pseudoRandomBytes(3000).toString('base64'),
    });
    const zip = await buildZip(
      exportEntries({ omit: 'profile.json', extra: [{ name: 'profile.json', data: profile }] }),
    );
    const header = centralDirectoryHeaders(zip).find((candidate) => candidate.name === 'profile.json');
    if (header === undefined) throw new Error('profile.json missing from the test zip');
    const localHeader = zip.readUInt32LE(header.offset + 42);
    const dataStart =
      localHeader + 30 + zip.readUInt16LE(localHeader + 26) + zip.readUInt16LE(localHeader + 28);
    const corrupted = Buffer.from(zip);
    const middle = dataStart + Math.floor(zip.readUInt32LE(header.offset + 20) / 2);
    corrupted[middle] = (corrupted[middle] ?? 0) ^ 0xff;
    const { stored, bytes } = await copyServed(corrupted);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('profile.json');
  });

  it('rejects an archive without profile.json', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(await buildZip(exportEntries({ omit: 'profile.json' })));
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('the archive lacks profile.json');
  });

  it('rejects a body that is not a zip', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(
      Buffer.from('<html><body>Your download has expired</body></html>'),
    );
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('not a readable zip');
  });

  it('rejects a stored object whose size differs from the copy', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(await buildZip(exportEntries()));
    store.commands.length = 0;
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes: bytes + 1 }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe(`the stored archive is ${bytes} bytes, but ${bytes + 1} were copied`);
    expect(commandNames()).toEqual(['GetObjectCommand', 'HeadObjectCommand']);
  });

  it('re-reads a zip larger than one read for its SHA-256, and catches a mismatch there', async () => {
    // Prepare
    const zip = await buildZip(
      exportEntries({
        omit: 'messages.json',
        extra: [{ name: 'messages.json', data: pseudoRandomBytes(MiB, 9), compress: false }],
      }),
    );
    const { stored, bytes, sha256: copiedSha } = await copyServed(zip);
    store.commands.length = 0;
    // Act
    await verifyStoredZip(stored, { bytes, sha256: copiedSha });
    const wrong = await failure(verifyStoredZip(stored, { bytes, sha256: sha256(Buffer.from('other')) }));
    // Assess
    const wholeGets = store.commands.filter(
      (command) => command.name === 'GetObjectCommand' && !('Range' in command.input),
    );
    expect(wholeGets).toHaveLength(2);
    expect(wrong).toBeInstanceOf(InvalidArchiveError);
    expect(wrong.message).toContain('SHA-256');
  });

  it('rejects a stored object whose SHA-256 differs from the copy', async () => {
    // Prepare
    const { stored, bytes } = await copyServed(await buildZip(exportEntries()));
    // Act
    const error = await failure(
      verifyStoredZip(stored, { bytes, sha256: sha256(Buffer.from('something else')) }),
    );
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('SHA-256');
  });

  it('rejects a missing object', async () => {
    // Act
    const error = await failure(verifyStoredZip(target(), { bytes: 100 }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('missing');
  });

  it('rejects an entry that expands beyond the ratio limit before inflating it', async () => {
    // Prepare
    const bomb = Buffer.alloc(8 * MiB);
    const zip = await buildZip(exportEntries({ extra: [{ name: 'padding.bin', data: bomb }] }));
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toMatch(
      /^an entry whose name is not one of the four documented files expands \d+:1, above the 200:1 limit$/,
    );
  });

  it('rejects an archive whose entries together exceed the uncompressed limit with ArchiveTooLargeError naming both', async () => {
    // Prepare
    const zip = await buildZip(
      exportEntries({ extra: [{ name: 'media.bin', data: pseudoRandomBytes(2 * MiB), compress: false }] }),
    );
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }, { maxUncompressedBytes: MiB }));
    // Assess
    expect(error).toBeInstanceOf(ArchiveTooLargeError);
    const expanded = 2 * MiB + exportEntries().reduce((sum, entry) => sum + Buffer.byteLength(entry.data), 0);
    expect(error.message).toContain(`expand to ${expanded} bytes, past the limit of ${MiB}`);
    expect(error.message).toContain('raise the setting');
  });

  it('rejects an encrypted entry and names it', async () => {
    // Prepare
    // General purpose flag bit 0 marks an entry as encrypted.
    const encrypted = patchCentralDirectory(await buildZip(exportEntries()), 'likes.json', (copy, offset) => {
      copy.writeUInt16LE(copy.readUInt16LE(offset + 8) | 0x1, offset + 8);
    });
    const { stored, bytes } = await copyServed(encrypted);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('entry likes.json is encrypted');
  });

  it('rejects an archive that lists the same entry twice', async () => {
    // Prepare
    const zip = await buildZip(exportEntries({ extra: [{ name: 'likes.json', data: '[]' }] }));
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('entry likes.json appears twice');
  });

  it('rejects an entry with a compression method it cannot check', async () => {
    // Prepare
    // Method 12 is bzip2, which the verifier cannot decode and so cannot check.
    const zip = patchCentralDirectory(await buildZip(exportEntries()), 'dislikes.json', (copy, offset) => {
      copy.writeUInt16LE(12, offset + 10);
    });
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('entry dislikes.json uses compression method 12');
  });

  it('never quotes an undocumented entry name, which may hold an e-mail, a link or terminal escapes', async () => {
    // Prepare
    const hostileName = 'jane.doe@example.com https://evil.example/x \u001b[2J.json';
    const zip = patchCentralDirectory(
      await buildZip(exportEntries({ extra: [{ name: hostileName, data: '[]' }] })),
      hostileName,
      (copy, offset) => {
        copy.writeUInt16LE(copy.readUInt16LE(offset + 8) | 0x1, offset + 8);
      },
    );
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toBe('an entry whose name is not one of the four documented files is encrypted');
  });

  it("drops the entry name from the zip reader's own complaint about it", async () => {
    // Prepare: an entry name that climbs out of the folder, with an e-mail address in it.
    const built = await buildZip(exportEntries({ extra: [{ name: 'zz/jane.doe@example.com', data: '[]' }] }));
    const zip = Buffer.from(built.toString('latin1').replaceAll('zz/jane', '../jane'), 'latin1');
    const { stored, bytes } = await copyServed(zip);
    // Act
    const error = await failure(verifyStoredZip(stored, { bytes }));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('invalid relative path in an entry name');
    expect(error.message).not.toContain('@');
  });
});

describe('hashStoredObject', () => {
  it('recomputes the SHA-256 and size of the stored object', async () => {
    // Prepare
    const zip = await buildZip(exportEntries());
    const { stored } = await copyServed(zip);
    // Act
    const hashed = await hashStoredObject(stored);
    // Assess
    expect(hashed).toEqual({ bytes: zip.length, sha256: sha256(zip) });
  });
});

describe('copyExportToS3 part uploads', () => {
  const signedRequest = z.object({
    query: z.record(z.string(), z.unknown()),
    headers: z.record(z.string(), z.string()),
  });

  it('sends each part with its own CRC32, an unsigned payload and no Expect header, refilling part buffers without mixing bytes', async () => {
    // Prepare: the disk stand-in refuses a part whose checksum does not match its bytes;
    // one part in flight at a time, so later parts refill the buffers of earlier ones.
    const root = await mkdtemp(join(tmpdir(), 'archive-parts-'));
    const disk = await startDiskS3({ root });
    const s3 = localS3Client(disk.endpoint);
    const sentParts = new Map<number, { payloadHash?: string; checksum?: string; expect?: string }>();
    s3.middlewareStack.add(
      (next) => async (args) => {
        const request = signedRequest.safeParse(args.request);
        const partNumber = request.success ? Number(request.data.query.partNumber) : Number.NaN;
        if (request.success && Number.isInteger(partNumber)) {
          sentParts.set(partNumber, {
            payloadHash: request.data.headers['x-amz-content-sha256'],
            checksum: request.data.headers['x-amz-checksum-crc32'],
            ...(request.data.headers.Expect === undefined ? {} : { expect: request.data.headers.Expect }),
          });
        }
        return next(args);
      },
      { step: 'deserialize', name: 'recordSignedParts' },
    );
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
    const partSize = 5 * MiB;
    const body = pseudoRandomBytes(3 * partSize + MiB + 17, 11);
    const link = serve(origin, '/exports/parts.zip', (response) => sendBody(response, body));
    const stored: ArchiveTarget = { s3, bucket: BUCKET, key: 'archives/parts.zip' };
    try {
      // Act
      const result = await copyExportToS3(link, stored, { policy, partSizeBytes: partSize, queueSize: 1 });
      // Assess
      expect(result).toMatchObject({ bytes: body.length, sha256: sha256(body) });
      expect(await hashStoredObject(stored)).toEqual({ bytes: body.length, sha256: sha256(body) });
      expect([...sentParts.keys()].sort()).toEqual([1, 2, 3, 4]);
      for (const [partNumber, sent] of sentParts) {
        const part = body.subarray((partNumber - 1) * partSize, partNumber * partSize);
        expect(sent).toEqual({ payloadHash: 'UNSIGNED-PAYLOAD', checksum: crc32Base64(part) });
      }
      const head = await s3.send(
        new HeadObjectCommand({ Bucket: BUCKET, Key: 'archives/parts.zip', ChecksumMode: 'ENABLED' }),
      );
      const parts = [0, 1, 2, 3].map((index) => body.subarray(index * partSize, (index + 1) * partSize));
      expect(result.checksumCrc32).toBe(compositeCrc32(parts));
      expect(head.ChecksumCRC32).toBe(result.checksumCrc32);
    } finally {
      s3.destroy();
      await disk.close();
      await rm(root, { recursive: true, force: true });
    }
  });

  it('aborts the multipart upload and reports the S3 error when a part is refused', async () => {
    // Prepare
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(CreateMultipartUploadCommand).resolves({ UploadId: 'upload-9' });
    s3Mock
      .on(UploadPartCommand)
      .rejects(Object.assign(new Error('We encountered an internal error.'), { name: 'InternalError' }));
    s3Mock.on(AbortMultipartUploadCommand).resolves({});
    const body = pseudoRandomBytes(12 * MiB);
    const fakeFetch: typeof fetch = async () =>
      new Response(body, { status: 200, headers: { 'content-length': String(body.length) } });
    // Act
    const error = await failure(
      copyExportToS3(
        new URL(`https://exports.example.com/x.zip?sig=${LINK_SECRET}`),
        { s3: client, bucket: BUCKET, key: 'archives/refused.zip' },
        { policy, fetch: fakeFetch, partSizeBytes: 5 * MiB },
      ),
    );
    // Assess
    expect(error.name).toBe('InternalError');
    expect(s3Mock).toHaveReceivedCommandWith(AbortMultipartUploadCommand, {
      Bucket: BUCKET,
      Key: 'archives/refused.zip',
      UploadId: 'upload-9',
    });
    expect(s3Mock).not.toHaveReceivedCommand(CompleteMultipartUploadCommand);
    s3Mock.restore();
  });

  it('aborts the upload when S3 reports a part CRC32 other than the one sent', async () => {
    // Prepare: S3 answers a checksum of different bytes for every part
    const client = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const s3Mock = mockClient(client);
    s3Mock.on(CreateMultipartUploadCommand).resolves({ UploadId: 'upload-3' });
    s3Mock.on(UploadPartCommand).resolves({ ETag: '"part"', ChecksumCRC32: 'AAAAAA==' });
    s3Mock.on(AbortMultipartUploadCommand).resolves({});
    const body = pseudoRandomBytes(12 * MiB);
    const fakeFetch: typeof fetch = async () =>
      new Response(body, { status: 200, headers: { 'content-length': String(body.length) } });
    // Act
    const error = await failure(
      copyExportToS3(
        new URL(`https://exports.example.com/x.zip?sig=${LINK_SECRET}`),
        { s3: client, bucket: BUCKET, key: 'archives/mismatch.zip' },
        { policy, fetch: fakeFetch, partSizeBytes: 5 * MiB },
      ),
    );
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toMatch(/^S3 reports CRC32 AAAAAA== for part \d, which was sent with /);
    expect(error.message).not.toContain(LINK_SECRET);
    expect(s3Mock).toHaveReceivedCommandWith(AbortMultipartUploadCommand, { UploadId: 'upload-3' });
    expect(s3Mock).not.toHaveReceivedCommand(CompleteMultipartUploadCommand);
    s3Mock.restore();
  });
});
