import { createHash } from 'node:crypto';
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { crc32 } from 'node:zlib';
import { HeadObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { type FauxqsServer, startFauxqs } from 'fauxqs';
import { afterAll, beforeAll, beforeEach, expect } from 'vitest';
import yazl from 'yazl';
import { type ArchiveTarget, copyExportToS3 } from '#shared/archive';
import { type DownloadPolicy, downloadPolicySchema } from '#shared/download-policy';
import { type StubServer, startStubServer } from '../../../../helpers/stub-server.ts';

export const MiB = 1024 * 1024;
export const BUCKET = 'dsr-archive';
/** Part of every link: it must never show up in an error. */
export const LINK_SECRET = 'link-signature-5f0c2e9b';

// ---------------------------------------------------------------------------------------------
// Stand-ins: fauxqs for S3, loopback HTTP servers for the platform's download hosts.

export interface RecordedCommand {
  readonly name: string;
  readonly input: object;
}

export interface S3StandIn {
  readonly fauxqs: FauxqsServer;
  readonly s3: S3Client;
  /** Every command the client sent, in order, as the middleware stack saw it. */
  readonly commands: RecordedCommand[];
}

export function localS3Client(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
}

export async function startS3StandIn(): Promise<S3StandIn> {
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

export let store: S3StandIn;
export let origin: StubServer;
export let mirror: StubServer;
export let stranger: StubServer;
export let policy: DownloadPolicy;
export let keyCounter = 0;

export type Route = (response: ServerResponse) => unknown;
export const routes = new Map<string, Route>();

export function routeTo(server: StubServer): void {
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
export function serve(server: StubServer, path: string, route: Route): URL {
  routes.set(`${server.url}${path}`, route);
  return new URL(`${server.url}${path}?sig=${LINK_SECRET}&expires=1900000000`);
}

export function target(overrides: Partial<ArchiveTarget> = {}): ArchiveTarget {
  keyCounter += 1;
  return { s3: store.s3, bucket: BUCKET, key: `archives/req-${keyCounter}.zip`, ...overrides };
}

/** A CRC32 as S3 writes it: base64 of the four big-endian bytes. */
export function crc32Base64(data: Buffer): string {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(crc32(data));
  return bytes.toString('base64');
}

/** S3's COMPOSITE CRC32 of a multipart object, from its parts' bytes. */
export function compositeCrc32(parts: readonly Buffer[]): string {
  const joined = Buffer.concat(parts.map((part) => Buffer.from(crc32Base64(part), 'base64')));
  return `${crc32Base64(joined)}-${parts.length}`;
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Sends `body` in 64 KiB writes, honouring backpressure; optionally breaks the connection early. */
export async function sendBody(
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
export function pseudoRandomBytes(size: number, seed = 1): Buffer {
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

export interface ZipEntrySpec {
  readonly name: string;
  readonly data: Buffer | string;
  readonly compress?: boolean;
}

export async function buildZip(entries: readonly ZipEntrySpec[]): Promise<Buffer> {
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

export const MESSAGES_MARKER = 'MESSAGES-MARKER-0123456789';

export function exportEntries(overrides: { omit?: string; extra?: ZipEntrySpec[] } = {}): ZipEntrySpec[] {
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
export function centralDirectoryHeaders(zip: Buffer): { offset: number; name: string }[] {
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
export function patchCentralDirectory(
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
export async function copyServed(
  zip: Buffer,
): Promise<{ stored: ArchiveTarget; bytes: number; sha256: string }> {
  keyCounter += 1;
  const link = serve(origin, `/exports/${keyCounter}.zip`, (response) => sendBody(response, zip));
  const stored = target();
  const result = await copyExportToS3(link, stored, { policy });
  return { stored, bytes: result.bytes, sha256: result.sha256 };
}

/** Awaits a failure and checks that it leaks nothing of the link. */
export async function failure(promise: Promise<unknown>): Promise<Error> {
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

export async function headStatus(stored: ArchiveTarget): Promise<number> {
  try {
    await store.s3.send(new HeadObjectCommand({ Bucket: stored.bucket, Key: stored.key }));
    return 200;
  } catch (error) {
    if (error instanceof Error && error.name === 'NotFound') return 404;
    throw error;
  }
}

export function commandNames(): string[] {
  return store.commands.map((command) => command.name);
}

/** Starts the stand-ins before the file's tests, clears what they saw before each, and stops them after. */
export function useArchiveStandIns(): void {
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
}
