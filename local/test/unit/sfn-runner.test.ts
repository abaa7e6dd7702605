import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type ExecutionEvent, type LocalLambda, LocalStateMachine } from '#local/runtime/sfn-runner';
import {
  ConfigurationError,
  PlatformAuthError,
  PlatformThrottledError,
  PlatformUnavailableError,
} from '../../../lambdas/shared/errors.ts';
import { localFunctionArn, type ResolvedStateMachine, resolveStateMachine } from '../../../lib/asl.ts';
import { synthesizeWorkflowFixture } from '../../../test/helpers/workflow-fixture-stack.ts';

/** What each fixture Lambda does in the current test; the machine is built once and delegates here. */
interface Behaviour {
  resolve: LocalLambda;
  startExport: LocalLambda;
  recordFailure: LocalLambda;
}

const calls: Record<keyof Behaviour, unknown[]> = { resolve: [], startExport: [], recordFailure: [] };
let behaviour: Behaviour;
let resolved: ResolvedStateMachine;
let machine: LocalStateMachine;
let ids: Record<keyof Behaviour, string>;

function logicalId(prefix: string): string {
  const id = [...resolved.functions.values()].find((candidate) => candidate.startsWith(prefix));
  if (id === undefined) throw new Error(`fixture has no Lambda ${prefix}`);
  return id;
}

function recording(name: keyof Behaviour): LocalLambda {
  return (payload) => {
    calls[name].push(payload);
    return behaviour[name](payload);
  };
}

const found =
  (waitSeconds: number): LocalLambda =>
  async () => ({ found: true, wait_seconds: waitSeconds });

function stateEvents(
  events: readonly ExecutionEvent[],
  type: string,
  name: string,
): Record<string, unknown>[] {
  return events
    .filter((event) => event.type === type && Object(event.state).name === name)
    .map((event) => Object(event.state));
}

function enteredStates(events: readonly ExecutionEvent[]): string[] {
  return events
    .filter((event) => event.type === 'StateEntered')
    .map((event) => String(Object(event.state).name));
}

beforeAll(() => {
  resolved = resolveStateMachine(synthesizeWorkflowFixture());
  ids = {
    resolve: logicalId('ResolveFunction'),
    startExport: logicalId('ExportFunction'),
    recordFailure: logicalId('FailureFunction'),
  };
  machine = new LocalStateMachine(resolved, {
    handlers: {
      [ids.resolve]: recording('resolve'),
      [ids.startExport]: recording('startExport'),
      [ids.recordFailure]: recording('recordFailure'),
    },
  });
});

beforeEach(() => {
  for (const list of Object.values(calls)) list.length = 0;
  behaviour = {
    resolve: found(3600),
    startExport: async (payload) => ({ export_id: 'exp-1', seen: payload }),
    recordFailure: async () => ({ recorded: true }),
  };
});

describe('LocalStateMachine on the synthesized fixture', () => {
  it('runs the found path to the end, compressing a one-hour Wait to nothing', async () => {
    // Prepare
    const started = performance.now();

    // Act
    const result = await machine.run({ request_id: 'r-1', type: 'access' }, { executionName: 'r-1-run-1' });
    const elapsed = performance.now() - started;

    // Assess
    expect(result.status).toBe('SUCCEEDED');
    expect(elapsed).toBeLessThan(1_000);
    expect(enteredStates(result.events)).toEqual([
      'Resolve',
      'Found?',
      'WaitForExport',
      'StartExport',
      'Done',
    ]);
    expect(result.output).toEqual({
      export_id: 'exp-1',
      seen: { request_id: 'r-1', type: 'access', resolved: { found: true, wait_seconds: 3600 } },
    });
  });

  it('routes on the Choice to NoData without calling the export Lambda', async () => {
    // Prepare
    behaviour.resolve = async () => ({ found: false, wait_seconds: 0 });

    // Act
    const result = await machine.run({ request_id: 'r-2' }, { executionName: 'r-2-run-1' });

    // Assess
    expect(result.status).toBe('SUCCEEDED');
    expect(enteredStates(result.events)).toEqual(['Resolve', 'Found?', 'NoData']);
    expect(result.output).toMatchObject({ outcome: 'no_data' });
    expect(calls.startExport).toHaveLength(0);
  });

  it('passes $$.Execution.Id and Name to the handler, defaulting the id to a local execution ARN', async () => {
    // Act
    await machine.run(
      { request_id: 'r-3' },
      { executionName: 'named', executionArn: 'arn:aws:states:eu-west-1:1:execution:M:named' },
    );
    await machine.run({ request_id: 'r-3' }, { executionName: 'defaulted' });

    // Assess
    expect(calls.resolve).toEqual([
      {
        request_id: 'r-3',
        execution_id: 'arn:aws:states:eu-west-1:1:execution:M:named',
        execution_name: 'named',
      },
      {
        request_id: 'r-3',
        execution_id: `arn:aws:states:us-east-1:000000000000:execution:${resolved.logicalId}:defaulted`,
        execution_name: 'defaulted',
      },
    ]);
  });

  it('retries a retryable error by name and succeeds on the next attempt, without the 30 s interval', async () => {
    // Prepare
    let attempts = 0;
    behaviour.resolve = async () => {
      attempts += 1;
      if (attempts === 1) throw new PlatformThrottledError('429 from the platform', 30);
      return { found: true, wait_seconds: 30 };
    };
    const started = performance.now();

    // Act
    const result = await machine.run({ request_id: 'r-4' }, { executionName: 'r-4-run-1' });

    // Assess
    expect(result.status).toBe('SUCCEEDED');
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(calls.resolve).toHaveLength(2);
    const failed = result.events.find((event) => event.type === 'StateFailed');
    expect(failed).toMatchObject({ Error: 'PlatformThrottledError', state: { name: 'Resolve' } });
    expect(JSON.parse(String(failed?.Cause))).toMatchObject({
      errorType: 'PlatformThrottledError',
      errorMessage: '429 from the platform',
    });
    const retried = result.events.find((event) => event.type === 'StateRetried');
    expect(retried).toMatchObject({
      state: { name: 'Resolve' },
      retry: { attempt: 1, retrier: { ErrorEquals: expect.arrayContaining(['PlatformThrottledError']) } },
    });
  });

  it('fails with the error name once the retries are spent, when nothing catches it', async () => {
    // Prepare
    behaviour.startExport = async () => {
      throw new PlatformUnavailableError('503 from the platform', 503);
    };

    // Act
    const result = await machine.run({ request_id: 'r-5' }, { executionName: 'r-5-run-1' });

    // Assess
    expect(result.status).toBe('FAILED');
    expect(result.error).toBe('PlatformUnavailableError');
    expect(JSON.parse(result.cause ?? '')).toMatchObject({ errorMessage: '503 from the platform' });
    expect(calls.startExport).toHaveLength(3);
    expect(result.events.filter((event) => event.type === 'StateRetried')).toHaveLength(2);
    expect(result.events.at(-1)).toMatchObject({
      type: 'ExecutionFailed',
      Error: 'PlatformUnavailableError',
    });
  });

  it('catches a terminal error into RecordFailure with the error under $.error and the input kept', async () => {
    // Prepare
    behaviour.resolve = async () => {
      throw new PlatformAuthError('the platform refused the token', 401);
    };

    // Act
    const result = await machine.run({ request_id: 'r-6', type: 'erasure' }, { executionName: 'r-6-run-1' });

    // Assess
    expect(calls.resolve).toHaveLength(1);
    const [recoveryInput] = stateEvents(result.events, 'StateEntered', 'RecordFailure');
    expect(recoveryInput?.input).toMatchObject({
      request_id: 'r-6',
      type: 'erasure',
      error: { Error: 'PlatformAuthError' },
    });
    expect(calls.recordFailure).toEqual([
      { request_id: 'r-6', error: 'PlatformAuthError', cause: expect.any(String) },
    ]);
    expect(result.events.some((event) => event.type === 'StateCaught')).toBe(true);
    expect(result).toMatchObject({
      status: 'FAILED',
      error: 'DsrFailed',
      cause: 'The request failed; see the ledger',
    });
  });

  it('logs every state entered and exited with its input and output', async () => {
    // Act
    const result = await machine.run({ request_id: 'r-7' }, { executionName: 'r-7-run-1' });

    // Assess
    expect(result.events[0]).toMatchObject({ type: 'ExecutionStarted', input: { request_id: 'r-7' } });
    expect(result.events.at(-1)?.type).toBe('ExecutionSucceeded');
    const [resolveExit] = stateEvents(result.events, 'StateExited', 'Resolve');
    expect(resolveExit).toMatchObject({
      type: 'Task',
      input: { request_id: 'r-7' },
      output: { request_id: 'r-7', resolved: { found: true, wait_seconds: 3600 } },
    });
    const [choiceEntry] = stateEvents(result.events, 'StateEntered', 'Found?');
    expect(choiceEntry?.input).toEqual(resolveExit?.output);
  });

  it('hands out event copies that share nothing with the execution or with each other', async () => {
    // Prepare
    behaviour.resolve = async (payload) => {
      // A handler that scribbles on its event must not change what the log recorded.
      Object.assign(Object(payload), { request_id: 'scribbled' });
      return { found: false, wait_seconds: 0 };
    };

    // Act
    const result = await machine.run({ request_id: 'r-8' }, { executionName: 'r-8-run-1' });
    const [resolveExit] = stateEvents(result.events, 'StateExited', 'Resolve');
    const [choiceEntry] = stateEvents(result.events, 'StateEntered', 'Found?');
    Object.assign(Object(resolveExit?.output), { request_id: 'mutated later' });

    // Assess
    expect(choiceEntry?.input).toMatchObject({ request_id: 'r-8' });
    expect(choiceEntry?.input).not.toBe(resolveExit?.output);
    expect(result.output).toMatchObject({ request_id: 'r-8' });
  });

  it('fails clearly, naming the logical id, when a Lambda of the machine has no handler', async () => {
    // Prepare
    const partial = new LocalStateMachine(resolved, { handlers: { [ids.resolve]: found(0) } });

    // Act
    const result = await partial.run({ request_id: 'r-9' }, { executionName: 'r-9-run-1' });

    // Assess
    expect(result.status).toBe('FAILED');
    expect(result.error).toBe('Lambda.ResourceNotFoundException');
    expect(result.cause).toContain(`no local handler for the Lambda with logical id ${ids.startExport}`);
  });

  it('runs executions of one machine side by side without mixing their data', async () => {
    // Prepare
    behaviour.resolve = async (payload) => ({ found: Object(payload).request_id === 'a', wait_seconds: 0 });

    // Act
    const [first, second] = await Promise.all([
      machine.run({ request_id: 'a' }, { executionName: 'a' }),
      machine.run({ request_id: 'b' }, { executionName: 'b' }),
    ]);

    // Assess
    expect(first.output).toMatchObject({ export_id: 'exp-1', seen: { request_id: 'a' } });
    expect(second.output).toMatchObject({ request_id: 'b', outcome: 'no_data' });
  });
});

describe('LocalStateMachine with hand-written definitions', () => {
  function resolvedFrom(
    states: Record<string, unknown>,
    functions: Record<string, string> = {},
  ): ResolvedStateMachine {
    return {
      logicalId: 'HandWritten',
      definition: { StartAt: Object.keys(states)[0], States: states },
      functions: new Map(Object.entries(functions)),
    };
  }

  const invokeTask = (functionName: string, extra: Record<string, unknown> = {}) => ({
    Type: 'Task',
    Resource: 'arn:aws:states:::lambda:invoke',
    Parameters: { FunctionName: functionName, 'Payload.$': '$' },
    End: true,
    ...extra,
  });

  it('answers a lambda:invoke task with the invoke response shape, sending {} when Payload is absent', async () => {
    // Prepare
    const arn = localFunctionArn('Echo');
    const payloads: unknown[] = [];
    const call = { ...invokeTask(arn, { ResultPath: '$.raw' }), Parameters: { FunctionName: arn } };
    const local = new LocalStateMachine(resolvedFrom({ Call: call }, { [arn]: 'Echo' }), {
      handlers: {
        Echo: async (payload) => {
          payloads.push(payload);
          return undefined;
        },
      },
    });

    // Act
    const result = await local.run({ n: 1 }, { executionName: 'shape' });

    // Assess
    expect(payloads).toEqual([{}]);
    expect(result.output).toEqual({
      n: 1,
      raw: { ExecutedVersion: '$LATEST', Payload: null, StatusCode: 200 },
    });
  });

  it('fails naming a FunctionName that is no Lambda of the template', async () => {
    // Prepare
    const known = localFunctionArn('Known');
    const local = new LocalStateMachine(
      resolvedFrom({ Call: invokeTask(localFunctionArn('Nope')) }, { [known]: 'Known' }),
      {
        handlers: { Known: async () => ({}) },
      },
    );

    // Act
    const result = await local.run({}, { executionName: 'unknown' });

    // Assess
    expect(result.error).toBe('Lambda.ResourceNotFoundException');
    expect(result.cause).toContain('function:Nope is not a Lambda function of the template');
    expect(result.cause).toContain('Known');
  });

  it('accepts a qualified function ARN and a Task whose Resource is the function ARN itself', async () => {
    // Prepare
    const arn = localFunctionArn('Double');
    const states = {
      Qualified: {
        Type: 'Task',
        Resource: 'arn:aws:states:::lambda:invoke',
        Parameters: { FunctionName: `${arn}:live`, 'Payload.$': '$' },
        OutputPath: '$.Payload',
        Next: 'Direct',
      },
      Direct: { Type: 'Task', Resource: arn, End: true },
    };
    const local = new LocalStateMachine(resolvedFrom(states, { [arn]: 'Double' }), {
      handlers: { Double: async (payload) => ({ n: Number(Object(payload).n) * 2 }) },
    });

    // Act
    const result = await local.run({ n: 3 }, { executionName: 'direct' });

    // Assess
    expect(result).toMatchObject({ status: 'SUCCEEDED', output: { n: 12 } });
  });

  it('reports a non-Error throw as the ASL error "Error"', async () => {
    // Prepare
    const arn = localFunctionArn('Thrower');
    const local = new LocalStateMachine(resolvedFrom({ Call: invokeTask(arn) }, { [arn]: 'Thrower' }), {
      handlers: {
        Thrower: async () => {
          throw 'plain string';
        },
      },
    });

    // Act
    const result = await local.run({}, { executionName: 'string-throw' });

    // Assess
    expect(result.error).toBe('Error');
    expect(JSON.parse(result.cause ?? '')).toMatchObject({
      errorType: 'Error',
      errorMessage: 'plain string',
    });
  });

  it('stops with ABORTED when the signal aborts', async () => {
    // Prepare
    const arn = localFunctionArn('Slow');
    const controller = new AbortController();
    const local = new LocalStateMachine(resolvedFrom({ Call: invokeTask(arn) }, { [arn]: 'Slow' }), {
      handlers: {
        Slow: () =>
          new Promise((resolve) => {
            controller.signal.addEventListener('abort', () => resolve({}));
            controller.abort();
          }),
      },
    });

    // Act
    const result = await local.run({}, { executionName: 'aborted', signal: controller.signal });

    // Assess
    expect(result.status).toBe('ABORTED');
    expect(result.events.at(-1)?.type).toBe('ExecutionAborted');
  });

  it('honours waitMs instead of the Wait state duration', async () => {
    // Prepare
    const local = new LocalStateMachine(
      resolvedFrom({ Pause: { Type: 'Wait', Seconds: 86_400, End: true } }),
      {
        handlers: {},
        waitMs: 60,
      },
    );
    const started = performance.now();

    // Act
    const result = await local.run({}, { executionName: 'wait' });

    // Assess
    expect(result.status).toBe('SUCCEEDED');
    expect(performance.now() - started).toBeGreaterThanOrEqual(55);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('refuses at construction a Task it cannot run locally, naming the state', () => {
    // Prepare
    const sqsTask = { Type: 'Task', Resource: 'arn:aws:states:::sqs:sendMessage', End: true };
    const callback = { ...invokeTask('x'), Resource: 'arn:aws:states:::lambda:invoke.waitForTaskToken' };

    // Act / Assess
    expect(() => new LocalStateMachine(resolvedFrom({ Notify: sqsTask }), { handlers: {} })).toThrow(
      /Task state Notify uses the resource arn:aws:states:::sqs:sendMessage/,
    );
    expect(() => new LocalStateMachine(resolvedFrom({ Wait: callback }), { handlers: {} })).toThrow(
      /waitForTaskToken/,
    );
    expect(() => new LocalStateMachine(resolvedFrom({ Notify: sqsTask }), { handlers: {} })).toThrow(
      ConfigurationError,
    );
  });

  describe('a .waitForTaskToken integration', () => {
    const SEND = 'arn:aws:states:::sqs:sendMessage';
    const waitsForToken = (next: Record<string, unknown>) => ({
      Type: 'Task',
      Resource: `${SEND}.waitForTaskToken`,
      Parameters: { QueueUrl: 'waiters', MessageBody: { 'token.$': '$$.Task.Token', 'wait.$': '$.wait' } },
      // Read from the state input, as Step Functions reads it, not from the Parameters.
      TimeoutSecondsPath: '$.wait',
      ResultPath: '$.answer',
      ...next,
    });
    const tokenOf = (parameters: unknown) =>
      String((parameters as { MessageBody: { token: string } }).MessageBody.token);

    it('sends its Parameters with a token of its own, and resumes with what SendTaskSuccess answers', async () => {
      // Prepare
      const sent: unknown[] = [];
      const local: LocalStateMachine = new LocalStateMachine(
        resolvedFrom({ First: waitsForToken({ Next: 'Second' }), Second: waitsForToken({ End: true }) }),
        {
          handlers: {},
          integrations: {
            [SEND]: async (parameters) => {
              sent.push(parameters);
              setImmediate(() => local.sendTaskSuccess(tokenOf(parameters), `{"go":${sent.length}}`));
              return { MessageId: 'm' };
            },
          },
        },
      );

      // Act
      const result = await local.run({ wait: 30 }, { executionName: 'woken' });

      // Assess
      expect(result.status).toBe('SUCCEEDED');
      expect(result.output).toEqual({ wait: 30, answer: { go: 2 } });
      expect(sent).toHaveLength(2);
      // The integration sees exactly the task's Parameters: no field of the runner's own.
      expect(sent[0]).toEqual({ QueueUrl: 'waiters', MessageBody: { token: tokenOf(sent[0]), wait: 30 } });
      expect(tokenOf(sent[0])).not.toBe(tokenOf(sent[1]));
      // The execution has ended: its tokens no longer wait.
      expect(() => local.sendTaskSuccess(tokenOf(sent[1]), '{}')).toThrow(
        expect.objectContaining({ name: 'TaskDoesNotExist' }),
      );
      expect(() => local.sendTaskSuccess('a token never given', '{}')).toThrow(
        expect.objectContaining({ name: 'InvalidToken' }),
      );
    });

    it('times out at TimeoutSecondsPath into its Catch; its token then answers TaskTimedOut', async () => {
      // Prepare
      const sent: unknown[] = [];
      const answers: string[] = [];
      const local: LocalStateMachine = new LocalStateMachine(
        resolvedFrom({
          First: waitsForToken({
            Catch: [{ ErrorEquals: ['States.Timeout'], ResultPath: null, Next: 'Second' }],
            Next: 'Second',
          }),
          Second: waitsForToken({ End: true }),
        }),
        {
          handlers: {},
          integrations: {
            [SEND]: async (parameters) => {
              sent.push(parameters);
              if (sent.length === 2) {
                // The first task timed out while its execution runs on.
                setImmediate(() => {
                  try {
                    local.sendTaskSuccess(tokenOf(sent[0]), '{}');
                  } catch (error) {
                    answers.push((error as Error).name);
                  }
                  local.sendTaskSuccess(tokenOf(parameters), '"late"');
                });
              }
              return {};
            },
          },
        },
      );
      const started = performance.now();

      // Act
      const result = await local.run({ wait: 1 }, { executionName: 'timed-out' });

      // Assess
      expect(result.status).toBe('SUCCEEDED');
      expect(result.output).toEqual({ wait: 1, answer: 'late' });
      expect(performance.now() - started).toBeGreaterThanOrEqual(900);
      expect(answers).toEqual(['TaskTimedOut']);
      expect(stateEvents(result.events, 'StateFailed', 'First')).toHaveLength(1);
    });

    it("fails the task with the integration's error when its message cannot be sent", async () => {
      // Prepare
      const local = new LocalStateMachine(resolvedFrom({ First: waitsForToken({ End: true }) }), {
        handlers: {},
        integrations: {
          [SEND]: async () => {
            throw Object.assign(new Error('throttled'), { name: 'SQS.ThrottlingException' });
          },
        },
      });

      // Act
      const result = await local.run({ wait: 30 }, { executionName: 'not-sent' });

      // Assess
      expect(result.status).toBe('FAILED');
      expect(result.error).toBe('SQS.ThrottlingException');
    });

    it('refuses a .waitForTaskToken task whose Parameters do not pass the token', async () => {
      // Prepare
      const local = new LocalStateMachine(
        resolvedFrom({
          First: { ...waitsForToken({ End: true }), Parameters: { QueueUrl: 'q', MessageBody: 'x' } },
        }),
        { handlers: {}, integrations: { [SEND]: async () => ({}) } },
      );

      // Act
      const result = await local.run({ wait: 30 }, { executionName: 'no-token' });

      // Assess
      expect(result.status).toBe('FAILED');
      expect(result.cause).toMatch(/must pass \$\$\.Task\.Token/);
    });
  });

  it('refuses an invalid definition at construction', () => {
    // Prepare
    const broken = resolvedFrom({ Start: { Type: 'Pass', Next: 'Nowhere' } });

    // Act / Assess
    expect(() => new LocalStateMachine(broken, { handlers: {} })).toThrow(/invalid/);
  });
});
