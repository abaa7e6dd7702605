/**
 * The product's DynamoDB test helper (test/helpers/dynamo.ts) on local mode's dynalite, whose
 * index entries carry whole table keys (local/aws/dynalite-index.ts), and the request ids that tell
 * it from dynalite on its own.
 */
import { createHash } from 'node:crypto';
import type { DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { openShardOf } from '../../../lambdas/shared/ledger/index.ts';
import { startDynamo as startProductDynamo } from '../../../test/helpers/dynamo.ts';
import { createDynalite } from '../../aws/dynalite-index.ts';

export { createTable, legacyLedgerTable } from '../../../test/helpers/dynamo.ts';

/** An in-memory DynamoDB on local mode's dynalite, on a free loopback port, with SDK clients. */
export function startDynamo(settings: Omit<DynamoDBClientConfig, 'endpoint'> = {}) {
  return startProductDynamo(
    settings,
    () => createDynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 }).server,
  );
}

/**
 * Two request ids that dynalite 4.0.0 on its own files under one open index entry when their
 * status and due date match: the same open shard, and the same six hex digits of the MD5 it
 * appends to an index key (local/aws/dynalite-index.ts). Found by a search over numbered UUIDs.
 */
export function collidingRequestIds(): [string, string] {
  const seen = new Map<string, string>();
  for (let number = 0; number < 1_000_000; number += 1) {
    const id = `00000000-0000-4000-8000-${number.toString(16).padStart(12, '0')}`;
    const shortKey = `${openShardOf(id)}:${createHash('md5').update('Outliers').update(id).digest('hex').slice(0, 6)}`;
    const earlier = seen.get(shortKey);
    if (earlier !== undefined) return [earlier, id];
    seen.set(shortKey, id);
  }
  throw new Error('no two numbered request ids share a short index key');
}
