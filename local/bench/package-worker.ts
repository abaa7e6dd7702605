/**
 * One subject package built in a process of its own, so its peak RSS is its own: `streamed` is
 * the BuildPackage path (the archive copied to scratch disk as it is hashed, the files read item
 * by item, sorted on disk, the zip uploaded in parts as it is written); `in-memory` is the build
 * as it was before (every file parsed whole, the package rendered whole, then stored), measured
 * as the baseline. The package goes to the S3 sink, which counts and discards it. Prints one JSON
 * line: seconds, CPU seconds, peak RSS and the package's size.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { parseExportFiles } from '../../lambdas/build-package/export-files.ts';
import { normalisePackage } from '../../lambdas/build-package/normalise.ts';
import {
  buildPackageZip,
  describePlatformFiles,
  packageZipStream,
  readPlatformFiles,
} from '../../lambdas/build-package/package-zip.ts';
import { PACKAGE_PLACEHOLDERS } from '../../lambdas/build-package/settings.ts';
import { streamedExport } from '../../lambdas/build-package/streamed-export.ts';
import { putPackageStream } from '../../lambdas/shared/archive/index.ts';
import { heavyActivity } from './heavy-user.ts';

const args = z
  .object({
    mode: z.enum(['streamed', 'in-memory']),
    archive: z.string(),
    comments: z.number().int().positive(),
    s3Endpoint: z.url(),
  })
  .parse(JSON.parse(process.argv[2] ?? '{}'));

const s3 = new S3Client({
  region: 'us-east-1',
  endpoint: args.s3Endpoint,
  forcePathStyle: true,
  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
});
const target = { s3, bucket: 'bench', key: `package-${args.mode}-${args.comments}.zip` };
const activity = heavyActivity(args.comments, 20_000);
const head = {
  account: null,
  activity,
  controller: { name: PACKAGE_PLACEHOLDERS.controllerName, contact: PACKAGE_PLACEHOLDERS.controllerContact },
  information: { gdpr: PACKAGE_PLACEHOLDERS.information.gdpr },
  language: 'en',
  timeZone: 'UTC',
  request: {
    request_id: '00000000-0000-4000-8000-000000000000',
    regulation: 'gdpr' as const,
    received_at: '2026-11-01T00:00:00.000Z',
    answered_at: '2026-11-02T00:00:00.000Z',
  },
};

/** The zip's bytes, counted on their way to the sink. */
async function* counted(
  zip: AsyncIterable<Uint8Array>,
  tally: { bytes: number },
): AsyncGenerator<Uint8Array> {
  for await (const chunk of zip) {
    tally.bytes += chunk.byteLength;
    yield chunk;
  }
}

const started = performance.now();
const cpuBefore = process.cpuUsage();
const tally = { bytes: 0 };
const scratch = await mkdtemp(join(tmpdir(), 'svc-dsr-bench-package-'));
// The most local disk the build used at once (the archive and the sorts' runs), sampled.
let scratchPeakBytes = 0;
const sampler = setInterval(() => {
  void readdir(scratch)
    .then((names) =>
      Promise.all(
        names.map((name) =>
          stat(join(scratch, name)).then(
            (s) => s.size,
            () => 0,
          ),
        ),
      ),
    )
    .then(
      (sizes) => {
        scratchPeakBytes = Math.max(
          scratchPeakBytes,
          sizes.reduce((sum, size) => sum + size, 0),
        );
      },
      () => undefined,
    );
}, 250);
try {
  if (args.mode === 'streamed') {
    // As the step does: the archive to local disk, hashed on the way (the ledger check).
    const archive = join(scratch, 'archive.zip');
    const hash = createHash('sha256');
    await pipeline(
      createReadStream(args.archive),
      async function* (source: AsyncIterable<Buffer>) {
        for await (const chunk of source) {
          hash.update(chunk);
          yield chunk;
        }
      },
      createWriteStream(archive),
    );
    hash.digest();
    const { source, close } = await streamedExport(archive, scratch, head);
    try {
      await putPackageStream(target, counted(packageZipStream(source), tally), { fileName: 'bench.zip' });
    } finally {
      await close();
    }
  } else {
    const platform = await readPlatformFiles(await readFile(args.archive));
    const data = normalisePackage({
      ...head,
      files: parseExportFiles(platform),
      platformFiles: describePlatformFiles(platform),
    });
    const zip = await buildPackageZip(data, platform);
    await putPackageStream(target, counted(Readable.from([zip]), tally), { fileName: 'bench.zip' });
  }
} finally {
  clearInterval(sampler);
  await rm(scratch, { recursive: true, force: true });
  s3.destroy();
}
const cpu = process.cpuUsage(cpuBefore);
process.stdout.write(
  `${JSON.stringify({
    seconds: (performance.now() - started) / 1000,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    packageBytes: tally.bytes,
    scratchPeakBytes,
  })}\n`,
);
