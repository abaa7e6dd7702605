/**
 * What svc-dsr does to every AWS SDK client it builds. The clients are given no logger, yet the
 * SDK's logger middleware still runs on each call: it copies the command's input and output
 * through the sensitive-data filter of its schema, only to hand them to a logger that does nothing.
 * Removing that middleware changes nothing but the cost, and it leaves no place where an SDK
 * client could log a request's contents should a logger ever be passed in.
 */

/** The part of an SDK v3 client this module touches. */
interface ClientWithMiddleware {
  readonly middlewareStack: { remove(toRemove: string): boolean };
}

/** The name the SDK registers its logger middleware under. */
export const SDK_LOGGER_MIDDLEWARE = 'loggerMiddleware';

/** Removes the SDK's logger middleware from the client and returns the client. */
export function withoutSdkLogging<T extends ClientWithMiddleware>(client: T): T {
  client.middlewareStack.remove(SDK_LOGGER_MIDDLEWARE);
  return client;
}
