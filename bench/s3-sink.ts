/**
 * A minimal S3 endpoint for the benchmark: it speaks just enough of the protocol for the archive
 * copy (create, upload part, complete, abort, single put, and HEAD for the stored size) and
 * discards the bytes after counting them. A real bucket absorbs parts in parallel; an in-memory
 * stand-in that stores them would measure itself instead of the copy.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface S3Sink {
  readonly endpoint: string;
  /** Bytes received per key, counted once the upload completes. */
  readonly stored: Map<string, number>;
  close(): Promise<void>;
}

export async function startS3Sink(): Promise<S3Sink> {
  const pending = new Map<string, number>();
  const stored = new Map<string, number>();
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://sink');
    const key = decodeURIComponent(url.pathname);
    let bytes = 0;
    request.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    request.on('end', () => {
      const uploadId = url.searchParams.get('uploadId');
      const xml = (body: string) =>
        response
          .writeHead(200, { 'content-type': 'application/xml' })
          .end(`<?xml version="1.0" encoding="UTF-8"?>${body}`);
      if (request.method === 'POST' && url.searchParams.has('uploads')) {
        const id = randomUUID();
        pending.set(id, 0);
        xml(
          `<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>${key}</Key><UploadId>${id}</UploadId></InitiateMultipartUploadResult>`,
        );
      } else if (request.method === 'PUT' && uploadId !== null) {
        pending.set(uploadId, (pending.get(uploadId) ?? 0) + bytes);
        response.writeHead(200, { etag: `"${randomUUID()}"` }).end();
      } else if (request.method === 'POST' && uploadId !== null) {
        stored.set(key, pending.get(uploadId) ?? 0);
        pending.delete(uploadId);
        xml(
          `<CompleteMultipartUploadResult><Location>${key}</Location><Bucket>b</Bucket><Key>${key}</Key><ETag>"done"</ETag></CompleteMultipartUploadResult>`,
        );
      } else if (request.method === 'DELETE' && uploadId !== null) {
        pending.delete(uploadId);
        response.writeHead(204).end();
      } else if (request.method === 'PUT') {
        stored.set(key, bytes);
        response.writeHead(200, { etag: '"single"' }).end();
      } else if (request.method === 'GET' && url.pathname === '/_cpu') {
        // The CPU this process has spent, so the benchmark can say what taking the parts cost.
        const cpu = process.cpuUsage();
        response
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ cpuSeconds: (cpu.user + cpu.system) / 1e6 }));
      } else if (request.method === 'HEAD') {
        const size = stored.get(key);
        if (size === undefined) response.writeHead(404).end();
        else response.writeHead(200, { 'content-length': String(size) }).end();
      } else {
        response.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    stored,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
