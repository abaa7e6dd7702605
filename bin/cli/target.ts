/**
 * Where the operator commands send their AWS calls: a deployed stack (its `cdk deploy` outputs or
 * a config file) or a serving local mode. Both use the same SDK clients; only their config differs.
 */
import { readFile } from 'node:fs/promises';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { type Command, Option } from 'commander';
import { z } from 'zod';
import { Ledger } from '#shared/ledger';
import { prepareSdkClient } from '#shared/sdk-clients';
import { type StackNames, stackNamesSchema } from '../../lib/stack-outputs.ts';
import { CliError, EXIT, parseOption, shellWord } from './io.ts';
import { type LocalEndpoints, readLocalEndpoints } from './local-endpoints.ts';
import { localOperator } from './operator.ts';
import {
  inProcessTransport,
  type OperatorInvoker,
  type OperatorTransport,
  operatorInvoker,
  signedHttpTransport,
} from './operator-client.ts';

/** The target flags every operator command takes. */
export interface TargetFlags {
  readonly target?: string;
  readonly stackOutputs?: string;
  readonly stack?: string;
  readonly config?: string;
  readonly dataDir?: string;
}

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

/** What a command works with: SDK clients, the stack's names, and the ledger over them. */
export interface CliContext {
  readonly target: 'aws' | 'local';
  readonly names: StackNames;
  readonly sqs: SQSClient;
  readonly s3: S3Client;
  readonly dynamo: DynamoDBDocumentClient;
  readonly sfn: SFNClient;
  readonly ledger: Ledger;
  readonly clock: () => Date;
  /**
   * Who runs the command, for the in-process operator function of tests and local-mode code. On a
   * target the function learns it from the caller's IAM principal, never from the CLI.
   */
  readonly operator: () => Promise<string>;
  /** Every change an operator makes goes through the operator function, invoked with this. */
  readonly operatorFunction: OperatorInvoker;
  /** Releases the clients' sockets. */
  close(): void;
}

/** The default folder of a local mode's data. */
export const DEFAULT_DATA_DIR = '.svc-dsr';

const targetSchema = z.enum(['aws', 'local'], { message: 'must be "aws" or "local"' });
const jsonObject = z.record(z.string(), z.unknown());

/**
 * Adds `--target`, `--stack-outputs`, `--stack`, `--config` and `--data-dir` to a command; each may
 * instead come from its environment variable (SVC_DSR_TARGET, ...), a flag winning over it.
 */
export function addTargetOptions(command: Command): Command {
  return command
    .addOption(
      new Option(
        '--target <target>',
        'aws or local (default: aws with --stack-outputs/--config, else local)',
      ).env('SVC_DSR_TARGET'),
    )
    .addOption(
      new Option(
        '--stack-outputs <file>',
        'AWS: the JSON written by `npx cdk deploy --outputs-file <file>`',
      ).env('SVC_DSR_STACK_OUTPUTS'),
    )
    .addOption(
      new Option('--stack <name>', 'AWS: which stack of the outputs file (default: the only one)').env(
        'SVC_DSR_STACK',
      ),
    )
    .addOption(
      new Option('--config <file>', 'AWS: a JSON file with the output keys at the top level').env(
        'SVC_DSR_CONFIG',
      ),
    )
    .addOption(
      new Option('--data-dir <dir>', 'local: the folder of the serving local mode')
        .env('SVC_DSR_DATA_DIR')
        .default(DEFAULT_DATA_DIR),
    );
}

/** The region in a stack ARN (`arn:aws:states:eu-west-1:...`), for outputs files without a Region key. */
function regionOf(names: StackNames): string | undefined {
  return /^arn:[^:]+:states:([a-z0-9-]+):/.exec(names.StateMachineArn)?.[1];
}

/**
 * The target flags as given (the default data dir left out), for hints that must work when pasted:
 * `npx svc-dsr retry <id>` plus these reaches the same ledger.
 */
export function targetArgs(flags: TargetFlags): string {
  const args: string[] = [];
  if (flags.target !== undefined) args.push('--target', flags.target);
  if (flags.stackOutputs !== undefined) args.push('--stack-outputs', flags.stackOutputs);
  if (flags.stack !== undefined) args.push('--stack', flags.stack);
  if (flags.config !== undefined) args.push('--config', flags.config);
  if (flags.dataDir !== undefined && flags.dataDir !== DEFAULT_DATA_DIR)
    args.push('--data-dir', flags.dataDir);
  return args.map((arg) => ` ${shellWord(arg)}`).join('');
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

/** Builds the SDK clients and the ledger for a resolved target. */
export function openContext(
  target: ResolvedTarget,
  clock: () => Date = () => new Date(),
  localAnswerMs = LOCAL_ANSWER_MS,
): CliContext {
  if (target.kind === 'local') {
    const { region, credentials, endpoints } = target.local;
    const base = {
      region,
      credentials,
      requestHandler: {
        connectionTimeout: localAnswerMs,
        requestTimeout: localAnswerMs,
        throwOnRequestTimeout: true,
      },
    };
    const sqs = new SQSClient({ ...base, endpoint: endpoints.sqs });
    return contextFromClients(
      {
        target: 'local',
        names: target.names,
        sqs,
        // The local S3 cannot serve virtual-hosted bucket names.
        s3: new S3Client({ ...base, endpoint: endpoints.s3, forcePathStyle: true }),
        dynamoClient: new DynamoDBClient({ ...base, endpoint: endpoints.dynamodb }),
        sfn: new SFNClient({ ...base, endpoint: endpoints.sfn }),
        operatorTransport: functionUrlTransport(target.names, sqs, localAnswerMs, target.kind),
      },
      clock,
    );
  }
  const base = target.region === undefined ? {} : { region: target.region };
  const sqs = new SQSClient(base);
  return contextFromClients(
    {
      target: 'aws',
      names: target.names,
      sqs,
      s3: new S3Client(base),
      dynamoClient: new DynamoDBClient(base),
      sfn: new SFNClient(base),
      operatorTransport: functionUrlTransport(target.names, sqs, OPERATOR_ANSWER_MS, target.kind),
    },
    clock,
  );
}

/** How long the operator function may take to answer on AWS: its own timeout, and a margin. */
const OPERATOR_ANSWER_MS = 70_000;

/**
 * A signed POST to the operator function's URL, with the credentials and region the SDK clients
 * resolve (the same chain: AWS_PROFILE, SSO, the environment); a target without the URL (an
 * outputs file from a stack before the operator function) is refused with the fix.
 */
function functionUrlTransport(
  names: StackNames,
  sqs: SQSClient,
  answerMs: number,
  kind: 'aws' | 'local',
): OperatorTransport {
  const url = names.OperatorUrl;
  if (url === undefined) {
    return async () => {
      throw new CliError(
        kind === 'aws'
          ? 'the outputs file has no OperatorUrl: the stack predates the operator function; deploy it again and write the outputs file anew (npx cdk deploy --outputs-file FILE)'
          : 'the serving local mode publishes no operator endpoint: restart npx svc-dsr local --serve',
        EXIT.failed,
      );
    };
  }
  return signedHttpTransport(
    url,
    { region: sqs.config.region, credentials: sqs.config.credentials },
    answerMs,
  );
}

/** A context over clients the caller built (local-mode code and tests). */
export function contextFromClients(
  clients: {
    target: 'aws' | 'local';
    names: StackNames;
    sqs: SQSClient;
    s3: S3Client;
    dynamoClient: DynamoDBClient;
    sfn: SFNClient;
    /** Who runs the command, for the in-process operator function. @default the OS user */
    operator?: () => Promise<string>;
    /** How commands reach the operator function. @default its handler, in this process */
    operatorTransport?: OperatorTransport;
  },
  clock: () => Date = () => new Date(),
): CliContext {
  for (const client of [clients.sqs, clients.s3, clients.dynamoClient, clients.sfn]) prepareSdkClient(client);
  const dynamo = DynamoDBDocumentClient.from(clients.dynamoClient, {
    marshallOptions: { removeUndefinedValues: true },
  });
  const ledger = new Ledger(clients.dynamoClient, clients.names.LedgerTableName, clock);
  const operator = clients.operator ?? (async () => localOperator());
  const transport =
    clients.operatorTransport ??
    inProcessTransport({ ledger, s3: clients.s3, sfn: clients.sfn, names: clients.names, clock }, operator);
  return {
    target: clients.target,
    names: clients.names,
    sqs: clients.sqs,
    s3: clients.s3,
    dynamo,
    sfn: clients.sfn,
    ledger,
    clock,
    operator,
    operatorFunction: operatorInvoker(transport, (requestId) =>
      unknownRequestError(clients.names.LedgerTableName, clients.target, requestId),
    ),
    close() {
      clients.sqs.destroy();
      clients.s3.destroy();
      dynamo.destroy();
      clients.dynamoClient.destroy();
      clients.sfn.destroy();
    },
  };
}

/** An unknown request id, with where the CLI looked (the same words as the read commands'). */
export function unknownRequestError(tableName: string, target: 'aws' | 'local', requestId: string): CliError {
  return new CliError(
    `no request ${requestId} in the ledger (${tableName}, target ${target}): check the id, or the --target/--stack-outputs you meant`,
    EXIT.failed,
  );
}

/** Resolves the target, runs `work` with a context, and always releases the clients. */
export async function withTarget<T>(
  flags: TargetFlags,
  work: (context: CliContext) => Promise<T>,
): Promise<T> {
  return withLazyTarget(flags, async (connect) => work(await connect()));
}

/**
 * Like withTarget, but connects only when `work` asks: a command that may finish without AWS
 * (`submit --dry-run`) never needs a target to exist.
 */
export async function withLazyTarget<T>(
  flags: TargetFlags,
  work: (connect: () => Promise<CliContext>) => Promise<T>,
): Promise<T> {
  let context: CliContext | undefined;
  const connect = async () => {
    context ??= openContext(await resolveTarget(flags));
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
