// Where a reconciler pass stopped in the open index, kept in the gate table for the next pass.
import { type DynamoDBClient, GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import { OPEN_INDEX_SHARDS, openPageKeySchema } from '#shared/ledger';
import { GATE_KEY } from '#shared/platform-gate';

/** The statuses of a request that an execution should be moving, in the order a pass reads them. */
export const RECONCILED_STATUSES = ['received', 'running'] as const;

/**
 * Where a reconciler pass stopped: the status and shard of the open index it was reading, and the
 * key of the last page it finished there (none: the shard's start).
 */
export const reconcileCursorSchema = z.object({
  status: z.enum(RECONCILED_STATUSES),
  shard: z
    .number()
    .int()
    .min(0)
    .max(OPEN_INDEX_SHARDS - 1),
  after: openPageKeySchema.optional(),
});
export type ReconcileCursor = z.infer<typeof reconcileCursorSchema>;

/** Keeps the cursor between passes; `save(undefined)` means the next pass starts from the beginning. */
export interface CursorStore {
  load(): Promise<ReconcileCursor | undefined>;
  save(cursor: ReconcileCursor | undefined): Promise<void>;
}

/** The gate table's item that keeps the cursor (the reconciler already reads and updates that table). */
export const CURSOR_ITEM = 'reconciler-cursor';

/**
 * The cursor as a small item of the platform gate's table: not in the ledger, whose scans read every
 * item as a request. A cursor the schema refuses (a hand edit, an older layout) starts a new pass.
 */
export function gateTableCursor(dynamo: DynamoDBClient, table: string): CursorStore {
  const key = marshall({ [GATE_KEY]: CURSOR_ITEM });
  return {
    async load() {
      const answer = await dynamo.send(
        new GetItemCommand({ TableName: table, Key: key, ConsistentRead: true }),
      );
      const stored = answer.Item === undefined ? undefined : unmarshall(answer.Item).cursor;
      if (typeof stored !== 'string') return undefined;
      try {
        const parsed = reconcileCursorSchema.safeParse(JSON.parse(stored));
        return parsed.success ? parsed.data : undefined;
      } catch {
        return undefined;
      }
    },
    async save(cursor) {
      await dynamo.send(
        new UpdateItemCommand({
          TableName: table,
          Key: key,
          UpdateExpression: cursor === undefined ? 'REMOVE #cursor' : 'SET #cursor = :cursor',
          ExpressionAttributeNames: { '#cursor': 'cursor' },
          ...(cursor === undefined
            ? {}
            : { ExpressionAttributeValues: marshall({ ':cursor': JSON.stringify(cursor) }) }),
        }),
      );
    },
  };
}

/** A cursor kept in memory: for a caller whose passes always finish (local mode, tests). */
export function memoryCursor(): CursorStore & { current: ReconcileCursor | undefined } {
  const store = {
    current: undefined as ReconcileCursor | undefined,
    load: async () => store.current,
    save: async (cursor: ReconcileCursor | undefined) => {
      store.current = cursor;
    },
  };
  return store;
}

/** The position after the last shard of `cursor`'s status: the next status's first shard, or the end. */
export function nextPartition(
  cursor: Pick<ReconcileCursor, 'status' | 'shard'>,
): ReconcileCursor | undefined {
  if (cursor.shard + 1 < OPEN_INDEX_SHARDS) return { status: cursor.status, shard: cursor.shard + 1 };
  const following = RECONCILED_STATUSES[RECONCILED_STATUSES.indexOf(cursor.status) + 1];
  return following === undefined ? undefined : { status: following, shard: 0 };
}
