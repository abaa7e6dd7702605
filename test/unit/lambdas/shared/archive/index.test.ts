/** The public API end to end: a large copy and its verification, and what it costs in memory. */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type ArchiveTarget, copyExportToS3, verifyStoredZip } from '#shared/archive';
import { downloadPolicySchema } from '#shared/download-policy';
import { localS3Client, MiB } from './fixtures.ts';

// ---------------------------------------------------------------------------------------------
// Memory: a file of its own, so this process is still small and RSS growth reflects the copy.
// The platform and S3 run in a child process, so their copies of the archive are not counted.

const BIG_ARCHIVE_BYTES = 96 * MiB;

const CHILD_SCRIPT = `
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { Readable } from 'node:stream';
import { startFauxqs } from 'fauxqs';
import yazl from 'yazl';

const fauxqs = await startFauxqs({ port: 0, logger: false });
fauxqs.createBucket('big');
let served = null;

function* blocks(total) {
  const block = Buffer.alloc(1024 * 1024);
  for (let i = 0; i < block.length; i += 1) block[i] = (i * 7919 + (i >> 11)) & 0xff;
  for (let sent = 0, n = 0; sent < total; n += 1) {
    const chunk = Buffer.from(block.subarray(0, Math.min(block.length, total - sent)));
    chunk.writeUInt32LE(n, 0);
    sent += chunk.length;
    yield chunk;
  }
}

const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://child');
  if (url.pathname === '/served') return res.end(JSON.stringify(served));
  const total = Number(url.searchParams.get('bytes'));
  const zip = new yazl.ZipFile();
  const mtime = new Date('2020-01-01T00:00:00Z');
  for (const name of ['profile.json', 'likes.json', 'dislikes.json']) zip.addBuffer(Buffer.from('[]'), name, { mtime, compress: false });
  zip.addReadStream(Readable.from(blocks(total)), 'messages.json', { size: total, compress: false, mtime });
  zip.end({}, (size) => {
    res.writeHead(200, { 'content-type': 'application/zip', 'content-length': String(size) });
    const hash = createHash('sha256');
    let bytes = 0;
    zip.outputStream.on('data', (chunk) => { hash.update(chunk); bytes += chunk.length; });
    zip.outputStream.on('end', () => { served = { bytes, sha256: hash.digest('hex') }; });
    zip.outputStream.pipe(res);
  });
});
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ s3: fauxqs.address, download: 'http://127.0.0.1:' + server.address().port }));
});
`;

describe('memory', () => {
  let child: ChildProcess;
  let endpoints: { s3: string; download: string };

  beforeAll(async () => {
    child = spawn(process.execPath, ['--input-type=module', '-e', CHILD_SCRIPT], {
      cwd: fileURLToPath(new URL('../../../../../', import.meta.url)),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    if (child.stdout === null) throw new Error('child has no stdout');
    const [line] = await once(createInterface({ input: child.stdout }), 'line');
    endpoints = z.object({ s3: z.string(), download: z.string() }).parse(JSON.parse(String(line)));
  });

  afterAll(() => {
    child.kill();
  });

  async function peakRssGrowth<T>(work: () => Promise<T>): Promise<{ result: T; growth: number }> {
    const baseline = process.memoryUsage.rss();
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage.rss());
    }, 10);
    try {
      const result = await work();
      peak = Math.max(peak, process.memoryUsage.rss());
      return { result, growth: peak - baseline };
    } finally {
      clearInterval(sampler);
    }
  }

  // Holding the archive would cost at least its size (measured: a buffering copy grows RSS by ~170 MiB
  // here); streaming stays near 50 MiB whatever the size, which is why the bound is the archive size.
  it('copies and verifies a 96 MiB export while RSS grows by less than the archive', async () => {
    // Prepare
    const s3 = localS3Client(endpoints.s3);
    const bigPolicy = downloadPolicySchema.parse({
      allowedHosts: [],
      insecureHosts: [new URL(endpoints.download).host],
    });
    const archive = (bytes: number) => new URL(`${endpoints.download}/export.zip?bytes=${bytes}`);
    // One-time costs (code loaded and compiled on first use, the heap's first growth) are not the copy's.
    const warmTarget: ArchiveTarget = { s3, bucket: 'big', key: 'archives/warm.zip' };
    const warm = await copyExportToS3(archive(9 * MiB), warmTarget, { policy: bigPolicy });
    await verifyStoredZip(warmTarget, warm);
    const bigTarget: ArchiveTarget = { s3, bucket: 'big', key: 'archives/big.zip' };
    // Act
    const copy = await peakRssGrowth(() =>
      copyExportToS3(archive(BIG_ARCHIVE_BYTES), bigTarget, { policy: bigPolicy }),
    );
    const verify = await peakRssGrowth(() =>
      verifyStoredZip(bigTarget, { bytes: copy.result.bytes, sha256: copy.result.sha256 }),
    );
    // Assess
    const served: unknown = await (await fetch(`${endpoints.download}/served`)).json();
    expect(served).toEqual({ bytes: copy.result.bytes, sha256: copy.result.sha256 });
    expect(verify.result.entries.find((entry) => entry.name === 'messages.json')?.uncompressedSize).toBe(
      BIG_ARCHIVE_BYTES,
    );
    expect(copy.growth).toBeLessThan(BIG_ARCHIVE_BYTES);
    expect(verify.growth).toBeLessThan(BIG_ARCHIVE_BYTES);
    s3.destroy();
  });
});
