/**
 * Where the operator commands send their AWS calls, as the flags and files say: a deployed stack
 * (its `cdk deploy` outputs or a config file) or a serving local mode; the SDK client settings for
 * it; and the words of the errors met on the way. No SDK client is loaded here: each command's
 * context (target.ts, ledger-context.ts) loads the clients it uses.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { type StackNames, stackNamesSchema } from '../../lib/stack-outputs.ts';
import { CliError, EXIT, parseOption, shellWord } from './io.ts';
import { type LocalEndpoints, readLocalEndpoints } from './local-endpoints.ts';
import { DEFAULT_DATA_DIR, type TargetFlags } from './target-flags.ts';

/** Where to connect, as resolved from the flags and files. */
export type ResolvedTarget =
  | {
      readonly kind: 'aws';
      readonly names: StackNames;
      /** From a `Region` output or key; otherwise the SDK's chain (AWS_REGION, the profile). */
      readonly region?: string;
      /** The file the names came from, for messages. */
      readonly source: string;
    }
  | {
      readonly kind: 'local';
      readonly names: StackNames;
      readonly local: LocalEndpoints;
      readonly dataDir: string;
    };

const targetSchema = z.enum(['aws', 'local'], { message: 'must be "aws" or "local"' });
const jsonObject = z.record(z.string(), z.unknown());

/** The region in a stack ARN (`arn:aws:states:eu-west-1:...`), for outputs files without a Region key. */
function regionOf(names: StackNames): string | undefined {
  return /^arn:[^:]+:states:([a-z0-9-]+):/.exec(names.StateMachineArn)?.[1];
}

/** Reads and validates whatever the flags point at; every problem is a CliError that says the fix. */
export async function resolveTarget(flags: TargetFlags): Promise<ResolvedTarget> {
  const awsFile = flags.stackOutputs ?? flags.config;
  const kind =
    flags.target === undefined
      ? awsFile === undefined
        ? 'local'
        : 'aws'
      : parseOption('--target', targetSchema, flags.target);
  if (kind === 'local') {
    if (awsFile !== undefined) {
      throw new CliError(
        `${flags.stackOutputs === undefined ? '--config' : '--stack-outputs'} is for --target aws; drop it, or pass --target aws`,
      );
    }
    const dataDir = flags.dataDir ?? DEFAULT_DATA_DIR;
    const local = await readLocal(dataDir);
    return { kind: 'local', names: local.outputs, local, dataDir };
  }
  if (flags.stackOutputs !== undefined && flags.config !== undefined) {
    throw new CliError('give either --stack-outputs or --config, not both');
  }
  if (flags.stackOutputs !== undefined) return readStackOutputs(flags.stackOutputs, flags.stack);
  if (flags.config !== undefined) {
    if (flags.stack !== undefined)
      throw new CliError('--stack picks a stack of --stack-outputs; a --config file holds one');
    return readConfig(flags.config);
  }
  throw new CliError(
    '--target aws needs the stack names: pass --stack-outputs FILE (written by `npx cdk deploy --outputs-file FILE`) or --config FILE',
  );
}

/**
 * How long a call to a serving local mode may go without an answer. A local mode that was stopped
 * (Ctrl-Z, kill -STOP) still accepts connections and never answers: without a limit every command
 * would wait for ever. Each call is tried three times, so a command gives up after about a minute.
 */
export const LOCAL_ANSWER_MS = 20_000;

/** The settings every SDK client of a local target shares; each adds its service's endpoint. */
export function localClientConfig(local: LocalEndpoints, localAnswerMs: number) {
  return {
    region: local.region,
    credentials: local.credentials,
    requestHandler: {
      connectionTimeout: localAnswerMs,
      requestTimeout: localAnswerMs,
      throwOnRequestTimeout: true,
    },
  };
}

/**
 * Resolves the target and opens a context (`open`) only when `work` asks for it; any error after
 * that gets the fix explainAwsError adds, and the context is always closed.
 */
export async function withConnection<C extends { readonly target: 'aws' | 'local'; close(): void }, T>(
  flags: TargetFlags,
  open: (target: ResolvedTarget) => C,
  work: (connect: () => Promise<C>) => Promise<T>,
): Promise<T> {
  let context: C | undefined;
  const connect = async () => {
    context ??= open(await resolveTarget(flags));
    return context;
  };
  try {
    return await work(connect);
  } catch (error) {
    throw context === undefined ? error : explainAwsError(error, context.target);
  } finally {
    context?.close();
  }
}

/** An unknown request id, with where the CLI looked (the same words as the read commands'). */
export function unknownRequestError(tableName: string, target: 'aws' | 'local', requestId: string): CliError {
  return new CliError(
    `no request ${requestId} in the ledger (${tableName}, target ${target}): check the id, or the --target/--stack-outputs you meant`,
    EXIT.failed,
  );
}

/** Adds the fix to the SDK errors an operator meets first (no credentials, no region, nothing listening). */
export function explainAwsError(error: unknown, target: 'aws' | 'local'): unknown {
  if (!(error instanceof Error) || error instanceof CliError) return error;
  const code = 'code' in error && typeof error.code === 'string' ? error.code : '';
  if (error.name === 'CredentialsProviderError') {
    return new CliError(
      'no AWS credentials were found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or run `aws sso login`',
      EXIT.failed,
    );
  }
  if (/region is missing/i.test(error.message)) {
    return new CliError(
      'no AWS region is set: export AWS_REGION, or add "Region" to the outputs/config file',
      EXIT.failed,
    );
  }
  if (target === 'local' && error.name === 'TimeoutError') {
    return new CliError(
      'the local mode did not answer in time: is `npx svc-dsr local --serve` stopped (Ctrl-Z, kill -STOP) or overloaded? Let it run again and retry',
      EXIT.failed,
    );
  }
  if (target === 'local' && (code === 'ECONNREFUSED' || error.name === 'ECONNREFUSED')) {
    return new CliError(
      'the local mode did not answer: is `npx svc-dsr local --serve` still running? Start it again and retry',
      EXIT.failed,
    );
  }
  if (
    error.name === 'ResourceNotFoundException' ||
    error.name === 'QueueDoesNotExist' ||
    error.name === 'NoSuchBucket'
  ) {
    return new CliError(
      `${error.name}: ${error.message} (check that the outputs file belongs to the deployed stack and region)`,
      EXIT.failed,
    );
  }
  return error;
}

async function readLocal(dataDir: string): Promise<LocalEndpoints> {
  try {
    return await readLocalEndpoints(dataDir);
  } catch (error) {
    const message =
      error instanceof SyntaxError ? `the endpoints file in ${dataDir} is not JSON` : errorText(error);
    // Not a bad command line: the command is right, but there is nothing to talk to yet.
    throw new CliError(
      message.includes('svc-dsr local --serve')
        ? message
        : `${message}; start npx svc-dsr local --serve --data-dir ${shellWord(dataDir)} and try again`,
      EXIT.failed,
    );
  }
}

async function readJsonFile(path: string, flag: string, what: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    const missing = error instanceof Error && 'code' in error && error.code === 'ENOENT';
    throw new CliError(
      missing
        ? `${flag}: ${path} does not exist; ${what}`
        : `${flag}: cannot read ${path} (${errorText(error)})`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new CliError(`${flag}: ${path} is not JSON; ${what}`);
  }
  const parsed = jsonObject.safeParse(json);
  if (!parsed.success) throw new CliError(`${flag}: ${path} must hold a JSON object; ${what}`);
  return parsed.data;
}

const OUTPUTS_HINT = 'write it with `npx cdk deploy --outputs-file <file>`';

async function readStackOutputs(path: string, stack: string | undefined): Promise<ResolvedTarget> {
  const outputs = await readJsonFile(path, '--stack-outputs', OUTPUTS_HINT);
  const stacks = Object.keys(outputs);
  if (stacks.length === 0) throw new CliError(`--stack-outputs: ${path} lists no stacks; ${OUTPUTS_HINT}`);
  let name: string;
  if (stack !== undefined) {
    if (!stacks.includes(stack)) {
      throw new CliError(
        `--stack: ${path} has no stack "${stack}"; it has ${stacks.map((s) => `"${s}"`).join(', ')}`,
      );
    }
    name = stack;
  } else if (stacks.length === 1 && stacks[0] !== undefined) {
    name = stacks[0];
  } else {
    throw new CliError(
      `--stack-outputs: ${path} holds several stacks (${stacks.map((s) => `"${s}"`).join(', ')}); pick one with --stack NAME`,
    );
  }
  const names = parseNames(outputs[name], `--stack-outputs: stack "${name}" in ${path}`);
  const region = names.Region ?? regionOf(names);
  return { kind: 'aws', names, ...(region ? { region } : {}), source: path };
}

async function readConfig(path: string): Promise<ResolvedTarget> {
  const config = await readJsonFile(path, '--config', 'it holds the stack output keys at the top level');
  const names = parseNames(config, `--config: ${path}`);
  const region = names.Region ?? regionOf(names);
  return { kind: 'aws', names, ...(region ? { region } : {}), source: path };
}

function parseNames(value: unknown, where: string): StackNames {
  const parsed = stackNamesSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  const fields = [
    ...new Set(parsed.error.issues.map((issue) => issue.path.map(String).join('.') || '(root)')),
  ];
  throw new CliError(
    `${where} lacks or has invalid ${fields.join(', ')}; expected the svc-dsr stack outputs (${Object.keys(stackNamesSchema.shape).join(', ')})`,
  );
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
