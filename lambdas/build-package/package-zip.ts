// The subject package's zip: the page, data.json, README.txt and the platform's original files, streamed.
import { createHash } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { InvalidArchiveError } from '#shared/errors';
import { EXPORT_FILES, type ExportFileName } from './export-files.ts';
import type { PlatformFile, SubjectPackageData } from './normalise.ts';
import type { PackageVote } from './package-schema.ts';
import {
  type CommentEntry,
  commentEntries,
  type PackageCounts,
  type PackageHead,
  PageText,
} from './render.ts';
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

/** Everything the package is written from; the lists are read as streams, each more than once. */
export interface PackageSource {
  readonly head: PackageHead;
  readonly counts: PackageCounts;
  /** Every comment in the package's order: conversations newest first, comments oldest first. */
  comments(): AsyncIterable<CommentEntry>;
  votes(list: 'likes' | 'dislikes'): AsyncIterable<PackageVote>;
  /** A platform file's bytes, untouched; opened when the zip reaches it. */
  platformFile(name: ExportFileName): Promise<Readable>;
}

/**
 * The subject package zip, as a stream of bytes: each entry is written as it is rendered, so
 * memory does not depend on the number of comments. Its bytes depend only on its content (every
 * entry's time is the answer time), so building it again from the same facts gives the same SHA-256.
 */
export function packageZipStream(source: PackageSource): AsyncIterable<Buffer> {
  const { head } = source;
  const mtime = new Date(head.request.answered_at);
  const options = { mtime, mode: 0o100644 };
  const zip = new yazl.ZipFile();
  const strings = stringsFor(head.language);
  const answered = new Intl.DateTimeFormat(head.language, {
    dateStyle: 'long',
    timeZone: head.time_zone,
  }).format(mtime);
  // A failing entry fails the whole stream (a pipe alone would leave the zip waiting for ever).
  const output = new PassThrough();
  const fail = (error: unknown) => output.destroy(error instanceof Error ? error : new Error(String(error)));
  const guarded = (stream: Readable): Readable => stream.once('error', fail);
  zip.on('error', fail);
  const text = (pieces: () => AsyncIterable<string>) => (callback: (error: null, stream: Readable) => void) =>
    callback(null, guarded(Readable.from(batched(pieces()), { objectMode: false })));
  zip.addReadStreamLazy(
    'index.html',
    options,
    text(() => pageHtml(source)),
  );
  zip.addReadStreamLazy(
    'data.json',
    options,
    text(() => dataJson(source)),
  );
  zip.addBuffer(
    Buffer.from(
      strings.readme({
        controller: head.controller.name,
        contact: head.controller.contact,
        answered,
        files: head.platform_files,
      }),
      'utf8',
    ),
    'README.txt',
    options,
  );
  for (const name of EXPORT_FILES) {
    zip.addReadStreamLazy(`${PLATFORM_FOLDER}${name}`, options, (callback) => {
      source.platformFile(name).then((stream) => callback(null, guarded(stream)), fail);
    });
  }
  zip.addBuffer(
    Buffer.from(
      head.platform_files
        .map((file) => `${file.sha256}  ${file.name.slice(PLATFORM_FOLDER.length)}\n`)
        .join(''),
      'utf8',
    ),
    `${PLATFORM_FOLDER}SHA256SUMS`,
    options,
  );
  zip.end();
  zip.outputStream.once('error', fail).pipe(output);
  return output;
}

/** The subject package zip of a package held in memory, whole. */
export async function buildPackageZip(data: SubjectPackageData, platform: PlatformFiles): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of packageZipStream(sourceOf(data, platform))) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/** A package held in memory, as a source. */
export function sourceOf(data: SubjectPackageData, platform: PlatformFiles): PackageSource {
  const { conversations, likes, dislikes, ...head } = data;
  return {
    head,
    counts: {
      comments: conversations.reduce((sum, c) => sum + c.comments.length, 0),
      conversations: conversations.length,
      likes: likes.length,
      dislikes: dislikes.length,
    },
    async *comments() {
      for (const conversation of conversations) yield* commentEntries(conversation);
    },
    async *votes(list) {
      yield* list === 'likes' ? likes : dislikes;
    },
    platformFile: async (name) => Readable.from([platform[name]]),
  };
}

/** index.html, line by line: the frame, with each list streamed into its slot. */
export async function* pageHtml(source: PackageSource): AsyncGenerator<string> {
  const text = new PageText(source.head);
  for (const line of text.frame(source.counts)) {
    if (typeof line === 'string') {
      yield `${line}\n`;
    } else if (line.slot === 'conversations') {
      let current: string | undefined;
      for await (const entry of source.comments()) {
        if (entry.conversation.conversation_id !== current) {
          if (current !== undefined) yield `${text.conversationClose()}\n`;
          current = entry.conversation.conversation_id;
          yield lines(text.conversationOpen(entry.conversation));
        }
        yield lines(text.comment(entry));
      }
      if (current !== undefined) yield `${text.conversationClose()}\n`;
    } else {
      for await (const vote of source.votes(line.slot)) yield `${text.vote(vote)}\n`;
    }
  }
}

/**
 * data.json as `JSON.stringify(data, null, 2)` writes it, with the three lists streamed: the same
 * bytes as the package held in memory (a test compares them).
 */
export async function* dataJson(source: PackageSource): AsyncGenerator<string> {
  const { head } = source;
  const value = (key: keyof PackageHead) => indent(JSON.stringify(head[key], null, 2), '  ');
  const entries: (keyof PackageHead | 'conversations' | 'likes' | 'dislikes')[] = [
    'format',
    'format_version',
    'language',
    'time_zone',
    'controller',
    'request',
    'information',
    'profile',
    'roles',
    'settings',
    'settings_source',
    'conversations',
    'likes',
    'dislikes',
    'conversation_details',
    'platform_files',
  ];
  yield '{';
  for (const [index, key] of entries.entries()) {
    yield `${index === 0 ? '' : ','}\n  ${JSON.stringify(key)}: `;
    if (key === 'conversations') yield* conversationsJson(source);
    else if (key === 'likes' || key === 'dislikes') yield* votesJson(source, key);
    else yield value(key);
  }
  yield '\n}\n';
}

async function* conversationsJson(source: PackageSource): AsyncGenerator<string> {
  let current: string | undefined;
  for await (const { conversation, comment } of source.comments()) {
    if (conversation.conversation_id !== current) {
      if (current !== undefined) yield '\n      ]\n    }';
      const header = JSON.stringify(
        { conversation_id: conversation.conversation_id, title: conversation.title, url: conversation.url },
        null,
        2,
      );
      yield `${current === undefined ? '[' : ','}\n    ${indent(`${header.slice(0, -2)},\n  "comments": [`, '    ')}`;
      yield `\n        ${indent(JSON.stringify(comment, null, 2), '        ')}`;
      current = conversation.conversation_id;
    } else {
      yield `,\n        ${indent(JSON.stringify(comment, null, 2), '        ')}`;
    }
  }
  yield current === undefined ? '[]' : '\n      ]\n    }\n  ]';
}

async function* votesJson(source: PackageSource, list: 'likes' | 'dislikes'): AsyncGenerator<string> {
  let first = true;
  for await (const vote of source.votes(list)) {
    yield `${first ? '[' : ','}\n    ${indent(JSON.stringify(vote, null, 2), '    ')}`;
    first = false;
  }
  yield first ? '[]' : '\n  ]';
}

function indent(json: string, pad: string): string {
  return json.replaceAll('\n', `\n${pad}`);
}

function lines(pieces: readonly string[]): string {
  return pieces.length === 0 ? '' : `${pieces.join('\n')}\n`;
}

/** Small strings gathered into buffers of about 64 KiB, so the zip is not fed a line at a time. */
async function* batched(pieces: AsyncIterable<string>): AsyncGenerator<Buffer> {
  let pending = '';
  for await (const piece of pieces) {
    pending += piece;
    if (pending.length >= 64 * 1024) {
      yield Buffer.from(pending, 'utf8');
      pending = '';
    }
  }
  if (pending !== '') yield Buffer.from(pending, 'utf8');
}
