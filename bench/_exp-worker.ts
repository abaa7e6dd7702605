import { createHash } from 'node:crypto';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { copyExportToS3 } from '#shared/archive';

const args = JSON.parse(process.argv[2] ?? '{}');
const variant = process.argv[3] ?? 'baseline';
const s3 = new S3Client({
  region: 'us-east-1',
  endpoint: args.s3Endpoint,
  forcePathStyle: true,
  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
});
if (process.env.PAYLOAD_MW) {
  s3.middlewareStack.add(
    (next) => async (a: any) => {
      const h = a.request.headers;
      const c = h['x-amz-checksum-sha256'];
      if (c && !h['x-amz-content-sha256']) h['x-amz-content-sha256'] = Buffer.from(c, 'base64').toString('hex');
      return next(a);
    },
    { step: 'build', name: 'payloadFromChecksum', priority: 'low' },
  );
}
const started = performance.now();
let bytes = 0;
const partSize = Number(process.env.PART_MIB ?? 8) * 1024 * 1024;
const queueSize = Number(process.env.QUEUE ?? 2);
if (variant === 'baseline') {
  const response = await fetch(args.link);
  const reader = response.body!.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) bytes += chunk.value.length;
} else if (variant === 'current') {
  const link = new URL(args.link);
  const r = await copyExportToS3(link, { s3, bucket: 'bench', key: 'k' }, {
    policy: { allowedHosts: [], insecureHosts: [link.host], maxRedirects: 0 },
    partSizeBytes: partSize,
    queueSize,
  });
  bytes = r.bytes;
} else {
  const response = await fetch(args.link);
  const reader = response.body!.getReader();
  const whole = createHash('sha256');
  const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: 'bench', Key: 'k', ChecksumAlgorithm: 'SHA256' }));
  const free: Buffer[] = [];
  const inflight = new Set<Promise<void>>();
  const parts: { PartNumber: number; ETag?: string; ChecksumSHA256?: string }[] = [];
  let part = Buffer.allocUnsafe(partSize);
  let partHash = createHash('sha256');
  let filled = 0;
  let partNumber = 0;
  const send = async (buffer: Buffer, length: number, digest: Buffer) => {
    partNumber += 1;
    const n = partNumber;
    const command = new UploadPartCommand({ Bucket: 'bench', Key: 'k', UploadId, PartNumber: n, Body: buffer.subarray(0, length), ChecksumAlgorithm: 'SHA256', ChecksumSHA256: digest.toString('base64') });
    command.middlewareStack.add((next) => async (a: any) => { a.request.headers['x-amz-content-sha256'] = digest.toString('hex'); return next(a); }, { step: 'build', name: 'payloadHash' });
    const p = s3.send(command).then((out) => { parts.push({ PartNumber: n, ETag: out.ETag, ChecksumSHA256: digest.toString('base64') }); free.push(buffer); inflight.delete(p); });
    inflight.add(p);
    if (inflight.size >= queueSize) await Promise.race(inflight);
  };
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.length;
    whole.update(value);
    let offset = 0;
    while (offset < value.length) {
      const n = Math.min(value.length - offset, partSize - filled);
      part.set(value.subarray(offset, offset + n), filled);
      if (variant === 'custom-inc') partHash.update(value.subarray(offset, offset + n));
      filled += n; offset += n;
      if (filled === partSize) {
        const digest = variant === 'custom-inc' ? partHash.digest() : createHash('sha256').update(part).digest();
        await send(part, filled, digest);
        part = free.pop() ?? Buffer.allocUnsafe(partSize);
        partHash = createHash('sha256');
        filled = 0;
      }
    }
  }
  if (filled > 0) await send(part, filled, variant === 'custom-inc' ? partHash.digest() : createHash('sha256').update(part.subarray(0, filled)).digest());
  await Promise.all(inflight);
  parts.sort((a, b) => a.PartNumber - b.PartNumber);
  await s3.send(new CompleteMultipartUploadCommand({ Bucket: 'bench', Key: 'k', UploadId, MultipartUpload: { Parts: parts } }));
  whole.digest('hex');
  void AbortMultipartUploadCommand;
}
s3.destroy();
const seconds = (performance.now() - started) / 1000;
process.stdout.write(`${JSON.stringify({ variant, mibps: +(bytes / 1048576 / seconds).toFixed(1), peakRss: Math.round(process.resourceUsage().maxRSS / 1024) })}\n`);
