/**
 * The subjects' primary keys of a page of requests, read by id in batches: the open index does not
 * hold them (a list never needs them whole), so a list that shows each one masked reads them here.
 */
import { type AttributeValue, BatchGetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { z } from 'zod';

/** The most keys one BatchGetItem takes. */
const BATCH_GET_KEYS = 100;
/** How many times the keys DynamoDB left unprocessed are asked for again before the read fails. */
const UNPROCESSED_ROUNDS = 5;

const keyItemSchema = z.object({
  request_id: z.object({ S: z.string() }),
  primary_key: z.object({ S: z.string() }).optional(),
});

/** Each request's primary_key, by request id; a request without one (or gone) is absent. */
export async function readPrimaryKeys(
  db: DynamoDBClient,
  tableName: string,
  requestIds: readonly string[],
): Promise<Map<string, string>> {
  const keys = new Map<string, string>();
  const unique = [...new Set(requestIds)];
  for (let start = 0; start < unique.length; start += BATCH_GET_KEYS) {
    let pending: Record<string, AttributeValue>[] = unique
      .slice(start, start + BATCH_GET_KEYS)
      .map((id) => ({ request_id: { S: id } }));
    for (let round = 0; pending.length > 0; round++) {
      if (round === UNPROCESSED_ROUNDS)
        throw new Error(`DynamoDB left ${pending.length} key(s) unread after ${round} rounds; ask again`);
      const answer = await db.send(
        new BatchGetItemCommand({
          RequestItems: {
            [tableName]: {
              Keys: pending,
              ProjectionExpression: 'request_id, primary_key',
            },
          },
        }),
      );
      for (const raw of answer.Responses?.[tableName] ?? []) {
        const item = keyItemSchema.safeParse(raw);
        if (item.success && item.data.primary_key !== undefined)
          keys.set(item.data.request_id.S, item.data.primary_key.S);
      }
      pending = (answer.UnprocessedKeys?.[tableName]?.Keys ?? []) as Record<string, AttributeValue>[];
    }
  }
  return keys;
}

/** The mark that stands for the hidden characters of a masked key. */
const HIDDEN = '•••';

/**
 * A primary_key masked for a list: enough to tell two requests apart at a glance, never the key.
 * Its first and last characters (two each from 10 on); a key under 4 characters shows none.
 */
export function maskedKey(key: string): string {
  const characters = Array.from(key);
  if (characters.length < 4) return HIDDEN;
  const shown = characters.length >= 10 ? 2 : 1;
  return `${characters.slice(0, shown).join('')}${HIDDEN}${characters.slice(-shown).join('')}`;
}
