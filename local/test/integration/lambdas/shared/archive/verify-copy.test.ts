import { createHash } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type ArchiveTarget,
  copyExportToS3,
  verifyCopy,
} from '../../../../../../lambdas/shared/archive/index.ts';
import { parseEnv, stepEnvSchema } from '../../../../../../lambdas/shared/config.ts';
import { ArchiveTooLargeError, InvalidArchiveError } from '../../../../../../lambdas/shared/errors.ts';
import { s3ArchiveStore } from '../../../../../../lambdas/shared/runtime.ts';
import { type DiskS3, startDiskS3 } from '../../../../../aws/s3-disk.ts';
import { planZip } from '../../../../../emulator/zip.ts';

const MiB = 1024 * 1024;
/** The variables every step needs, so the archive's own can be read alone. */
const STEP_ENV = {
  TABLE_NAME: 'ledger',
  ARCHIVE_BUCKET: 'dsr-archive',
  AUDIT_BUCKET: 'audit',
  AUDIT_KEY_SECRET_ID: 'audit-key',
  PLATFORM_BASE_URL: 'https://api.example.com/api',
  PLATFORM_EXPORT_URL: 'https://export.example.com',
  PLATFORM_ACTIVITY_URL: 'https://activity.example.com',
  SPOT_ID: 'sp_test',
  GATE_TABLE_NAME: 'gate',
};
const BUCKET = 'dsr-archive';
const FILES = {
  'profile.json': JSON.stringify({ user_name: 'alice' }),
  'likes.json': '[]',
  'dislikes.json': '[]',
  'messages.json': JSON.stringify([{ id: 'm1', text: 'first comment' }]),
};

/** The emulator's layout: four deflated JSON files and a stored padding entry of `padding` bytes. */
function exportZip(padding: number): Buffer {
  const bytes = Buffer.alloc(padding);
  for (let index = 0; index < padding; index += 1) bytes[index] = (index * 7919) % 251;
  const plan = planZip(
    Object.entries(FILES).map(([name, data]) => ({ name, data: Buffer.from(data) })),
    padding > 0 ? [{ name: 'padding.bin', size: padding, chunks: () => [bytes] }] : [],
  );
  return Buffer.concat([...plan.chunks()]);
}

function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

let root: string;
let disk: DiskS3;
let s3: S3Client;
let platform: Server;
let served: Buffer = Buffer.alloc(0);
/** Bytes the platform had written when the client hung up or the body ended. */
let sentBytes = 0;
let commands: string[] = [];
let keyCounter = 0;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'verify-copy-'));
  disk = await startDiskS3({ root });
  s3 = new S3Client({
    endpoint: disk.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      commands.push(context.commandName ?? 'unknown');
      return next(args);
    },
    { step: 'initialize', name: 'recordCommands' },
  );
  await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  platform = createServer((_request, response) => {
    sentBytes = 0;
    response.writeHead(200, { 'content-type': 'application/zip', 'content-length': served.length });
    // 64 KiB at a time, so a copy that stops early leaves most of a large body unsent.
    let offset = 0;
    const next = () => {
      while (offset < served.length) {
        const chunk = served.subarray(offset, offset + 64 * 1024);
        offset += chunk.length;
        sentBytes = offset;
        if (!response.write(chunk)) {
          response.once('drain', next);
          return;
        }
      }
      response.end();
    };
    response.once('close', () => {
      offset = served.length;
    });
    next();
  });
  await new Promise<void>((resolve) => platform.listen(0, '127.0.0.1', resolve));
});

afterAll(async () => {
  s3.destroy();
  platform.closeAllConnections();
  await new Promise((resolve) => platform.close(resolve));
  await disk.close();
  await rm(root, { recursive: true, force: true });
});

beforeEach(() => {
  commands = [];
});

function link(): URL {
  const { port } = platform.address() as AddressInfo;
  return new URL(`http://127.0.0.1:${port}/export.zip`);
}

function target(): ArchiveTarget {
  keyCounter += 1;
  return { s3, bucket: BUCKET, key: `exports/verify-${keyCounter}.zip` };
}

function copyOptions(verify: { maxUncompressedBytes?: number } = {}) {
  const { host } = link();
  return {
    policy: { allowedHosts: [], insecureHosts: [host], maxRedirects: 0 },
    partSizeBytes: 5 * MiB,
    verify,
  };
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof Error) return error;
  }
  throw new Error('expected a failure');
}

async function headStatus(stored: ArchiveTarget): Promise<number> {
  const response = await fetch(`${disk.endpoint}/${stored.bucket}/${stored.key}`, { method: 'HEAD' });
  return response.status;
}

describe('copyExportToS3 with verify, then verifyCopy', () => {
  it('proves a multipart copy with one HEAD and no read of the stored object', async () => {
    // Prepare
    served = exportZip(12 * MiB);
    const stored = target();
    // Act
    const copied = await copyExportToS3(link(), stored, copyOptions());
    commands = [];
    const verified = await verifyCopy(stored, copied);
    // Assess
    expect(copied).toMatchObject({ bytes: served.length, sha256: sha256(served) });
    expect(copied.checksumCrc32).toMatch(/^[A-Za-z0-9+/]{6}==-3$/);
    expect(verified.entries.map((entry) => entry.name).sort()).toEqual([
      'dislikes.json',
      'likes.json',
      'messages.json',
      'padding.bin',
      'profile.json',
    ]);
    expect(commands).toEqual(['HeadObjectCommand']);
  });

  it('uploads every part over the same kept-alive connections, one per part in flight', async () => {
    // Prepare: five parts, two in flight at a time
    served = exportZip(22 * MiB);
    const fresh = new S3Client({
      endpoint: disk.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const parts: number[] = [];
    fresh.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'UploadPartCommand') parts.push(parts.length + 1);
        return next(args);
      },
      { step: 'initialize', name: 'countParts' },
    );
    const stored = { ...target(), s3: fresh };
    const s3Port = Number(new URL(disk.endpoint).port);
    let s3Connections = 0;
    const count = (message: unknown) => {
      const { socket } = message as { socket: Socket };
      socket.once('connect', () => {
        if (socket.remotePort === s3Port) s3Connections += 1;
      });
    };
    subscribe('net.client.socket', count);
    // Act
    try {
      await copyExportToS3(link(), stored, copyOptions());
    } finally {
      unsubscribe('net.client.socket', count);
      fresh.destroy();
    }
    // Assess: Expect: 100-continue would have cost a connection per part
    expect(parts).toHaveLength(5);
    expect(s3Connections).toBeGreaterThan(0);
    expect(s3Connections).toBeLessThanOrEqual(2);
  });

  it('proves a single-part copy by its full-object CRC32', async () => {
    // Prepare
    served = exportZip(1000);
    const stored = target();
    // Act
    const copied = await copyExportToS3(link(), stored, copyOptions());
    commands = [];
    await verifyCopy(stored, copied);
    // Assess
    const head = await s3.send(
      new HeadObjectCommand({ Bucket: BUCKET, Key: stored.key, ChecksumMode: 'ENABLED' }),
    );
    expect(head.ChecksumCRC32).toBe(copied.checksumCrc32);
    expect(copied.checksumCrc32).not.toContain('-');
    expect(commands.filter((name) => name === 'GetObjectCommand')).toEqual([]);
  });

  it('fails with InvalidArchiveError when the stored object is not the copy, even at the same size', async () => {
    // Prepare: another writer replaces the object with bytes of the same length
    served = exportZip(6 * MiB);
    const stored = target();
    const copied = await copyExportToS3(link(), stored, copyOptions());
    const replaced = Buffer.from(served);
    replaced[100] = (replaced[100] ?? 0) ^ 0xff;
    await s3.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: stored.key, Body: replaced, ChecksumAlgorithm: 'CRC32' }),
    );
    // Act
    const error = await failure(verifyCopy(stored, copied));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('the stored object is not the copy');
  });

  it('reads the stored object once, by ranges, for a zip the stream check could not follow', async () => {
    // Prepare: bytes before the first entry, which zip readers accept
    served = Buffer.concat([Buffer.from('#!/bin/sh\nexit 0\n'), exportZip(0)]);
    const stored = target();
    const copied = await copyExportToS3(link(), stored, copyOptions());
    commands = [];
    // Act
    const error = await failure(verifyCopy(stored, copied));
    // Assess: read back, judged by the zip reader, and no whole-object SHA-256 pass
    expect(copied.archive).toBeUndefined();
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(commands[0]).toBe('HeadObjectCommand');
    expect(commands.filter((name) => name === 'GetObjectCommand').length).toBeGreaterThan(0);
  });

  it('stores nothing when an entry does not match its CRC-32, and aborts the upload', async () => {
    // Prepare: one byte of the stored padding flipped
    const zip = exportZip(7 * MiB);
    const damaged = zip.indexOf('padding.bin') + 'padding.bin'.length + 5000;
    zip[damaged] = (zip[damaged] ?? 0) ^ 0x01;
    served = zip;
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link(), stored, copyOptions()));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('does not match the recorded');
    expect(error.message).toContain('an entry whose name is not one of the four documented files');
    expect(commands).toContain('AbortMultipartUploadCommand');
    expect(commands).not.toContain('CompleteMultipartUploadCommand');
    expect(await headStatus(stored)).toBe(404);
  });

  it('stores nothing for a zip that ends before its central directory', async () => {
    // Prepare: the platform serves a cut archive with a matching Content-Length
    served = exportZip(2 * MiB).subarray(0, MiB + 123);
    const stored = target();
    // Act
    const error = await failure(copyExportToS3(link(), stored, copyOptions()));
    // Assess
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect(error.message).toContain('truncated');
    expect(await headStatus(stored)).toBe(404);
  });

  it('stops the download with ArchiveTooLargeError once the expansion passes the limit', async () => {
    // Prepare
    served = exportZip(40 * MiB);
    const stored = target();
    // Act
    const error = await failure(
      copyExportToS3(link(), stored, copyOptions({ maxUncompressedBytes: 2 * MiB })),
    );
    // Assess
    expect(error).toBeInstanceOf(ArchiveTooLargeError);
    expect(error.message).toContain(`past the limit of ${2 * MiB}`);
    expect(sentBytes).toBeLessThan(served.length / 2);
    expect(await headStatus(stored)).toBe(404);
  });

  it('aborts the copy when S3 refuses a part whose bytes do not match its CRC32', async () => {
    // Prepare: a client whose second part is damaged after its checksum was computed
    served = exportZip(12 * MiB);
    const damaging = new S3Client({
      endpoint: disk.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    const seen: string[] = [];
    damaging.middlewareStack.add(
      (next, context) => async (args) => {
        seen.push(context.commandName ?? 'unknown');
        const input = args.input as { PartNumber?: number; Body?: Buffer };
        if (input.PartNumber === 2 && Buffer.isBuffer(input.Body)) {
          const body = Buffer.from(input.Body);
          body[10] = (body[10] ?? 0) ^ 0xff;
          return next({ ...args, input: { ...input, Body: body } } as typeof args);
        }
        return next(args);
      },
      { step: 'serialize', priority: 'high', name: 'damagePart' },
    );
    const stored = { ...target(), s3: damaging };
    // Act
    const error = await failure(copyExportToS3(link(), stored, copyOptions()));
    damaging.destroy();
    // Assess
    expect(error.name).toBe('BadDigest');
    expect(seen).toContain('AbortMultipartUploadCommand');
    expect(await headStatus(stored)).toBe(404);
  });
});

describe('s3ArchiveStore', () => {
  const policy = () => ({ allowedHosts: [], insecureHosts: [link().host], maxRedirects: 0 });
  const inOneGo = { shouldStop: () => false, onCheckpoint: async () => {} };

  it('copies and verifies with the stream check, and proves the copy with a HEAD alone', async () => {
    // Prepare
    served = exportZip(6 * MiB);
    const store = s3ArchiveStore(s3, { bucket: BUCKET, policy: policy() });
    const key = target().key;
    // Act
    const outcome = await store.copy(link(), key, 'access', inOneGo);
    if (outcome.kind !== 'copied') throw new Error(`expected a copy in one go, got ${outcome.kind}`);
    commands = [];
    const verified = await store.verify(key, outcome.copied);
    // Assess
    expect(verified).toEqual({ entries: 5 });
    expect(commands).toEqual(['HeadObjectCommand']);
  });

  it('refuses an archive past the configured cap with ArchiveTooLargeError and stores nothing', async () => {
    // Prepare
    served = exportZip(6 * MiB);
    const env = parseEnv(stepEnvSchema, { ...STEP_ENV, ARCHIVE_MAX_EXPANDED_BYTES: String(4 * MiB) });
    const store = s3ArchiveStore(s3, {
      bucket: BUCKET,
      policy: policy(),
      maxExpandedBytes: env.ARCHIVE_MAX_EXPANDED_BYTES,
    });
    const stored = target();
    // Act
    const error = await failure(store.copy(link(), stored.key, 'erasure', inOneGo));
    // Assess
    expect(error).toBeInstanceOf(ArchiveTooLargeError);
    expect(error.message).toContain(`past the limit of ${4 * MiB} (stack setting archiveMaxExpandedBytes)`);
    expect(await headStatus(stored)).toBe(404);
  });

  it('reads the cap from the environment: 4 GiB by default, and a clear error for a bad value', () => {
    expect(parseEnv(stepEnvSchema, STEP_ENV).ARCHIVE_MAX_EXPANDED_BYTES).toBe(4 * 1024 ** 3);
    expect(() => parseEnv(stepEnvSchema, { ...STEP_ENV, ARCHIVE_MAX_EXPANDED_BYTES: '1000' })).toThrow(
      /ARCHIVE_MAX_EXPANDED_BYTES: .*1048576.*redeploy the stack/,
    );
  });
});
