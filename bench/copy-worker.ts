/**
 * One measured download, in its own process so its peak RSS is its own: either the ArchiveExport
 * copy into S3 (`archive`) or the baseline, the same download streamed to nowhere by fetch (`baseline`).
 * Prints one JSON line: bytes, seconds, CPU seconds spent on the download, peak RSS.
 * bench/index.ts runs it from a bundle; both modes load the same modules, so both start from the
 * same memory floor.
 */
import { S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { copyExportToS3 } from '#shared/archive';

const args = z
  .object({
    mode: z.enum(['archive', 'baseline']),
    link: z.url(),
    s3Endpoint: z.url().optional(),
    bucket: z.string().optional(),
    key: z.string().optional(),
  })
  .parse(JSON.parse(process.argv[2] ?? '{}'));

const started = performance.now();
const cpuBefore = process.cpuUsage();
let bytes = 0;
if (args.mode === 'baseline') {
  const response = await fetch(args.link);
  const reader = response.body?.getReader();
  for (let chunk = await reader?.read(); chunk && !chunk.done; chunk = await reader?.read())
    bytes += chunk.value.length;
} else {
  const s3 = new S3Client({
    region: 'us-east-1',
    endpoint: args.s3Endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  const link = new URL(args.link);
  const result = await copyExportToS3(
    link,
    { s3, bucket: args.bucket ?? '', key: args.key ?? '' },
    { policy: { allowedHosts: [], insecureHosts: [link.host], maxRedirects: 0 } },
  );
  bytes = result.bytes;
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
  })}\n`,
);
