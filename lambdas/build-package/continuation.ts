// A package build continued in a second invocation: the ordered lists and head stored, then read back.
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { InvalidArchiveError } from '#shared/errors';
import type { ArchiveStore } from '#shared/step-deps';
import { packageCommentSchema, packageVoteSchema, subjectPackageDataSchema } from './package-schema.ts';
import type { PackageSource } from './package-zip.ts';
import type { CommentEntry, PackageHead } from './render.ts';
import { measured, readLines } from './streams.ts';

/**
 * A package build continued across invocations (docs/cost.md, "Past one invocation"): when the
 * first invocation has ordered everything but has too little time left to write the zip, it
 * stores the ordered lists and the package's head under the request's work prefix and answers a
 * continuation; the state machine runs BuildPackage again with it, and that invocation writes the
 * zip from what was stored. The zip is written in one pass (Node's deflate and SHA-256 states
 * cannot be saved), so a stop can only come before it.
 */

/** Passes a build takes at most: the ordering pass, then the writing pass. The state machine loops no more. */
export const PACKAGE_MAX_PASSES = 2;

/**
 * Time kept free after the ordering for the writing pass, beyond as long again as the ordering
 * took (the writing took about two thirds of it in the bench): the upload's last parts, the ledger
 * and audit writes.
 */
export const PACKAGE_WRITE_MARGIN_MS = 60_000;

/**
 * What BuildPackage answers when the build goes on in another invocation, and what that
 * invocation gets: the pass it is, and the size and SHA-256 of the stored work's manifest (which is
 * read back only if it matches). Step facts only: no identifier, no link.
 */
export const packageContinuationSchema = z.strictObject({
  pass: z.number().int().min(2).max(PACKAGE_MAX_PASSES),
  bytes: z.number().int().positive(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
export type PackageContinuation = z.infer<typeof packageContinuationSchema>;

/** Where a build's work is kept between invocations: beside the archive, from request_id only. */
export function packageWorkPrefix(requestId: string): string {
  return `exports/${requestId}/package-work/`;
}

const WORK_FILES = ['comments', 'likes', 'dislikes'] as const;
type WorkFile = (typeof WORK_FILES)[number];

const storedFileSchema = z.strictObject({
  bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});

const headSchema = subjectPackageDataSchema.omit({ conversations: true, likes: true, dislikes: true });

/** The stored work's manifest: what the writing pass needs besides the archive and the three lists. */
const manifestSchema = z.strictObject({
  format: z.literal('svc-dsr-package-work'),
  format_version: z.literal(1),
  /** The archive the lists were read from: the writing pass reads it again for the platform files. */
  archive_sha256: z.string(),
  file_name: z.string(),
  head: z.unknown(),
  counts: z.strictObject({
    comments: z.number().int().nonnegative(),
    conversations: z.number().int().nonnegative(),
    likes: z.number().int().nonnegative(),
    dislikes: z.number().int().nonnegative(),
  }),
  account_failure: z.string().nullable(),
  activity_failure: z.string().nullable(),
  files: z.strictObject({ comments: storedFileSchema, likes: storedFileSchema, dislikes: storedFileSchema }),
});
export type PackageWorkManifest = Omit<z.infer<typeof manifestSchema>, 'head'> & { head: PackageHead };

/** A comment line: its conversation when it differs from the line before, the comment, its parent's time. */
const commentLineSchema = z.strictObject({
  k: z
    .strictObject({ conversation_id: z.string(), title: z.string().nullable(), url: z.string().nullable() })
    .optional(),
  m: packageCommentSchema,
  r: z.string().nullable(),
});

/**
 * Stores the ordered lists (as NDJSON, each counted and hashed on its way) and the manifest under
 * the work prefix, and answers the continuation the next pass is run with.
 */
export async function saveWork(
  requestId: string,
  source: PackageSource,
  facts: Omit<PackageWorkManifest, 'format' | 'format_version' | 'files' | 'head' | 'counts'>,
  archive: Pick<ArchiveStore, 'storePackage'>,
): Promise<PackageContinuation> {
  const prefix = packageWorkPrefix(requestId);
  const lines: Record<WorkFile, () => AsyncIterable<string>> = {
    async *comments() {
      let conversation: string | undefined;
      for await (const entry of source.comments()) {
        const changed = entry.conversation.conversation_id !== conversation;
        conversation = entry.conversation.conversation_id;
        yield JSON.stringify({
          ...(changed ? { k: entry.conversation } : {}),
          m: entry.comment,
          r: entry.parentWrittenAt,
        });
      }
    },
    likes: () => jsonLines(source.votes('likes')),
    dislikes: () => jsonLines(source.votes('dislikes')),
  };
  const files: Partial<Record<WorkFile, z.infer<typeof storedFileSchema>>> = {};
  for (const name of WORK_FILES) {
    const counted = measured(batchedLines(lines[name]()), 'package work');
    await archive.storePackage(`${prefix}${name}.ndjson`, counted.body, `${name}.ndjson`);
    files[name] = counted.result();
  }
  const manifest = Buffer.from(
    JSON.stringify({
      format: 'svc-dsr-package-work',
      format_version: 1,
      ...facts,
      head: source.head,
      counts: source.counts,
      files,
    }),
  );
  await archive.storePackage(
    `${prefix}manifest.json`,
    (async function* () {
      yield manifest;
    })(),
    'manifest.json',
  );
  return {
    pass: 2,
    bytes: manifest.length,
    sha256: createHash('sha256').update(manifest).digest('hex'),
  };
}

/**
 * Reads the stored work back for the writing pass: the manifest, checked against the
 * continuation's size and SHA-256, and the three lists to local disk, each checked against the
 * manifest. Answers the manifest and the lists as the package source reads them.
 */
export async function loadWork(
  requestId: string,
  continuation: PackageContinuation,
  scratchDir: string,
  archive: Pick<ArchiveStore, 'read'>,
): Promise<{
  manifest: PackageWorkManifest;
  comments(): AsyncIterable<CommentEntry>;
  votes(list: 'likes' | 'dislikes'): AsyncIterable<z.infer<typeof packageVoteSchema>>;
}> {
  const prefix = packageWorkPrefix(requestId);
  const chunks: Buffer[] = [];
  for await (const chunk of await archive.read(`${prefix}manifest.json`, continuation))
    chunks.push(Buffer.from(chunk));
  let json: unknown;
  try {
    json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new InvalidArchiveError('the stored package work is not JSON');
  }
  const parsed = manifestSchema.safeParse(json);
  const head = headSchema.safeParse(parsed.data?.head);
  if (!parsed.success || !head.success) {
    throw new InvalidArchiveError('the stored package work does not have its documented shape');
  }
  for (const name of WORK_FILES) {
    await pipeline(
      await archive.read(`${prefix}${name}.ndjson`, parsed.data.files[name]),
      createWriteStream(join(scratchDir, `work-${name}.ndjson`)),
    );
  }
  const read = (name: WorkFile) => readLines(join(scratchDir, `work-${name}.ndjson`), 64 * 1024);
  return {
    manifest: { ...parsed.data, head: head.data },
    async *comments() {
      let conversation: CommentEntry['conversation'] | undefined;
      for await (const line of read('comments')) {
        const entry = parseLine(commentLineSchema, line);
        conversation = entry.k ?? conversation;
        if (conversation === undefined) {
          throw new InvalidArchiveError('the stored package work does not have its documented shape');
        }
        yield { conversation, comment: entry.m, parentWrittenAt: entry.r };
      }
    },
    async *votes(list) {
      for await (const line of read(list)) yield parseLine(packageVoteSchema, line);
    },
  };
}

/** Removes a build's stored work, whatever is there; answers how many objects went. */
export async function removeWork(requestId: string, archive: Pick<ArchiveStore, 'remove'>): Promise<number> {
  let removed = 0;
  for (const name of [...WORK_FILES.map((file) => `${file}.ndjson`), 'manifest.json']) {
    removed += await archive.remove(`${packageWorkPrefix(requestId)}${name}`);
  }
  return removed;
}

function parseLine<S extends z.ZodType>(schema: S, line: string): z.output<S> {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    throw new InvalidArchiveError('the stored package work is not JSON');
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success)
    throw new InvalidArchiveError('the stored package work does not have its documented shape');
  return parsed.data;
}

async function* jsonLines(items: AsyncIterable<unknown>): AsyncGenerator<string> {
  for await (const item of items) yield JSON.stringify(item);
}

/** Lines gathered into chunks of about 64 KiB, each line ended by a newline. */
async function* batchedLines(lines: AsyncIterable<string>): AsyncGenerator<Uint8Array> {
  let pending = '';
  for await (const line of lines) {
    pending += `${line}\n`;
    if (pending.length >= 64 * 1024) {
      yield Buffer.from(pending);
      pending = '';
    }
  }
  if (pending !== '') yield Buffer.from(pending);
}
