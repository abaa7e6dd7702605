/**
 * The disk S3's versions, as S3 keeps them: a version per write in a versioned bucket, delete
 * markers, reads and deletes by version id, ListObjectVersions and its paging, LastModified from the
 * stand-in's own clock, changes made on disk taken in as S3 would have recorded them through its API,
 * and a data dir written before versions (one sidecar per key) read as one "null" version per key.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cp, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  type ListObjectVersionsCommandOutput,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { afterEach, describe, expect, it } from 'vitest';
import { type DiskS3, startDiskS3 } from '#local/aws/s3-disk';
import { removeAllVersions } from '../../../lambdas/shared/runtime.ts';

const MiB = 1024 * 1024;
const BUCKET = 'versioned';
const STORED_AT = new Date('2026-11-20T10:00:00.000Z');

/** A running stand-in on its own folder, with a client and a clock the test moves. */
interface Local {
  readonly root: string;
  readonly server: DiskS3;
  readonly s3: S3Client;
  /** Sets the stand-in's clock. */
  at(date: Date): void;
  /** The plain file of a key in the bucket. */
  path(key: string): string;
}

const opened: { server: DiskS3; s3: S3Client; root: string }[] = [];

afterEach(async () => {
  for (const { server, s3, root } of opened.splice(0)) {
    s3.destroy();
    await server.close();
    await rm(root, { recursive: true, force: true });
  }
});

function clientFor(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    maxAttempts: 1,
  });
}

/** Starts the stand-in on `root` (a new folder by default); `versioning` sets up the bucket. */
async function start(
  options: { root?: string; versioning?: 'Enabled' | 'Suspended' | 'off' } = {},
): Promise<Local> {
  const root = options.root ?? (await mkdtemp(join(tmpdir(), 'svc-dsr-s3-versions-')));
  let now = STORED_AT;
  const server = await startDiskS3({ root, clock: () => now });
  const s3 = clientFor(server.endpoint);
  opened.push({ server, s3, root });
  if (options.root === undefined) {
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
    const status = options.versioning ?? 'Enabled';
    if (status !== 'off') {
      await s3.send(
        new PutBucketVersioningCommand({ Bucket: BUCKET, VersioningConfiguration: { Status: status } }),
      );
    }
  }
  return {
    root,
    server,
    s3,
    at(date) {
      now = date;
    },
    path: (key) => join(root, BUCKET, ...key.split('/')),
  };
}

async function put(local: Local, key: string, body: string): Promise<string | undefined> {
  return (await local.s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: body }))).VersionId;
}

async function read(local: Local, key: string, versionId?: string): Promise<string> {
  const answer = await local.s3.send(
    new GetObjectCommand({ Bucket: BUCKET, Key: key, VersionId: versionId }),
  );
  return (await answer.Body?.transformToString()) ?? '';
}

/**
 * Every version and delete marker under `prefix` as [key, id, latest, kind], in the order of S3's
 * answer (by key, each key's newest first), read from the XML: the SDK splits it into two lists.
 */
async function history(local: Local, prefix = ''): Promise<[string, string, boolean, string][]> {
  const answer = await rawRequest(local, 'GET', `/${BUCKET}?versions&prefix=${encodeURIComponent(prefix)}`);
  expect(answer.status).toBe(200);
  return [...answer.body.matchAll(/<(Version|DeleteMarker)>(.*?)<\/\1>/g)].map(
    ([, kind = '', inner = '']) => {
      const field = (name: string) => new RegExp(`<${name}>([^<]*)</${name}>`).exec(inner)?.[1] ?? '';
      return [
        field('Key'),
        field('VersionId'),
        field('IsLatest') === 'true',
        kind === 'Version' ? 'version' : 'marker',
      ];
    },
  );
}

/** A page's versions and markers as [key, id, latest, kind], sorted so pages and a whole listing compare. */
function entries(page: ListObjectVersionsCommandOutput): [string, string, boolean, string][] {
  return [
    ...(page.Versions ?? []).map((v): [string, string, boolean, string] => [
      v.Key ?? '',
      v.VersionId ?? '',
      v.IsLatest === true,
      'version',
    ]),
    ...(page.DeleteMarkers ?? []).map((m): [string, string, boolean, string] => [
      m.Key ?? '',
      m.VersionId ?? '',
      m.IsLatest === true,
      'marker',
    ]),
  ].sort((a, b) => (a.join('\n') < b.join('\n') ? -1 : 1));
}

async function failure(call: Promise<unknown>): Promise<{ name?: string; status?: number }> {
  try {
    await call;
  } catch (error) {
    const failed = error as { name?: string; $metadata?: { httpStatusCode?: number } };
    return { name: failed.name, status: failed.$metadata?.httpStatusCode };
  }
  throw new Error('expected the call to fail');
}

/** A hand-made request, to see the headers S3 sends with an error. */
function rawRequest(
  local: Local,
  method: string,
  path: string,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const { hostname, port } = new URL(local.server.endpoint);
  return new Promise((resolve, reject) => {
    const outgoing = request({ host: hostname, port, method, path, agent: false }, (answer) => {
      const chunks: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => chunks.push(chunk));
      answer.on('end', () =>
        resolve({
          status: answer.statusCode ?? 0,
          headers: answer.headers,
          body: Buffer.concat(chunks).toString('utf8'),
        }),
      );
    });
    outgoing.on('error', reject);
    outgoing.end();
  });
}

const md5 = (text: string) => `"${createHash('md5').update(text).digest('hex')}"`;

describe('versions in a versioned bucket', () => {
  it('keeps a version per write, each read by its id, the plain file holding the current one', async () => {
    // Prepare
    const local = await start();

    // Act
    const first = await put(local, 'a.txt', 'one');
    const second = await put(local, 'a.txt', 'two');
    const head = await local.s3.send(
      new HeadObjectCommand({ Bucket: BUCKET, Key: 'a.txt', VersionId: first }),
    );

    // Assess
    expect(first).not.toBe(second);
    expect(await read(local, 'a.txt')).toBe('two');
    expect(await read(local, 'a.txt', first)).toBe('one');
    expect(await read(local, 'a.txt', second)).toBe('two');
    expect(head).toMatchObject({ VersionId: first, ETag: md5('one'), ContentLength: 3 });
    expect(await readFile(local.path('a.txt'), 'utf8')).toBe('two');
    expect(await history(local)).toEqual([
      ['a.txt', second, true, 'version'],
      ['a.txt', first, false, 'version'],
    ]);
  });

  it('answers a delete without an id with a delete marker, after which the key reads as deleted and the versions stay', async () => {
    // Prepare
    const local = await start();
    const kept = await put(local, 'a.txt', 'kept');

    // Act
    const deleted = await local.s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'a.txt' }));
    const current = await rawRequest(local, 'HEAD', `/${BUCKET}/a.txt`);
    const byMarker = await rawRequest(local, 'GET', `/${BUCKET}/a.txt?versionId=${deleted.VersionId}`);
    const listed = await local.s3.send(new ListObjectsV2Command({ Bucket: BUCKET }));

    // Assess
    expect(deleted).toMatchObject({ DeleteMarker: true, VersionId: expect.stringMatching(/^[0-9a-z]{11}/) });
    expect(current).toMatchObject({
      status: 404,
      headers: { 'x-amz-delete-marker': 'true', 'x-amz-version-id': deleted.VersionId },
    });
    expect(byMarker.status).toBe(405);
    expect(byMarker.body).toContain('<Code>MethodNotAllowed</Code>');
    expect(listed.Contents).toBeUndefined();
    expect(await read(local, 'a.txt', kept)).toBe('kept');
    expect(await history(local)).toEqual([
      ['a.txt', deleted.VersionId, true, 'marker'],
      ['a.txt', kept, false, 'version'],
    ]);
    await expect(stat(local.path('a.txt'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('deletes one version for good by its id, the one before it becoming current again', async () => {
    // Prepare
    const local = await start();
    const first = await put(local, 'a.txt', 'one');
    const second = await put(local, 'a.txt', 'two');

    // Act
    const deleted = await local.s3.send(
      new DeleteObjectCommand({ Bucket: BUCKET, Key: 'a.txt', VersionId: second }),
    );
    const again = await local.s3.send(
      new DeleteObjectCommand({ Bucket: BUCKET, Key: 'a.txt', VersionId: second }),
    );
    const gone = await failure(read(local, 'a.txt', second));

    // Assess
    expect(deleted.VersionId).toBe(second);
    expect(again.$metadata.httpStatusCode).toBe(204);
    expect(gone).toEqual({ name: 'NoSuchVersion', status: 404 });
    expect(await read(local, 'a.txt')).toBe('one');
    expect(await readFile(local.path('a.txt'), 'utf8')).toBe('one');
    expect(await history(local)).toEqual([['a.txt', first, true, 'version']]);
  });

  it('refuses a version id it could not have given with InvalidArgument, and answers NoSuchVersion for one it does not hold', async () => {
    // Prepare
    const local = await start();
    const first = await put(local, 'a.txt', 'one');
    const other = `${first?.slice(0, 11)}${'x'.repeat(21)}`;

    // Act
    const malformed = await failure(read(local, 'a.txt', '3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY'));
    const unknown = await failure(read(local, 'a.txt', other));
    const otherKey = await failure(read(local, 'b.txt', first));

    // Assess
    expect(malformed).toEqual({ name: 'InvalidArgument', status: 400 });
    expect(unknown).toEqual({ name: 'NoSuchVersion', status: 404 });
    expect(otherKey).toEqual({ name: 'NoSuchVersion', status: 404 });
  });

  it('gives a multipart upload a version of its own, with its version id in the answer', async () => {
    // Prepare
    const local = await start();
    const earlier = await put(local, 'big.bin', 'small');
    const body = Buffer.alloc(11 * MiB, 7);

    // Act
    const done = await new Upload({
      client: local.s3,
      params: { Bucket: BUCKET, Key: 'big.bin', Body: body },
      partSize: 5 * MiB,
    }).done();

    // Assess
    expect(done.VersionId).toMatch(/^[0-9a-z]{11}[0-9A-Za-z]{21}$/);
    expect(await history(local)).toEqual([
      ['big.bin', done.VersionId, true, 'version'],
      ['big.bin', earlier, false, 'version'],
    ]);
    expect(await read(local, 'big.bin', earlier)).toBe('small');
  });
});

describe('ListObjectVersions', () => {
  it('pages versions and delete markers with max-keys, key-marker and version-id-marker, each once and in order', async () => {
    // Prepare: three keys, one with three versions and a delete marker.
    const local = await start();
    await put(local, 'a', '1');
    await put(local, 'b', '1');
    await put(local, 'b', '2');
    await local.s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'b' }));
    await put(local, 'b', '3');
    await put(local, 'c', '1');
    const whole = await history(local);

    // Act
    const pages: ListObjectVersionsCommandOutput[] = [];
    let markers: { KeyMarker?: string; VersionIdMarker?: string } = {};
    for (;;) {
      const page = await local.s3.send(
        new ListObjectVersionsCommand({ Bucket: BUCKET, MaxKeys: 2, ...markers }),
      );
      pages.push(page);
      if (page.IsTruncated !== true) break;
      markers = { KeyMarker: page.NextKeyMarker, VersionIdMarker: page.NextVersionIdMarker };
    }

    // Assess
    expect(whole.map(([key, , latest, kind]) => [key, latest, kind])).toEqual([
      ['a', true, 'version'],
      ['b', true, 'version'],
      ['b', false, 'marker'],
      ['b', false, 'version'],
      ['b', false, 'version'],
      ['c', true, 'version'],
    ]);
    const sorted = [...whole].sort((a, b) => (a.join('\n') < b.join('\n') ? -1 : 1));
    expect(pages.flatMap(entries).sort((a, b) => (a.join('\n') < b.join('\n') ? -1 : 1))).toEqual(sorted);
    expect(pages.flatMap((page) => [...(page.Versions ?? []), ...(page.DeleteMarkers ?? [])])).toHaveLength(
      6,
    );
    expect(pages.map((page) => [page.IsTruncated, page.NextKeyMarker])).toEqual([
      [true, 'b'],
      [true, 'b'],
      [false, undefined],
    ]);
    expect(pages[1]?.NextVersionIdMarker).toBe(whole[3]?.[1]);
  });

  it('resumes after a marker version deleted since, as removeAllVersions deletes between pages', async () => {
    // Prepare
    const local = await start();
    for (const body of ['1', '2', '3', '4', '5']) await put(local, 'k', body);
    const first = await local.s3.send(new ListObjectVersionsCommand({ Bucket: BUCKET, MaxKeys: 2 }));
    for (const version of first.Versions ?? []) {
      await local.s3.send(
        new DeleteObjectCommand({ Bucket: BUCKET, Key: 'k', VersionId: version.VersionId }),
      );
    }

    // Act
    const next = await local.s3.send(
      new ListObjectVersionsCommand({
        Bucket: BUCKET,
        KeyMarker: first.NextKeyMarker,
        VersionIdMarker: first.NextVersionIdMarker,
      }),
    );
    const removed = await removeAllVersions(local.s3, BUCKET, 'k');

    // Assess
    expect(next.Versions).toHaveLength(3);
    expect(removed).toBe(3);
    expect(await history(local)).toEqual([]);
    expect(await readdir(join(local.root, '.versions', BUCKET), { recursive: true })).toEqual(
      expect.not.arrayContaining([expect.stringMatching(/^[0-9a-f]{2}\/[0-9a-f]{32}$/)]),
    );
  });

  it("answers in S3's XML: Version and DeleteMarker elements, each with its key, id, IsLatest and LastModified", async () => {
    // Prepare
    const local = await start();
    const version = await put(local, 'x', 'x');
    const { VersionId: marker } = await local.s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'x' }));

    // Act
    const answer = await rawRequest(local, 'GET', `/${BUCKET}?versions&max-keys=1`);

    // Assess
    expect(answer.status).toBe(200);
    expect(answer.body).toContain(
      `<DeleteMarker><Key>x</Key><VersionId>${marker}</VersionId><IsLatest>true</IsLatest><LastModified>${STORED_AT.toISOString()}</LastModified><Owner>`,
    );
    expect(answer.body).toContain(
      `<NextKeyMarker>x</NextKeyMarker><NextVersionIdMarker>${marker}</NextVersionIdMarker>`,
    );
    expect(answer.body).toContain('<IsTruncated>true</IsTruncated>');
    expect(answer.body).not.toContain(`<VersionId>${version}</VersionId>`);
  });
});

describe('versioning off or suspended', () => {
  it('keeps one "null" version without versioning: a write replaces it and a delete removes it', async () => {
    // Prepare
    const local = await start({ versioning: 'off' });

    // Act
    const first = await put(local, 'a', 'one');
    await put(local, 'a', 'two');
    const listed = await history(local);
    const deleted = await local.s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'a' }));

    // Assess
    expect(first).toBeUndefined();
    expect(listed).toEqual([['a', 'null', true, 'version']]);
    expect(deleted.DeleteMarker).toBeUndefined();
    expect(await history(local)).toEqual([]);
    expect(await readdir(join(local.root, '.meta'), { recursive: true })).toEqual([]);
  });

  it('writes "null" versions while suspended, replacing the "null" one and keeping the versions with ids', async () => {
    // Prepare
    const local = await start();
    const kept = await put(local, 'a', 'versioned');
    await local.s3.send(
      new PutBucketVersioningCommand({ Bucket: BUCKET, VersioningConfiguration: { Status: 'Suspended' } }),
    );

    // Act
    await put(local, 'a', 'null one');
    await put(local, 'a', 'null two');
    const listed = await history(local);
    const nullVersion = await read(local, 'a', 'null');
    const deleted = await local.s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'a' }));

    // Assess
    expect(listed).toEqual([
      ['a', 'null', true, 'version'],
      ['a', kept, false, 'version'],
    ]);
    expect(nullVersion).toBe('null two');
    expect((await history(local))[0]).toEqual(['a', 'null', true, 'marker']);
    expect(deleted).toMatchObject({ DeleteMarker: true, VersionId: 'null' });
    expect(await read(local, 'a', kept)).toBe('versioned');
  });
});

describe('LastModified', () => {
  it("is the stand-in's own time of each version, whatever time the file on disk says", async () => {
    // Prepare
    const local = await start();
    const first = await put(local, 'a', 'one');
    local.at(new Date('2026-11-20T12:30:00.000Z'));
    await put(local, 'a', 'two');
    // A person moves the file's mtime a day back.
    await utimes(local.path('a'), new Date('2026-11-19T00:00:00Z'), new Date('2026-11-19T00:00:00Z'));

    // Act
    const listed = await local.s3.send(new ListObjectsV2Command({ Bucket: BUCKET }));
    const older = await local.s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'a', VersionId: first }));
    const versions = await local.s3.send(new ListObjectVersionsCommand({ Bucket: BUCKET }));

    // Assess
    expect(listed.Contents?.map((object) => object.LastModified?.toISOString())).toEqual([
      '2026-11-20T12:30:00.000Z',
    ]);
    expect(older.LastModified?.toISOString()).toBe(STORED_AT.toISOString());
    expect(versions.Versions).toHaveLength(2);
  });

  it('is the time the stand-in first finds a file put into the bucket folder, not the mtime it was given', async () => {
    // Prepare
    const local = await start();
    await mkdir(join(local.root, BUCKET, 'audit', 'r'), { recursive: true });
    await writeFile(local.path('audit/r/000000-Intake.json'), '{"at":"2026-11-01T09:00:00Z"}');
    await utimes(
      local.path('audit/r/000000-Intake.json'),
      new Date('2026-11-01T09:00:00Z'),
      new Date('2026-11-01T09:00:00Z'),
    );
    local.at(new Date('2026-11-20T15:00:00.000Z'));

    // Act
    const listed = await local.s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: 'audit/' }));
    local.at(new Date('2026-11-21T15:00:00.000Z'));
    const later = await local.s3.send(
      new HeadObjectCommand({ Bucket: BUCKET, Key: 'audit/r/000000-Intake.json' }),
    );

    // Assess
    expect(listed.Contents?.map((object) => object.LastModified?.toISOString())).toEqual([
      '2026-11-20T15:00:00.000Z',
    ]);
    expect(later.LastModified?.toISOString()).toBe('2026-11-20T15:00:00.000Z');
    expect(later.VersionId).toMatch(/^[0-9a-z]{11}/);
  });
});

describe('changes made on disk, outside S3', () => {
  it('takes a file replaced on disk as a new version stored now, and keeps the replaced one readable', async () => {
    // Prepare
    const local = await start();
    const original = await put(local, 'r.json', '{"v":1}');
    local.at(new Date('2026-11-20T10:03:00.000Z'));
    // As an editor saves: a new file renamed over the old one.
    await writeFile(join(local.root, 'replacement'), '{"v":2}');
    await rename(join(local.root, 'replacement'), local.path('r.json'));

    // Act
    const listed = await history(local);
    const current = await local.s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'r.json' }));

    // Assess
    expect(listed).toHaveLength(2);
    expect(listed[1]).toEqual(['r.json', original, false, 'version']);
    expect(current).toMatchObject({ ETag: md5('{"v":2}'), VersionId: listed[0]?.[1] });
    expect(current.LastModified?.toISOString()).toBe('2026-11-20T10:03:00.000Z');
    expect(await read(local, 'r.json', original)).toBe('{"v":1}');
  });

  it('takes a file edited in place with its size and mtime put back as a new version; the old bytes are listed, not served', async () => {
    // Prepare
    const local = await start();
    const original = await put(local, 'r.json', '{"v":1}');
    const before = await stat(local.path('r.json'));
    // As `touch -r` puts a time back: to the nanosecond, from a file that kept it.
    const reference = join(local.root, 'reference');
    execFileSync('touch', ['-r', local.path('r.json'), reference]);
    await new Promise((resolve) => setTimeout(resolve, 20));
    await writeFile(local.path('r.json'), '{"v":2}');
    execFileSync('touch', ['-r', reference, local.path('r.json')]);

    // Act
    const listed = await history(local);
    const old = await failure(read(local, 'r.json', original));

    // Assess
    expect((await stat(local.path('r.json'))).mtimeMs).toBe(before.mtimeMs);
    expect(listed.map(([, id, latest]) => [id === original, latest])).toEqual([
      [false, true],
      [true, false],
    ]);
    expect(await read(local, 'r.json')).toBe('{"v":2}');
    expect(old).toEqual({ name: 'InternalError', status: 500 });
  });

  it('takes a plain file removed on disk as a delete marker, and a chain folder removed as one per record', async () => {
    // Prepare
    const local = await start();
    const single = await put(local, 'single.json', 'x');
    const chain = [await put(local, 'audit/c/0.json', '0'), await put(local, 'audit/c/1.json', '1')];
    await rm(local.path('single.json'));
    await rm(join(local.root, BUCKET, 'audit', 'c'), { recursive: true });

    // Act
    const listed = await history(local);
    const current = await local.s3.send(new ListObjectsV2Command({ Bucket: BUCKET }));

    // Assess
    expect(listed.map(([key, , latest, kind]) => [key, latest, kind])).toEqual([
      ['audit/c/0.json', true, 'marker'],
      ['audit/c/0.json', false, 'version'],
      ['audit/c/1.json', true, 'marker'],
      ['audit/c/1.json', false, 'version'],
      ['single.json', true, 'marker'],
      ['single.json', false, 'version'],
    ]);
    expect(current.Contents).toBeUndefined();
    expect(await read(local, 'single.json', single)).toBe('x');
    expect(await read(local, 'audit/c/1.json', chain[1])).toBe('1');
  });

  it('takes a copy of the data dir (new inodes and times, the same bytes) as no change', async () => {
    // Prepare
    const local = await start();
    await put(local, 'a.json', 'a');
    await put(local, 'a.json', 'b');
    await new Upload({
      client: local.s3,
      params: { Bucket: BUCKET, Key: 'big.bin', Body: Buffer.alloc(6 * MiB, 1) },
      partSize: 5 * MiB,
    }).done();
    const before = await history(local);
    await local.server.close();
    const copy = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-copy-'));
    await cp(local.root, copy, { recursive: true });

    // Act
    const moved = await start({ root: copy });
    const after = await history(moved);

    // Assess
    expect(after).toEqual(before);
    expect(await read(moved, 'a.json')).toBe('b');
  });

  it('finishes a write the process was killed in after its rename, and undoes one killed before it', async () => {
    // Prepare: two records left as a write leaves them between its two steps.
    const local = await start();
    const kept = await put(local, 'done', 'new');
    const undone = await put(local, 'undone', 'old');
    const recordOf = (key: string) => join(local.root, '.meta', BUCKET, `${key}.json`);
    const finished = JSON.parse(await readFile(recordOf('done'), 'utf8'));
    const plain = await stat(local.path('done'));
    finished.pending = { ino: plain.ino, size: plain.size, mtimeMs: plain.mtimeMs };
    await writeFile(recordOf('done'), JSON.stringify(finished));
    const cut = JSON.parse(await readFile(recordOf('undone'), 'utf8'));
    const blob = 'ab'.padEnd(32, '0');
    const stagedFile = join(local.root, '.versions', BUCKET, 'ab', blob);
    await mkdir(join(local.root, '.versions', BUCKET, 'ab'), { recursive: true });
    await writeFile(stagedFile, 'lost');
    const staged = {
      ...cut.versions[0],
      versionId: `${'0'.repeat(11)}${'a'.repeat(21)}`,
      etag: md5('lost'),
      blob,
    };
    cut.versions = [staged, ...cut.versions];
    cut.pending = { ino: 1, size: 4, mtimeMs: 1 };
    await writeFile(recordOf('undone'), JSON.stringify(cut));

    // Act
    const listed = await history(local);

    // Assess
    expect(listed).toEqual([
      ['done', kept, true, 'version'],
      ['undone', undone, true, 'version'],
    ]);
    expect(await read(local, 'done')).toBe('new');
    expect(await read(local, 'undone')).toBe('old');
    expect(JSON.parse(await readFile(recordOf('done'), 'utf8')).pending).toBeUndefined();
    await expect(stat(stagedFile)).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

describe('a data dir written before versions', () => {
  /** A bucket as the first layout left it: a plain file and a format-1 sidecar with the file's mtime. */
  async function firstLayout(): Promise<string> {
    const root = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-layout-1-'));
    await mkdir(join(root, BUCKET, 'audit', 'r'), { recursive: true });
    await mkdir(join(root, '.meta', BUCKET, 'audit', 'r'), { recursive: true });
    await mkdir(join(root, '.buckets'), { recursive: true });
    await writeFile(
      join(root, '.buckets', `${BUCKET}.json`),
      JSON.stringify({ format: 1, created: '2026-11-01T00:00:00.000Z', versioning: 'Enabled' }),
    );
    for (const [name, body] of [
      ['0.json', 'first'],
      ['1.json', 'second'],
    ] as const) {
      const path = join(root, BUCKET, 'audit', 'r', name);
      await writeFile(path, body);
      const { mtimeMs } = await stat(path);
      await writeFile(
        join(root, '.meta', BUCKET, 'audit', 'r', `${name}.json`),
        JSON.stringify({
          format: 1,
          etag: md5(body),
          size: body.length,
          mtimeMs,
          lastModified: '2026-11-02T08:00:00.000Z',
          headers: { 'content-type': 'application/json' },
        }),
      );
    }
    return root;
  }

  it('reads each object as its one "null" version with the time its sidecar gave, and adds versions beside it', async () => {
    // Prepare
    const local = await start({ root: await firstLayout() });

    // Act
    const head = await local.s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'audit/r/0.json' }));
    const before = await history(local);
    const added = await put(local, 'audit/r/0.json', 'rewritten');

    // Assess
    expect(head).toMatchObject({ VersionId: 'null', ETag: md5('first'), ContentType: 'application/json' });
    expect(head.LastModified?.toISOString()).toBe('2026-11-02T08:00:00.000Z');
    expect(before).toEqual([
      ['audit/r/0.json', 'null', true, 'version'],
      ['audit/r/1.json', 'null', true, 'version'],
    ]);
    expect(await history(local, 'audit/r/0')).toEqual([
      ['audit/r/0.json', added, true, 'version'],
      ['audit/r/0.json', 'null', false, 'version'],
    ]);
    expect(await read(local, 'audit/r/0.json', 'null')).toBe('first');
  });

  it('takes a file changed or removed since its sidecar was written as a change on disk', async () => {
    // Prepare
    const root = await firstLayout();
    await writeFile(join(root, BUCKET, 'audit', 'r', '0.json'), 'forged');
    await rm(join(root, BUCKET, 'audit', 'r', '1.json'));
    const local = await start({ root });

    // Act
    const listed = await history(local);

    // Assess
    expect(listed.map(([key, id, latest, kind]) => [key, id === 'null', latest, kind])).toEqual([
      ['audit/r/0.json', false, true, 'version'],
      ['audit/r/0.json', true, false, 'version'],
      ['audit/r/1.json', false, true, 'marker'],
      ['audit/r/1.json', true, false, 'version'],
    ]);
    expect(await read(local, 'audit/r/0.json')).toBe('forged');
    expect(await failure(read(local, 'audit/r/0.json', 'null'))).toEqual({
      name: 'InternalError',
      status: 500,
    });
  });
});
