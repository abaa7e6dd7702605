/**
 * What every local server shares: listening on a loopback port, reading a request body up to a
 * limit, and closing with the connections SDK clients keep alive cut, so a close never waits on them.
 */
import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export const LOOPBACK = '127.0.0.1';

/** A request body past the reader's limit. */
export class BodyTooLargeError extends Error {
  override readonly name = 'BodyTooLargeError';
}

/**
 * Listens on `port` (0: any free one) of `host`; answers the port and the endpoint URL. A failure to
 * listen (the port taken) rejects instead of throwing from an event.
 */
export function listen(
  server: Server,
  port = 0,
  host = LOOPBACK,
): Promise<{ port: number; endpoint: string }> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const address = server.address() as AddressInfo;
      const shown = host.includes(':') ? `[${host}]` : host;
      resolve({ port: address.port, endpoint: `http://${shown}:${address.port}` });
    });
  });
}

/** The server's open connections, kept up to date, so a close can cut them. */
export function trackSockets(server: Server): Set<Socket> {
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  return sockets;
}

/** Stops listening and cuts every connection; resolves once the server has closed. */
export function closeServer(server: Server, sockets?: ReadonlySet<Socket>): Promise<void> {
  return new Promise((resolve, reject) => {
    server.close((error) => (error ? reject(error) : resolve()));
    server.closeAllConnections();
    for (const socket of sockets ?? []) socket.destroy();
  });
}

/** Listens on a free loopback port; answers the endpoint and a close that cuts open connections. */
export async function listenOnLoopback(
  server: Server,
): Promise<{ endpoint: string; close(): Promise<void> }> {
  const { endpoint } = await listen(server);
  return { endpoint, close: () => closeServer(server) };
}

/**
 * The request's body, up to `limit` bytes; past it, the rest is read and dropped (so the answer can
 * still be sent) and the promise rejects with BodyTooLargeError.
 */
export async function readBody(request: IncomingMessage, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer | string>) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
    size += buffer.length;
    if (size <= limit) chunks.push(buffer);
  }
  if (size > limit) throw new BodyTooLargeError(`the request body is over ${limit} bytes`);
  return Buffer.concat(chunks);
}

/** The JSON in `text`, or undefined when it is not JSON. */
export function safeJson(text: string | Buffer): unknown {
  try {
    return JSON.parse(text.toString());
  } catch {
    return undefined;
  }
}
