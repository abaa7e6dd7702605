/**
 * A minimal S3 endpoint for the benchmark: it speaks just enough of the protocol for the archive
 * copy and lib-storage's `Upload` (create, upload part, complete, abort, single put, HEAD) and
 * discards the bytes after counting them. Like S3, it computes the CRC32 of every body that names
 * one, refuses a mismatch with BadDigest, echoes it, answers Complete with the COMPOSITE checksum
 * (`<CRC32 of the part CRC32s>-<parts>`) and HEAD with ChecksumMode with the object's. A real
 * bucket absorbs parts in parallel; an in-memory stand-in that stored them would measure itself
 * instead of the copy.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { crc32 } from 'node:zlib';

export interface S3Sink {
  readonly endpoint: string;
  /** Bytes received per key, counted once the upload completes. */
  readonly stored: Map<string, StoredObject>;
  close(): Promise<void>;
}

interface StoredObject {
  readonly size: number;
  /** Base64, as S3 reports it; undefined when the client sent no CRC32. */
  readonly checksumCrc32?: string;
}

interface PendingUpload {
  size: number;
  readonly crcs: Map<number, number>;
}

function crc32Base64(crc: number): string {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(crc >>> 0);
  return bytes.toString('base64');
}

function sentCrc32(request: IncomingMessage): string | undefined {
  const value = request.headers['x-amz-checksum-crc32'];
  return typeof value === 'string' ? value : undefined;
}

export async function startS3Sink(): Promise<S3Sink> {
  const pending = new Map<string, PendingUpload>();
  const stored = new Map<string, StoredObject>();
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://sink');
    const key = decodeURIComponent(url.pathname);
    let bytes = 0;
    let crc = 0;
    const sent = sentCrc32(request);
    request.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (sent !== undefined) crc = crc32(chunk, crc);
    });
    request.on('end', () => {
      const uploadId = url.searchParams.get('uploadId');
      const xml = (body: string) =>
        response
          .writeHead(200, { 'content-type': 'application/xml' })
          .end(`<?xml version="1.0" encoding="UTF-8"?>${body}`);
      if (sent !== undefined && crc32Base64(crc) !== sent) {
        response
          .writeHead(400, { 'content-type': 'application/xml' })
          .end(
            '<Error><Code>BadDigest</Code><Message>The CRC32 you specified did not match the calculated checksum.</Message></Error>',
          );
        return;
      }
      const echo = sent === undefined ? {} : { 'x-amz-checksum-crc32': sent };
      if (request.method === 'POST' && url.searchParams.has('uploads')) {
        const id = randomUUID();
        pending.set(id, { size: 0, crcs: new Map() });
        xml(
          `<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>${key}</Key><UploadId>${id}</UploadId></InitiateMultipartUploadResult>`,
        );
      } else if (request.method === 'PUT' && uploadId !== null) {
        const upload = pending.get(uploadId);
        if (upload !== undefined) {
          upload.size += bytes;
          if (sent !== undefined) upload.crcs.set(Number(url.searchParams.get('partNumber')), crc);
        }
        response.writeHead(200, { etag: `"${randomUUID()}"`, ...echo }).end();
      } else if (request.method === 'POST' && uploadId !== null) {
        const upload = pending.get(uploadId);
        const crcs = [...(upload?.crcs.entries() ?? [])].sort(([left], [right]) => left - right);
        let checksum: string | undefined;
        if (crcs.length > 0) {
          const joined = Buffer.alloc(crcs.length * 4);
          for (const [index, [, partCrc]] of crcs.entries()) joined.writeUInt32BE(partCrc >>> 0, index * 4);
          checksum = `${crc32Base64(crc32(joined))}-${crcs.length}`;
        }
        stored.set(key, {
          size: upload?.size ?? 0,
          ...(checksum === undefined ? {} : { checksumCrc32: checksum }),
        });
        pending.delete(uploadId);
        xml(
          `<CompleteMultipartUploadResult><Location>${key}</Location><Bucket>b</Bucket><Key>${key}</Key><ETag>"done"</ETag>${checksum === undefined ? '' : `<ChecksumCRC32>${checksum}</ChecksumCRC32><ChecksumType>COMPOSITE</ChecksumType>`}</CompleteMultipartUploadResult>`,
        );
      } else if (request.method === 'DELETE' && uploadId !== null) {
        pending.delete(uploadId);
        response.writeHead(204).end();
      } else if (request.method === 'PUT') {
        stored.set(key, { size: bytes, ...(sent === undefined ? {} : { checksumCrc32: sent }) });
        response.writeHead(200, { etag: '"single"', ...echo }).end();
      } else if (request.method === 'GET' && url.pathname === '/_cpu') {
        // The CPU this process has spent, so the benchmark can say what taking the parts cost.
        const cpu = process.cpuUsage();
        response
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ cpuSeconds: (cpu.user + cpu.system) / 1e6 }));
      } else if (request.method === 'HEAD') {
        const object = stored.get(key);
        const checksum =
          object?.checksumCrc32 !== undefined && request.headers['x-amz-checksum-mode'] === 'ENABLED'
            ? {
                'x-amz-checksum-crc32': object.checksumCrc32,
                'x-amz-checksum-type': object.checksumCrc32.includes('-') ? 'COMPOSITE' : 'FULL_OBJECT',
              }
            : {};
        if (object === undefined) response.writeHead(404).end();
        else response.writeHead(200, { 'content-length': String(object.size), ...checksum }).end();
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
