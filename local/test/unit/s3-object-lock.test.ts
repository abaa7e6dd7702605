import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetBucketLocationCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  GetObjectLegalHoldCommand,
  GetObjectLockConfigurationCommand,
  GetObjectRetentionCommand,
  GetObjectTaggingCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsCommand,
  ListObjectVersionsCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  PutObjectLegalHoldCommand,
  PutObjectLockConfigurationCommand,
  PutObjectRetentionCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { type DiskS3, startDiskS3 } from '#local/aws/s3-disk';

const LOCKED = 'svc-dsr-audit';
const PLAIN = 'svc-dsr-archive';
const DAY_MS = 24 * 3600 * 1000;

let root: string;
let server: DiskS3;
let s3: S3Client;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'svc-dsr-s3-lock-'));
  server = await startDiskS3({ root });
  s3 = new S3Client({
    endpoint: server.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  await s3.send(new CreateBucketCommand({ Bucket: LOCKED, ObjectLockEnabledForBucket: true }));
  await s3.send(
    new PutObjectLockConfigurationCommand({
      Bucket: LOCKED,
      ObjectLockConfiguration: {
        ObjectLockEnabled: 'Enabled',
        Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 2 } },
      },
    }),
  );
  await s3.send(new CreateBucketCommand({ Bucket: PLAIN }));
});

afterEach(() => {
  vi.useRealTimers();
});

afterAll(async () => {
  s3.destroy();
  await server.close();
  await rm(root, { recursive: true, force: true });
});

/** The error a call fails with, caught at once so a later rejection is never left unhandled. */
function failure(call: Promise<unknown>): Promise<unknown> {
  return call.then(
    () => undefined,
    (error: unknown) => error,
  );
}

async function put(key: string, body = '{}', bucket = LOCKED): Promise<void> {
  await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
}

async function putVersion(key: string, body = '{}'): Promise<{ VersionId?: string }> {
  return s3.send(new PutObjectCommand({ Bucket: LOCKED, Key: key, Body: body }));
}

describe('Object Lock in COMPLIANCE mode', () => {
  it('stamps the default retention on a new version and refuses its delete by id; a delete without an id adds a delete marker', async () => {
    // Prepare
    const key = 'audit/r1/000000-Intake.json';
    const before = Date.now();
    const { VersionId } = await putVersion(key);

    // Act
    const retention = await s3.send(new GetObjectRetentionCommand({ Bucket: LOCKED, Key: key }));
    const deleteVersion = failure(s3.send(new DeleteObjectCommand({ Bucket: LOCKED, Key: key, VersionId })));
    const marker = await s3.send(new DeleteObjectCommand({ Bucket: LOCKED, Key: key }));
    const current = failure(s3.send(new GetObjectCommand({ Bucket: LOCKED, Key: key })));
    const kept = await s3.send(new GetObjectCommand({ Bucket: LOCKED, Key: key, VersionId }));
    const listed = await s3.send(new ListObjectVersionsCommand({ Bucket: LOCKED, Prefix: key }));

    // Assess
    expect(retention.Retention?.Mode).toBe('COMPLIANCE');
    const until = retention.Retention?.RetainUntilDate?.getTime() ?? 0;
    expect(until).toBeGreaterThanOrEqual(before + 2 * DAY_MS - 1000);
    expect(until).toBeLessThanOrEqual(Date.now() + 2 * DAY_MS);
    expect(await deleteVersion).toMatchObject({ name: 'AccessDenied', $metadata: { httpStatusCode: 403 } });
    expect(marker).toMatchObject({ DeleteMarker: true, VersionId: expect.any(String) });
    expect(await current).toMatchObject({ name: 'NoSuchKey' });
    expect(await kept.Body?.transformToString()).toBe('{}');
    expect(listed.Versions?.map((version) => [version.VersionId, version.IsLatest])).toEqual([
      [VersionId, false],
    ]);
    expect(listed.DeleteMarkers?.map((found) => [found.VersionId, found.IsLatest])).toEqual([
      [marker.VersionId, true],
    ]);
  });

  it('keeps a locked version through an overwrite, which adds a version, and refuses a shortening of its retention', async () => {
    // Prepare
    const key = 'audit/r2/000000-Intake.json';
    const first = await putVersion(key, 'first');
    const { Retention } = await s3.send(
      new GetObjectRetentionCommand({ Bucket: LOCKED, Key: key, VersionId: first.VersionId }),
    );
    const until = Retention?.RetainUntilDate?.getTime() ?? 0;

    // Act
    const second = await putVersion(key, 'second');
    const retain = (VersionId: string | undefined, Mode: 'COMPLIANCE' | 'GOVERNANCE', at: number) =>
      s3.send(
        new PutObjectRetentionCommand({
          Bucket: LOCKED,
          Key: key,
          VersionId,
          Retention: { Mode, RetainUntilDate: new Date(at) },
        }),
      );
    const shorten = failure(retain(first.VersionId, 'COMPLIANCE', until - DAY_MS));
    const loosen = failure(retain(first.VersionId, 'GOVERNANCE', until + DAY_MS));
    await retain(first.VersionId, 'COMPLIANCE', until + DAY_MS);
    const older = await s3.send(
      new HeadObjectCommand({ Bucket: LOCKED, Key: key, VersionId: first.VersionId }),
    );
    const latest = await s3.send(new GetObjectCommand({ Bucket: LOCKED, Key: key }));
    const original = await s3.send(
      new GetObjectCommand({ Bucket: LOCKED, Key: key, VersionId: first.VersionId }),
    );

    // Assess
    expect(second.VersionId).not.toBe(first.VersionId);
    expect(await shorten).toMatchObject({ name: 'AccessDenied' });
    expect(await loosen).toMatchObject({ name: 'AccessDenied' });
    expect(older.ObjectLockMode).toBe('COMPLIANCE');
    expect(older.ObjectLockRetainUntilDate?.getTime()).toBe(until + DAY_MS);
    // The extension is the first version's alone.
    expect(latest.ObjectLockRetainUntilDate?.getTime()).not.toBe(until + DAY_MS);
    expect(latest.VersionId).toBe(second.VersionId);
    expect(await latest.Body?.transformToString()).toBe('second');
    expect(await original.Body?.transformToString()).toBe('first');
  });

  it('allows the delete of a version by its id once its retention date has passed', async () => {
    // Prepare
    const key = 'audit/r3/000000-Intake.json';
    const { VersionId } = await putVersion(key);
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 3 * DAY_MS });

    // Act
    const deleted = await s3.send(new DeleteObjectCommand({ Bucket: LOCKED, Key: key, VersionId }));
    const gone = failure(s3.send(new HeadObjectCommand({ Bucket: LOCKED, Key: key })));
    const listed = await s3.send(new ListObjectVersionsCommand({ Bucket: LOCKED, Prefix: key }));

    // Assess
    expect(deleted.VersionId).toBe(VersionId);
    expect(await gone).toMatchObject({ $metadata: { httpStatusCode: 404 } });
    expect(listed.Versions).toBeUndefined();
  });

  it('keeps a version under legal hold past its retention, and reads the hold back', async () => {
    // Prepare
    const key = 'audit/r4/000000-Intake.json';
    const { VersionId } = await putVersion(key);
    await s3.send(
      new PutObjectLegalHoldCommand({ Bucket: LOCKED, Key: key, VersionId, LegalHold: { Status: 'ON' } }),
    );
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 3 * DAY_MS });

    // Act
    const hold = await s3.send(new GetObjectLegalHoldCommand({ Bucket: LOCKED, Key: key }));
    const remove = failure(s3.send(new DeleteObjectCommand({ Bucket: LOCKED, Key: key, VersionId })));

    // Assess
    expect(hold.LegalHold?.Status).toBe('ON');
    expect(await remove).toMatchObject({ name: 'AccessDenied' });
  });

  it('removes a delete marker by its id, which makes the version before it current again', async () => {
    // Prepare
    const key = 'audit/r5/000000-Intake.json';
    const { VersionId } = await putVersion(key, 'kept');
    const marker = await s3.send(new DeleteObjectCommand({ Bucket: LOCKED, Key: key }));

    // Act
    const removed = await s3.send(
      new DeleteObjectCommand({ Bucket: LOCKED, Key: key, VersionId: marker.VersionId }),
    );
    const current = await s3.send(new GetObjectCommand({ Bucket: LOCKED, Key: key }));
    const markerRead = failure(
      s3.send(new HeadObjectCommand({ Bucket: LOCKED, Key: key, VersionId: marker.VersionId })),
    );

    // Assess
    expect(removed).toMatchObject({ DeleteMarker: true, VersionId: marker.VersionId });
    expect(current.VersionId).toBe(VersionId);
    expect(await current.Body?.transformToString()).toBe('kept');
    expect(await readFile(join(root, LOCKED, ...key.split('/')), 'utf8')).toBe('kept');
    expect(await markerRead).toMatchObject({ $metadata: { httpStatusCode: 404 } });
  });

  it('answers the lock configuration and versioning of the bucket, and refuses lock settings on a plain bucket', async () => {
    // Act
    const lock = await s3.send(new GetObjectLockConfigurationCommand({ Bucket: LOCKED }));
    const versioning = await s3.send(new GetBucketVersioningCommand({ Bucket: LOCKED }));
    const plainLock = failure(s3.send(new GetObjectLockConfigurationCommand({ Bucket: PLAIN })));
    const plainVersioning = await s3.send(new GetBucketVersioningCommand({ Bucket: PLAIN }));
    const lockedWrite = failure(
      s3.send(
        new PutObjectCommand({
          Bucket: PLAIN,
          Key: 'x',
          Body: 'x',
          ObjectLockMode: 'COMPLIANCE',
          ObjectLockRetainUntilDate: new Date(Date.now() + DAY_MS),
        }),
      ),
    );

    // Assess
    expect(lock.ObjectLockConfiguration).toEqual({
      ObjectLockEnabled: 'Enabled',
      Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 2 } },
    });
    expect(versioning.Status).toBe('Enabled');
    expect(plainVersioning.Status).toBeUndefined();
    expect(await plainLock).toMatchObject({ name: 'ObjectLockConfigurationNotFoundError' });
    expect(await lockedWrite).toMatchObject({ name: 'InvalidRequest' });
  });

  it('refuses to suspend versioning on a bucket with Object Lock', async () => {
    // Act
    const suspend = failure(
      s3.send(
        new PutBucketVersioningCommand({ Bucket: LOCKED, VersioningConfiguration: { Status: 'Suspended' } }),
      ),
    );

    // Assess
    expect(await suspend).toMatchObject({ name: 'InvalidBucketState' });
  });
});

describe('inspection calls', () => {
  it('lists the buckets with their creation dates, and gives us-east-1 as an empty location', async () => {
    // Act
    const { Buckets } = await s3.send(new ListBucketsCommand({}));
    const location = await s3.send(new GetBucketLocationCommand({ Bucket: PLAIN }));

    // Assess
    expect(Buckets?.map((bucket) => bucket.Name)).toEqual([PLAIN, LOCKED]);
    expect(Buckets?.every((bucket) => bucket.CreationDate instanceof Date)).toBe(true);
    expect(location.LocationConstraint).toBeUndefined();
  });

  it('answers the tags an object was written with', async () => {
    // Prepare
    await s3.send(
      new PutObjectCommand({
        Bucket: PLAIN,
        Key: 'exports/a.zip',
        Body: 'zip',
        Tagging: 'request-type=access&x=a%20b',
      }),
    );

    // Act
    const { TagSet } = await s3.send(new GetObjectTaggingCommand({ Bucket: PLAIN, Key: 'exports/a.zip' }));

    // Assess
    expect(TagSet).toEqual([
      { Key: 'request-type', Value: 'access' },
      { Key: 'x', Value: 'a b' },
    ]);
  });

  it('lists with ListObjects (version 1) and url encoding, keys with spaces and plus signs intact', async () => {
    // Prepare
    await put('listing/a b+c.json', '1', PLAIN);
    await put('listing/d/e.json', '2', PLAIN);

    // Act
    const encoded = await s3.send(
      new ListObjectsCommand({ Bucket: PLAIN, Prefix: 'listing/', Delimiter: '/', EncodingType: 'url' }),
    );

    // Assess
    expect(encoded.EncodingType).toBe('url');
    expect(encoded.Contents?.map((item) => item.Key)).toEqual(['listing/a%20b%2Bc.json']);
    expect(encoded.CommonPrefixes).toEqual([{ Prefix: 'listing/d/' }]);
  });
});
