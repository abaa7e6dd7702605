/**
 * One measured download, in its own process so its peak RSS, CPU and connections are its own:
 * - `baseline`: the download streamed to nowhere by plain fetch, the floor of downloading;
 * - `upload`: the same download into S3 with lib-storage's `Upload` and the SDK's defaults, what
 *   most engineers write (no verification);
 * - `floor`: the least a copy can do: node:http in, one SHA-256 and one CRC32 per byte, and the
 *   bytes sent on in one plain PUT (no S3 protocol, no parts, no zip check);
 * - `archive`: ArchiveExport's copy with the zip checked as it streams, then its proof of the
 *   stored object (verifyCopy), as the Lambda runs them.
 * Prints one JSON line: bytes, seconds, CPU seconds, peak RSS, TCP connections opened.
 * local/bench/index.ts runs it from a bundle; every mode loads the same modules, so all start from the
 * same memory floor.
 */
import { createHash } from 'node:crypto';
import { subscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import http from 'node:http';
import { Readable } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { crc32 } from 'node:zlib';
import { S3Client } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { z } from 'zod';
import { copyExportToS3, verifyCopy } from '../../lambdas/shared/archive/index.ts';

const args = z
  .object({
    mode: z.enum(['archive', 'baseline', 'floor', 'upload']),
    link: z.url(),
    s3Endpoint: z.url().optional(),
    bucket: z.string().optional(),
    key: z.string().optional(),
  })
  .parse(JSON.parse(process.argv[2] ?? '{}'));

let connections = 0;
// Every TCP connection this process opens, fetch's and the SDK's alike.
subscribe('net.client.socket', () => {
  connections += 1;
});

function s3Client(): S3Client {
  return new S3Client({
    region: 'us-east-1',
    endpoint: args.s3Endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
}

const started = performance.now();
const cpuBefore = process.cpuUsage();
let bytes = 0;
if (args.mode === 'baseline') {
  const response = await fetch(args.link);
  const reader = response.body?.getReader();
  for (let chunk = await reader?.read(); chunk && !chunk.done; chunk = await reader?.read())
    bytes += chunk.value.length;
} else if (args.mode === 'floor') {
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    http.get(args.link, resolve).on('error', reject);
  });
  const put = http.request(`${args.s3Endpoint}/${args.bucket}/${args.key}`, {
    method: 'PUT',
    headers: { 'content-length': response.headers['content-length'] ?? '0' },
  });
  const answered = once(put, 'response');
  const hash = createHash('sha256');
  let crc = 0;
  for await (const chunk of response as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    hash.update(chunk);
    crc = crc32(chunk, crc);
    if (!put.write(chunk)) await once(put, 'drain');
  }
  put.end();
  const [answer] = (await answered) as [http.IncomingMessage];
  answer.resume();
  hash.digest();
} else if (args.mode === 'upload') {
  const s3 = s3Client();
  const response = await fetch(args.link);
  if (response.body === null) throw new Error('the download has no body');
  const body = Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>);
  body.on('data', (chunk: Buffer) => {
    bytes += chunk.length;
  });
  await new Upload({
    client: s3,
    params: { Bucket: args.bucket ?? '', Key: args.key ?? '', Body: body },
  }).done();
  s3.destroy();
} else {
  const s3 = s3Client();
  const link = new URL(args.link);
  const target = { s3, bucket: args.bucket ?? '', key: args.key ?? '' };
  const copied = await copyExportToS3(link, target, {
    policy: { allowedHosts: [], insecureHosts: [link.host], maxRedirects: 0 },
    verify: {},
  });
  await verifyCopy(target, copied);
  bytes = copied.bytes;
  s3.destroy();
}
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuBefore);
process.stdout.write(
  `${JSON.stringify({
    bytes,
    seconds,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    connections,
  })}\n`,
);
