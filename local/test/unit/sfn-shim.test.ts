import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  DescribeExecutionCommand,
  ExecutionAlreadyExists,
  ExecutionDoesNotExist,
  GetExecutionHistoryCommand,
  InvalidArn,
  InvalidExecutionInput,
  InvalidName,
  InvalidToken,
  ListExecutionsCommand,
  ListStateMachinesCommand,
  SendTaskSuccessCommand,
  SFNClient,
  StartExecutionCommand,
  StateMachineDoesNotExist,
  StopExecutionCommand,
  TaskDoesNotExist,
} from '@aws-sdk/client-sfn';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type SfnShim, startSfnShim } from '#local/aws/sfn-shim';
import { type ExecutionRecord, openExecutions, type Registry } from '#local/runtime/executions';
import { type ExecutionEvent, type LocalLambda, LocalStateMachine } from '#local/runtime/sfn-runner';
import { sfnStarter } from '../../../lambdas/intake/aws.ts';
import { ConfigurationError, PlatformUnavailableError } from '../../../lambdas/shared/errors.ts';
import type { ExecutionInput } from '../../../lambdas/shared/step-io.ts';
import { type ResolvedStateMachine, resolveStateMachine } from '../../../lib/asl.ts';
import { synthesizeWorkflowFixture } from '../../../test/helpers/workflow-fixture-stack.ts';

/** What each fixture Lambda does in the current test; the machine is built once and delegates here. */
interface Behaviour {
  resolve: LocalLambda;
  startExport: LocalLambda;
  recordFailure: LocalLambda;
}

let behaviour: Behaviour;
let resolveCalls: unknown[];
let resolved: ResolvedStateMachine;
let machine: LocalStateMachine;
let stateMachineArn: string;

/** The executions of the current test and the shim serving them, as local mode pairs them. */
interface Served {
  readonly executions: Registry;
  readonly shim: SfnShim;
}

let served: Served | undefined;
let sfn: SFNClient;
let dataDir: string;
/** Every execution record the shims of a test handed out at the end, by name. */
const endedRecords = new Map<string, ExecutionRecord>();
/** Releases every gate a test left closed, so no handler outlives its test. */
let openGates: (() => void)[];

const noData: LocalLambda = async () => ({ found: false, wait_seconds: 0 });
const found: LocalLambda = async () => ({ found: true, wait_seconds: 3600 });

/** A handler that waits until the test releases it. */
function gated(then: LocalLambda): { handler: LocalLambda; release: () => void; entered: Promise<void> } {
  let release: () => void = () => {};
  let signalEntered: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    release = resolve;
  });
  const entered = new Promise<void>((resolve) => {
    signalEntered = resolve;
  });
  openGates.push(release);
  return {
    handler: async (payload) => {
      signalEntered();
      await opened;
      return then(payload);
    },
    release,
    entered,
  };
}

async function openShim(
  options: { dataDir?: string; onExecutionEnd?: (record: ExecutionRecord) => void } = {},
): Promise<Served> {
  const executions = await openExecutions({
    machine,
    stateMachineArn,
    ...options,
    onExecutionEnd: (record) => {
      endedRecords.set(record.name, record);
      options.onExecutionEnd?.(record);
    },
  });
  const opened = { executions, shim: await startSfnShim({ executions }) };
  sfn.destroy();
  sfn = clientFor(opened.shim);
  served = opened;
  return opened;
}

/** Closes as local mode does: the executions first, then the shim. */
async function closeShim(target: Served, timeoutMs: number): Promise<void> {
  await target.executions.close({ timeoutMs });
  await target.shim.close();
}

function clientFor(target: SfnShim): SFNClient {
  return new SFNClient({
    endpoint: target.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    maxAttempts: 1,
  });
}

function start(name: string, input: unknown = { request_id: name }) {
  return sfn.send(new StartExecutionCommand({ stateMachineArn, name, input: JSON.stringify(input) }));
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to fail');
}

function executionArn(name: string): string {
  return `arn:aws:states:us-east-1:000000000000:execution:${resolved.logicalId}:${name}`;
}

/** The runner's event log of an execution that ended, as the shim handed its record out. */
function eventsOf(name: string): readonly ExecutionEvent[] {
  const record = endedRecords.get(name);
  if (record === undefined) throw new Error(`execution ${name} has not ended`);
  return record.events;
}

beforeAll(() => {
  resolved = resolveStateMachine(synthesizeWorkflowFixture());
  stateMachineArn = `arn:aws:states:us-east-1:000000000000:stateMachine:${resolved.logicalId}`;
  const logicalId = (prefix: string) => {
    const id = [...resolved.functions.values()].find((candidate) => candidate.startsWith(prefix));
    if (id === undefined) throw new Error(`fixture has no Lambda ${prefix}`);
    return id;
  };
  machine = new LocalStateMachine(resolved, {
    handlers: {
      [logicalId('ResolveFunction')]: (payload) => {
        resolveCalls.push(payload);
        return behaviour.resolve(payload);
      },
      [logicalId('ExportFunction')]: (payload) => behaviour.startExport(payload),
      [logicalId('FailureFunction')]: (payload) => behaviour.recordFailure(payload),
    },
  });
});

beforeEach(async () => {
  endedRecords.clear();
  behaviour = {
    resolve: noData,
    startExport: async () => ({ export_id: 'exp-1' }),
    recordFailure: async () => ({ recorded: true }),
  };
  resolveCalls = [];
  openGates = [];
  dataDir = await mkdtemp(join(tmpdir(), 'sfn-shim-'));
  sfn = new SFNClient({});
  served = undefined;
});

afterEach(async () => {
  for (const release of openGates) release();
  if (served !== undefined) await closeShim(served, 1_000);
  sfn.destroy();
  await rm(dataDir, { recursive: true, force: true });
});

describe('StartExecution and DescribeExecution', () => {
  it('runs an execution in the background to SUCCEEDED and describes it as AWS does', async () => {
    // Prepare
    const running = await openShim();

    // Act
    const started = await start('req-1', { request_id: 'req-1', type: 'access' });
    await running.executions.idle();
    const described = await sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('req-1') }));

    // Assess
    expect(started.executionArn).toBe(executionArn('req-1'));
    expect(described).toMatchObject({
      executionArn: executionArn('req-1'),
      stateMachineArn,
      name: 'req-1',
      status: 'SUCCEEDED',
      redriveCount: 0,
    });
    expect(JSON.parse(described.input ?? '')).toEqual({ request_id: 'req-1', type: 'access' });
    expect(JSON.parse(described.output ?? '')).toMatchObject({ request_id: 'req-1', outcome: 'no_data' });
    expect(described.startDate?.getTime()).toBe(started.startDate?.getTime());
    expect(described.stopDate?.getTime()).toBeGreaterThanOrEqual(described.startDate?.getTime() ?? Infinity);
  });

  it('answers at once and reports RUNNING while the execution waits on a task', async () => {
    // Prepare
    await openShim();
    const gate = gated(noData);
    behaviour.resolve = gate.handler;

    // Act
    await start('slow');
    await gate.entered;
    const whileRunning = await sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('slow') }));
    gate.release();
    await served?.executions.idle();
    const afterwards = await sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('slow') }));

    // Assess
    expect(whileRunning.status).toBe('RUNNING');
    expect(whileRunning.stopDate).toBeUndefined();
    expect(whileRunning.output).toBeUndefined();
    expect(afterwards.status).toBe('SUCCEEDED');
  });

  it('returns the same execution for the same name and input while it runs, and refuses another input', async () => {
    // Prepare
    await openShim();
    const gate = gated(noData);
    behaviour.resolve = gate.handler;
    const first = await start('twice', { request_id: 'twice' });
    await gate.entered;

    // Act
    const second = await start('twice', { request_id: 'twice' });
    const different = await rejection(start('twice', { request_id: 'other' }));
    gate.release();
    await served?.executions.idle();

    // Assess
    expect(second.executionArn).toBe(first.executionArn);
    expect(second.startDate?.getTime()).toBe(first.startDate?.getTime());
    expect(different).toBeInstanceOf(ExecutionAlreadyExists);
    expect(resolveCalls).toHaveLength(1);
    expect(served?.executions.summaries().map((record) => record.status)).toEqual(['SUCCEEDED']);
  });

  it('throws ExecutionAlreadyExists for a name whose execution has ended, without running it again', async () => {
    // Prepare
    const running = await openShim();
    await start('done');
    await running.executions.idle();

    // Act
    const error = await rejection(start('done'));

    // Assess
    expect(error).toBeInstanceOf(ExecutionAlreadyExists);
    expect(String(Object(error).message)).toContain(executionArn('done'));
    expect(resolveCalls).toHaveLength(1);
  });

  it('lets sfnStarter report started, then already_exists', async () => {
    // Prepare
    const running = await openShim();
    const startExecution = sfnStarter(sfn, stateMachineArn);
    const input: ExecutionInput = {
      request_id: '6f1c2a44-8d0e-4b7a-9c3e-2f5d1a7b9e10',
      type: 'access',
      regulation: 'gdpr',
    };

    // Act
    const first = await startExecution(input.request_id, input);
    await running.executions.idle();
    const second = await startExecution(input.request_id, input);

    // Assess
    expect([first, second]).toEqual(['started', 'already_exists']);
    expect(resolveCalls).toEqual([expect.objectContaining({ request_id: input.request_id })]);
  });

  it('passes the execution ARN and name to the machine as $$.Execution', async () => {
    // Prepare
    const running = await openShim();

    // Act
    await start('context-check');
    await running.executions.idle();

    // Assess
    expect(resolveCalls).toEqual([
      {
        request_id: 'context-check',
        execution_id: executionArn('context-check'),
        execution_name: 'context-check',
      },
    ]);
  });
});

describe('request validation', () => {
  it('throws ExecutionDoesNotExist for an execution it never ran, and InvalidArn for a malformed ARN', async () => {
    // Prepare
    await openShim();

    // Act
    const missing = await rejection(
      sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('never-started') })),
    );
    const otherMachine = await rejection(
      sfn.send(
        new DescribeExecutionCommand({
          executionArn: 'arn:aws:states:us-east-1:000000000000:execution:Other:x',
        }),
      ),
    );
    const malformed = await rejection(sfn.send(new DescribeExecutionCommand({ executionArn: 'not-an-arn' })));

    // Assess
    expect(missing).toBeInstanceOf(ExecutionDoesNotExist);
    expect(otherMachine).toBeInstanceOf(ExecutionDoesNotExist);
    expect(malformed).toBeInstanceOf(InvalidArn);
  });

  it('throws StateMachineDoesNotExist for another state machine ARN, running nothing', async () => {
    // Prepare
    await openShim();
    const wrongArn = 'arn:aws:states:us-east-1:000000000000:stateMachine:Elsewhere';

    // Act
    const started = await rejection(
      sfn.send(new StartExecutionCommand({ stateMachineArn: wrongArn, name: 'x', input: '{}' })),
    );

    // Assess
    expect(started).toBeInstanceOf(StateMachineDoesNotExist);
    expect(served?.executions.summaries()).toEqual([]);
  });

  it('throws InvalidName for a name with other characters or over 80 characters', async () => {
    // Prepare
    await openShim();

    // Act
    const spaced = await rejection(start('has space'));
    const colon = await rejection(start('a:b'));
    const long = await rejection(start('x'.repeat(81)));
    const longest = await start('y'.repeat(80));

    // Assess
    expect(spaced).toBeInstanceOf(InvalidName);
    expect(colon).toBeInstanceOf(InvalidName);
    expect(long).toBeInstanceOf(InvalidName);
    expect(longest.executionArn).toBe(executionArn('y'.repeat(80)));
  });

  it('throws InvalidExecutionInput for input that is not JSON', async () => {
    // Prepare
    await openShim();

    // Act
    const error = await rejection(
      sfn.send(new StartExecutionCommand({ stateMachineArn, name: 'bad-input', input: '{not json' })),
    );

    // Assess
    expect(error).toBeInstanceOf(InvalidExecutionInput);
    expect(served?.executions.summaries()).toEqual([]);
  });

  it('answers an unknown operation with a 400 naming the operations it knows', async () => {
    // Prepare
    const running = await openShim();

    // Act
    const response = await fetch(running.shim.endpoint, {
      method: 'POST',
      headers: {
        'x-amz-target': 'AWSStepFunctions.CreateStateMachine',
        'content-type': 'application/x-amz-json-1.0',
      },
      body: '{}',
    });
    const body: unknown = await response.json();

    // Assess
    expect(response.status).toBe(400);
    expect(body).toMatchObject({
      __type: 'UnknownOperationException',
      message: expect.stringContaining('StartExecution'),
    });
  });

  it('answers SendTaskSuccess for a token no task waits for as Step Functions does, by name', async () => {
    // Prepare
    const running = await openShim();
    const send = (taskToken: string, output = '{}') =>
      sfn.send(new SendTaskSuccessCommand({ taskToken, output })).catch((error: unknown) => error);

    // Act
    const never = await send('a token the runner never gave');
    const gone = await send('svc-dsr-local-task:arn:aws:states:us-east-1:000000000000:execution:M:e:1');
    const malformed = await fetch(running.shim.endpoint, {
      method: 'POST',
      headers: {
        'x-amz-target': 'AWSStepFunctions.SendTaskSuccess',
        'content-type': 'application/x-amz-json-1.0',
      },
      body: JSON.stringify({ taskToken: 'x' }),
    });

    // Assess
    expect(never).toBeInstanceOf(InvalidToken);
    expect(gone).toBeInstanceOf(TaskDoesNotExist);
    expect(malformed.status).toBe(400);
    expect(await malformed.json()).toMatchObject({ __type: 'ValidationException' });
  });

  it('answers timestamps as epoch seconds on the wire', async () => {
    // Prepare
    const running = await openShim();
    const before = Date.now() / 1000;

    // Act
    const response = await fetch(running.shim.endpoint, {
      method: 'POST',
      headers: {
        'x-amz-target': 'AWSStepFunctions.StartExecution',
        'content-type': 'application/x-amz-json-1.0',
      },
      body: JSON.stringify({ stateMachineArn, name: 'raw', input: '{}' }),
    });
    const body: unknown = await response.json();

    // Assess
    expect(response.headers.get('content-type')).toBe('application/x-amz-json-1.0');
    expect(body).toEqual({ executionArn: executionArn('raw'), startDate: expect.any(Number) });
    expect(Object(body).startDate).toBeGreaterThanOrEqual(Math.floor(before));
    expect(Object(body).startDate).toBeLessThan(before + 60);
  });
});

describe('failures and StopExecution', () => {
  it('reports a failed execution with the error name and cause, and each failed attempt in its event log', async () => {
    // Prepare
    const running = await openShim();
    behaviour.resolve = found;
    behaviour.startExport = async () => {
      throw new PlatformUnavailableError('503 from the platform', 503);
    };

    // Act
    await start('broken');
    await running.executions.idle();
    const described = await sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('broken') }));
    const events = eventsOf('broken');

    // Assess
    expect(described.status).toBe('FAILED');
    expect(described.error).toBe('PlatformUnavailableError');
    expect(JSON.parse(described.cause ?? '')).toMatchObject({ errorMessage: '503 from the platform' });
    expect(described.output).toBeUndefined();
    const taskFailures = events.filter((event) => event.type === 'StateFailed');
    expect(taskFailures).toHaveLength(3);
    expect(taskFailures[0]).toMatchObject({ Error: 'PlatformUnavailableError' });
    expect(events.at(-1)).toMatchObject({ type: 'ExecutionFailed', Error: 'PlatformUnavailableError' });
  });

  it('aborts a running execution on StopExecution, recording the error and cause given', async () => {
    // Prepare
    const ended: ExecutionRecord[] = [];
    await openShim({ onExecutionEnd: (record) => ended.push(record) });
    const gate = gated(noData);
    behaviour.resolve = gate.handler;
    await start('to-stop');
    await gate.entered;

    // Act
    const stopped = await sfn.send(
      new StopExecutionCommand({
        executionArn: executionArn('to-stop'),
        error: 'Operator',
        cause: 'no longer needed',
      }),
    );
    const described = await sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('to-stop') }));
    const events = eventsOf('to-stop');

    // Assess
    expect(described).toMatchObject({ status: 'ABORTED', error: 'Operator', cause: 'no longer needed' });
    expect(described.stopDate?.getTime()).toBe(stopped.stopDate?.getTime());
    expect(events.at(-1)).toMatchObject({ type: 'ExecutionAborted' });
    expect(ended.map((record) => [record.name, record.status])).toEqual([['to-stop', 'ABORTED']]);
  });

  it('leaves an execution that already ended as it was on StopExecution', async () => {
    // Prepare
    const running = await openShim();
    await start('finished');
    await running.executions.idle();

    // Act
    await sfn.send(new StopExecutionCommand({ executionArn: executionArn('finished'), error: 'Late' }));
    const described = await sfn.send(
      new DescribeExecutionCommand({ executionArn: executionArn('finished') }),
    );

    // Assess
    expect(described.status).toBe('SUCCEEDED');
    expect(described.error).toBeUndefined();
  });
});

describe('execution records in the data directory', () => {
  async function recordOnDisk(name: string): Promise<unknown> {
    return JSON.parse(await readFile(join(dataDir, `${name}.json`), 'utf8'));
  }

  it('writes a record at start and at end, and leaves no temporary files', async () => {
    // Prepare
    await openShim({ dataDir });
    const gate = gated(noData);
    behaviour.resolve = gate.handler;

    // Act
    await start('kept', { request_id: 'kept' });
    await gate.entered;
    const atStart = await recordOnDisk('kept');
    gate.release();
    await served?.executions.idle();
    const atEnd = await recordOnDisk('kept');

    // Assess
    expect(atStart).toMatchObject({
      name: 'kept',
      status: 'RUNNING',
      input: { request_id: 'kept' },
      events: [],
    });
    expect(atEnd).toMatchObject({
      name: 'kept',
      executionArn: executionArn('kept'),
      status: 'SUCCEEDED',
      output: { outcome: 'no_data' },
      stopDate: expect.any(String),
    });
    expect(Object(atEnd).events.at(-1)).toMatchObject({ type: 'ExecutionSucceeded' });
    expect(await readdir(dataDir)).toEqual(['kept.json']);
  });

  it('answers for old executions after a restart and lists a killed one as interrupted; restart completes it', async () => {
    // Prepare: one execution ends, another is still running when the first shim goes away.
    const first = await openShim({ dataDir });
    await start('old');
    await first.executions.idle();
    const gate = gated(noData);
    behaviour.resolve = gate.handler;
    await start('killed', { request_id: 'killed' });
    await gate.entered;
    await closeShim(first, 20);
    gate.release();
    behaviour.resolve = noData;
    const ended: ExecutionRecord[] = [];

    // Act
    const second = await openShim({ dataDir, onExecutionEnd: (record) => ended.push(record) });
    const old = await sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('old') }));
    const oldHistory = eventsOf('old');
    const killedBefore = await sfn.send(
      new DescribeExecutionCommand({ executionArn: executionArn('killed') }),
    );
    const interrupted = second.executions.interrupted.map((record) => record.name);
    await second.executions.restart('killed');
    await second.executions.idle();
    const killedAfter = await sfn.send(
      new DescribeExecutionCommand({ executionArn: executionArn('killed') }),
    );

    // Assess
    expect(old.status).toBe('SUCCEEDED');
    expect(oldHistory.at(-1)?.type).toBe('ExecutionSucceeded');
    expect(killedBefore.status).toBe('RUNNING');
    expect(interrupted).toEqual(['killed']);
    expect(killedAfter.status).toBe('SUCCEEDED');
    expect(JSON.parse(killedAfter.output ?? '')).toMatchObject({ request_id: 'killed', outcome: 'no_data' });
    expect(await recordOnDisk('killed')).toMatchObject({ status: 'SUCCEEDED' });
    expect(ended.map((record) => record.name)).toEqual(['killed']);
  });

  it('answers an ended execution from its record file, so only a summary of it stays in memory', async () => {
    // Prepare
    const opened = await openShim({ dataDir });
    await start('ended', { request_id: 'ended' });
    await opened.executions.idle();
    const written = Object(await recordOnDisk('ended'));
    // Stands in for what the shim would hold if it still had the record: the file alone now answers.
    await writeFile(
      join(dataDir, 'ended.json'),
      JSON.stringify({ ...written, input: { request_id: 'ended', from: 'file' } }),
    );

    // Act
    const described = await sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('ended') }));
    const events = eventsOf('ended');
    await rm(join(dataDir, 'ended.json'));
    const gone = await rejection(
      sfn.send(new DescribeExecutionCommand({ executionArn: executionArn('ended') })),
    );

    // Assess
    expect(JSON.parse(described.input ?? '')).toEqual({ request_id: 'ended', from: 'file' });
    expect(JSON.parse(described.output ?? '')).toMatchObject({ outcome: 'no_data' });
    expect(events.at(-1)?.type).toBe('ExecutionSucceeded');
    expect(opened.executions.summaries()).toEqual([
      {
        name: 'ended',
        executionArn: executionArn('ended'),
        status: 'SUCCEEDED',
        startDate: written.startDate,
        stopDate: written.stopDate,
      },
    ]);
    expect(String(gone)).toContain(
      'ended.json is gone: the record of execution ended was removed while the shim ran',
    );
  });

  it('lists a RUNNING record written by hand as interrupted', async () => {
    // Prepare
    const record = {
      name: 'by-hand',
      executionArn: executionArn('by-hand'),
      input: { request_id: 'by-hand' },
      status: 'RUNNING',
      startDate: '2026-01-02T03:04:05.000Z',
      events: [],
    };
    await writeFile(join(dataDir, 'by-hand.json'), JSON.stringify(record));

    // Act
    const running = await openShim({ dataDir });
    const listed = running.executions.summaries().filter((execution) => execution.status === 'RUNNING');
    await running.executions.restart('by-hand');
    await running.executions.idle();

    // Assess
    expect(running.executions.interrupted).toEqual([record]);
    expect(listed.map((item) => item.name)).toEqual(['by-hand']);
    expect(resolveCalls).toEqual([expect.objectContaining({ request_id: 'by-hand' })]);
    expect(running.executions.summaries()).toEqual([
      expect.objectContaining({ name: 'by-hand', status: 'SUCCEEDED' }),
    ]);
  });

  it('marks an interrupted execution ABORTED on StopExecution instead of restarting it', async () => {
    // Prepare
    const record = {
      name: 'abandon-me',
      executionArn: executionArn('abandon-me'),
      input: { request_id: 'abandon-me' },
      status: 'RUNNING',
      startDate: '2026-01-02T03:04:05.000Z',
      events: [],
    };
    await writeFile(join(dataDir, 'abandon-me.json'), JSON.stringify(record));
    const running = await openShim({ dataDir });

    // Act
    await sfn.send(
      new StopExecutionCommand({ executionArn: executionArn('abandon-me'), cause: 'operator gave up' }),
    );
    const events = eventsOf('abandon-me');
    const restarted = await rejection(running.executions.restart('abandon-me'));

    // Assess
    expect(await recordOnDisk('abandon-me')).toMatchObject({ status: 'ABORTED', cause: 'operator gave up' });
    expect(events.map((event) => event.type)).toEqual(['ExecutionStarted', 'ExecutionAborted']);
    expect(restarted).toBeInstanceOf(ConfigurationError);
    expect(resolveCalls).toEqual([]);
  });

  it('waits in close() for a running execution to end and writes its final record', async () => {
    // Prepare
    const running = await openShim({ dataDir });
    const gate = gated(noData);
    behaviour.resolve = gate.handler;
    await start('finishing');
    await gate.entered;

    // Act
    setTimeout(gate.release, 50);
    await closeShim(running, 5_000);

    // Assess
    expect(await recordOnDisk('finishing')).toMatchObject({ status: 'SUCCEEDED' });
    await expect(fetch(running.shim.endpoint, { method: 'POST' })).rejects.toThrow();
  });

  it('refuses to restart an execution that was not interrupted', async () => {
    // Prepare
    const running = await openShim({ dataDir });
    await start('complete');
    await running.executions.idle();

    // Act
    const ended = await rejection(running.executions.restart('complete'));
    const unknown = await rejection(running.executions.restart('unknown'));

    // Assess
    expect(ended).toBeInstanceOf(ConfigurationError);
    expect(String(Object(ended).message)).toContain('SUCCEEDED');
    expect(unknown).toBeInstanceOf(ConfigurationError);
  });

  it('refuses to start on a data directory holding a file that is not an execution record', async () => {
    // Prepare
    await writeFile(join(dataDir, 'stray.json'), JSON.stringify({ hello: 'world' }));

    // Act
    const error = await rejection(openExecutions({ machine, stateMachineArn, dataDir }));

    // Assess
    expect(error).toBeInstanceOf(ConfigurationError);
    expect(String(Object(error).message)).toContain('stray.json');
  });
});

describe('openExecutions options', () => {
  it('refuses a stateMachineArn that is not a state machine ARN', async () => {
    // Act
    const error = await rejection(openExecutions({ machine, stateMachineArn: 'FixtureStateMachine' }));

    // Assess
    expect(error).toBeInstanceOf(ConfigurationError);
  });
});

describe('inspection: ListStateMachines, ListExecutions and GetExecutionHistory', () => {
  it('lists the one state machine local mode runs', async () => {
    // Prepare
    await openShim();

    // Act
    const { stateMachines } = await sfn.send(new ListStateMachinesCommand({}));

    // Assess
    expect(stateMachines).toEqual([
      expect.objectContaining({ stateMachineArn, name: resolved.logicalId, type: 'STANDARD' }),
    ]);
  });

  it('lists executions newest first, by status, a page at a time', async () => {
    // Prepare
    const running = await openShim({ dataDir });
    for (const name of ['first', 'second', 'third']) {
      await start(name);
      await running.executions.idle();
    }
    const gate = gated(noData);
    behaviour.resolve = gate.handler;
    await start('waiting');
    await gate.entered;

    // Act
    const firstPage = await sfn.send(
      new ListExecutionsCommand({ stateMachineArn, statusFilter: 'SUCCEEDED', maxResults: 2 }),
    );
    const secondPage = await sfn.send(
      new ListExecutionsCommand({
        stateMachineArn,
        statusFilter: 'SUCCEEDED',
        maxResults: 2,
        nextToken: firstPage.nextToken,
      }),
    );
    const runningOnes = await sfn.send(
      new ListExecutionsCommand({ stateMachineArn, statusFilter: 'RUNNING' }),
    );
    const wrongToken = await rejection(
      sfn.send(
        new ListExecutionsCommand({
          stateMachineArn,
          statusFilter: 'FAILED',
          nextToken: firstPage.nextToken,
        }),
      ),
    );
    gate.release();
    await running.executions.idle();

    // Assess
    expect(firstPage.executions?.map((execution) => execution.name)).toEqual(['third', 'second']);
    expect(firstPage.executions?.[0]).toMatchObject({
      executionArn: executionArn('third'),
      stateMachineArn,
      status: 'SUCCEEDED',
    });
    expect(firstPage.executions?.[0]?.stopDate).toBeInstanceOf(Date);
    expect(secondPage.executions?.map((execution) => execution.name)).toEqual(['first']);
    expect(secondPage.nextToken).toBeUndefined();
    expect(runningOnes.executions?.map((execution) => execution.name)).toEqual(['waiting']);
    expect(wrongToken).toBeInstanceOf(InvalidToken);
  });

  it('gives the history of the states the execution went through, in Step Functions event types', async () => {
    // Prepare
    const running = await openShim({ dataDir });
    behaviour.resolve = found;
    behaviour.startExport = async () => {
      throw new PlatformUnavailableError('503 from the platform', 503);
    };
    await start('history');
    await running.executions.idle();

    // Act
    const { events = [] } = await sfn.send(
      new GetExecutionHistoryCommand({ executionArn: executionArn('history'), maxResults: 1000 }),
    );
    const newestFirst = await sfn.send(
      new GetExecutionHistoryCommand({
        executionArn: executionArn('history'),
        reverseOrder: true,
        maxResults: 1,
      }),
    );

    // Assess
    const logged = eventsOf('history');
    const entered = events.filter((event) => event.type?.endsWith('StateEntered'));
    expect(entered.map((event) => event.stateEnteredEventDetails?.name)).toEqual(
      logged
        .filter((event) => event.type === 'StateEntered')
        .map((event) => (event.state as { name: string }).name),
    );
    expect(events[0]).toMatchObject({ id: 1, previousEventId: 0, type: 'ExecutionStarted' });
    expect(JSON.parse(events[0]?.executionStartedEventDetails?.input ?? '')).toEqual({
      request_id: 'history',
    });
    expect(events.map((event) => event.id)).toEqual(events.map((_event, index) => index + 1));
    expect(events.filter((event) => event.type === 'TaskFailed')).toHaveLength(3);
    expect(events.find((event) => event.type === 'TaskFailed')?.taskFailedEventDetails?.error).toBe(
      'PlatformUnavailableError',
    );
    expect(events.at(-1)).toMatchObject({
      type: 'ExecutionFailed',
      executionFailedEventDetails: { error: 'PlatformUnavailableError' },
    });
    expect(events[0]?.timestamp).toBeInstanceOf(Date);
    expect(newestFirst.events?.map((event) => event.type)).toEqual(['ExecutionFailed']);
    expect(newestFirst.nextToken).toBeDefined();
  });
});
