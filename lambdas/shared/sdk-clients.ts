/**
 * What svc-dsr does to every AWS SDK client it builds. The clients are given no logger, yet the
 * SDK's logger middleware still runs on each call: it copies the command's input and output
 * through the sensitive-data filter of its schema, only to hand them to a logger that does nothing.
 * Removing that middleware changes nothing but the cost, and it leaves no place where an SDK
 * client could log a request's contents should a logger ever be passed in.
 */

import { recordCalls } from './call-recorder.ts';
import { traceClient } from './powertools.ts';

/** The part of an SDK v3 client this module touches. */
interface ClientWithMiddleware {
  readonly middlewareStack: { remove(toRemove: string): boolean };
}

/** The name the SDK registers its logger middleware under. */
export const SDK_LOGGER_MIDDLEWARE = 'loggerMiddleware';

/**
 * Client config for a client whose commands never get middleware of their own: the SDK then
 * resolves each command class's middleware stack once per client instead of on every call, which
 * more than halves its CPU per S3 call. The stack resolved for a class's first command serves
 * every later one, so a client shared with code that adds middleware to a command (the archive's
 * payload hash) must not use it, nor may lib-dynamodb's DocumentClient, whose handlers keep the
 * command they were resolved for (and which shares the config of the client it wraps). That is why
 * the ledger marshals its own items and sends plain DynamoDB commands.
 */
export const CACHED_MIDDLEWARE = { cacheMiddleware: true } as const;

/**
 * Prepares an SDK client the way every svc-dsr client is: without the SDK's logger middleware,
 * traced by the function's Tracer (in Lambda), and with the call recorder that the IAM proof reads
 * (`call-recorder.ts`). Returns the client.
 */
export function prepareSdkClient<T extends ClientWithMiddleware & Parameters<typeof recordCalls>[0]>(
  client: T,
): T {
  client.middlewareStack.remove(SDK_LOGGER_MIDDLEWARE);
  return recordCalls(traceClient(client));
}
