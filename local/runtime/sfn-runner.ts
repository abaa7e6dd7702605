/**
 * Runs a resolved state machine with aws-local-stepfunctions, handing every Lambda Task to an
 * in-process handler the way Lambda would: the payload and the result cross a JSON boundary, and a
 * thrown error surfaces by its `name` so Retry and Catch match exactly as they do in AWS.
 */
import {
  ExecutionAbortedError,
  ExecutionError,
  ExecutionTimeoutError,
  type RunOptions,
  StateMachine,
  type StateMachineDefinition,
} from 'aws-local-stepfunctions';
import { z } from 'zod';
import { ConfigurationError } from '../../lambdas/shared/errors.ts';
import { PLATFORM_WAIT_SUFFIX } from '../../lambdas/shared/platform-gate.ts';
import { LOCAL_ACCOUNT_ID, LOCAL_PARTITION, LOCAL_REGION, type ResolvedStateMachine } from '../../lib/asl.ts';
import { type AwsFaults, AwsThrottle } from '../aws/aws-faults.ts';

/** An in-process Lambda handler: gets the invocation payload; its return value becomes the task's Payload. */
export type LocalLambda = (payload: unknown, context?: LocalLambdaContext) => Promise<unknown>;

/** What a local Lambda may be given of Lambda's context: the time left, for a test that shortens it. */
export interface LocalLambdaContext {
  getRemainingTimeInMillis(): number;
}

/** How a {@link LocalStateMachine} runs its tasks and how much it compresses time. */
export interface RunnerOptions {
  /** Logical id of the Lambda in the template -> in-process handler. */
  readonly handlers: Readonly<Record<string, LocalLambda>>;
  /** Every Wait state lasts this many ms instead of its real duration. @default 0 */
  readonly waitMs?: number;
  /** Every Retry interval lasts this many ms. @default 0 */
  readonly retryIntervalMs?: number;
  /** Throttles a seeded share of Lambda invokes when it lists `lambda`. @default no throttling */
  readonly awsFaults?: AwsFaults;
  /**
   * Service integrations by resource (`arn:aws:states:::dynamodb:updateItem`): each gets the task's
   * Parameters and answers the API's response; a thrown error's name becomes the ASL error, so
   * name it as Step Functions does (`DynamoDB.ConditionalCheckFailedException`). The same resource
   * with `.waitForTaskToken` runs the integration, then waits for {@link LocalStateMachine.sendTaskSuccess}.
   */
  readonly integrations?: Readonly<Record<string, LocalIntegration>>;
}

/** An in-process AWS service integration of a Task state. */
export type LocalIntegration = (parameters: unknown) => Promise<unknown>;

/** Identifies one execution, as Step Functions would in the context object (`$$.Execution`). */
export interface RunContext {
  /** `$$.Execution.Name`. */
  readonly executionName: string;
  /** `$$.Execution.Id`. @default arn:aws:states:us-east-1:000000000000:execution:<state machine>:<name> */
  readonly executionArn?: string;
  /** Aborting it stops the execution with status ABORTED. */
  readonly signal?: AbortSignal;
}

/** One entry of the execution's event log; a deep copy, safe to keep and to mutate. */
export interface ExecutionEvent {
  readonly type: string;
  readonly [key: string]: unknown;
}

/** How an execution ended, with its full event log. */
export interface ExecutionResult {
  readonly status: 'SUCCEEDED' | 'FAILED' | 'ABORTED' | 'TIMED_OUT';
  readonly output?: unknown;
  readonly error?: string;
  readonly cause?: string;
  /** Every state's entered/exited with input and output, task failures, retries and catches. */
  readonly events: readonly ExecutionEvent[];
}

type Overrides = NonNullable<RunOptions['overrides']>;
type TaskOverrides = NonNullable<Overrides['taskResourceLocalHandlers']>;
type TaskOverride = TaskOverrides[string];
type JsonValue = Parameters<TaskOverride>[0];

const LAMBDA_INVOKE = /^arn:[^:]+:states:::lambda:invoke$/;
const WAIT_FOR_TASK_TOKEN = '.waitForTaskToken';
/**
 * `$$.Task.Token` as an execution's context holds it: the runner gives each task that waits for
 * its token a token of its own, which starts with this and the execution's ARN.
 */
const TOKEN_PREFIX = 'svc-dsr-local-task:';

/** A task waiting for its token: its execution, and when it times out (epoch ms). */
interface WaitingTask {
  readonly executionArn: string;
  readonly timesOutAt: number;
  readonly resolve: (output: JsonValue) => void;
}

/**
 * Where the runner carries a Task's TimeoutSecondsPath into its parameters. Step Functions reads
 * TimeoutSecondsPath from the state's input; the library reads it from the parameters, so the
 * runner adds the field to the Parameters, points the path at it, and takes it out again before
 * the task runs.
 */
const TIMEOUT_FIELD = 'svc_dsr_local_timeout_seconds';

/** The longest timer Node keeps, in whole seconds: 2^31 - 1 ms. */
export const LONGEST_TIMER_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

/** Makes each Task's TimeoutSecondsPath read the state's input, as in Step Functions (see TIMEOUT_FIELD). */
function timeoutsFromStateInput(states: Record<string, unknown>): void {
  for (const state of Object.values(states)) {
    if (typeof state !== 'object' || state === null) continue;
    const task = state as Record<string, unknown>;
    const parameters = task.Parameters;
    if (
      task.Type === 'Task' &&
      typeof task.TimeoutSecondsPath === 'string' &&
      typeof parameters === 'object' &&
      parameters !== null
    ) {
      task.Parameters = { ...parameters, [`${TIMEOUT_FIELD}.$`]: task.TimeoutSecondsPath };
      task.TimeoutSecondsPath = `$.${TIMEOUT_FIELD}`;
    }
    for (const nested of [task.Branches, [task.Iterator], [task.ItemProcessor]].flat()) {
      if (typeof nested === 'object' && nested !== null && 'States' in nested) {
        timeoutsFromStateInput(nested.States as Record<string, unknown>);
      }
    }
  }
}

/** A task's parameters without the runner's TIMEOUT_FIELD, and the timeout it carried. */
function withoutTimeout(input: JsonValue): { parameters: JsonValue; timeoutSeconds?: number } {
  if (input === null || typeof input !== 'object' || Array.isArray(input) || !(TIMEOUT_FIELD in input)) {
    return { parameters: input };
  }
  const { [TIMEOUT_FIELD]: timeout, ...parameters } = input;
  return typeof timeout === 'number' ? { parameters, timeoutSeconds: timeout } : { parameters };
}
const LAMBDA_INVOKE_ANY = /^arn:[^:]+:states:::lambda:invoke(\.|$)/;
const LAMBDA_FUNCTION_ARN = /^arn:[^:]+:lambda:[^:]*:[^:]*:function:([^:]+)(?::[^:]+)?$/;

/** Lambda's own error when a function does not exist; the closest AWS answer to a missing handler. */
const FUNCTION_NOT_FOUND = 'Lambda.ResourceNotFoundException';

const invokeParametersSchema = z.looseObject({
  FunctionName: z.string().min(1),
  Payload: z.unknown().optional(),
});

/**
 * A synthesized state machine, validated and built once (that costs ~300 ms), then run as often as
 * needed with in-process Lambda handlers.
 */
export class LocalStateMachine {
  readonly #machine: StateMachine;
  readonly #overrides: Overrides;
  readonly #stateMachineArn: string;
  readonly #stateMachineName: string;
  readonly #functions: ReadonlyMap<string, string>;
  readonly #handlers: Readonly<Record<string, LocalLambda>>;
  readonly #throttle: AwsThrottle;
  readonly #integrations: Readonly<Record<string, LocalIntegration>>;
  /** Tasks waiting for their token, by token; an execution's go when it ends. */
  readonly #waiting = new Map<string, WaitingTask>();
  #tokens = 0;

  constructor(resolved: ResolvedStateMachine, options: RunnerOptions) {
    const definition = structuredClone(resolved.definition);
    if (!isStateMachineDefinition(definition)) {
      throw new ConfigurationError(
        'The resolved definition has no StartAt or States; resolve it with resolveStateMachine',
      );
    }
    this.#functions = resolved.functions;
    this.#handlers = options.handlers;
    this.#throttle = new AwsThrottle(options.awsFaults);
    this.#integrations = options.integrations ?? {};
    this.#stateMachineName = resolved.logicalId;
    this.#stateMachineArn = `arn:${LOCAL_PARTITION}:states:${LOCAL_REGION}:${LOCAL_ACCOUNT_ID}:stateMachine:${resolved.logicalId}`;

    timeoutsFromStateInput(definition.States);
    const taskResourceLocalHandlers: TaskOverrides = {};
    const waitTimeOverrides: Record<string, number> = {};
    const retryIntervalOverrides: Record<string, number> = {};
    for (const [name, state] of allStates(definition.States)) {
      if (state.Type === 'Task') {
        const override = this.#taskOverride(name, state.Resource);
        taskResourceLocalHandlers[name] = (input) => override(withoutTimeout(input).parameters, input);
      }
      // Every Wait is compressed except a wait for platform capacity: the platform's limits (the
      // emulator's rate limit, its outage window) run in real time, and so must waiting for them.
      if (state.Type === 'Wait' && !name.endsWith(PLATFORM_WAIT_SUFFIX)) {
        waitTimeOverrides[name] = options.waitMs ?? 0;
      }
      if (state.Retry !== undefined) retryIntervalOverrides[name] = options.retryIntervalMs ?? 0;
    }
    this.#overrides = { taskResourceLocalHandlers, waitTimeOverrides, retryIntervalOverrides };
    // Node fires a timer set past 2^31 - 1 ms (24.8 days) at once, and the library times the
    // execution with one: a longer TimeoutSeconds (the stack's covers a request open for 93 days)
    // is capped there. No local run lasts that long; a shorter timeout is kept as it is.
    if (definition.TimeoutSeconds !== undefined && definition.TimeoutSeconds > LONGEST_TIMER_SECONDS) {
      definition.TimeoutSeconds = LONGEST_TIMER_SECONDS;
    }
    this.#machine = new StateMachine(definition);
  }

  /** `$$.StateMachine.Id`; executions' default ARNs start from it. */
  get stateMachineArn(): string {
    return this.#stateMachineArn;
  }

  /** Runs one execution to its end and returns its status, output or error, and event log. */
  async run(input: unknown, context: RunContext): Promise<ExecutionResult> {
    if (context.executionName.length === 0) throw new ConfigurationError('executionName must not be empty');
    const executionInput = jsonCopy(input, 'the execution input');
    const executionArn =
      context.executionArn ??
      `arn:${LOCAL_PARTITION}:states:${LOCAL_REGION}:${LOCAL_ACCOUNT_ID}:execution:${this.#stateMachineName}:${context.executionName}`;
    const execution = this.#machine.run(executionInput, {
      overrides: this.#overrides,
      context: {
        Execution: { Id: executionArn, Name: context.executionName },
        StateMachine: { Id: this.#stateMachineArn, Name: this.#stateMachineName },
        Task: { Token: `${TOKEN_PREFIX}${executionArn}` },
      },
    });

    const events: ExecutionEvent[] = [];
    // The library's events hold live references to state data; copy each as soon as it arrives.
    const collecting = (async () => {
      for await (const event of execution.eventLogs) events.push(copyEvent(event));
    })();
    const abort = () => execution.abort();
    if (context.signal?.aborted) abort();
    context.signal?.addEventListener('abort', abort, { once: true });

    try {
      const output = await execution.result;
      await collecting;
      return { status: 'SUCCEEDED', output: structuredClone(output), events };
    } catch (error) {
      await collecting;
      return { ...describeFailure(error), events };
    } finally {
      context.signal?.removeEventListener('abort', abort);
      // Tokens of an ended execution answer TaskDoesNotExist, as in Step Functions.
      for (const [token, task] of this.#waiting)
        if (task.executionArn === executionArn) this.#waiting.delete(token);
    }
  }

  /**
   * SendTaskSuccess: the task waiting for `token` ends with `output` (JSON text). Throws errors
   * named as Step Functions names them: InvalidToken for a token never given, TaskDoesNotExist
   * for one whose execution has ended, TaskTimedOut for one past its timeout, InvalidOutput for
   * output that is not JSON.
   */
  sendTaskSuccess(token: string, output: string): void {
    if (!token.startsWith(TOKEN_PREFIX)) throw namedError('InvalidToken', 'Invalid token');
    const task = this.#waiting.get(token);
    if (task === undefined) throw namedError('TaskDoesNotExist', 'Task does not exist anymore');
    if (Date.now() >= task.timesOutAt) {
      this.#waiting.delete(token);
      throw namedError('TaskTimedOut', 'Task Timed Out');
    }
    let value: unknown;
    try {
      value = JSON.parse(output);
    } catch {
      throw namedError('InvalidOutput', 'Invalid State Machine Execution Output: the output is not JSON');
    }
    this.#waiting.delete(token);
    task.resolve(jsonCopy(value, 'the task output'));
  }

  #taskOverride(
    stateName: string,
    resource: string,
  ): (input: JsonValue, withTimeout: JsonValue) => ReturnType<TaskOverride> {
    if (LAMBDA_INVOKE.test(resource)) {
      return async (input) => {
        const parameters = invokeParametersSchema.safeParse(input);
        if (!parameters.success) {
          throw namedError(
            'States.Runtime',
            `Task ${stateName}: lambda:invoke needs Parameters with a FunctionName string: ${z.prettifyError(parameters.error)}`,
          );
        }
        const handler = this.#handlerFor(stateName, parameters.data.FunctionName);
        const payload = parameters.data.Payload === undefined ? {} : parameters.data.Payload;
        this.#checkThrottle();
        const result = await invoke(handler, payload);
        return { ExecutedVersion: '$LATEST', Payload: result, StatusCode: 200 };
      };
    }
    if (LAMBDA_FUNCTION_ARN.test(resource)) {
      return async (input) => {
        const handler = this.#handlerFor(stateName, resource);
        this.#checkThrottle();
        return invoke(handler, input);
      };
    }
    const callback = resource.endsWith(WAIT_FOR_TASK_TOKEN);
    const base = callback ? resource.slice(0, -WAIT_FOR_TASK_TOKEN.length) : resource;
    const integration = Object.hasOwn(this.#integrations, base) ? this.#integrations[base] : undefined;
    if (integration !== undefined && callback) return this.#callbackOverride(stateName, integration);
    if (integration !== undefined) {
      return async (input) =>
        jsonCopy(await integration(jsonCopy(input, 'the task parameters')), 'the answer');
    }
    const why = LAMBDA_INVOKE_ANY.test(resource)
      ? 'callback and async invocations (.waitForTaskToken) are not supported locally'
      : `the local runner executes Lambda tasks (lambda:invoke or a function ARN) and the integrations it is given (${Object.keys(this.#integrations).join(', ') || 'none'})`;
    throw new ConfigurationError(`Task state ${stateName} uses the resource ${resource}: ${why}`);
  }

  /**
   * A `.waitForTaskToken` task: the integration gets its Parameters with `$$.Task.Token` made this
   * task's own, and the task ends when {@link sendTaskSuccess} answers that token (or at its
   * TimeoutSeconds, which the library keeps).
   */
  #callbackOverride(
    stateName: string,
    integration: LocalIntegration,
  ): (input: JsonValue, withTimeout: JsonValue) => ReturnType<TaskOverride> {
    return async (input, withTimeout) => {
      const parameters = jsonCopy(input, 'the task parameters');
      const { timeoutSeconds } = withoutTimeout(withTimeout);
      const execution = findToken(parameters);
      if (execution === undefined) {
        throw namedError(
          'States.Runtime',
          `Task ${stateName}: a .waitForTaskToken task must pass $$.Task.Token in its Parameters`,
        );
      }
      this.#tokens += 1;
      const token = `${execution}:${this.#tokens}`;
      const timesOutAt =
        timeoutSeconds === undefined ? Number.POSITIVE_INFINITY : Date.now() + timeoutSeconds * 1000;
      const answered = new Promise<JsonValue>((resolve) => {
        this.#waiting.set(token, { executionArn: execution.slice(TOKEN_PREFIX.length), timesOutAt, resolve });
      });
      try {
        await integration(withToken(parameters, execution, token));
      } catch (error) {
        this.#waiting.delete(token);
        throw error;
      }
      return answered;
    };
  }

  /** A throttled invoke fails as the lambda:invoke integration reports Lambda's 429, before the function runs. */
  #checkThrottle(): void {
    if (!this.#throttle.throttles('lambda')) return;
    throw namedError(
      'Lambda.TooManyRequestsException',
      'Rate Exceeded. (Service: AWSLambda; Status Code: 429; Error Code: TooManyRequestsException)',
    );
  }

  #handlerFor(stateName: string, functionName: string): LocalLambda {
    const logicalId = this.#logicalIdOf(functionName);
    if (logicalId === undefined) {
      const known = [...new Set(this.#functions.values())].join(', ') || 'none';
      throw namedError(
        FUNCTION_NOT_FOUND,
        `Task ${stateName}: FunctionName ${functionName} is not a Lambda function of the template (functions in this state machine: ${known})`,
      );
    }
    const handler = Object.hasOwn(this.#handlers, logicalId) ? this.#handlers[logicalId] : undefined;
    if (handler === undefined) {
      const registered = Object.keys(this.#handlers).join(', ') || 'none';
      throw namedError(
        FUNCTION_NOT_FOUND,
        `Task ${stateName}: no local handler for the Lambda with logical id ${logicalId}; handlers are registered for: ${registered}`,
      );
    }
    return handler;
  }

  #logicalIdOf(functionName: string): string | undefined {
    const exact = this.#functions.get(functionName);
    if (exact !== undefined) return exact;
    // A qualified ARN (…:function:Name:alias) or a bare function name still names the same function.
    const name = LAMBDA_FUNCTION_ARN.exec(functionName)?.[1] ?? functionName;
    return [...this.#functions.values()].find((logicalId) => logicalId === name);
  }
}

interface StateSummary {
  readonly Type: string;
  readonly Resource: string;
  readonly Retry: unknown;
}

const stateSchema = z.looseObject({
  Type: z.string(),
  Resource: z.string().optional(),
  Retry: z.array(z.unknown()).optional(),
  Branches: z.array(z.looseObject({ States: z.record(z.string(), z.unknown()) })).optional(),
  Iterator: z.looseObject({ States: z.record(z.string(), z.unknown()) }).optional(),
  ItemProcessor: z.looseObject({ States: z.record(z.string(), z.unknown()) }).optional(),
});

/** Every state, including those nested in Parallel branches and Map iterators; overrides are keyed by name. */
function* allStates(states: Record<string, unknown>): Generator<[string, StateSummary]> {
  for (const [name, raw] of Object.entries(states)) {
    const state = stateSchema.safeParse(raw);
    if (!state.success) {
      throw new ConfigurationError(`State ${name} is not an ASL state: ${z.prettifyError(state.error)}`);
    }
    const { Type, Resource = '', Retry, Branches = [], Iterator, ItemProcessor } = state.data;
    yield [name, { Type, Resource, Retry }];
    for (const branch of [...Branches, Iterator, ItemProcessor]) {
      if (branch !== undefined) yield* allStates(branch.States);
    }
  }
}

function isStateMachineDefinition(
  value: Record<string, unknown>,
): value is Record<string, unknown> & StateMachineDefinition {
  return typeof value.StartAt === 'string' && typeof value.States === 'object' && value.States !== null;
}

/** The execution's token (`$$.Task.Token` from the context) where Parameters carry it. */
function findToken(value: JsonValue): string | undefined {
  if (typeof value === 'string') return value.startsWith(TOKEN_PREFIX) ? value : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  for (const item of Object.values(value)) {
    const found = findToken(item);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** Parameters with the execution's token replaced by the task's. */
function withToken(value: JsonValue, execution: string, token: string): JsonValue {
  if (value === execution) return token;
  if (Array.isArray(value)) return value.map((item) => withToken(item, execution, token));
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, item]) => [key, withToken(item, execution, token)]),
  );
}

/** Calls a handler across the JSON boundary Lambda puts between a state machine and its code. */
async function invoke(handler: LocalLambda, payload: unknown): Promise<JsonValue> {
  const event = jsonCopy(payload, 'the Lambda payload');
  let result: unknown;
  try {
    result = await handler(event);
  } catch (thrown) {
    throw asLambdaError(thrown);
  }
  return jsonCopy(result, 'the Lambda result');
}

/**
 * The error Step Functions sees when a Lambda throws: Error is the error's name and Cause is the
 * JSON document Lambda reports ({errorType, errorMessage, trace}), so local Catch outputs look like AWS's.
 */
function asLambdaError(thrown: unknown): Error {
  const errorType = thrown instanceof Error ? thrown.name : 'Error';
  const errorMessage = thrown instanceof Error ? thrown.message : String(thrown);
  const trace = thrown instanceof Error ? (thrown.stack ?? '').split('\n') : [];
  return namedError(errorType, JSON.stringify({ errorType, errorMessage, trace }));
}

function namedError(name: string, message: string): Error {
  const error = new Error(message);
  error.name = name;
  return error;
}

/** A JSON round trip: what survives serialization, as Lambda and Step Functions would pass it on. */
function jsonCopy(value: unknown, what: string): JsonValue {
  const text = JSON.stringify(value);
  if (text === undefined) return null;
  const copy: unknown = JSON.parse(text);
  if (!isJsonValue(copy)) throw namedError('States.Runtime', `${what} is not JSON`);
  return copy;
}

function isJsonValue(value: unknown): value is JsonValue {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return true;
  if (typeof value === 'number') return Number.isFinite(value);
  if (Array.isArray(value)) return value.every(isJsonValue);
  if (typeof value === 'object') return Object.values(value).every(isJsonValue);
  return false;
}

function copyEvent(event: { readonly type: string }): ExecutionEvent {
  const copy: ExecutionEvent = structuredClone(event);
  // A failure's Cause may be an Error object from the library; keep the log plain data.
  const cause = copy.Cause;
  return cause instanceof Error ? { ...copy, Cause: cause.message } : copy;
}

function describeFailure(error: unknown): Omit<ExecutionResult, 'events'> {
  if (error instanceof ExecutionAbortedError) return { status: 'ABORTED' };
  if (error instanceof ExecutionTimeoutError) {
    return { status: 'TIMED_OUT', error: 'States.Timeout', cause: 'The execution ran past TimeoutSeconds' };
  }
  if (error instanceof ExecutionError && error.cause instanceof Error) {
    return { status: 'FAILED', error: error.cause.name, cause: error.cause.message };
  }
  throw error;
}
