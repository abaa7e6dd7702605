import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { InvalidArchiveError } from '#shared/errors';
import { parseExportFiles } from '../../../../lambdas/build-package/export-files.ts';
import { normalisePackage } from '../../../../lambdas/build-package/normalise.ts';
import {
  packageJsonSchema,
  subjectPackageDataSchema,
} from '../../../../lambdas/build-package/package-schema.ts';
import {
  buildPackageZip,
  describePlatformFiles,
  PACKAGE_ENTRIES,
  packageFileName,
  readPlatformFiles,
} from '../../../../lambdas/build-package/package-zip.ts';
import { exportedMessage, normaliseInput, rawFiles, T0 } from './fixtures.ts';

async function zipOf(entries: Record<string, Buffer>): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  for (const [name, data] of Object.entries(entries)) zip.addBuffer(data, name);
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

async function unzip(buffer: Buffer): Promise<Map<string, Buffer>> {
  const zip = await yauzl.fromBufferPromise(buffer, { lazyEntries: true });
  const out = new Map<string, Buffer>();
  for await (const entry of zip.eachEntry()) {
    const chunks: Buffer[] = [];
    for await (const chunk of await zip.openReadStreamPromise(entry)) chunks.push(Buffer.from(chunk));
    out.set(entry.fileName, Buffer.concat(chunks));
  }
  zip.close();
  return out;
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

async function samplePackage() {
  const raw = rawFiles([exportedMessage('m1', 'conv-a', T0, 'Hello <world>')], { likes: ['x-1'] });
  const archive = await zipOf({ ...raw, 'extra-unlisted.txt': Buffer.from('ignored') });
  const platform = await readPlatformFiles(archive);
  const data = normalisePackage({
    ...normaliseInput([]),
    files: parseExportFiles(platform),
    platformFiles: describePlatformFiles(platform),
  });
  return { raw, data, zip: await buildPackageZip(data, platform) };
}

describe('buildPackageZip', () => {
  it('holds index.html, data.json, README.txt and the four original files byte for byte with their SHA-256', async () => {
    const { raw, zip } = await samplePackage();

    const entries = await unzip(zip);

    expect([...entries.keys()]).toEqual([...PACKAGE_ENTRIES]);
    const sums = entries.get('platform/SHA256SUMS')?.toString('utf8') ?? '';
    for (const name of ['dislikes.json', 'likes.json', 'messages.json', 'profile.json'] as const) {
      expect(entries.get(`platform/${name}`)?.equals(raw[name])).toBe(true);
      expect(sums).toContain(`${sha256(raw[name])}  ${name}\n`);
      expect(entries.get('README.txt')?.toString('utf8')).toContain(`${sha256(raw[name])}  platform/${name}`);
    }
    expect(entries.get('index.html')?.toString('utf8')).toContain('Hello &lt;world&gt;');
  });

  it('writes data.json that matches its published schema', async () => {
    const { zip } = await samplePackage();
    const data: unknown = JSON.parse((await unzip(zip)).get('data.json')?.toString('utf8') ?? '');
    const parsed = subjectPackageDataSchema.safeParse(data);
    expect(parsed.success ? [] : parsed.error.issues).toEqual([]);
    expect(data).toMatchObject({ conversations: [{ comments: [{ text: 'Hello <world>' }] }] });
  });

  it('gives the same bytes when built again from the same facts', async () => {
    const first = await samplePackage();
    const second = await samplePackage();
    expect(sha256(second.zip)).toBe(sha256(first.zip));
  });
});

describe('readPlatformFiles', () => {
  it('refuses an archive without one of the four documented files', async () => {
    const { 'likes.json': _likes, ...three } = rawFiles([]);
    const archive = await zipOf(three);
    await expect(readPlatformFiles(archive)).rejects.toThrow(InvalidArchiveError);
    await expect(readPlatformFiles(archive)).rejects.toThrow(/lacks likes\.json/);
  });

  it('refuses bytes that are not a zip', async () => {
    await expect(readPlatformFiles(Buffer.from('not a zip at all'))).rejects.toThrow(/not a readable zip/);
  });
});

describe('packageFileName', () => {
  it("names the package for the answer date in the controller's time zone", () => {
    const lateEvening = new Date('2026-11-22T23:30:00Z');
    expect(packageFileName(lateEvening, 'UTC')).toBe('your-data-2026-11-22.zip');
    expect(packageFileName(lateEvening, 'Europe/Berlin')).toBe('your-data-2026-11-23.zip');
  });
});

describe('docs/subject-package.schema.json', () => {
  it('is the JSON Schema generated from the package schema', () => {
    const published: unknown = JSON.parse(readFileSync('docs/subject-package.schema.json', 'utf8'));
    expect(
      published,
      "docs/subject-package.schema.json is out of date; regenerate it with: node --import tsx -e \"import('./lambdas/build-package/package-schema.ts').then(m=>process.stdout.write(JSON.stringify(m.packageJsonSchema(),null,2)+'\\n'))\" > docs/subject-package.schema.json && npx biome format --write docs/subject-package.schema.json",
    ).toEqual(packageJsonSchema());
  });
});
