import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliError } from '../../../bin/cli/io.ts';
import { ENDPOINTS_FILE, type LocalEndpoints } from '../../../bin/cli/local-endpoints.ts';
import { explainAwsError, openContext, resolveTarget } from '../../../bin/cli/target.ts';
import { NAMES, REQUEST_ID } from './helpers.ts';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-dsr-target-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function json(name: string, value: unknown): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
}

async function refusal(promise: Promise<unknown>): Promise<CliError> {
  const caught = await promise.then(
    () => undefined,
    (error: unknown) => error,
  );
  if (!(caught instanceof CliError)) throw new Error(`expected a CliError, got ${String(caught)}`);
  return caught;
}

describe('resolveTarget for AWS', () => {
  it('reads the only stack of a cdk outputs file and defaults to the aws target', async () => {
    const path = await json('one.json', { SvcDsrStack: { ...NAMES, ExtraOutput: 'x' } });
    const target = await resolveTarget({ stackOutputs: path });
    expect(target).toMatchObject({ kind: 'aws', names: NAMES, source: path });
    // Without a Region output, the region is the state machine's (an outputs file of an older deploy).
    expect(target).toMatchObject({ region: 'eu-west-1' });
  });

  it('needs --stack when the file holds several stacks, and takes a Region output', async () => {
    const path = await json('two.json', { Prod: { ...NAMES, Region: 'eu-central-1' }, Dev: NAMES });
    const missing = await refusal(resolveTarget({ stackOutputs: path }));
    expect(missing.exitCode).toBe(2);
    expect(missing.message).toContain('several stacks ("Prod", "Dev"); pick one with --stack NAME');
    expect(await resolveTarget({ stackOutputs: path, stack: 'Prod' })).toMatchObject({
      region: 'eu-central-1',
    });
    expect((await refusal(resolveTarget({ stackOutputs: path, stack: 'Test' }))).message).toContain(
      'has no stack "Test"',
    );
  });

  it('names the outputs a stack lacks', async () => {
    const { StateMachineArn: _arn, LedgerTableName: _table, ...partial } = NAMES;
    const path = await json('partial.json', { Old: partial });
    const error = await refusal(resolveTarget({ stackOutputs: path }));
    expect(error.exitCode).toBe(2);
    expect(error.message).toContain('lacks or has invalid LedgerTableName, StateMachineArn');
  });

  it('says how to create a missing or broken outputs file (exit 2)', async () => {
    const missing = await refusal(resolveTarget({ target: 'aws', stackOutputs: join(dir, 'nope.json') }));
    expect(missing.exitCode).toBe(2);
    expect(missing.message).toContain('does not exist; write it with `npx cdk deploy --outputs-file <file>`');
    const broken = await refusal(resolveTarget({ stackOutputs: await json('broken.json', '{"a":') }));
    expect(broken.message).toContain('is not JSON');
  });

  it('reads a flat config file', async () => {
    const path = await json('config.json', { ...NAMES, Region: 'us-west-2' });
    expect(await resolveTarget({ config: path })).toMatchObject({
      kind: 'aws',
      names: NAMES,
      region: 'us-west-2',
    });
  });

  it('refuses contradictory or incomplete target flags (exit 2)', async () => {
    const path = await json('flags.json', NAMES);
    expect((await refusal(resolveTarget({ target: 'aws' }))).message).toContain('pass --stack-outputs FILE');
    expect((await refusal(resolveTarget({ target: 'local', config: path }))).message).toContain(
      '--config is for --target aws',
    );
    expect((await refusal(resolveTarget({ target: 'gcp' }))).message).toContain(
      '--target: must be "aws" or "local"',
    );
    expect((await refusal(resolveTarget({ stackOutputs: path, config: path }))).exitCode).toBe(2);
  });
});

describe('resolveTarget for local mode', () => {
  it('is the default and points at svc-dsr local --serve when nothing serves (exit 1)', async () => {
    const error = await refusal(resolveTarget({ dataDir: join(dir, 'empty') }));
    expect(error.exitCode).toBe(1);
    expect(error.message).toContain('svc-dsr local --serve');
  });

  it('builds clients on the local endpoints, S3 path-style', async () => {
    // Prepare
    const dataDir = join(dir, 'serving');
    await mkdir(dataDir);
    const endpoints: LocalEndpoints = {
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      endpoints: {
        sqs: 'http://127.0.0.1:4101',
        s3: 'http://127.0.0.1:4101',
        dynamodb: 'http://127.0.0.1:4102',
        sfn: 'http://127.0.0.1:4103',
      },
      outputs: NAMES,
      pid: process.pid,
      platform: { url: 'http://127.0.0.1:4104', spot_id: 'sp_demo' },
    };
    await writeFile(join(dataDir, ENDPOINTS_FILE), JSON.stringify(endpoints));
    // Act
    const target = await resolveTarget({ dataDir });
    const context = openContext(target);
    try {
      // Assess
      expect(target).toMatchObject({ kind: 'local', names: NAMES, dataDir });
      expect(context.target).toBe('local');
      expect(context.ledger.tableName).toBe(NAMES.LedgerTableName);
      expect(context.s3.config.forcePathStyle).toBe(true);
      expect((await context.sfn.config.endpoint?.())?.port).toBe(4103);
      expect((await context.dynamo.config.endpoint?.())?.port).toBe(4102);
      expect(await context.sqs.config.region()).toBe('us-east-1');
    } finally {
      context.close();
    }
  });

  it('gives up on a local mode that accepts connections and never answers (stopped), saying so', async () => {
    // Prepare: a server that takes every connection and answers nothing, as a stopped process does.
    const held = new Set<Socket>();
    const silent = createServer((socket) => held.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const address = silent.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    const url = `http://127.0.0.1:${address.port}`;
    const dataDir = join(dir, 'stopped');
    await mkdir(dataDir);
    const endpoints: LocalEndpoints = {
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      endpoints: { sqs: url, s3: url, dynamodb: url, sfn: url },
      outputs: NAMES,
      pid: process.pid,
      platform: { url, spot_id: 'sp_demo' },
    };
    await writeFile(join(dataDir, ENDPOINTS_FILE), JSON.stringify(endpoints));
    const context = openContext(await resolveTarget({ dataDir }), undefined, 200);
    try {
      // Act
      const started = Date.now();
      const error = await context.ledger.get(REQUEST_ID).then(
        () => undefined,
        (failure: unknown) => explainAwsError(failure, 'local'),
      );

      // Assess: three tries of 200 ms (and the SDK's backoff between them), then a clear message.
      expect(error).toBeInstanceOf(CliError);
      expect(error).toMatchObject({
        exitCode: 1,
        message: expect.stringContaining('did not answer in time'),
      });
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      context.close();
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('refuses an endpoints file that is not JSON, saying to restart local mode', async () => {
    const dataDir = join(dir, 'garbled');
    await mkdir(dataDir);
    await writeFile(join(dataDir, ENDPOINTS_FILE), '{');
    const error = await refusal(resolveTarget({ dataDir }));
    expect(error.exitCode).toBe(1);
    expect(error.message).toContain('svc-dsr local --serve');
  });
});
