import { createServer, request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { BodyTooLargeError, closeServer, listen, readBody, safeJson, trackSockets } from '#local/http';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A server that answers each request with what readBody made of its body at `limit`. */
async function echoing(limit: number) {
  const server = createServer((req, res) => {
    readBody(req, limit).then(
      (body) => res.writeHead(200).end(`read ${body.length}`),
      (error: unknown) => res.writeHead(413).end(error instanceof BodyTooLargeError ? 'too large' : 'other'),
    );
  });
  const sockets = trackSockets(server);
  const { endpoint, port } = await listen(server);
  cleanups.push(() => closeServer(server, sockets));
  return { endpoint, port, server };
}

function post(endpoint: string, body: Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = request(`${endpoint}/`, { method: 'POST', agent: false }, (incoming) => {
      const chunks: Buffer[] = [];
      incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
      incoming.on('end', () =>
        resolve({ status: incoming.statusCode ?? 0, text: Buffer.concat(chunks).toString() }),
      );
    });
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

describe('the shared local HTTP helpers', () => {
  it('reads a body up to its limit, and past it reads the rest away and answers BodyTooLargeError', async () => {
    const { endpoint } = await echoing(1024);

    expect(await post(endpoint, Buffer.alloc(1024, 1))).toEqual({ status: 200, text: 'read 1024' });
    expect(await post(endpoint, Buffer.alloc(300_000, 1))).toEqual({ status: 413, text: 'too large' });
  });

  it('listens on a free loopback port and rejects, rather than throwing, when the port is taken', async () => {
    const { endpoint, port } = await echoing(10);
    expect(endpoint).toBe(`http://127.0.0.1:${port}`);

    await expect(listen(createServer(), port)).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });

  it('closes even with a kept-alive connection open', async () => {
    const server = createServer((_req, res) => res.end('ok'));
    const sockets = trackSockets(server);
    const { endpoint } = await listen(server);
    await fetch(endpoint);
    expect(sockets.size).toBe(1);

    await closeServer(server, sockets);

    expect(server.listening).toBe(false);
    expect(safeJson('{"a":1}')).toEqual({ a: 1 });
    expect(safeJson('not json')).toBeUndefined();
  });
});
