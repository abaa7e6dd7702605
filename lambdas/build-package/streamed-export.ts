// The package built from the archive as streams: files read, sorted on disk, in fixed memory.
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import yauzl from 'yauzl';
import type { z } from 'zod';
import { InvalidArchiveError } from '#shared/errors';
import {
  EXPORT_FILES,
  type ExportFileName,
  exportedMessageSchema,
  exportedProfileSchema,
} from './export-files.ts';
import { JsonArrayScanner, jsonArrayItems } from './json-array-stream.ts';
import { compareText, type HeadInput, normaliseComment, packageHead, safeLink, voteOn } from './normalise.ts';
import type { PackageComment, PackageVote, PlatformFile } from './package-schema.ts';
import { type PackageSource, PLATFORM_FOLDER } from './package-zip.ts';
import type { CommentEntry } from './render.ts';
import { SpillSort } from './spill-sort.ts';

/** profile.json is read whole: one object of a few kilobytes; past this it is refused. */
export const PROFILE_MAX_BYTES = 16 * 1024 * 1024;

/** How the streamed build uses memory; every figure is fixed, whatever the subject's size. */
export interface StreamLimits {
  /** JSON held per sort before it goes to disk as a run. @default 2 MiB */
  readonly runBytes?: number;
  /** Records held per sort before it goes to disk as a run. @default 20,000 */
  readonly runRecords?: number;
  /** Runs merged at once. @default 256 */
  readonly fanIn?: number;
  /** The largest single item of messages.json, likes.json or dislikes.json. @default 8 MiB */
  readonly maxItemBytes?: number;
}

/** The most any scanner or sort held at once: what the memory test reads. */
export interface StreamHighWater {
  scannerBytes: number;
  sortBytes: number;
  sortRecords: number;
}

/** What the package states, besides what the archive holds (the head without the profile and files). */
export type StreamedHeadInput = Omit<HeadInput, 'profile' | 'platformFiles'>;

/**
 * Reads a verified export archive on local disk and answers the package as a stream source: the
 * four files are read entry by entry, each JSON array item by item, and the comments ordered
 * through disk-backed sorts (spill-sort.ts). Nothing held in memory grows with the number of
 * comments or votes. The order and every value are those of `normalisePackage` for the same
 * export (a test compares the bytes of both packages).
 *
 * The sorts: ids (to tell whether a parent or a voted comment is the subject's own), replies by
 * parent (joined with the ids), comments by conversation with the newest first (which gives each
 * conversation's latest time), then the package order. Votes keep their first mention and order.
 */
export async function streamedExport(
  archivePath: string,
  scratchDir: string,
  input: StreamedHeadInput,
  limits: StreamLimits = {},
  highWater?: StreamHighWater,
): Promise<{ source: PackageSource; close(): Promise<void> }> {
  const zip = await openZip(archivePath);
  const sorts: Pick<SpillSort<unknown>, 'maxBufferedBytes' | 'maxBufferedRecords' | 'dispose'>[] = [];
  const sort = <T, K>(name: string, keyOf: (record: T) => K, compare: (a: K, b: K) => number) => {
    const created = new SpillSort<T, K>(scratchDir, name, { keyOf, compare }, limits);
    sorts.push(created);
    return created;
  };
  const close = async () => {
    zip.file.close();
    await Promise.all(sorts.map((each) => each.dispose()));
  };
  try {
    const files = new Map<ExportFileName, PlatformFile>();
    const scanner = (name: ExportFileName) => {
      const created = new JsonArrayScanner(name, limits);
      scanners.push(created);
      return created;
    };
    const scanners: JsonArrayScanner[] = [];
    const read = (name: ExportFileName) => hashed(zip, name, files);

    const profile = await readProfile(read('profile.json'));

    // Pass 1: every comment, normalised; its id into the own-ids sort, a reply also by its parent.
    const ids = sort(
      'ids',
      (own: OwnId) => own,
      (a, b) => compareText(a.i, b.i) || a.s - b.s,
    );
    const replies = sort(
      'replies',
      (reply: CommentRecord & { p: string }) => ({ p: reply.p, s: reply.s }),
      (a, b) => compareText(a.p, b.p) || a.s - b.s,
    );
    // Newest first within a conversation: its first record gives the conversation's latest time.
    const byConversation = sort(
      'by-conversation',
      (record: CommentRecord) => ({ c: record.c, w: record.w }),
      (a, b) => compareText(a.c, b.c) || b.w - a.w,
    );
    let seq = 0;
    for await (const item of jsonArrayItems(read('messages.json'), scanner('messages.json'))) {
      const message = parseItem(exportedMessageSchema, item, 'messages.json', seq);
      if (Number.isNaN(new Date(message.written_at * 1000).getTime())) {
        throw new InvalidArchiveError(
          `the archive's files do not have their documented shape (messages.json at ${seq}.written_at: out_of_range)`,
        );
      }
      const record: CommentRecord = {
        c: message.conversation_id,
        w: message.written_at,
        s: seq,
        m: normaliseComment(message, input.activity, () => false),
        r: null,
      };
      await ids.add({ i: message.id, c: message.conversation_id, w: message.written_at, s: seq });
      if (message.parent_comment_id === null) await byConversation.add(record);
      else await replies.add({ ...record, p: message.parent_comment_id });
      seq += 1;
    }

    // Pass 2: each reply joined with its parent, when the parent is one of the subject's own.
    for await (const { reply, own } of joinOwn(replies.sorted(), (reply) => reply.p, ids.sorted())) {
      const { p: parent, ...record } = reply;
      await byConversation.add({
        ...record,
        m: { ...record.m, reply_to: own === undefined ? null : parent },
        r: own !== undefined && own.c === record.c ? isoOf(own.w) : null,
      });
    }
    await replies.dispose();

    // Pass 3: each conversation's latest time is its first comment here; then the package order.
    const ordered = sort(
      'ordered',
      (record: CommentRecord & { l: number }) => ({
        l: record.l,
        c: record.c,
        w: record.w,
        id: record.m.id,
        s: record.s,
      }),
      (a, b) => b.l - a.l || compareText(a.c, b.c) || a.w - b.w || compareText(a.id, b.id) || a.s - b.s,
    );
    let conversations = 0;
    let current: string | undefined;
    let latest = 0;
    for await (const record of byConversation.sorted()) {
      if (record.c !== current) {
        current = record.c;
        latest = record.w;
        conversations += 1;
      }
      await ordered.add({ ...record, l: latest });
    }
    await byConversation.dispose();

    // Votes: the first mention of each id, in the file's order, with its conversation when own.
    const votes = async (name: 'likes.json' | 'dislikes.json') => {
      const mentions = sort(
        name,
        (mention: { i: string; s: number }) => mention,
        (a, b) => compareText(a.i, b.i) || a.s - b.s,
      );
      let index = 0;
      for await (const item of jsonArrayItems(read(name), scanner(name))) {
        await mentions.add({ i: parseItem(voteIdSchema, item, name, index), s: index });
        index += 1;
      }
      const firsts = sort(
        `${name}-firsts`,
        (first: { s: number; v: PackageVote }) => first.s,
        (a, b) => a - b,
      );
      let previous: string | undefined;
      for await (const { reply: mention, own } of joinOwn(mentions.sorted(), (m) => m.i, ids.sorted())) {
        if (mention.i === previous) continue;
        previous = mention.i;
        await firsts.add({ s: mention.s, v: voteOn(mention.i, own?.c ?? null, input.activity) });
      }
      await mentions.dispose();
      return firsts;
    };
    const likes = await votes('likes.json');
    const dislikes = await votes('dislikes.json');
    await ids.dispose();

    const head = packageHead({
      ...input,
      profile,
      platformFiles: EXPORT_FILES.map((name) => {
        const file = files.get(name);
        if (file === undefined) throw new InvalidArchiveError(`the stored archive lacks ${name}`);
        return file;
      }),
    });
    if (highWater !== undefined) {
      highWater.scannerBytes = Math.max(0, ...scanners.map((each) => each.maxRetainedBytes));
      highWater.sortBytes = Math.max(0, ...sorts.map((each) => each.maxBufferedBytes));
      highWater.sortRecords = Math.max(0, ...sorts.map((each) => each.maxBufferedRecords));
    }
    const conversationOf = (id: string): CommentEntry['conversation'] => {
      const context = input.activity.conversations.get(id);
      return { conversation_id: id, title: context?.title ?? null, url: safeLink(context?.url) };
    };
    const source: PackageSource = {
      head,
      counts: { comments: seq, conversations, likes: likes.size, dislikes: dislikes.size },
      async *comments() {
        let conversation: CommentEntry['conversation'] | undefined;
        for await (const record of ordered.sorted()) {
          if (conversation?.conversation_id !== record.c) conversation = conversationOf(record.c);
          yield { conversation, comment: record.m, parentWrittenAt: record.r };
        }
      },
      async *votes(list) {
        for await (const { v } of (list === 'likes' ? likes : dislikes).sorted()) yield v;
      },
      platformFile: (name) => zip.open(name),
    };
    return { source, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** A comment on its way through the sorts: conversation, time, place in messages.json, the comment, its parent's time. */
interface CommentRecord {
  readonly c: string;
  readonly w: number;
  readonly s: number;
  readonly m: PackageComment;
  readonly r: string | null;
}

/** One of the subject's own comments: id, conversation, time, place in messages.json. */
interface OwnId {
  readonly i: string;
  readonly c: string;
  readonly w: number;
  readonly s: number;
}

/**
 * A merge join of records sorted by an id with the own ids sorted by id: each record with the
 * subject's comment of that id, if any (the last one in messages.json, as a Map would keep).
 */
async function* joinOwn<T>(
  records: AsyncIterable<T>,
  idOf: (record: T) => string,
  own: AsyncIterable<OwnId>,
): AsyncGenerator<{ reply: T; own: OwnId | undefined }> {
  const cursor = own[Symbol.asyncIterator]();
  let next = await cursor.next();
  let matchedId: string | undefined;
  let matched: OwnId | undefined;
  try {
    for await (const record of records) {
      const id = idOf(record);
      if (id !== matchedId) {
        while (next.done !== true && next.value.i < id) next = await cursor.next();
        matched = undefined;
        while (next.done !== true && next.value.i === id) {
          matched = next.value;
          next = await cursor.next();
        }
        matchedId = id;
      }
      yield { reply: record, own: matched };
    }
  } finally {
    await cursor.return?.(undefined);
  }
}

const voteIdSchema = exportedMessageSchema.shape.id;

function parseItem<S extends z.ZodType>(
  schema: S,
  item: unknown,
  name: ExportFileName,
  index: number,
): z.output<S> {
  const parsed = schema.safeParse(item);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.slice(0, 5).map((issue) => {
    const path = [index, ...issue.path].map(String).join('.');
    return `${name} at ${path}: ${issue.code}`;
  });
  // Field paths and codes only: never the values, which are the subject's data.
  throw new InvalidArchiveError(
    `the archive's files do not have their documented shape (${problems.join('; ')})`,
  );
}

async function readProfile(stream: AsyncIterable<Uint8Array>) {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of stream) {
    bytes += chunk.byteLength;
    if (bytes > PROFILE_MAX_BYTES) {
      throw new InvalidArchiveError(`profile.json in the archive is larger than ${PROFILE_MAX_BYTES} bytes`);
    }
    chunks.push(Buffer.from(chunk));
  }
  let json: unknown;
  try {
    json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new InvalidArchiveError('profile.json in the archive is not JSON');
  }
  const parsed = exportedProfileSchema.safeParse(json);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues
    .slice(0, 5)
    .map(
      (issue) => `profile.json${issue.path.length === 0 ? '' : ` at ${issue.path.join('.')}`}: ${issue.code}`,
    );
  throw new InvalidArchiveError(
    `the archive's files do not have their documented shape (${problems.join('; ')})`,
  );
}

function isoOf(writtenAt: number): string {
  return new Date(writtenAt * 1000).toISOString();
}

/** The archive on disk, its four entries found once and opened as often as needed. */
export interface OpenedZip {
  readonly file: yauzl.ZipFile;
  open(name: ExportFileName): Promise<Readable>;
}

export async function openZip(path: string): Promise<OpenedZip> {
  let file: yauzl.ZipFile;
  try {
    file = await new Promise<yauzl.ZipFile>((resolve, reject) =>
      yauzl.open(path, { lazyEntries: true, autoClose: false, validateEntrySizes: true }, (error, zip) =>
        error === null ? resolve(zip) : reject(error),
      ),
    );
  } catch {
    throw new InvalidArchiveError('the stored archive is not a readable zip');
  }
  const wanted = new Set<string>(EXPORT_FILES);
  const entries = new Map<string, yauzl.Entry>();
  try {
    for await (const entry of file.eachEntry()) {
      if (wanted.has(entry.fileName) && !entries.has(entry.fileName)) entries.set(entry.fileName, entry);
    }
  } catch {
    file.close();
    throw new InvalidArchiveError('an entry of the stored archive could not be read');
  }
  const missing = EXPORT_FILES.filter((name) => !entries.has(name));
  if (missing.length > 0) {
    file.close();
    throw new InvalidArchiveError(`the stored archive lacks ${missing.join(', ')}`);
  }
  return {
    file,
    async open(name) {
      const entry = entries.get(name);
      if (entry === undefined) throw new InvalidArchiveError(`the stored archive lacks ${name}`);
      try {
        return await file.openReadStreamPromise(entry);
      } catch {
        throw new InvalidArchiveError('an entry of the stored archive could not be read');
      }
    },
  };
}

/** An entry's bytes, with its size and SHA-256 noted for the package's file list once read to the end. */
async function* hashed(
  zip: OpenedZip,
  name: ExportFileName,
  files: Map<ExportFileName, PlatformFile>,
): AsyncGenerator<Uint8Array> {
  const hash = createHash('sha256');
  let bytes = 0;
  const stream = await zip.open(name);
  try {
    for await (const chunk of stream) {
      const buffer: Buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
      hash.update(buffer);
      bytes += buffer.length;
      yield buffer;
    }
  } catch (error) {
    if (error instanceof InvalidArchiveError) throw error;
    throw new InvalidArchiveError('an entry of the stored archive could not be read');
  }
  files.set(name, { name: `${PLATFORM_FOLDER}${name}`, bytes, sha256: hash.digest('hex') });
}
