import './quiet.ts';
import { createServer } from 'node:http';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { S3Client, CreateBucketCommand } from '@aws-sdk/client-s3';
import { startDiskS3 } from '#local/s3-disk';
import { copyExportToS3, verifyStoredZip, hashStoredObject } from '#shared/archive';
const disk = await startDiskS3({ root: await mkdtemp(join(tmpdir(), 'disk-')) });
const s3 = new S3Client({ region: 'us-east-1', endpoint: disk.endpoint, forcePathStyle: true, credentials: { accessKeyId: 'a', secretAccessKey: 'b' } });
await s3.send(new CreateBucketCommand({ Bucket: 'bench-bucket' }));
for (const size of [100, 8 * 1024 * 1024, 8 * 1024 * 1024 + 1, 21 * 1024 * 1024 + 7]) {
  const body = Buffer.alloc(size); for (let i = 0; i < size; i += 1) body[i] = (i * 31 + (i >> 9)) & 0xff;
  const server = createServer((_, res) => { res.writeHead(200, { 'content-length': String(size) }); res.end(body); });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address(); const port = typeof addr === 'object' && addr ? addr.port : 0;
  const link = new URL(`http://127.0.0.1:${port}/x.zip`);
  const r = await copyExportToS3(link, { s3, bucket: 'bench-bucket', key: `k${size}` }, { policy: { allowedHosts: [], insecureHosts: [link.host], maxRedirects: 0 } });
  const h = await hashStoredObject({ s3, bucket: 'bench-bucket', key: `k${size}` });
  console.log(size, r.bytes === size, r.sha256 === createHash('sha256').update(body).digest('hex'), h.sha256 === r.sha256, r.etag);
  server.close();
}
s3.destroy(); await disk.close();
void verifyStoredZip;
