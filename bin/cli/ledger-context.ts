/**
 * The context of the commands that only read the ledger (status, list): the ledger and its table
 * over one DynamoDB client. It loads no other SDK client and no operator function, so these
 * commands start in a fraction of the time the full context (target.ts) takes.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { Ledger } from '#shared/ledger';
import { prepareSdkClient } from '#shared/sdk-clients';
import { LOCAL_ANSWER_MS, localClientConfig, type ResolvedTarget, withConnection } from './resolve-target.ts';
import type { CliContext } from './target.ts';
import type { TargetFlags } from './target-flags.ts';

/** What status and list read through: the ledger, and the table for scans. */
export type LedgerContext = Pick<CliContext, 'target' | 'names' | 'ledger' | 'dynamo' | 'clock' | 'close'>;

/** Opens the ledger of a resolved target with the same client settings as the full context. */
export function openLedgerContext(
  target: ResolvedTarget,
  clock: () => Date = () => new Date(),
  localAnswerMs = LOCAL_ANSWER_MS,
): LedgerContext {
  const dynamoClient = prepareSdkClient(
    target.kind === 'local'
      ? new DynamoDBClient({
          ...localClientConfig(target.local, localAnswerMs),
          endpoint: target.local.endpoints.dynamodb,
        })
      : new DynamoDBClient(target.region === undefined ? {} : { region: target.region }),
  );
  const dynamo = DynamoDBDocumentClient.from(dynamoClient, {
    marshallOptions: { removeUndefinedValues: true },
  });
  return {
    target: target.kind,
    names: target.names,
    ledger: new Ledger(dynamoClient, target.names.LedgerTableName, clock),
    dynamo,
    clock,
    close() {
      dynamo.destroy();
      dynamoClient.destroy();
    },
  };
}

/** Resolves the target, runs `work` with its ledger, and always releases the client. */
export async function withLedger<T>(
  flags: TargetFlags,
  work: (context: LedgerContext) => Promise<T>,
): Promise<T> {
  return withConnection(
    flags,
    (target) => openLedgerContext(target),
    async (connect) => work(await connect()),
  );
}
