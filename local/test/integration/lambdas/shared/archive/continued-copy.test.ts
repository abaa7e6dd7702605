/**
 * A copy carried across invocations, against local mode's disk S3 (which keeps and lists parts
 * with their CRC32s) and a loopback platform that honours Range: stopped at part boundaries, or
 * killed (its S3 calls never answer again, as when a Lambda dies), then carried on from the last
 * checkpoint it recorded.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type CompleteMultipartUploadCommand,
  CreateBucketCommand,
  GetObjectCommand,
  ListPartsCommand,
  S3Client,
  type UploadPartCommand,
} from '@aws-sdk/client-s3';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type ArchiveTarget,
  type ContinuableCopyResult,
  type CopyCheckpoint,
  copyExportContinuable,
  verifyContinuedCopy,
} from '../../../../../../lambdas/shared/archive/index.ts';
import { DownloadNotResumableError } from '../../../../../../lambdas/shared/errors.ts';
import { type DiskS3, startDiskS3 } from '../../../../../aws/s3-disk.ts';
import { planZip } from '../../../../../emulator/zip.ts';

const MiB = 1024 * 1024;
const PART = 5 * MiB;
const BUCKET = 'dsr-archive';
/** Part of every link: it must never show up in an error. */
const LINK_SECRET = 'sig-7d41c09e';

/** The emulator's layout: four deflated JSON files and a stored padding entry: 4 parts of 5 MiB and a bit. */
function exportZip(padding: number): Buffer {
  const bytes = Buffer.alloc(padding);
  for (let index = 0; index < padding; index += 1) bytes[index] = (index * 7919 + (index >> 13)) % 251;
  const files = {
    'profile.json': JSON.stringify({ user_name: 'alice' }),
    'likes.json': '[]',
    'dislikes.json': '[]',
    'messages.json': JSON.stringify([{ id: 'm1', text: 'first comment' }]),
  };
  const plan = planZip(
    Object.entries(files).map(([name, data]) => ({ name, data: Buffer.from(data) })),
    [{ name: 'padding.bin', size: padding, chunks: () => [bytes] }],
  );
  return Buffer.concat([...plan.chunks()]);
}

const ZIP = exportZip(3 * PART + 2 * MiB);
const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

let root: string;
let disk: DiskS3;
let s3: S3Client;
let platform: Server;
/** How the platform answers a Range: honour it, or send the whole archive as a 200. */
let honourRange = true;
/** Added to the start of the range the platform says it sends (a platform whose ranges are off). */
let rangeShift = 0;
/** The platform drops the connection after this many bytes of the next answer. */
let cutAfter: number | undefined;
let ranges: (string | undefined)[] = [];
let keys = 0;

function serveZip(request: IncomingMessage, response: ServerResponse): void {
  const range = request.headers.range;
  ranges.push(range);
  const match = /^bytes=(\d+)-$/.exec(range ?? '');
  if (!honourRange || match === null) {
    response.writeHead(200, { 'content-type': 'application/zip', 'content-length': ZIP.length });
    if (cutAfter === undefined) {
      response.end(ZIP);
      return;
    }
    response.write(ZIP.subarray(0, cutAfter), () => setTimeout(() => response.socket?.destroy(), 100));
    cutAfter = undefined;
    return;
  }
  const first = Number(match[1]) + rangeShift;
  response.writeHead(206, {
    'content-type': 'application/zip',
    'content-length': ZIP.length - first,
    'content-range': `bytes ${first}-${ZIP.length - 1}/${ZIP.length}`,
  });
  response.end(ZIP.subarray(first));
}

function link(): URL {
  const { port } = platform.address() as AddressInfo;
  return new URL(`http://127.0.0.1:${port}/export.zip?sig=${LINK_SECRET}`);
}

const policy = () => ({ allowedHosts: [], insecureHosts: [link().host], maxRedirects: 0 });

function client(): S3Client {
  return new S3Client({
    endpoint: disk.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
}

/**
 * An S3 client for one invocation that can be killed: from the moment `killWhen` says so (asked
 * before each command, and once each answers), no command it sends ever answers, as when the
 * Lambda running it dies. `commands` records what it sent.
 */
function killableClient(killWhen: (event: { name: string; input: object; answered: boolean }) => boolean) {
  const dying = client();
  const commands: { name: string; input: object }[] = [];
  let killed = false;
  let markKilled: () => void = () => {};
  const died = new Promise<void>((resolve) => {
    markKilled = resolve;
  });
  const hang = () => new Promise<never>(() => {});
  dying.middlewareStack.add(
    (next, context) => async (args) => {
      const name = context.commandName ?? 'unknown';
      const input = { ...(args.input as object) };
      if (!killed && killWhen({ name, input, answered: false })) {
        killed = true;
        markKilled();
      }
      if (killed) return hang();
      commands.push({ name, input });
      const output = await next(args);
      if (!killed && killWhen({ name, input, answered: true })) {
        killed = true;
        markKilled();
      }
      if (killed) return hang();
      return output;
    },
    { step: 'initialize', name: 'killSwitch' },
  );
  return { s3: dying, commands, died };
}

function target(s3Client: S3Client, key: string): ArchiveTarget {
  return { s3: s3Client, bucket: BUCKET, key };
}

/** The stored object's size and SHA-256 (a byte-for-byte comparison that never prints 17 MiB). */
async function stored(key: string): Promise<{ bytes: number; sha256: string }> {
  const { Body } = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
  const body = Buffer.from((await Body?.transformToByteArray()) ?? []);
  return { bytes: body.length, sha256: sha256(body) };
}

const ZIP_STORED = { bytes: ZIP.length, sha256: sha256(ZIP) };

/** One invocation: stops at the boundary after `stopAfterParts` more parts (never, when undefined). */
async function invocation(
  s3Client: S3Client,
  key: string,
  checkpoint: CopyCheckpoint | undefined,
  recorded: CopyCheckpoint[],
  stopAfterParts?: number,
): Promise<ContinuableCopyResult> {
  let boundaries = 0;
  return copyExportContinuable(link(), target(s3Client, key), {
    policy: policy(),
    partSizeBytes: PART,
    verify: {},
    checkpointEveryMs: 0,
    ...(checkpoint === undefined ? {} : { checkpoint }),
    shouldStop: () => {
      boundaries += 1;
      return stopAfterParts !== undefined && boundaries >= stopAfterParts;
    },
    onCheckpoint: async (reached) => {
      recorded.push(reached);
    },
  });
}

function partNumbersCompleted(commands: { name: string; input: object }[]): number[] {
  const complete = commands.find((command) => command.name === 'CompleteMultipartUploadCommand');
  const input = complete?.input as CompleteMultipartUploadCommand['input'] | undefined;
  return (input?.MultipartUpload?.Parts ?? []).map((part) => part.PartNumber ?? 0);
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'continued-copy-'));
  disk = await startDiskS3({ root });
  s3 = client();
  await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  platform = createServer(serveZip);
  await new Promise<void>((resolve) => platform.listen(0, '127.0.0.1', resolve));
});

afterAll(async () => {
  platform.closeAllConnections();
  await new Promise((resolve) => platform.close(resolve));
  s3.destroy();
  await disk.close();
  await rm(root, { recursive: true, force: true });
});

beforeEach(() => {
  honourRange = true;
  rangeShift = 0;
  cutAfter = undefined;
  ranges = [];
  keys += 1;
});

describe('copyExportContinuable', () => {
  it('says once that the platform answered the download, before any part is uploaded, and not when it refused it', async () => {
    // Prepare
    const key = `exports/opened-${keys}.zip`;
    const { s3: watched, commands } = killableClient(() => false);
    const opened: number[] = [];
    const copy = (checkpoint?: CopyCheckpoint) =>
      copyExportContinuable(link(), target(watched, key), {
        policy: policy(),
        partSizeBytes: PART,
        verify: {},
        checkpointEveryMs: 0,
        ...(checkpoint === undefined ? {} : { checkpoint }),
        shouldStop: () => checkpoint === undefined,
        onCheckpoint: async () => {},
        onDownloadOpened: async () => {
          opened.push(commands.filter((command) => command.name === 'UploadPartCommand').length);
        },
      });

    // Act
    const first = await copy();
    const paused = 'paused' in first ? first.paused : undefined;
    honourRange = false;
    const refused = await copy(paused).catch((error: unknown) => error);
    watched.destroy();

    // Assess: the first copy was told before its first part; the resume the platform would not
    // answer with the range was never told
    expect(paused).toBeDefined();
    expect(opened).toEqual([0]);
    expect(refused).toBeInstanceOf(DownloadNotResumableError);
  });

  it('stores in three invocations the archive one uninterrupted copy stores, byte for byte', async () => {
    // Prepare
    const whole = `exports/whole-${keys}.zip`;
    const continued = `exports/continued-${keys}.zip`;
    const recorded: CopyCheckpoint[] = [];

    // Act: one copy in one go; another stopped after 1 part, then after 1 more, then finished.
    const oneGo = await invocation(s3, whole, undefined, []);
    const first = await invocation(s3, continued, undefined, recorded, 1);
    if (!('paused' in first)) throw new Error('the first invocation should stop');
    const second = await invocation(s3, continued, first.paused, recorded, 1);
    if (!('paused' in second)) throw new Error('the second invocation should stop');
    const third = await invocation(s3, continued, second.paused, recorded);

    // Assess
    expect(first.paused).toMatchObject({ parts: 1, partSizeBytes: PART, totalBytes: ZIP.length });
    expect(second.paused).toMatchObject({ parts: 2, uploadId: first.paused.uploadId });
    expect(ranges).toEqual([undefined, undefined, `bytes=${PART}-`, `bytes=${2 * PART}-`]);
    if (!('done' in oneGo) || oneGo.continued || !('done' in third) || !third.continued) {
      throw new Error('both copies should end, the second as a continued one');
    }
    expect(third.done.bytes).toBe(ZIP.length);
    expect(await stored(continued)).toEqual(ZIP_STORED);
    expect(await stored(continued)).toEqual(await stored(whole));
    // The same composite checksum: the same parts, cut at the same places.
    expect(third.done.checksumCrc32).toBe(oneGo.done.checksumCrc32);
    const proven = await verifyContinuedCopy(target(s3, continued), third.done);
    expect(proven.sha256).toBe(sha256(ZIP));
    expect(proven.sha256).toBe(oneGo.done.sha256);
    expect(oneGo.done.archive?.entries).toHaveLength(5);
    expect(proven.entries).toEqual(oneGo.done.archive?.entries);
  });

  it.each([
    {
      window: 'mid-part (a part in flight never lands)',
      killWhen: (event: { name: string; input: object; answered: boolean }) =>
        !event.answered &&
        event.name === 'UploadPartCommand' &&
        (event.input as UploadPartCommand['input']).PartNumber === 3,
    },
    {
      window: 'between parts (part 2 landed, nothing after it is sent)',
      killWhen: (event: { name: string; input: object; answered: boolean }) =>
        event.answered &&
        event.name === 'UploadPartCommand' &&
        (event.input as UploadPartCommand['input']).PartNumber === 2,
    },
    {
      window: 'before completion (every part sent, CompleteMultipartUpload never answers)',
      killWhen: (event: { name: string; input: object; answered: boolean }) =>
        !event.answered && event.name === 'CompleteMultipartUploadCommand',
    },
  ])(
    'carries on a copy killed $window from its last checkpoint, losing and repeating no part',
    async ({ killWhen }) => {
      // Prepare: the first invocation runs until it is killed, without returning.
      const key = `exports/killed-${keys}.zip`;
      const recorded: CopyCheckpoint[] = [];
      const dying = killableClient(killWhen);
      void invocation(dying.s3, key, undefined, recorded);
      await dying.died;
      const checkpoint = recorded.at(-1);
      if (checkpoint === undefined) throw new Error('the killed invocation recorded no checkpoint');

      // Act: Step Functions' retry, a new invocation with a new client, from the last checkpoint.
      const retry = killableClient(() => false);
      const result = await invocation(retry.s3, key, checkpoint, []);

      // Assess
      if (!('done' in result) || !result.continued) throw new Error('the retry should complete the copy');
      expect(ranges.at(-1)).toBe(`bytes=${checkpoint.parts * PART}-`);
      // Only the parts after the checkpoint went again; every part is completed once, in order.
      const resent = retry.commands
        .filter((command) => command.name === 'UploadPartCommand')
        .map((command) => (command.input as UploadPartCommand['input']).PartNumber);
      expect(resent).toEqual(
        Array.from({ length: 4 - checkpoint.parts }, (_, index) => checkpoint.parts + 1 + index),
      );
      expect(partNumbersCompleted(retry.commands)).toEqual([1, 2, 3, 4]);
      expect(await stored(key)).toEqual(ZIP_STORED);
      expect((await verifyContinuedCopy(target(s3, key), result.done)).sha256).toBe(sha256(ZIP));
      retry.s3.destroy();
    },
  );

  it('begins anew when the recorded parts are not the ones S3 lists, and when the upload is gone', async () => {
    // Prepare: a copy stopped after 2 parts; its checkpoint then says something else of them.
    const key = `exports/differ-${keys}.zip`;
    const first = await invocation(s3, key, undefined, [], 2);
    if (!('paused' in first)) throw new Error('the first invocation should stop');
    const wrong = { ...first.paused, partsCrc32: (first.paused.partsCrc32 + 1) >>> 0 };

    // Act
    const differ = await invocation(s3, key, wrong, []);
    const gone = await invocation(s3, `${key}.2`, { ...first.paused, uploadId: 'f'.repeat(32) }, []);

    // Assess: no part of the doubtful upload is used; the archive is still stored whole.
    expect(differ).toMatchObject({ continued: false, restarted: 'parts_differ' });
    expect(gone).toMatchObject({ continued: false, restarted: 'upload_gone' });
    expect(await stored(key)).toEqual(ZIP_STORED);
    // The doubtful upload was aborted: its parts, the subject's data, are gone.
    await expect(
      s3.send(new ListPartsCommand({ Bucket: BUCKET, Key: key, UploadId: first.paused.uploadId })),
    ).rejects.toMatchObject({ name: 'NoSuchUpload' });
  });

  it('fails with DownloadNotResumableError when the platform answers a range with the whole archive', async () => {
    // Prepare
    const key = `exports/no-range-${keys}.zip`;
    const first = await invocation(s3, key, undefined, [], 1);
    if (!('paused' in first)) throw new Error('the first invocation should stop');
    honourRange = false;

    // Act
    const error = await invocation(s3, key, first.paused, []).then(
      () => undefined,
      (failure: unknown) => failure,
    );

    // Assess
    expect(error).toBeInstanceOf(DownloadNotResumableError);
    expect(String((error as Error).message)).not.toContain(LINK_SECRET);
    expect((error as Error).message).toContain('does not honour Range');
  });

  it('fails with DownloadNotResumableError when the platform answers another range than asked', async () => {
    // Prepare
    const key = `exports/shifted-${keys}.zip`;
    const first = await invocation(s3, key, undefined, [], 1);
    if (!('paused' in first)) throw new Error('the first invocation should stop');
    rangeShift = 1;

    // Act
    const error = await invocation(s3, key, first.paused, []).then(
      () => undefined,
      (failure: unknown) => failure,
    );

    // Assess
    expect(error).toBeInstanceOf(DownloadNotResumableError);
    expect((error as Error).message).toContain(
      `another range than bytes ${PART}-${ZIP.length - 1}/${ZIP.length}`,
    );
  });

  it('keeps the upload and records its checkpoint when the download breaks off, so the retry goes on from there', async () => {
    // Prepare: the connection drops after 2 parts and a bit.
    const key = `exports/broken-${keys}.zip`;
    const recorded: CopyCheckpoint[] = [];
    cutAfter = 2 * PART + MiB;

    // Act
    const error = await invocation(s3, key, undefined, recorded).then(
      () => undefined,
      (failure: unknown) => failure,
    );
    const checkpoint = recorded.at(-1);
    if (checkpoint === undefined) throw new Error('the broken copy recorded no checkpoint');
    const retry = await invocation(s3, key, checkpoint, []);

    // Assess
    expect((error as Error).name).toBe('TruncatedDownloadError');
    expect(checkpoint.parts).toBe(2);
    expect(ranges.at(-1)).toBe(`bytes=${2 * PART}-`);
    if (!('done' in retry) || !retry.continued) throw new Error('the retry should complete the copy');
    expect(await stored(key)).toEqual(ZIP_STORED);
  });
});
