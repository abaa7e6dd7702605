/**
 * The executions of the local state machine, the only record of them: started, restarted after a
 * crash, stopped, and, with a data directory, each one kept as a JSON file a person can read
 * (`execution-records.ts`), so a restart knows which executions a crash cut short. The workflow
 * (`workflow.ts`) owns it; the Step Functions API (`local/aws/sfn-shim.ts`) serves it.
 */
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { ConfigurationError } from '../../lambdas/shared/errors.ts';
import { loadRecords, readRecordFile, writeAtomically } from './execution-records.ts';
import type { ExecutionEvent, ExecutionResult, LocalStateMachine } from './sfn-runner.ts';

/** What the executions run on, and where their records go. */
export interface ExecutionRegistryOptions {
  /** Built once by the caller; every execution runs on it. */
  readonly machine: LocalStateMachine;
  /** The machine's ARN (`arn:<partition>:states:<region>:<account>:stateMachine:<name>`): clients use it, executions' ARNs start from it. */
  readonly stateMachineArn: string;
  /**
   * A directory of its own for execution records: one `<name>.json` per execution, written at start
   * and at end, so a person can read its history and a restart knows what ran.
   * @default none (memory only)
   */
  readonly dataDir?: string;
  /** Called with a copy of the record when an execution ends, after the record is written. */
  readonly onExecutionEnd?: (record: ExecutionRecord) => void;
}

/** How {@link Registry.close} treats executions that are still running. */
export interface CloseOptions {
  /** How long to wait for running executions to end. @default 5000 */
  readonly timeoutMs?: number;
}

/** Status of an execution, as DescribeExecution reports it. */
export type ExecutionStatus = 'RUNNING' | ExecutionResult['status'];

/** What the shim knows about one execution; also the content of `<dataDir>/<name>.json`. */
export interface ExecutionRecord {
  readonly name: string;
  readonly executionArn: string;
  readonly input: unknown;
  readonly status: ExecutionStatus;
  /** ISO 8601. */
  readonly startDate: string;
  /** ISO 8601; absent while RUNNING. */
  readonly stopDate?: string;
  readonly output?: unknown;
  readonly error?: string;
  readonly cause?: string;
  /** The runner's event log, filled in when the execution ends (empty while it runs). */
  readonly events: readonly ExecutionEvent[];
}

/** A record without its input, output and event log: all a caller's overview needs. */
export type ExecutionSummary = Omit<ExecutionRecord, 'input' | 'output' | 'events'>;

const STATE_MACHINE_ARN =
  /^arn:(?<partition>[^:]+):states:(?<region>[^:]*):(?<account>[^:]*):stateMachine:(?<name>[^:]+)$/;
export const EXECUTION_ARN = /^arn:[^:]+:states:[^:]*:[^:]*:execution:[^:]+:([^:]+)$/;
/** Step Functions' limit on an execution input, in UTF-8 bytes. */
export const MAX_INPUT_BYTES = 256 * 1024;

interface MachineArns {
  readonly executionArnPrefix: string;
}

export function parseStateMachineArn(stateMachineArn: string): MachineArns {
  const parts = STATE_MACHINE_ARN.exec(stateMachineArn)?.groups;
  if (parts?.partition === undefined || parts.account === undefined || parts.name === undefined) {
    throw new ConfigurationError(
      `stateMachineArn ${stateMachineArn} is not a state machine ARN; expected arn:<partition>:states:<region>:<account>:stateMachine:<name>`,
    );
  }
  const { partition, region = '', account, name } = parts;
  return { executionArnPrefix: `arn:${partition}:states:${region}:${account}:execution:${name}:` };
}

export interface Execution {
  /**
   * The whole record while the execution runs, or when there is no data directory. Once its final
   * record is written only the summary stays in memory and the rest is read back from the file when
   * asked for, so a long-running local mode does not keep every history it ever ran.
   */
  record: ExecutionRecord | ExecutionSummary;
  /** Order of (re)start, newest highest; the summaries are listed in it. */
  sequence: number;
  /** Present while the execution runs in this process. */
  run?: { readonly controller: AbortController; readonly settled: Promise<void>; stop?: StopRequest };
  /** Set by close() for an execution it gave up waiting for: nothing about it is written again. */
  abandoned: boolean;
  /** Record writes of this execution, in order. */
  writes: Promise<void>;
}

interface StopRequest {
  readonly error?: string;
  readonly cause?: string;
}

/** Opens the executions of `options.machine`, loading the records already in `options.dataDir`. */
export async function openExecutions(options: ExecutionRegistryOptions): Promise<Registry> {
  const arns = parseStateMachineArn(options.stateMachineArn);
  const loaded = options.dataDir === undefined ? [] : await loadRecords(options.dataDir);
  return new Registry(options, arns, loaded);
}

export class Registry {
  /**
   * Executions whose record said RUNNING when the registry opened (a killed run); the owner decides
   * to restart them. Until then they answer as RUNNING, and StopExecution marks them ABORTED.
   */
  readonly interrupted: readonly ExecutionRecord[];
  #closed: Promise<void> | undefined;
  readonly #executions = new Map<string, Execution>();
  readonly #writeFailures: unknown[] = [];
  readonly #restarting = new Set<string>();
  #sequence = 0;

  constructor(
    readonly options: ExecutionRegistryOptions,
    readonly arns: MachineArns,
    loaded: readonly ExecutionRecord[],
  ) {
    this.interrupted = loaded.filter((record) => record.status === 'RUNNING');
    const oldestFirst = [...loaded].sort(
      (a, b) => a.startDate.localeCompare(b.startDate) || a.name.localeCompare(b.name),
    );
    for (const record of oldestFirst) {
      this.#executions.set(record.name, {
        record: record.status === 'RUNNING' ? record : summaryOf(record),
        sequence: this.#nextSequence(),
        abandoned: false,
        writes: Promise.resolve(),
      });
    }
  }

  /** Set once {@link close} is called: no execution starts or restarts from then on. */
  get closing(): boolean {
    return this.#closed !== undefined;
  }

  /** StartExecution: the same name and input while RUNNING is the same execution, as in AWS. */
  async start(name: string, input: unknown): Promise<ExecutionRecord> {
    const existing = this.#executions.get(name);
    if (existing !== undefined) {
      if (existing.record.status === 'RUNNING') {
        const running = inMemory(existing);
        if (isDeepStrictEqual(running.input, input)) return running;
      }
      throw apiFault(
        'ExecutionAlreadyExists',
        `Execution Already Exists: '${existing.record.executionArn}' (status ${existing.record.status}${existing.record.status === 'RUNNING' ? ', with a different input' : ''})`,
      );
    }
    const record = this.#freshRecord(name, input);
    const execution: Execution = {
      record,
      sequence: this.#nextSequence(),
      abandoned: false,
      writes: Promise.resolve(),
    };
    this.#executions.set(name, execution);
    try {
      await this.#persist(execution);
    } catch (error) {
      this.#executions.delete(name);
      throw error;
    }
    this.#launch(execution);
    return record;
  }

  /** Starts an interrupted execution again under the same name and input, replacing its record. */
  async restart(name: string): Promise<void> {
    const execution = this.#executions.get(name);
    if (execution === undefined) {
      throw new ConfigurationError(`No execution named ${name} to restart`);
    }
    const running = execution.run !== undefined || this.#restarting.has(name);
    if (execution.record.status !== 'RUNNING' || running || this.closing) {
      const why = this.closing
        ? 'the executions are closing'
        : running
          ? 'it is running'
          : `it ended with ${execution.record.status}`;
      throw new ConfigurationError(
        `Execution ${name} cannot be restarted: ${why}; only interrupted executions can`,
      );
    }
    this.#restarting.add(name);
    try {
      execution.record = this.#freshRecord(name, inMemory(execution).input);
      execution.sequence = this.#nextSequence();
      await this.#persist(execution);
      this.#launch(execution);
    } finally {
      this.#restarting.delete(name);
    }
  }

  /** StopExecution: aborts a running execution; one that already ended keeps its outcome. */
  async stop(execution: Execution, request: StopRequest): Promise<ExecutionSummary> {
    const { run } = execution;
    if (run !== undefined) {
      run.stop ??= request;
      run.controller.abort();
      await run.settled;
      return execution.record;
    }
    if (execution.record.status !== 'RUNNING') return execution.record;
    // An interrupted execution has no run to abort; stopping it settles its record for good.
    const now = Date.now();
    const interrupted = inMemory(execution);
    execution.record = {
      ...interrupted,
      status: 'ABORTED',
      stopDate: new Date(now).toISOString(),
      ...errorDetails(request),
      events: [
        {
          type: 'ExecutionStarted',
          timestamp: Date.parse(interrupted.startDate),
          input: interrupted.input,
        },
        { type: 'ExecutionAborted', timestamp: now },
      ],
    };
    const ended = inMemory(execution);
    await this.#persist(execution);
    this.#keepSummaryOnly(execution);
    this.#notifyEnd(ended);
    return execution.record;
  }

  find(name: string): Execution | undefined {
    return this.#executions.get(name);
  }

  /** Newest first. */
  list(): Execution[] {
    return [...this.#executions.values()].sort((a, b) => b.sequence - a.sequence);
  }

  /** Summaries of all executions known (this run and the data directory), newest first. */
  summaries(): ExecutionSummary[] {
    return this.list().map((execution) => summaryOf(execution.record));
  }

  /** The execution's whole record: from memory while it runs, else from its file. */
  async read(execution: Execution): Promise<ExecutionRecord> {
    const { record } = execution;
    if ('events' in record) return record;
    return readRecordFile(join(this.options.dataDir ?? '.', `${record.name}.json`), record.name);
  }

  /** What each execution that ended came to, oldest first; waits for the running ones first. */
  async results(): Promise<Map<string, ExecutionResult>> {
    await this.idle();
    const results = new Map<string, ExecutionResult>();
    for (const execution of this.list().reverse()) {
      const { name, status, output, error, cause, events } = await this.read(execution);
      // Only an interrupted execution, which nobody restarted, is still RUNNING here.
      if (status === 'RUNNING') continue;
      results.set(name, {
        status,
        ...(output === undefined ? {} : { output }),
        ...errorDetails({ error, cause }),
        events,
      });
    }
    return results;
  }

  /** Resolves when no execution is running and every record is written. */
  async idle(): Promise<void> {
    for (;;) {
      const running = [...this.#executions.values()].flatMap((execution) =>
        execution.run === undefined ? [] : [execution.run.settled],
      );
      if (running.length === 0) break;
      await Promise.all(running);
    }
    await Promise.all([...this.#executions.values()].map((execution) => execution.writes));
  }

  /**
   * Waits up to `timeoutMs` for running executions to end, then abandons the rest as a killed
   * process would: they are aborted without writing their record again, so it still says RUNNING
   * and the next registry on the same data directory lists them in `interrupted`. Rejects if an
   * execution record could not be written.
   */
  close(options: CloseOptions = {}): Promise<void> {
    this.#closed ??= this.#shutdown(options.timeoutMs ?? 5_000);
    return this.#closed;
  }

  async #shutdown(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    try {
      await Promise.race([this.idle(), timedOut]);
    } finally {
      clearTimeout(timer);
    }
    for (const execution of this.#executions.values()) {
      if (execution.run === undefined) continue;
      execution.abandoned = true;
      execution.run.controller.abort();
    }
    await Promise.all([...this.#executions.values()].map((execution) => execution.writes));
    const [failure] = this.#writeFailures;
    if (failure !== undefined) {
      throw new ConfigurationError(
        `Could not write ${this.#writeFailures.length} execution record(s) to ${this.options.dataDir}`,
        { cause: failure },
      );
    }
  }

  #freshRecord(name: string, input: unknown): ExecutionRecord {
    return {
      name,
      executionArn: `${this.arns.executionArnPrefix}${name}`,
      input,
      status: 'RUNNING',
      startDate: new Date().toISOString(),
      events: [],
    };
  }

  #nextSequence(): number {
    this.#sequence += 1;
    return this.#sequence;
  }

  #launch(execution: Execution): void {
    const controller = new AbortController();
    const { name, executionArn, input } = inMemory(execution);
    const settled = (async () => {
      let result: ExecutionResult;
      try {
        result = await this.options.machine.run(input, {
          executionName: name,
          executionArn,
          signal: controller.signal,
        });
      } catch (error) {
        // The runner throws only for what it cannot describe as an execution outcome.
        const cause = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
        result = { status: 'FAILED', error: 'States.Runtime', cause, events: [] };
      }
      const stop = execution.run?.stop;
      execution.run = undefined;
      if (execution.abandoned) return;
      execution.record = {
        ...inMemory(execution),
        status: result.status,
        stopDate: new Date().toISOString(),
        ...(result.status === 'SUCCEEDED' ? { output: result.output } : {}),
        ...(result.status === 'ABORTED' && stop !== undefined ? errorDetails(stop) : errorDetails(result)),
        events: result.events,
      };
      const ended = inMemory(execution);
      try {
        await this.#persist(execution);
        this.#keepSummaryOnly(execution);
      } catch (error) {
        // The record in memory is right; close() reports that the file is not.
        this.#writeFailures.push(error);
      }
      this.#notifyEnd(ended);
    })();
    execution.run = { controller, settled };
  }

  #notifyEnd(record: ExecutionRecord): void {
    const listener = this.options.onExecutionEnd;
    if (listener === undefined) return;
    try {
      listener(structuredClone(record));
    } catch {
      // A progress display that throws must not change the execution or its record.
    }
  }

  /** After the final record is written: the file has the rest (see {@link Execution.record}). */
  #keepSummaryOnly(execution: Execution): void {
    if (this.options.dataDir !== undefined) execution.record = summaryOf(execution.record);
  }

  #persist(execution: Execution): Promise<void> {
    const { dataDir } = this.options;
    if (dataDir === undefined || execution.abandoned) return Promise.resolve();
    const record = inMemory(execution);
    const text = `${JSON.stringify(record, null, 2)}\n`;
    const path = join(dataDir, `${record.name}.json`);
    const write = execution.writes.then(() => writeAtomically(path, text));
    execution.writes = write.catch(() => {});
    return write;
  }
}

/** Only the fields that are set, so records and answers carry no `error: undefined`. */
function errorDetails(source: StopRequest): { error?: string; cause?: string } {
  return {
    ...(source.error === undefined ? {} : { error: source.error }),
    ...(source.cause === undefined ? {} : { cause: source.cause }),
  };
}

/** The record without its input, output and event log. */
function summaryOf(record: ExecutionRecord | ExecutionSummary): ExecutionSummary {
  const { name, executionArn, status, startDate, stopDate, error, cause } = record;
  return {
    name,
    executionArn,
    status,
    startDate,
    ...(stopDate === undefined ? {} : { stopDate }),
    ...errorDetails({ error, cause }),
  };
}

/** The whole record of an execution that is still running, which is always in memory. */
function inMemory(execution: Execution): ExecutionRecord {
  const { record } = execution;
  if (!('events' in record)) {
    throw new Error(`the record of execution ${record.name} is not in memory; read it with Registry.read`);
  }
  return record;
}

/** Errors answered as 400 `{__type, message}`; the SDK turns `__type` into its exception class. */
export const apiFaults = new WeakSet<Error>();

export function apiFault(type: string, message: string): Error {
  const error = new Error(message);
  error.name = type;
  apiFaults.add(error);
  return error;
}
