/**
 * A small Step Functions API on loopback over the local executions (`local/runtime/executions.ts`):
 * enough of the AWS JSON 1.0 protocol that the real `SFNClient` (and so the intake Lambda's
 * StartExecution code) works unchanged in local mode. It answers the operations svc-dsr calls:
 * StartExecution (intake), DescribeExecution (the reconciler), StopExecution (`svc-dsr cancel`)
 * and SendTaskSuccess (the steps that hand an export slot to a waiting execution), and the ones an
 * engineer inspects local mode with, from the AWS CLI or a console script: ListStateMachines,
 * ListExecutions and GetExecutionHistory (`sfn-history.ts`).
 * It keeps no executions of its own: the registry it is given runs them and keeps their records.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { z } from 'zod';
import { BodyTooLargeError, listen, readBody } from '../http.ts';
import { NAME } from '../runtime/execution-records.ts';
import {
  apiFault,
  apiFaults,
  EXECUTION_ARN,
  type Execution,
  type ExecutionSummary,
  MAX_INPUT_BYTES,
  type Registry,
} from '../runtime/executions.ts';
import { type AwsFaults, AwsThrottle, throttleServer } from './aws-faults.ts';
import { executionHistory } from './sfn-history.ts';

/** How to start a {@link SfnShim}: the executions it serves, and where and how it answers. */
export interface ShimOptions {
  /** The executions StartExecution, DescribeExecution and StopExecution act on; their owner closes them. */
  readonly executions: Registry;
  /** @default 0 (any free port) */
  readonly port?: number;
  /** Throttles a seeded share of StartExecution calls (ThrottlingException) when it lists `states`. @default no throttling */
  readonly awsFaults?: AwsFaults;
}

/** A running Step Functions shim. */
export interface SfnShim {
  /** `http://127.0.0.1:<port>`, for `new SFNClient({ endpoint })`. */
  readonly endpoint: string;
  readonly stateMachineArn: string;
  /**
   * Stops answering. Close the executions first: while they close the shim answers that it is
   * closing, and a StopExecution already in flight gets its answer.
   */
  close(): Promise<void>;
}

/** Starts the shim on 127.0.0.1 over `options.executions`. */
export async function startSfnShim(options: ShimOptions): Promise<SfnShim> {
  const registry = options.executions;
  const server = createServer((request, response) => {
    answer(registry, request, response).catch((error: unknown) => {
      // A shim bug must not take local mode down; the client gets a 500, stderr gets one line.
      const reason = error instanceof Error ? `${error.name}: ${error.message}` : 'unknown error';
      process.stderr.write(`svc-dsr sfn shim: internal error: ${reason}\n`);
      if (!response.headersSent) sendJson(response, 500, { __type: 'InternalFailure', message: reason });
      else response.destroy();
    });
  });
  throttleServer(server, new AwsThrottle(options.awsFaults), (request) =>
    request.headers['x-amz-target'] === `${TARGET_PREFIX}StartExecution` ? 'states' : null,
  );
  const { endpoint } = await listen(server, options.port ?? 0);

  let closed: Promise<void> | undefined;
  return {
    endpoint,
    stateMachineArn: registry.options.stateMachineArn,
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closed;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The wire protocol

const TARGET_PREFIX = 'AWSStepFunctions.';
/** Generous for a 256 KiB input escaped inside a JSON string. */
const MAX_BODY_BYTES = 2 * 1024 * 1024;

type Operation = (registry: Registry, body: unknown) => Promise<Record<string, unknown>>;

const OPERATIONS: Readonly<Record<string, Operation>> = {
  StartExecution: startExecution,
  DescribeExecution: describeExecution,
  StopExecution: stopExecution,
  SendTaskSuccess: sendTaskSuccess,
  ListStateMachines: listStateMachines,
  ListExecutions: listExecutions,
  GetExecutionHistory: getExecutionHistory,
};

async function answer(registry: Registry, request: IncomingMessage, response: ServerResponse): Promise<void> {
  const target = request.headers['x-amz-target'];
  const operationName =
    typeof target === 'string' && target.startsWith(TARGET_PREFIX) ? target.slice(TARGET_PREFIX.length) : '';
  const operation = Object.hasOwn(OPERATIONS, operationName) ? OPERATIONS[operationName] : undefined;
  if (request.method !== 'POST' || (request.url ?? '/') !== '/' || operation === undefined) {
    request.resume();
    const what = typeof target === 'string' ? target : 'no X-Amz-Target';
    sendJson(response, 400, {
      __type: 'UnknownOperationException',
      message: `${request.method ?? ''} ${request.url ?? ''} with ${what} is not an operation this shim answers (${Object.keys(OPERATIONS).join(', ')})`,
    });
    return;
  }
  if (registry.closing) {
    request.resume();
    sendJson(response, 503, { __type: 'ServiceUnavailable', message: 'The Step Functions shim is closing' });
    return;
  }
  try {
    const body = await readJsonBody(request);
    sendJson(response, 200, await operation(registry, body));
  } catch (error) {
    if (error instanceof Error && apiFaults.has(error)) {
      sendJson(response, 400, { __type: error.name, message: error.message });
      return;
    }
    throw error;
  }
}

async function readJsonBody(request: IncomingMessage): Promise<unknown> {
  const body = await readBody(request, MAX_BODY_BYTES).catch((error: unknown) => {
    throw error instanceof BodyTooLargeError
      ? apiFault('ValidationException', `Request body over ${MAX_BODY_BYTES} bytes`)
      : error;
  });
  const text = body.toString('utf8');
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    throw apiFault('SerializationException', 'The request body is not JSON');
  }
}

function sendJson(response: ServerResponse, status: number, body: Record<string, unknown>): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/x-amz-json-1.0',
    'content-length': Buffer.byteLength(text),
    'x-amzn-requestid': randomUUID(),
  });
  response.end(text);
}

function parseRequest<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw apiFault('ValidationException', z.prettifyError(parsed.error));
  return parsed.data;
}

const startRequest = z.looseObject({
  stateMachineArn: z.string(),
  name: z.string().optional(),
  input: z.string().optional(),
});

async function startExecution(registry: Registry, body: unknown): Promise<Record<string, unknown>> {
  const request = parseRequest(startRequest, body);
  checkStateMachine(registry, request.stateMachineArn);
  const name = request.name ?? randomUUID();
  if (!NAME.test(name)) {
    throw apiFault('InvalidName', `Invalid Name: '${name}' (1 to 80 characters of A-Z, a-z, 0-9, - and _)`);
  }
  const inputText = request.input ?? '{}';
  if (Buffer.byteLength(inputText) > MAX_INPUT_BYTES) {
    throw apiFault('InvalidExecutionInput', `The input is over ${MAX_INPUT_BYTES} bytes`);
  }
  let input: unknown;
  try {
    input = JSON.parse(inputText);
  } catch {
    throw apiFault('InvalidExecutionInput', 'Invalid State Machine Execution Input: the input is not JSON');
  }
  if (registry.closing) throw apiFault('ValidationException', 'The Step Functions shim is closing');
  const record = await registry.start(name, input);
  return { executionArn: record.executionArn, startDate: epochSeconds(record.startDate) };
}

const describeRequest = z.looseObject({
  executionArn: z.string(),
  includedData: z.enum(['ALL_DATA', 'METADATA_ONLY']).optional(),
});

/** What DescribeExecution says of any execution. */
function executionSummary(registry: Registry, record: ExecutionSummary) {
  return {
    executionArn: record.executionArn,
    stateMachineArn: registry.options.stateMachineArn,
    name: record.name,
    status: record.status,
    startDate: epochSeconds(record.startDate),
    ...(record.stopDate === undefined ? {} : { stopDate: epochSeconds(record.stopDate) }),
    redriveCount: 0,
  };
}

async function describeExecution(registry: Registry, body: unknown): Promise<Record<string, unknown>> {
  const request = parseRequest(describeRequest, body);
  const execution = findExecution(registry, request.executionArn);
  // Input and output may have to be read from the record file: only when they are asked for.
  const full = request.includedData === 'METADATA_ONLY' ? undefined : await registry.read(execution);
  const record = full ?? execution.record;
  const { redriveCount, ...summary } = executionSummary(registry, record);
  return {
    ...summary,
    ...(full === undefined ? {} : { input: JSON.stringify(full.input), inputDetails: { included: true } }),
    ...(full?.status === 'SUCCEEDED'
      ? { output: JSON.stringify(full.output ?? null), outputDetails: { included: true } }
      : {}),
    ...(record.error === undefined ? {} : { error: record.error }),
    ...(record.cause === undefined ? {} : { cause: record.cause }),
    redriveCount,
  };
}

const stopRequest = z.looseObject({
  executionArn: z.string(),
  error: z.string().max(256).optional(),
  cause: z.string().max(32_768).optional(),
});

async function stopExecution(registry: Registry, body: unknown): Promise<Record<string, unknown>> {
  const request = parseRequest(stopRequest, body);
  const execution = findExecution(registry, request.executionArn);
  const record = await registry.stop(execution, { error: request.error, cause: request.cause });
  return { stopDate: epochSeconds(record.stopDate ?? new Date().toISOString()) };
}

const taskSuccessRequest = z.looseObject({
  taskToken: z.string().min(1).max(2048),
  output: z.string().max(MAX_INPUT_BYTES),
});

/** Answers a waiting task's token; the machine's errors carry Step Functions' names (TaskTimedOut, ...). */
async function sendTaskSuccess(registry: Registry, body: unknown): Promise<Record<string, unknown>> {
  const request = parseRequest(taskSuccessRequest, body);
  try {
    registry.options.machine.sendTaskSuccess(request.taskToken, request.output);
  } catch (error) {
    if (error instanceof Error) throw apiFault(error.name, error.message);
    throw error;
  }
  return {};
}

/** The one machine local mode runs; its creation date is the shim's start, as close as local mode has. */
const SHIM_STARTED = Date.now();

function machineName(registry: Registry): string {
  return registry.options.stateMachineArn.split(':').at(-1) ?? '';
}

async function listStateMachines(registry: Registry, body: unknown): Promise<Record<string, unknown>> {
  parseRequest(
    z.looseObject({
      maxResults: z.number().int().min(0).max(1000).optional(),
      nextToken: z.string().optional(),
    }),
    body,
  );
  return {
    stateMachines: [
      {
        stateMachineArn: registry.options.stateMachineArn,
        name: machineName(registry),
        type: 'STANDARD',
        creationDate: SHIM_STARTED / 1000,
      },
    ],
  };
}

/** A page token: the position after the page, tied to what was asked so it cannot be reused for another question. */
function pageToken(position: number, question: string): string {
  return Buffer.from(JSON.stringify({ position, question }), 'utf8').toString('base64url');
}

function readPageToken(token: string | undefined, question: string): number {
  if (token === undefined) return 0;
  try {
    const parsed = z
      .object({ position: z.number().int().nonnegative(), question: z.string() })
      .parse(JSON.parse(Buffer.from(token, 'base64url').toString('utf8')));
    if (parsed.question === question) return parsed.position;
  } catch {
    // An invalid token is answered below, whatever made it invalid.
  }
  throw apiFault('InvalidToken', `Invalid Token: '${token}'`);
}

/** Step Functions pages at most 1000 items; 0 or nothing means its default of 100. */
function pageSize(maxResults: number | undefined): number {
  return maxResults === undefined || maxResults === 0 ? 100 : maxResults;
}

const listExecutionsRequest = z.looseObject({
  stateMachineArn: z.string(),
  statusFilter: z
    .enum(['RUNNING', 'SUCCEEDED', 'FAILED', 'TIMED_OUT', 'ABORTED', 'PENDING_REDRIVE'])
    .optional(),
  maxResults: z.number().int().min(0).max(1000).optional(),
  nextToken: z.string().max(3096).optional(),
});

/** Newest first, as Step Functions lists them; `statusFilter` and paging as its API takes them. */
async function listExecutions(registry: Registry, body: unknown): Promise<Record<string, unknown>> {
  const request = parseRequest(listExecutionsRequest, body);
  checkStateMachine(registry, request.stateMachineArn);
  const matching = registry
    .summaries()
    .filter((summary) => request.statusFilter === undefined || summary.status === request.statusFilter);
  const question = `ListExecutions ${request.stateMachineArn} ${request.statusFilter ?? ''}`;
  const start = readPageToken(request.nextToken, question);
  const size = pageSize(request.maxResults);
  const page = matching.slice(start, start + size);
  return {
    executions: page.map((summary) => {
      const { redriveCount: _redriveCount, ...listed } = executionSummary(registry, summary);
      return listed;
    }),
    ...(start + size < matching.length ? { nextToken: pageToken(start + size, question) } : {}),
  };
}

const historyRequest = z.looseObject({
  executionArn: z.string(),
  maxResults: z.number().int().min(0).max(1000).optional(),
  nextToken: z.string().max(3096).optional(),
  reverseOrder: z.boolean().optional(),
  includeExecutionData: z.boolean().optional(),
});

async function getExecutionHistory(registry: Registry, body: unknown): Promise<Record<string, unknown>> {
  const request = parseRequest(historyRequest, body);
  const execution = findExecution(registry, request.executionArn);
  const oldestFirst = executionHistory(await registry.read(execution));
  const events = request.reverseOrder === true ? oldestFirst.reverse() : oldestFirst;
  const question = `GetExecutionHistory ${request.executionArn} ${request.reverseOrder === true}`;
  const start = readPageToken(request.nextToken, question);
  const size = pageSize(request.maxResults);
  const page = events.slice(start, start + size);
  return {
    events: request.includeExecutionData === false ? page.map(withoutData) : page,
    ...(start + size < events.length ? { nextToken: pageToken(start + size, question) } : {}),
  };
}

/** `includeExecutionData: false` leaves out inputs and outputs, as Step Functions does. */
function withoutData(event: Record<string, unknown>): Record<string, unknown> {
  const stripped: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(event)) {
    if (field.endsWith('EventDetails') && typeof value === 'object' && value !== null) {
      const { input: _input, output: _output, ...rest } = value as Record<string, unknown>;
      stripped[field] = rest;
    } else {
      stripped[field] = value;
    }
  }
  return stripped;
}

function checkStateMachine(registry: Registry, stateMachineArn: string): void {
  if (!stateMachineArn.startsWith('arn:')) throw apiFault('InvalidArn', `Invalid Arn: '${stateMachineArn}'`);
  if (stateMachineArn !== registry.options.stateMachineArn) {
    throw apiFault('StateMachineDoesNotExist', `State Machine Does Not Exist: '${stateMachineArn}'`);
  }
}

function findExecution(registry: Registry, executionArn: string): Execution {
  const name = EXECUTION_ARN.exec(executionArn)?.[1];
  if (name === undefined) throw apiFault('InvalidArn', `Invalid Arn: '${executionArn}'`);
  const execution = registry.find(name);
  if (execution === undefined || execution.record.executionArn !== executionArn) {
    throw apiFault('ExecutionDoesNotExist', `Execution Does Not Exist: '${executionArn}'`);
  }
  return execution;
}

function epochSeconds(iso: string): number {
  return Date.parse(iso) / 1000;
}
