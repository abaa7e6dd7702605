/**
 * What the operator commands work with: the SDK clients for the target (resolve-target.ts), the
 * stack's names, the ledger over them, and the operator function. Both kinds of target use the
 * same SDK clients; only their config differs.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { Ledger } from '#shared/ledger';
import { prepareSdkClient } from '#shared/sdk-clients';
import { OPERATOR_TIMEOUT_SECONDS } from '../../lambdas/operator/commands.ts';
import type { StackNames } from '../../lib/stack-outputs.ts';
import { CliError, EXIT } from './io.ts';
import { localOperator } from './operator.ts';
import {
  inProcessTransport,
  type OperatorInvoker,
  type OperatorTransport,
  operatorInvoker,
  signedHttpTransport,
} from './operator-client.ts';
import {
  LOCAL_ANSWER_MS,
  localClientConfig,
  type ResolvedTarget,
  unknownRequestError,
  withConnection,
} from './resolve-target.ts';
import type { TargetFlags } from './target-flags.ts';

export {
  explainAwsError,
  LOCAL_ANSWER_MS,
  type ResolvedTarget,
  resolveTarget,
  unknownRequestError,
} from './resolve-target.ts';
export { addTargetOptions, DEFAULT_DATA_DIR, type TargetFlags, targetArgs } from './target-flags.ts';

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

/** Builds the SDK clients and the ledger for a resolved target. */
export function openContext(
  target: ResolvedTarget,
  clock: () => Date = () => new Date(),
  localAnswerMs = LOCAL_ANSWER_MS,
): CliContext {
  if (target.kind === 'local') {
    const { endpoints } = target.local;
    const base = localClientConfig(target.local, localAnswerMs);
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

/**
 * How long the operator function may take to answer on AWS: its own timeout (a re-hash of a large
 * archive for verify takes minutes), and a margin, so the CLI always hears how a command ended.
 */
const OPERATOR_ANSWER_MS = (OPERATOR_TIMEOUT_SECONDS + 10) * 1000;

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
  return withConnection(flags, (target) => openContext(target), work);
}
