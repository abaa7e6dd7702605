/**
 * Each signed-in person's own share of the API: at most PER_PERSON.calls calls in each window of
 * PER_PERSON.windowSeconds, counted in one item per person in the platform gate's table
 * (`api-caller#<subject>`). API Gateway throttles each route for everyone (the stage's route
 * settings); this count keeps one person, or one leaked token, from using a route's whole share.
 * The count is DynamoDB's atomic ADD under a condition, so calls at once (a page makes several)
 * never conflict and never both take the last call of a window.
 */
import { type DynamoDBClient, GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { isConditionalFailure } from '#shared/ledger';
import { GATE_KEY } from '#shared/platform-gate';

/** What one person may call: a page of the console is a few calls, a batch review a few more. */
export const PER_PERSON = { calls: 600, windowSeconds: 60 } as const;

/** The item of a person's count in the gate table. */
export function callerItemKey(subject: string): string {
  return `api-caller#${subject}`;
}

export interface CallerThrottle {
  /** Whether the person may make one more call now; counts it when they may. */
  admit(subject: string): Promise<boolean>;
}

/** A throttle over the gate table; `now` in milliseconds. */
export function callerThrottle(
  db: Pick<DynamoDBClient, 'send'>,
  table: string,
  now: () => number = Date.now,
  limits: { readonly calls: number; readonly windowSeconds: number } = PER_PERSON,
): CallerThrottle {
  const names = { '#window': 'window', '#count': 'count' };
  return {
    async admit(subject) {
      const key = marshall({ [GATE_KEY]: callerItemKey(subject) });
      const window = Math.floor(now() / (limits.windowSeconds * 1000));
      for (let attempt = 0; attempt < 4; attempt++) {
        // A call of the window under way, while it has calls left.
        try {
          await db.send(
            new UpdateItemCommand({
              TableName: table,
              Key: key,
              UpdateExpression: 'ADD #count :one',
              ConditionExpression: '#window = :window AND #count < :calls',
              ExpressionAttributeNames: names,
              ExpressionAttributeValues: marshall({ ':one': 1, ':window': window, ':calls': limits.calls }),
            }),
          );
          return true;
        } catch (error) {
          if (!isConditionalFailure(error)) throw error;
        }
        const held = await db.send(new GetItemCommand({ TableName: table, Key: key, ConsistentRead: true }));
        const seen = held.Item === undefined ? undefined : unmarshall(held.Item);
        if (seen !== undefined && Number(seen.window) === window) {
          // Another call started this window meanwhile: take a call of it while it has one left.
          if (Number(seen.count) >= limits.calls) return false;
          continue;
        }
        // The first call of a new window starts its count; another call may start it first.
        try {
          await db.send(
            new UpdateItemCommand({
              TableName: table,
              Key: key,
              UpdateExpression: 'SET #window = :window, #count = :one',
              ConditionExpression: 'attribute_not_exists(#window) OR #window < :window',
              ExpressionAttributeNames: names,
              ExpressionAttributeValues: marshall({ ':one': 1, ':window': window }),
            }),
          );
          return true;
        } catch (error) {
          if (!isConditionalFailure(error)) throw error;
        }
      }
      return false;
    },
  };
}
