import { mkdtemp, rm } from 'node:fs/promises';
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

describe('Object Lock in COMPLIANCE mode', () => {
  it('stamps the default retention on a new object and refuses its delete, with or without a version id', async () => {
    // Prepare
    const before = Date.now();
    await put('audit/r1/000000-Intake.json');

    // Act
    const retention = await s3.send(
      new GetObjectRetentionCommand({ Bucket: LOCKED, Key: 'audit/r1/000000-Intake.json' }),
    );
    const deleteVersion = failure(
      s3.send(
        new DeleteObjectCommand({ Bucket: LOCKED, Key: 'audit/r1/000000-Intake.json', VersionId: 'null' }),
      ),
    );
    const deleteKey = failure(
      s3.send(new DeleteObjectCommand({ Bucket: LOCKED, Key: 'audit/r1/000000-Intake.json' })),
    );

    // Assess
    expect(retention.Retention?.Mode).toBe('COMPLIANCE');
    const until = retention.Retention?.RetainUntilDate?.getTime() ?? 0;
    expect(until).toBeGreaterThanOrEqual(before + 2 * DAY_MS - 1000);
    expect(until).toBeLessThanOrEqual(Date.now() + 2 * DAY_MS);
    expect(await deleteVersion).toMatchObject({
      name: 'AccessDenied',
      $metadata: { httpStatusCode: 403 },
    });
    expect(await deleteKey).toMatchObject({ name: 'AccessDenied' });
    const still = await s3.send(new GetObjectCommand({ Bucket: LOCKED, Key: 'audit/r1/000000-Intake.json' }));
    expect(await still.Body?.transformToString()).toBe('{}');
  });

  it('refuses an overwrite of a locked object and a shortening of its retention, and allows extending it', async () => {
    // Prepare
    await put('audit/r2/000000-Intake.json', 'first');
    const { Retention } = await s3.send(
      new GetObjectRetentionCommand({ Bucket: LOCKED, Key: 'audit/r2/000000-Intake.json' }),
    );
    const until = Retention?.RetainUntilDate?.getTime() ?? 0;

    // Act
    const overwrite = failure(put('audit/r2/000000-Intake.json', 'second'));
    const shorten = failure(
      s3.send(
        new PutObjectRetentionCommand({
          Bucket: LOCKED,
          Key: 'audit/r2/000000-Intake.json',
          Retention: { Mode: 'COMPLIANCE', RetainUntilDate: new Date(until - DAY_MS) },
        }),
      ),
    );
    const loosen = failure(
      s3.send(
        new PutObjectRetentionCommand({
          Bucket: LOCKED,
          Key: 'audit/r2/000000-Intake.json',
          Retention: { Mode: 'GOVERNANCE', RetainUntilDate: new Date(until + DAY_MS) },
        }),
      ),
    );
    expect(await overwrite).toMatchObject({ name: 'AccessDenied' });
    expect(await shorten).toMatchObject({ name: 'AccessDenied' });
    expect(await loosen).toMatchObject({ name: 'AccessDenied' });
    await s3.send(
      new PutObjectRetentionCommand({
        Bucket: LOCKED,
        Key: 'audit/r2/000000-Intake.json',
        Retention: { Mode: 'COMPLIANCE', RetainUntilDate: new Date(until + DAY_MS) },
      }),
    );
    const after = await s3.send(
      new HeadObjectCommand({ Bucket: LOCKED, Key: 'audit/r2/000000-Intake.json' }),
    );

    // Assess
    expect(after.ObjectLockMode).toBe('COMPLIANCE');
    expect(after.ObjectLockRetainUntilDate?.getTime()).toBe(until + DAY_MS);
    const body = await s3.send(new GetObjectCommand({ Bucket: LOCKED, Key: 'audit/r2/000000-Intake.json' }));
    expect(await body.Body?.transformToString()).toBe('first');
  });

  it('allows the delete once the retention date has passed', async () => {
    // Prepare
    await put('audit/r3/000000-Intake.json');
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 3 * DAY_MS });

    // Act
    await s3.send(
      new DeleteObjectCommand({ Bucket: LOCKED, Key: 'audit/r3/000000-Intake.json', VersionId: 'null' }),
    );
    const gone = failure(
      s3.send(new HeadObjectCommand({ Bucket: LOCKED, Key: 'audit/r3/000000-Intake.json' })),
    );

    // Assess
    expect(await gone).toMatchObject({ $metadata: { httpStatusCode: 404 } });
  });

  it('keeps an object under legal hold past its retention, and reads the hold back', async () => {
    // Prepare
    await put('audit/r4/000000-Intake.json');
    await s3.send(
      new PutObjectLegalHoldCommand({
        Bucket: LOCKED,
        Key: 'audit/r4/000000-Intake.json',
        LegalHold: { Status: 'ON' },
      }),
    );
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 3 * DAY_MS });

    // Act
    const hold = await s3.send(
      new GetObjectLegalHoldCommand({ Bucket: LOCKED, Key: 'audit/r4/000000-Intake.json' }),
    );
    const remove = failure(
      s3.send(new DeleteObjectCommand({ Bucket: LOCKED, Key: 'audit/r4/000000-Intake.json' })),
    );

    // Assess
    expect(hold.LegalHold?.Status).toBe('ON');
    expect(await remove).toMatchObject({ name: 'AccessDenied' });
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
