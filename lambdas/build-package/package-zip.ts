import { createHash } from 'node:crypto';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { InvalidArchiveError } from '#shared/errors';
import { EXPORT_FILES, type ExportFileName } from './export-files.ts';
import type { PlatformFile, SubjectPackageData } from './normalise.ts';
import { renderIndexHtml } from './render.ts';
import { stringsFor } from './strings.ts';

/** The platform's files as they were in the verified archive, byte for byte. */
export type PlatformFiles = Readonly<Record<ExportFileName, Buffer>>;

/** Where the original files go inside the subject package. */
export const PLATFORM_FOLDER = 'platform/';

/**
 * Reads the four documented files out of the platform's archive, untouched. The archive was
 * verified (CRCs, sizes, zip-bomb limits) by ArchiveExport; an entry missing now is an
 * InvalidArchiveError, as it would have been then.
 */
export async function readPlatformFiles(archive: Buffer): Promise<PlatformFiles> {
  const wanted = new Set<string>(EXPORT_FILES);
  const found = new Map<string, Buffer>();
  let zip: yauzl.ZipFile;
  try {
    zip = await yauzl.fromBufferPromise(archive, { lazyEntries: true, validateEntrySizes: true });
  } catch {
    throw new InvalidArchiveError('the stored archive is not a readable zip');
  }
  try {
    for await (const entry of zip.eachEntry()) {
      if (!wanted.has(entry.fileName) || found.has(entry.fileName)) continue;
      const stream = await zip.openReadStreamPromise(entry);
      const chunks: Buffer[] = [];
      for await (const chunk of stream) chunks.push(Buffer.from(chunk));
      found.set(entry.fileName, Buffer.concat(chunks));
    }
  } catch {
    throw new InvalidArchiveError('an entry of the stored archive could not be read');
  } finally {
    zip.close();
  }
  const missing = EXPORT_FILES.filter((name) => !found.has(name));
  if (missing.length > 0) throw new InvalidArchiveError(`the stored archive lacks ${missing.join(', ')}`);
  const files: Partial<Record<ExportFileName, Buffer>> = {};
  for (const name of EXPORT_FILES) files[name] = found.get(name);
  return files as PlatformFiles;
}

/** Each original file's name inside the package, size and SHA-256. */
export function describePlatformFiles(files: PlatformFiles): PlatformFile[] {
  return EXPORT_FILES.map((name) => ({
    name: `${PLATFORM_FOLDER}${name}`,
    bytes: files[name].length,
    sha256: createHash('sha256').update(files[name]).digest('hex'),
  }));
}

/** The download's file name: `your-data-<answer date in the controller's time zone>.zip`. */
export function packageFileName(answeredAt: Date, timeZone: string): string {
  const parts = new Intl.DateTimeFormat('en-CA', {
    timeZone,
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
  }).formatToParts(answeredAt);
  const part = (type: string) => parts.find((p) => p.type === type)?.value ?? '00';
  return `your-data-${part('year')}-${part('month')}-${part('day')}.zip`;
}

/** The entry names of a subject package, in the order they are written. */
export const PACKAGE_ENTRIES = [
  'index.html',
  'data.json',
  'README.txt',
  ...EXPORT_FILES.map((name) => `${PLATFORM_FOLDER}${name}`),
  `${PLATFORM_FOLDER}SHA256SUMS`,
] as const;

/**
 * The subject package zip. Its bytes depend only on its content (every entry's time is the answer
 * time), so building it again from the same facts gives the same SHA-256.
 */
export async function buildPackageZip(data: SubjectPackageData, platform: PlatformFiles): Promise<Buffer> {
  const mtime = new Date(data.request.answered_at);
  const zip = new yazl.ZipFile();
  const strings = stringsFor(data.language);
  const answered = new Intl.DateTimeFormat(data.language, {
    dateStyle: 'long',
    timeZone: data.time_zone,
  }).format(mtime);
  const add = (name: string, content: Buffer) => zip.addBuffer(content, name, { mtime, mode: 0o100644 });
  add('index.html', Buffer.from(renderIndexHtml(data), 'utf8'));
  add('data.json', Buffer.from(`${JSON.stringify(data, null, 2)}\n`, 'utf8'));
  add(
    'README.txt',
    Buffer.from(
      strings.readme({
        controller: data.controller.name,
        contact: data.controller.contact,
        answered,
        files: data.platform_files,
      }),
      'utf8',
    ),
  );
  for (const name of EXPORT_FILES) add(`${PLATFORM_FOLDER}${name}`, platform[name]);
  add(
    `${PLATFORM_FOLDER}SHA256SUMS`,
    Buffer.from(
      data.platform_files
        .map((file) => `${file.sha256}  ${file.name.slice(PLATFORM_FOLDER.length)}\n`)
        .join(''),
      'utf8',
    ),
  );
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}
