/**
 * Pages of the open requests for a person following them: earliest due first over every shard of
 * the open index, filtered, with a cursor that continues each shard from the last request it gave.
 * A page costs one query per shard and status read, however many requests the ledger holds.
 */
import { createHash } from 'node:crypto';
import { type AttributeValue, type DynamoDBClient, QueryCommand } from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { z } from 'zod';
import { isSitePart } from '../sites.ts';
import {
  OPEN_DUE_INDEX,
  OPEN_INDEX_SHARDS,
  OPEN_SHARD_ATTRIBUTE,
  type OpenRequest,
  type OwedStatus,
  openRequestSchema,
} from './schema.ts';

/** What a page of open requests is filtered by; every field optional but the statuses. */
export interface OpenListFilter {
  readonly statuses: readonly OwedStatus[];
  readonly types?: readonly string[];
  readonly regulations?: readonly string[];
  /** Only requests due at or after this instant (RFC 3339, UTC). */
  readonly dueFrom?: string;
  /** Only requests due at or before this instant. */
  readonly dueTo?: string;
  /** Only requests whose reference starts with this text. */
  readonly reference?: string;
}

/** The most requests one page holds. */
export const MAX_OPEN_PAGE = 200;

/**
 * Where each shard read stands: the last request it gave (its due date and id, the index key a
 * query continues after), or 0 once it has none left. A shard not named has not been read.
 */
const cursorSchema = z.strictObject({
  f: z.string().regex(/^[0-9a-f]{16}$/),
  s: z.record(
    z.string().regex(/^[a-z]+#\d{1,2}$/),
    z.union([z.literal(0), z.tuple([z.string().max(40), z.string().max(80)])]),
  ),
});
type Cursor = z.infer<typeof cursorSchema>;

/** A cursor that does not belong to this filter, or is not one this reader made. */
export class OpenCursorError extends Error {
  override readonly name = 'OpenCursorError';
}

/** The digest a cursor carries of the filter it was made under: a cursor is refused under another. */
function filterDigest(filter: OpenListFilter): string {
  const canonical = JSON.stringify([
    [...filter.statuses].sort(),
    [...(filter.types ?? [])].sort(),
    [...(filter.regulations ?? [])].sort(),
    filter.dueFrom ?? null,
    filter.dueTo ?? null,
    filter.reference ?? null,
  ]);
  return createHash('sha256').update(canonical).digest('hex').slice(0, 16);
}

function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify(cursor)).toString('base64url');
}

function decodeCursor(text: string, filter: OpenListFilter): Cursor {
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    throw new OpenCursorError('cursor: not a cursor this API gave; start again without it');
  }
  const parsed = cursorSchema.safeParse(value);
  if (!parsed.success)
    throw new OpenCursorError('cursor: not a cursor this API gave; start again without it');
  if (parsed.data.f !== filterDigest(filter)) {
    throw new OpenCursorError(
      'cursor: it was given for other filters; start again without it, or keep the filters',
    );
  }
  return parsed.data;
}

interface ShardRead {
  readonly shard: string;
  readonly items: OpenRequest[];
  /** Where the read stopped: the last key evaluated, or undefined when the shard has no more. */
  readonly end: Record<string, AttributeValue> | undefined;
}

/**
 * One page of open requests: up to `limit`, earliest due first (ties by request id), and the cursor
 * of the next page, or null after the last. Site parts are left out: a request over several sites
 * is listed once.
 */
export async function readOpenPage(
  db: DynamoDBClient,
  tableName: string,
  filter: OpenListFilter,
  options: { readonly limit: number; readonly cursor?: string },
): Promise<{ readonly requests: OpenRequest[]; readonly next: string | null }> {
  const limit = Math.max(1, Math.min(options.limit, MAX_OPEN_PAGE));
  const positions = options.cursor === undefined ? {} : decodeCursor(options.cursor, filter).s;
  const shards = filter.statuses.flatMap((status) =>
    Array.from({ length: OPEN_INDEX_SHARDS }, (_, shard) => `${status}#${shard}`),
  );
  const reads = await Promise.all(
    shards.flatMap((shard) => {
      const position = positions[shard];
      return position === 0 ? [] : [readShard(db, tableName, filter, shard, position, limit)];
    }),
  );
  // A merge that takes from each shard in its own order, so that each shard's cursor is the last
  // request taken from it and none it skipped.
  const taken = new Map<string, number>();
  const requests: OpenRequest[] = [];
  while (requests.length < limit) {
    let best: ShardRead | undefined;
    let bestItem: OpenRequest | undefined;
    for (const read of reads) {
      const item = read.items[taken.get(read.shard) ?? 0];
      if (item !== undefined && (bestItem === undefined || before(item, bestItem))) {
        best = read;
        bestItem = item;
      }
    }
    if (best === undefined || bestItem === undefined) break;
    taken.set(best.shard, (taken.get(best.shard) ?? 0) + 1);
    requests.push(bestItem);
  }
  const next: Cursor['s'] = { ...positions };
  let more = false;
  for (const read of reads) {
    const count = taken.get(read.shard) ?? 0;
    if (count === read.items.length) {
      next[read.shard] = read.end === undefined ? 0 : positionOf(unmarshall(read.end));
    } else {
      more = true;
      const last = read.items[count - 1];
      if (last !== undefined) next[read.shard] = [last.due_at ?? '', last.request_id];
    }
    if (next[read.shard] !== 0) more = true;
  }
  return {
    requests,
    next: more ? encodeCursor({ f: filterDigest(filter), s: next }) : null,
  };
}

function before(a: OpenRequest, b: OpenRequest): boolean {
  const due = (a.due_at ?? '').localeCompare(b.due_at ?? '');
  return due < 0 || (due === 0 && a.request_id < b.request_id);
}

function positionOf(key: Record<string, unknown>): [string, string] {
  return [String(key.due_at ?? ''), String(key.request_id ?? '')];
}

/** The query of one shard of the open index under the filter: its key condition, filter and values. */
function shardQuery(filter: OpenListFilter, shard: string) {
  const names: Record<string, string> = { '#shard': OPEN_SHARD_ATTRIBUTE };
  const values: Record<string, unknown> = { ':shard': shard };
  let keyCondition = '#shard = :shard';
  if (filter.dueFrom !== undefined || filter.dueTo !== undefined) {
    names['#due_at'] = 'due_at';
    if (filter.dueFrom !== undefined && filter.dueTo !== undefined) {
      keyCondition += ' AND #due_at BETWEEN :from AND :to';
      values[':from'] = filter.dueFrom;
      values[':to'] = filter.dueTo;
    } else if (filter.dueFrom !== undefined) {
      keyCondition += ' AND #due_at >= :from';
      values[':from'] = filter.dueFrom;
    } else {
      keyCondition += ' AND #due_at <= :to';
      values[':to'] = filter.dueTo;
    }
  }
  const filters: string[] = [];
  const anyOf = (attribute: string, list: readonly string[] | undefined) => {
    if (list === undefined || list.length === 0) return;
    names[`#${attribute}`] = attribute;
    const placeholders = list.map((value, index) => {
      values[`:${attribute}${index}`] = value;
      return `:${attribute}${index}`;
    });
    filters.push(`#${attribute} IN (${placeholders.join(', ')})`);
  };
  anyOf('type', filter.types);
  anyOf('regulation', filter.regulations);
  if (filter.reference !== undefined) {
    names['#reference'] = 'reference';
    values[':reference'] = filter.reference;
    filters.push('begins_with(#reference, :reference)');
  }
  return { keyCondition, filters, names, values };
}

/** Up to `limit` requests of one shard that pass the filter, from its position. */
async function readShard(
  db: DynamoDBClient,
  tableName: string,
  filter: OpenListFilter,
  shard: string,
  position: [string, string] | undefined,
  limit: number,
): Promise<ShardRead> {
  const { keyCondition, filters, names, values } = shardQuery(filter, shard);
  const items: OpenRequest[] = [];
  let start: Record<string, AttributeValue> | undefined =
    position === undefined
      ? undefined
      : marshall({ [OPEN_SHARD_ATTRIBUTE]: shard, due_at: position[0], request_id: position[1] });
  do {
    const page = await db.send(
      new QueryCommand({
        TableName: tableName,
        IndexName: OPEN_DUE_INDEX,
        KeyConditionExpression: keyCondition,
        ...(filters.length === 0 ? {} : { FilterExpression: filters.join(' AND ') }),
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: marshall(values),
        Limit: limit,
        ...(start === undefined ? {} : { ExclusiveStartKey: start }),
      }),
    );
    for (const raw of page.Items ?? []) {
      const item = openRequestSchema.parse(unmarshall(raw));
      if (!isSitePart(item.request_id)) items.push(item);
    }
    start = page.LastEvaluatedKey;
  } while (start !== undefined && items.length < limit);
  return { shard, items, end: start };
}

/**
 * How many open requests of each status pass the filter (site parts left out), counted by the
 * index itself (`Select: COUNT`): one query per shard and status, a page per megabyte read, and no
 * item read back.
 */
export async function countOpenRequests(
  db: DynamoDBClient,
  tableName: string,
  filter: OpenListFilter,
): Promise<Record<OwedStatus, number>> {
  const counts = Object.fromEntries(filter.statuses.map((status) => [status, 0])) as Record<
    OwedStatus,
    number
  >;
  await Promise.all(
    filter.statuses.flatMap((status) =>
      Array.from({ length: OPEN_INDEX_SHARDS }, async (_, shard) => {
        const { keyCondition, filters, names, values } = shardQuery(filter, `${status}#${shard}`);
        // A site's part has "_" in its id (sites.ts): a request over several sites counts once.
        names['#request_id'] = 'request_id';
        values[':part'] = '_';
        let start: Record<string, AttributeValue> | undefined;
        do {
          const page = await db.send(
            new QueryCommand({
              TableName: tableName,
              IndexName: OPEN_DUE_INDEX,
              Select: 'COUNT',
              KeyConditionExpression: keyCondition,
              FilterExpression: [...filters, 'NOT contains(#request_id, :part)'].join(' AND '),
              ExpressionAttributeNames: names,
              ExpressionAttributeValues: marshall(values),
              ...(start === undefined ? {} : { ExclusiveStartKey: start }),
            }),
          );
          counts[status] += page.Count ?? 0;
          start = page.LastEvaluatedKey;
        } while (start !== undefined);
      }),
    ),
  );
  return counts;
}
