/**
 * The AWS CLI, as shipped, pointed at a served local mode: every inspection command the docs give
 * (docs/local.md, "Inspecting local mode with AWS tools") succeeds, and what it prints is what the
 * product stored. The CLI is a test prerequisite like chromium (.ci/run installs Debian's awscli
 * when no `aws` is on the PATH). SQS is asked with every CLI found: aws-cli 1.x speaks SQS's JSON
 * protocol, 2.x its query (XML) protocol.
 */
import { execFile } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, realpathSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type LocalMode, startLocalMode } from '#local/local-mode';
import { LOCAL_NAMES } from '#local/runtime/workflow';

const run = promisify(execFile);

let workdir: string;
let mode: LocalMode;
let s3: S3Client;
let clis: string[];
let env: NodeJS.ProcessEnv;
const accessId = randomUUID();

/** The CLIs to try: `aws` on the PATH, and Debian's /usr/bin/aws when the PATH's is another one. */
async function findClis(): Promise<string[]> {
  const onPath = (process.env.PATH ?? '')
    .split(':')
    .map((folder) => join(folder, 'aws'))
    .find((candidate) => existsSync(candidate));
  if (onPath === undefined) throw new Error("no AWS CLI on the PATH: install Debian's awscli (see .ci/run)");
  const debian = '/usr/bin/aws';
  return existsSync(debian) && realpathSync(onPath) !== realpathSync(debian) ? [onPath, debian] : [onPath];
}

/** Runs one CLI command against the service's local endpoint and parses its JSON output. */
async function aws(endpoint: string, args: readonly string[], cli = clis[0] ?? 'aws'): Promise<unknown> {
  const { stdout } = await run(cli, ['--endpoint-url', endpoint, '--output', 'json', ...args], {
    env,
    maxBuffer: 16 * 1024 * 1024,
  });
  return stdout.trim() === '' ? {} : JSON.parse(stdout);
}

/** A command that must fail: its stderr. */
async function awsFails(endpoint: string, args: readonly string[]): Promise<string> {
  return run(clis[0] ?? 'aws', ['--endpoint-url', endpoint, ...args], { env }).then(
    () => 'succeeded',
    (error: { stderr?: string }) => error.stderr ?? '',
  );
}

async function storedKeys(bucket: string, prefix = ''): Promise<string[]> {
  const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
  return (listed.Contents ?? []).map((item) => item.Key ?? '');
}

async function storedBytes(bucket: string, key: string): Promise<Buffer> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from((await answer.Body?.transformToByteArray()) ?? []);
}

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-aws-cli-'));
  const config = join(workdir, 'aws-config');
  const credentials = join(workdir, 'aws-credentials');
  await writeFile(config, '[default]\nregion = us-east-1\n');
  await writeFile(credentials, '[default]\naws_access_key_id = local\naws_secret_access_key = local\n');
  env = {
    PATH: process.env.PATH,
    HOME: workdir,
    AWS_CONFIG_FILE: config,
    AWS_SHARED_CREDENTIALS_FILE: credentials,
    AWS_PAGER: '',
    AWS_EC2_METADATA_DISABLED: 'true',
  };
  clis = await findClis();
  mode = await startLocalMode({ dataDir: join(workdir, 'data'), logSink: () => {} });
  s3 = new S3Client(mode.aws.clientConfig('s3'));
  const now = Date.now();
  await mode.submit([
    JSON.stringify({
      request_id: accessId,
      type: 'access',
      regulation: 'gdpr',
      primary_key: 'u-alice',
      received_at: new Date(now - 3_600_000).toISOString(),
      verification: {
        method: 'email_link',
        verified_by: 'privacy-team',
        verified_at: new Date(now - 60_000).toISOString(),
      },
    }),
    'not json',
  ]);
  await mode.idle();
}, 120_000);

afterAll(async () => {
  s3?.destroy();
  await mode?.close();
  await rm(workdir, { recursive: true, force: true });
});

describe('S3, as the auditor inspects it', { timeout: 90_000 }, () => {
  it('lists the buckets and the audit chain the product stored, with ls, list-objects and list-object-versions', async () => {
    // Prepare
    const endpoint = mode.aws.endpoints.s3;
    const prefix = `audit/${accessId}/`;
    const stored = await storedKeys(LOCAL_NAMES.auditBucket, prefix);
    const keysOf = (listed: unknown, field: 'Contents' | 'Versions') =>
      (z.looseObject({ [field]: z.array(z.object({ Key: z.string() })) }).parse(listed)[field] ?? []).map(
        (item) => item.Key,
      );
    const bucketsSchema = z.object({ Buckets: z.array(z.object({ Name: z.string() })) });

    // Act: `s3 ls` lists with ListObjectsV2 and encoding-type=url; s3api with ListObjects and ListObjectVersions
    const [buckets, lsText, v1, versions] = await Promise.all([
      aws(endpoint, ['s3api', 'list-buckets']),
      run(
        clis[0] ?? 'aws',
        ['--endpoint-url', endpoint, 's3', 'ls', `s3://${LOCAL_NAMES.auditBucket}/${prefix}`],
        {
          env,
        },
      ).then((result) => result.stdout),
      aws(endpoint, ['s3api', 'list-objects', '--bucket', LOCAL_NAMES.auditBucket, '--prefix', prefix]),
      aws(endpoint, [
        's3api',
        'list-object-versions',
        '--bucket',
        LOCAL_NAMES.auditBucket,
        '--prefix',
        prefix,
      ]),
    ]);

    // Assess
    expect(stored.length).toBeGreaterThan(1);
    expect(bucketsSchema.parse(buckets).Buckets.map((bucket) => bucket.Name)).toEqual(
      expect.arrayContaining([LOCAL_NAMES.archiveBucket, LOCAL_NAMES.auditBucket]),
    );
    for (const key of stored) expect(lsText).toContain(key.split('/').at(-1));
    expect(keysOf(v1, 'Contents')).toEqual(stored);
    expect(keysOf(versions, 'Versions')).toEqual(stored);
  });

  it('downloads the audit chain with s3 cp --recursive, byte for byte what the product stored', async () => {
    // Prepare
    const target = join(workdir, 'chain');
    const stored = await storedKeys(LOCAL_NAMES.auditBucket, `audit/${accessId}/`);
    const source = `s3://${LOCAL_NAMES.auditBucket}/audit/${accessId}/`;

    // Act
    await run(
      clis[0] ?? 'aws',
      ['--endpoint-url', mode.aws.endpoints.s3, 's3', 'cp', source, target, '--recursive'],
      {
        env,
      },
    );

    // Assess
    expect((await readdir(target)).sort()).toEqual(stored.map((key) => key.split('/').at(-1)).sort());
    for (const key of stored) {
      const downloaded = await readFile(join(target, key.split('/').at(-1) ?? ''));
      expect(downloaded.equals(await storedBytes(LOCAL_NAMES.auditBucket, key))).toBe(true);
    }
  });

  it('reads an audit record locked in COMPLIANCE mode, and cannot delete it', async () => {
    // Prepare
    const endpoint = mode.aws.endpoints.s3;
    const [key = ''] = await storedKeys(LOCAL_NAMES.auditBucket, `audit/${accessId}/`);
    const bytes = await storedBytes(LOCAL_NAMES.auditBucket, key);
    const object = ['--bucket', LOCAL_NAMES.auditBucket, '--key', key];
    const bucket = ['--bucket', LOCAL_NAMES.auditBucket];

    const headAnswer = await aws(endpoint, ['s3api', 'head-object', ...object]);
    const { VersionId: versionId } = z.object({ VersionId: z.string().min(1) }).parse(headAnswer);

    // Act
    const [retentionAnswer, lock, versioning, deleteVersion] = await Promise.all([
      aws(endpoint, ['s3api', 'get-object-retention', ...object]),
      aws(endpoint, ['s3api', 'get-object-lock-configuration', ...bucket]),
      aws(endpoint, ['s3api', 'get-bucket-versioning', ...bucket]),
      awsFails(endpoint, ['s3api', 'delete-object', ...object, '--version-id', versionId]),
      aws(endpoint, ['s3api', 'put-object-legal-hold', ...object, '--legal-hold', 'Status=ON']),
    ]);
    const hold = await aws(endpoint, ['s3api', 'get-object-legal-hold', ...object]);

    // Assess
    const head = z
      .object({
        ContentLength: z.number(),
        ETag: z.string(),
        ObjectLockMode: z.string(),
        ObjectLockRetainUntilDate: z.string(),
      })
      .parse(headAnswer);
    const retention = z
      .object({ Retention: z.object({ Mode: z.string(), RetainUntilDate: z.string() }) })
      .parse(retentionAnswer);
    expect(head.ContentLength).toBe(bytes.length);
    expect(head.ETag).toBe(`"${createHash('md5').update(bytes).digest('hex')}"`);
    expect(head.ObjectLockMode).toBe('COMPLIANCE');
    expect(retention.Retention.Mode).toBe('COMPLIANCE');
    expect(Date.parse(retention.Retention.RetainUntilDate)).toBe(Date.parse(head.ObjectLockRetainUntilDate));
    expect(Date.parse(retention.Retention.RetainUntilDate)).toBeGreaterThan(
      Date.now() + 700 * 24 * 3600 * 1000,
    );
    expect(lock).toEqual({
      ObjectLockConfiguration: {
        ObjectLockEnabled: 'Enabled',
        Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 731 } },
      },
    });
    expect(versioning).toEqual({ Status: 'Enabled' });
    expect(hold).toEqual({ LegalHold: { Status: 'ON' } });
    expect(deleteVersion).toContain('AccessDenied');
    expect((await storedBytes(LOCAL_NAMES.auditBucket, key)).equals(bytes)).toBe(true);
  });

  it('reads the archive bucket: its location and the tags the product gave the archive', async () => {
    // Prepare
    const endpoint = mode.aws.endpoints.s3;
    const [archive = ''] = await storedKeys(LOCAL_NAMES.archiveBucket);

    // Act
    const [location, tagging] = await Promise.all([
      aws(endpoint, ['s3api', 'get-bucket-location', '--bucket', LOCAL_NAMES.archiveBucket]),
      aws(endpoint, ['s3api', 'get-object-tagging', '--bucket', LOCAL_NAMES.archiveBucket, '--key', archive]),
    ]);

    // Assess
    expect(archive).not.toBe('');
    expect(location).toEqual({ LocationConstraint: null });
    expect(tagging).toEqual({
      TagSet: [{ Key: 'request-type', Value: 'access' }],
      VersionId: expect.stringMatching(/^[A-Za-z0-9._-]{32}$/),
    });
  });
});

describe('SQS, with each CLI found (JSON and query protocols)', { timeout: 90_000 }, () => {
  it('lists the queues, reads their attributes and the quarantined line the product kept', async () => {
    // Prepare
    const endpoint = mode.aws.endpoints.sqs;
    const { intake, quarantine } = mode.workflow.queueUrls;
    const receive = ['sqs', 'receive-message', '--queue-url', quarantine, '--visibility-timeout', '0'];
    const all = ['--message-attribute-names', 'All', '--attribute-names', 'All'];

    // Act: every CLI receives the quarantined line; one lists the queues, the other reads attributes
    const answers = await Promise.all(
      clis.map((cli, index) =>
        Promise.all([
          index % 2 === 0
            ? aws(endpoint, ['sqs', 'list-queues'], cli)
            : aws(
                endpoint,
                ['sqs', 'get-queue-attributes', '--queue-url', intake, '--attribute-names', 'All'],
                cli,
              ),
          aws(endpoint, [...receive, ...all], cli),
        ]),
      ),
    );

    // Assess
    for (const [index, [listedOrAttributes, received]] of answers.entries()) {
      if (index % 2 === 0) {
        const { QueueUrls } = z.object({ QueueUrls: z.array(z.string()) }).parse(listedOrAttributes);
        expect(QueueUrls).toEqual(expect.arrayContaining([intake, quarantine]));
      } else {
        const { Attributes } = z
          .object({ Attributes: z.record(z.string(), z.string()) })
          .parse(listedOrAttributes);
        expect(Attributes.QueueArn).toMatch(/:svc-dsr-intake$/);
      }
      const { Messages } = z
        .object({ Messages: z.array(z.looseObject({ Body: z.string() })) })
        .parse(received);
      expect(Messages).toHaveLength(1);
      expect(JSON.stringify(Messages[0])).toContain('not json');
    }
  });
});

describe('Step Functions, as the engineer inspects it', { timeout: 90_000 }, () => {
  it('lists the machine and its executions, describes one and gives the history the run went through', async () => {
    // Prepare
    const endpoint = mode.shim.endpoint;
    const machineArn = mode.shim.stateMachineArn;
    const list = ['stepfunctions', 'list-executions', '--state-machine-arn', machineArn];

    // Act
    const [machines, listedAnswer] = await Promise.all([
      aws(endpoint, ['stepfunctions', 'list-state-machines']),
      aws(endpoint, [...list, '--status-filter', 'SUCCEEDED', '--max-items', '1']),
    ]);
    const listed = z
      .object({
        executions: z.array(z.object({ executionArn: z.string(), name: z.string(), status: z.string() })),
      })
      .parse(listedAnswer);
    const [execution] = listed.executions;
    const arn = execution?.executionArn ?? '';
    const [describedAnswer, historyAnswer] = await Promise.all([
      aws(endpoint, ['stepfunctions', 'describe-execution', '--execution-arn', arn]),
      aws(endpoint, ['stepfunctions', 'get-execution-history', '--execution-arn', arn]),
    ]);

    // Assess
    const described = z.object({ status: z.string(), input: z.string() }).parse(describedAnswer);
    const history = z
      .object({
        events: z.array(
          z.looseObject({
            id: z.number(),
            type: z.string(),
            stateEnteredEventDetails: z.object({ name: z.string() }).optional(),
          }),
        ),
      })
      .parse(historyAnswer);
    const recordFile = join(workdir, 'data', 'executions', `${execution?.name}.json`);
    const record = z
      .object({
        events: z.array(
          z.looseObject({ type: z.string(), state: z.object({ name: z.string() }).optional() }),
        ),
      })
      .parse(JSON.parse(await readFile(recordFile, 'utf8')));
    expect(machines).toMatchObject({ stateMachines: [{ stateMachineArn: machineArn, type: 'STANDARD' }] });
    expect(listed.executions).toHaveLength(1);
    expect(execution).toMatchObject({ name: accessId, status: 'SUCCEEDED' });
    expect(described.status).toBe('SUCCEEDED');
    expect(JSON.parse(described.input)).toMatchObject({ request_id: accessId });
    expect(history.events[0]?.type).toBe('ExecutionStarted');
    expect(history.events.at(-1)?.type).toBe('ExecutionSucceeded');
    expect(history.events.map((event) => event.stateEnteredEventDetails?.name).filter(Boolean)).toEqual(
      record.events.filter((event) => event.type === 'StateEntered').map((event) => event.state?.name),
    );
    expect(history.events.some((event) => event.type === 'TaskStateEntered')).toBe(true);
  });
});
