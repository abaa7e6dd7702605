/**
 * One-off migration of a ledger created before the open index or the ended index (docs/deploy.md,
 * "Migrating a ledger to the open index"): puts every received, running and failed request into the
 * open index, and every ended request not minimised into the ended index. Safe to run again. Usage: `node --import tsx bin/backfill-open-index.ts <LedgerTableName>` with credentials
 * that may Scan and UpdateItem the table and use its KMS key.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Ledger } from '#shared/ledger';

const [tableName, ...rest] = process.argv.slice(2);
if (tableName === undefined || rest.length > 0 || !/^[A-Za-z0-9_.-]{3,255}$/.test(tableName)) {
  process.stderr.write(
    'usage: node --import tsx bin/backfill-open-index.ts <LedgerTableName>\n' +
      '  the table name is the LedgerTableName output of the stack (cdk deploy --outputs-file outputs.json)\n',
  );
  process.exit(2);
}
const client = new DynamoDBClient({});
const ledger = new Ledger(client, tableName);
const indexed = await ledger.backfillOpenIndex();
const ended = await ledger.backfillEndedIndex();
client.destroy();
process.stdout.write(`put ${indexed} open request(s) of ${tableName} into the open index\n`);
process.stdout.write(`put ${ended} ended request(s) of ${tableName} into the ended index\n`);
