import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient, ListTablesCommand, ThrottlingException } from '@aws-sdk/client-dynamodb';
import { CreateBucketCommand, ListBucketsCommand, S3Client } from '@aws-sdk/client-s3';
import { DescribeExecutionCommand, SFNClient, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { ListQueuesCommand, RequestThrottled, SQSClient } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it } from 'vitest';
import { type AwsFaultService, AwsThrottle, loadAwsFaultsFile } from '#local/aws/aws-faults';
import { type AwsStandIns, startAwsStandIns } from '#local/aws/aws-standins';
import { type SfnShim, startSfnShim } from '#local/aws/sfn-shim';
import { openExecutions, type Registry } from '#local/runtime/executions';
import { LocalStateMachine } from '#local/runtime/sfn-runner';
import { localFunctionArn, type ResolvedStateMachine } from '../../../lib/asl.ts';

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The first seed whose draws for `service` at `rate` start with `pattern` (true: throttled). */
function seedFor(service: AwsFaultService, rate: number, pattern: boolean[]): number {
  for (let seed = 1; seed < 100_000; seed += 1) {
    const throttle = new AwsThrottle({ seed, throttle_rate: rate, services: [service] });
    if (pattern.every((expected) => throttle.throttles(service) === expected)) return seed;
  }
  throw new Error(`no seed gives ${pattern.join(',')} for ${service}`);
}

/** Throttled, throttled, then not: one call without retries fails, the next call's retry succeeds. */
const FAIL_THEN_RETRY = [true, true, false];

async function standIns(
  service: 'dynamodb' | 's3' | 'sqs',
  seed: number,
  s3Root?: string,
): Promise<AwsStandIns> {
  const aws = await startAwsStandIns({
    faults: { seed, throttle_rate: 0.5, services: [service] },
    ...(s3Root === undefined ? {} : { s3Root }),
  });
  cleanups.push(() => aws.close());
  return aws;
}

function client<T extends { destroy(): void }>(made: T): T {
  cleanups.push(async () => made.destroy());
  return made;
}

describe('AWS throttles in local mode, as the real SDK clients read them', () => {
  it('DynamoDB answers ThrottlingException, and the SDK retry then succeeds', async () => {
    // Prepare
    const aws = await standIns('dynamodb', seedFor('dynamodb', 0.5, FAIL_THEN_RETRY));
    const once = client(new DynamoDBClient({ ...aws.clientConfig('dynamodb'), maxAttempts: 1 }));
    const retrying = client(new DynamoDBClient(aws.clientConfig('dynamodb')));

    // Act
    const refused = await once.send(new ListTablesCommand({})).catch((error: unknown) => error);
    const answered = await retrying.send(new ListTablesCommand({}));

    // Assess
    expect(refused).toBeInstanceOf(ThrottlingException);
    expect(refused).toMatchObject({ $metadata: { httpStatusCode: 400 } });
    expect(answered.$metadata).toMatchObject({ httpStatusCode: 200, attempts: 2 });
  });

  it.each([
    ['on disk', true],
    ['in fauxqs', false],
  ])('S3 %s answers 503 SlowDown, and the SDK retry then succeeds', async (_where, onDisk) => {
    // Prepare
    const root = onDisk ? await mkdtemp(join(tmpdir(), 'aws-faults-s3-')) : undefined;
    if (root !== undefined) cleanups.unshift(() => rm(root, { recursive: true, force: true }));
    const aws = await standIns('s3', seedFor('s3', 0.5, FAIL_THEN_RETRY), root);
    const once = client(new S3Client({ ...aws.clientConfig('s3'), maxAttempts: 1 }));
    const retrying = client(new S3Client(aws.clientConfig('s3')));

    // Act
    const refused = await once
      .send(new CreateBucketCommand({ Bucket: 'refused' }))
      .catch((error: unknown) => error);
    const answered = await retrying.send(new CreateBucketCommand({ Bucket: 'answered' }));

    // Assess
    expect(refused).toMatchObject({ name: 'SlowDown', $metadata: { httpStatusCode: 503 } });
    expect(answered.$metadata).toMatchObject({ httpStatusCode: 200, attempts: 2 });
  });

  it('SQS answers RequestThrottled, and the SDK retry then succeeds', async () => {
    // Prepare
    const aws = await standIns('sqs', seedFor('sqs', 0.5, FAIL_THEN_RETRY));
    const once = client(new SQSClient({ ...aws.clientConfig('sqs'), maxAttempts: 1 }));
    const retrying = client(new SQSClient(aws.clientConfig('sqs')));

    // Act
    const refused = await once.send(new ListQueuesCommand({})).catch((error: unknown) => error);
    const answered = await retrying.send(new ListQueuesCommand({}));

    // Assess
    expect(refused).toBeInstanceOf(RequestThrottled);
    expect(answered.$metadata).toMatchObject({ httpStatusCode: 200, attempts: 2 });
  });

  it('leaves the services it does not list alone', async () => {
    // Prepare
    const aws = await startAwsStandIns({ faults: { seed: 1, throttle_rate: 1, services: ['s3'] } });
    cleanups.push(() => aws.close());
    const dynamo = client(new DynamoDBClient({ ...aws.clientConfig('dynamodb'), maxAttempts: 1 }));
    const sqs = client(new SQSClient({ ...aws.clientConfig('sqs'), maxAttempts: 1 }));
    const s3 = client(new S3Client({ ...aws.clientConfig('s3'), maxAttempts: 1 }));

    // Act
    const tables = await dynamo.send(new ListTablesCommand({}));
    const queues = await sqs.send(new ListQueuesCommand({}));
    const buckets = await s3.send(new ListBucketsCommand({})).catch((error: unknown) => error);

    // Assess
    expect(tables.$metadata.httpStatusCode).toBe(200);
    expect(queues.$metadata.httpStatusCode).toBe(200);
    expect(buckets).toMatchObject({ name: 'SlowDown' });
  });
});

const STATE_MACHINE_ARN = 'arn:aws:states:us-east-1:000000000000:stateMachine:Throttled';
const FUNCTION_ARN = localFunctionArn('Echo');

function invokeMachine(retry: boolean): ResolvedStateMachine {
  return {
    logicalId: 'Throttled',
    definition: {
      StartAt: 'Call',
      States: {
        Call: {
          Type: 'Task',
          Resource: 'arn:aws:states:::lambda:invoke',
          Parameters: { FunctionName: FUNCTION_ARN, 'Payload.$': '$' },
          OutputPath: '$.Payload',
          End: true,
          ...(retry
            ? { Retry: [{ ErrorEquals: ['Lambda.TooManyRequestsException'], IntervalSeconds: 1 }] }
            : {}),
        },
      },
    },
    functions: new Map([[FUNCTION_ARN, 'Echo']]),
  };
}

describe('Lambda invokes in the local state machine', () => {
  it('fail as Lambda.TooManyRequestsException before the function runs', async () => {
    // Prepare
    const calls: unknown[] = [];
    const machine = new LocalStateMachine(invokeMachine(false), {
      handlers: { Echo: async (payload) => calls.push(payload) },
      awsFaults: { seed: 1, throttle_rate: 1, services: ['lambda'] },
    });

    // Act
    const result = await machine.run({ n: 1 }, { executionName: 'throttled' });

    // Assess
    expect(result).toMatchObject({ status: 'FAILED', error: 'Lambda.TooManyRequestsException' });
    expect(calls).toEqual([]);
  });

  it('succeed on a Retry that names Lambda.TooManyRequestsException', async () => {
    // Prepare
    const calls: unknown[] = [];
    const machine = new LocalStateMachine(invokeMachine(true), {
      handlers: { Echo: async (payload) => calls.push(payload) },
      awsFaults: { seed: seedFor('lambda', 0.5, [true, false]), throttle_rate: 0.5, services: ['lambda'] },
    });

    // Act
    const result = await machine.run({ n: 1 }, { executionName: 'retried' });

    // Assess
    expect(result.status).toBe('SUCCEEDED');
    expect(calls).toEqual([{ n: 1 }]);
  });
});

describe('StartExecution in the Step Functions shim', () => {
  async function shimWith(seed: number): Promise<{ executions: Registry; shim: SfnShim }> {
    const resolved: ResolvedStateMachine = {
      logicalId: 'Throttled',
      definition: { StartAt: 'Done', States: { Done: { Type: 'Pass', End: true } } },
      functions: new Map(),
    };
    const executions = await openExecutions({
      machine: new LocalStateMachine(resolved, { handlers: {} }),
      stateMachineArn: STATE_MACHINE_ARN,
    });
    const shim = await startSfnShim({
      executions,
      awsFaults: { seed, throttle_rate: 0.5, services: ['states'] },
    });
    // Cleanups run newest first: the executions close before the shim, as in local mode.
    cleanups.push(() => shim.close());
    cleanups.push(() => executions.close());
    return { executions, shim };
  }

  const sfnClient = (shim: SfnShim, maxAttempts?: number) =>
    client(
      new SFNClient({
        endpoint: shim.endpoint,
        region: 'us-east-1',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
        ...(maxAttempts === undefined ? {} : { maxAttempts }),
      }),
    );

  it('answers ThrottlingException, and the SDK retry then succeeds; other operations are not throttled', async () => {
    // Prepare
    const { executions, shim } = await shimWith(seedFor('states', 0.5, FAIL_THEN_RETRY));
    const start = (name: string) =>
      new StartExecutionCommand({ stateMachineArn: STATE_MACHINE_ARN, name, input: '{}' });

    // Act
    // An execution that does not exist: each answer is the shim's own, never a throttle.
    const unknownArn = STATE_MACHINE_ARN.replace(':stateMachine:', ':execution:').concat(':nobody');
    const described = await Promise.all(
      [1, 2, 3].map(() =>
        sfnClient(shim, 1)
          .send(new DescribeExecutionCommand({ executionArn: unknownArn }))
          .catch((error: unknown) => error),
      ),
    );
    const refused = await sfnClient(shim, 1)
      .send(start('first'))
      .catch((error: unknown) => error);
    const started = await sfnClient(shim).send(start('second'));
    await executions.idle();

    // Assess
    expect(described.map((answer) => (answer as Error).name)).toEqual([
      'ExecutionDoesNotExist',
      'ExecutionDoesNotExist',
      'ExecutionDoesNotExist',
    ]);
    expect(refused).toMatchObject({ name: 'ThrottlingException', $metadata: { httpStatusCode: 400 } });
    expect(started.$metadata).toMatchObject({ httpStatusCode: 200, attempts: 2 });
    expect(executions.summaries().map((execution) => execution.name)).toEqual(['second']);
  });
});

describe('determinism', () => {
  it('throttles the same calls for the same seed and sequence of calls, whatever other services do', async () => {
    // Prepare
    const run = async (seed: number, interleaveS3: boolean) => {
      const aws = await startAwsStandIns({
        faults: { seed, throttle_rate: 0.3, services: ['dynamodb', 's3'] },
      });
      cleanups.push(() => aws.close());
      const dynamo = client(new DynamoDBClient({ ...aws.clientConfig('dynamodb'), maxAttempts: 1 }));
      const s3 = client(new S3Client({ ...aws.clientConfig('s3'), maxAttempts: 1 }));
      const throttled: number[] = [];
      for (let call = 0; call < 30; call += 1) {
        if (interleaveS3) await s3.send(new ListBucketsCommand({})).catch(() => undefined);
        const outcome = await dynamo.send(new ListTablesCommand({})).catch((error: unknown) => error);
        if (outcome instanceof ThrottlingException) throttled.push(call);
      }
      return throttled;
    };

    // Act
    const first = await run(7, false);
    const again = await run(7, true);
    const otherSeed = await run(8, false);

    // Assess
    expect(first.length).toBeGreaterThan(0);
    expect(first.length).toBeLessThan(30);
    expect(again).toEqual(first);
    expect(otherSeed).not.toEqual(first);
  });
});

describe('loadAwsFaultsFile', () => {
  it('fills seed and services, and names each bad field', async () => {
    // Prepare
    const dir = await mkdtemp(join(tmpdir(), 'aws-faults-file-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const good = join(dir, 'good.json');
    const bad = join(dir, 'bad.json');
    await writeFile(good, JSON.stringify({ throttle_rate: 0.05 }));
    await writeFile(bad, JSON.stringify({ throttle_rate: 5, services: ['kinesis'], sed: 1 }));

    // Act
    const loaded = await loadAwsFaultsFile(good);
    const refused = await loadAwsFaultsFile(bad).catch((error: unknown) => error);

    // Assess
    expect(loaded).toEqual({
      seed: 1,
      throttle_rate: 0.05,
      services: ['dynamodb', 's3', 'sqs', 'lambda', 'states'],
    });
    expect(refused).toMatchObject({ name: 'EmulatorConfigError' });
    const message = refused instanceof Error ? refused.message : '';
    expect(message).toContain('throttle_rate: must be between 0 and 1');
    expect(message).toContain('services[0]: must be one of dynamodb, s3, sqs, lambda, states');
    expect(message).toContain('sed');
  });
});
