/**
 * The emulator's state on disk: a snapshot file written atomically and paced, read back on start,
 * so a restarted emulator has the users, exports and calls it had.
 */
import { mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';
import { EmulatorConfigError, parseWith } from './config-file.ts';
import { FAULT_KINDS, faultProfileSchema, LIMIT_ANSWERS, resolveFaults } from './faults.ts';
import { NOTIFICATION_VALUES, roleSchema, unknownKeys } from './rules.ts';
import { emulatorStateSchema } from './state.ts';
import { entryMatches, MAX_STREAM_ENTRY_BYTES } from './zip.ts';

/** The value of a snapshot file's `format` key: what tells it apart from any other JSON file. */
export const SNAPSHOT_FORMAT = 'svc-dsr-emulator-snapshot';
/** The snapshot layout this emulator writes and reads. */
export const SNAPSHOT_VERSION = 1;
/** The call log keeps this many entries; older ones are dropped and counted. */
export const MAX_CALLS = 10_000;

const identifier = z.string().min(1, { error: 'must be a non-empty string' });
const count = z.number().int({ error: 'must be a whole number' }).min(0, { error: 'must not be negative' });
const millis = count;
// A stream starts at an unsigned 32-bit seed and moves through signed 32-bit states.
const streamPosition = z
  .number()
  .int({ error: 'must be a whole number' })
  .min(-(2 ** 31), { error: 'must be a 32-bit stream position' })
  .max(2 ** 32 - 1, { error: 'must be a 32-bit stream position' });

function strict<T extends z.core.$ZodLooseShape>(shape: T) {
  return z.strictObject(shape, { error: unknownKeys(Object.keys(shape)) });
}

const notification = z.enum(NOTIFICATION_VALUES, { error: 'must be immediately or never' });
const channel = strict({
  liked_your_message: notification,
  message_approved: notification,
  message_rejected: notification,
  replied_to_message: notification,
  user_mentioned: notification,
});

const userSchema = strict({
  svcUserId: identifier,
  primaryKey: identifier.nullable(),
  registered: z.boolean(),
  userName: identifier,
  displayName: z.string(),
  email: z.string().nullable(),
  emailVerified: z.boolean(),
  imageUrl: z.string().nullable(),
  location: z.string().nullable(),
  privateProfile: z.boolean(),
  userMetadata: strict({ is_subscriber: z.boolean() }),
  bio: z.string(),
  role: roleSchema,
  settings: strict({ email: channel, in_app: channel }),
  createdAt: millis,
  updatedAt: millis,
});

const platformSchema = strict({
  userCounter: count,
  conversations: z.array(strict({ id: identifier, url: z.string(), title: z.string() })),
  users: z.array(userSchema),
  comments: z.array(
    strict({
      id: identifier,
      conversationId: identifier,
      authorId: identifier,
      text: z.string(),
      writtenAt: count,
      parentId: identifier.nullable(),
    }),
  ),
  votes: z.array(
    strict({
      svcUserId: identifier,
      commentId: identifier,
      value: z.enum(['like', 'dislike'], { error: 'must be like or dislike' }),
    }),
  ),
});

const exportFileSchema = strict({
  name: identifier,
  crc32: z.number().int().min(0).max(0xffffffff, { error: 'must be an unsigned 32-bit CRC' }),
  size: count,
  deflated: z.base64({ error: 'must be base64' }),
});

const exportSchema = strict({
  number: count.min(1, { error: 'must be at least 1' }),
  publicId: identifier,
  idBody: z.union([z.number(), z.string(), z.record(z.string(), z.unknown())], {
    error: 'must be a number, a string or an object',
  }),
  svcUserId: identifier,
  primaryKey: identifier.nullable(),
  createdAt: millis,
  readyAfterPolls: count,
  outcome: z.enum(['completed', 'failed'], { error: 'must be completed or failed' }),
  polls: count,
  linkToken: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/, { error: 'must be a url-safe token' })
    .nullable(),
  linkCreatedAt: millis.nullable(),
  linkExpiresAt: millis.nullable(),
  paddingBytes: count.max(MAX_STREAM_ENTRY_BYTES, { error: `must be at most ${MAX_STREAM_ENTRY_BYTES}` }),
  paddingSeed: z.number().int({ error: 'must be a whole number' }),
  downloads: count,
  /** Null once the link has expired and the entries were dropped. */
  files: z.array(exportFileSchema).nullable(),
  /** The archive's length; snapshots written before it was kept leave it to be computed from the files. */
  byteSize: count.optional(),
});

const credentialKind = z.enum(['sso_access_token', 'export_token']);
const credentialLocation = z.enum(['header', 'query', 'body']);
const callSchema = strict({
  seq: count.min(1, { error: 'must be at least 1' }),
  at: z.string(),
  method: z.string(),
  path: z.string(),
  status: z.number().int().nullable(),
  fault: z.enum([...FAULT_KINDS, ...LIMIT_ANSWERS, 'truncate']).nullable(),
  credential: strict({
    kind: z.enum(['sso_access_token', 'export_token', 'unknown', 'none']),
    expected: credentialKind,
    location: credentialLocation,
    name: z.string(),
    present: z.boolean(),
    valid: z.boolean(),
  }).nullable(),
  stray_credentials: z.array(
    strict({ kind: credentialKind, location: credentialLocation, name: z.string() }),
  ),
  duration_ms: count,
});

const snapshotShape = {
  format: z.literal(SNAPSHOT_FORMAT),
  version: z.literal(SNAPSHOT_VERSION),
  savedAt: z.string(),
  spotId: identifier,
  ssoAccessToken: identifier,
  exportToken: identifier,
  baselineState: emulatorStateSchema,
  initialFaults: faultProfileSchema,
  // Snapshots saved before a profile key existed take its default.
  faults: faultProfileSchema.transform(resolveFaults),
  activityEnabled: z.boolean(),
  randomStreams: strict({
    faults: streamPosition,
    names: streamPosition,
    exports: streamPosition,
    downloads: streamPosition,
  }),
  platform: platformSchema,
  exportCounter: count,
  exports: z.array(exportSchema),
  callCounter: count,
  droppedCalls: count,
  calls: z.array(callSchema).max(MAX_CALLS, { error: `must hold at most ${MAX_CALLS} calls` }),
};

/** A running emulator's whole state, as saved in its persist file (see docs/emulator.md, "Persistence"). */
export const emulatorSnapshotSchema = z
  .strictObject(snapshotShape, { error: unknownKeys(Object.keys(snapshotShape)) })
  .superRefine((snapshot, context) => {
    const report = (path: PropertyKey[], message: string) =>
      context.addIssue({ code: 'custom', path, message });
    const unique = <T>(
      items: readonly T[],
      key: (item: T) => string | null,
      path: (index: number) => PropertyKey[],
    ) => {
      const seen = new Set<string>();
      items.forEach((item, index) => {
        const value = key(item);
        if (value === null) return;
        if (seen.has(value)) report(path(index), 'is not unique');
        seen.add(value);
      });
      return seen;
    };
    const { platform } = snapshot;
    const conversations = unique(
      platform.conversations,
      (c) => c.id,
      (i) => ['platform', 'conversations', i, 'id'],
    );
    const users = unique(
      platform.users,
      (u) => u.svcUserId,
      (i) => ['platform', 'users', i, 'svcUserId'],
    );
    unique(
      platform.users,
      (u) => u.primaryKey,
      (i) => ['platform', 'users', i, 'primaryKey'],
    );
    unique(
      platform.users,
      (u) => u.userName.toLowerCase(),
      (i) => ['platform', 'users', i, 'userName'],
    );
    const comments = unique(
      platform.comments,
      (c) => c.id,
      (i) => ['platform', 'comments', i, 'id'],
    );
    platform.comments.forEach((comment, index) => {
      const path = ['platform', 'comments', index];
      if (!users.has(comment.authorId)) report([...path, 'authorId'], 'names no user in platform.users');
      if (!conversations.has(comment.conversationId))
        report([...path, 'conversationId'], 'names no conversation in platform.conversations');
      if (comment.parentId !== null && !comments.has(comment.parentId))
        report([...path, 'parentId'], 'names no comment in platform.comments');
    });
    platform.votes.forEach((vote, index) => {
      const path = ['platform', 'votes', index];
      if (!users.has(vote.svcUserId)) report([...path, 'svcUserId'], 'names no user in platform.users');
      if (!comments.has(vote.commentId))
        report([...path, 'commentId'], 'names no comment in platform.comments');
    });
    unique(
      snapshot.exports,
      (e) => e.publicId,
      (i) => ['exports', i, 'publicId'],
    );
    unique(
      snapshot.exports,
      (e) => e.linkToken,
      (i) => ['exports', i, 'linkToken'],
    );
    snapshot.exports.forEach((record, index) => {
      if (record.number > snapshot.exportCounter)
        report(['exports', index, 'number'], 'is above exportCounter');
      if (record.files === null && record.byteSize === undefined)
        report(['exports', index, 'byteSize'], 'is required when files is null');
      record.files?.forEach((file, fileIndex) => {
        const deflated = Buffer.from(file.deflated, 'base64');
        if (!entryMatches({ name: file.name, deflated, crc32: file.crc32, size: file.size }))
          report(
            ['exports', index, 'files', fileIndex, 'deflated'],
            'does not inflate to its size and crc32',
          );
      });
    });
    snapshot.calls.forEach((call, index) => {
      if (call.seq > snapshot.callCounter) report(['calls', index, 'seq'], 'is above callCounter');
    });
  });

/** A validated snapshot (see emulatorSnapshotSchema). */
export type EmulatorSnapshot = z.infer<typeof emulatorSnapshotSchema>;
export type PlatformSnapshot = EmulatorSnapshot['platform'];
export type ExportSnapshot = EmulatorSnapshot['exports'][number];

const START_FRESH =
  'Delete the file to start fresh from the given state (earlier users, exports and calls are then gone), ' +
  'or point the emulator at another file.';

function unusable(
  path: string,
  what: string,
  cause?: unknown,
  problems: { field: string; message: string }[] = [],
  fix = START_FRESH,
) {
  return new EmulatorConfigError(
    `Emulator snapshot file ${path} cannot be used: ${what}\n${fix}`,
    problems,
    cause === undefined ? undefined : { cause },
  );
}

/**
 * Reads and validates a persist file; undefined when it does not exist yet. A file that is not
 * JSON, not a snapshot, from another snapshot version or inconsistent throws EmulatorConfigError
 * naming the file and what is wrong.
 */
export async function loadSnapshotFile(path: string): Promise<EmulatorSnapshot | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if (error instanceof Error && 'code' in error && error.code === 'ENOENT') return undefined;
    const reason = error instanceof Error ? error.message : String(error);
    throw unusable(path, `it cannot be read (${reason}).`, error, [], 'Check the path and its permissions.');
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    // The parser's message quotes the text around the fault, which may be part of a token.
    throw unusable(
      path,
      `it is not valid JSON (${Buffer.byteLength(text)} bytes); it may have been cut short or edited.`,
    );
  }
  const header = z.looseObject({ format: z.unknown(), version: z.unknown() }).safeParse(document);
  if (!header.success || header.data.format !== SNAPSHOT_FORMAT) {
    throw unusable(
      path,
      `it is not an emulator snapshot (it has no "format": "${SNAPSHOT_FORMAT}"), so it belongs to something else.`,
    );
  }
  if (header.data.version !== SNAPSHOT_VERSION) {
    throw unusable(
      path,
      `it has snapshot version ${JSON.stringify(header.data.version) ?? 'none'}, and this emulator reads version ${SNAPSHOT_VERSION}.`,
    );
  }
  const outcome = parseWith(emulatorSnapshotSchema, document);
  if (outcome.success) return outcome.value;
  const lines = outcome.problems.map((problem) => `  - ${problem.field}: ${problem.message}`);
  throw unusable(path, `it is corrupt:\n${lines.join('\n')}`, undefined, outcome.problems);
}

/**
 * The JSON text of a list that grows at its end and loses entries at its start (the call log),
 * kept in one buffer: a snapshot then copies it in one piece, and no entry is encoded twice.
 */
export class JsonListBytes {
  private buffer = Buffer.alloc(0);
  private end = 0;
  /** Where each entry's JSON starts (after its comma). */
  private offsets: number[] = [];

  /** Appends an entry, given as its JSON text. */
  push(json: string): void {
    const separator = this.offsets.length > 0 ? 1 : 0;
    const length = Buffer.byteLength(json);
    if (this.end + separator + length > this.buffer.length) this.grow(separator + length);
    if (separator) this.buffer[this.end++] = 0x2c;
    this.offsets.push(this.end);
    this.end += this.buffer.write(json, this.end);
  }

  /** Drops the oldest entry. */
  shift(): void {
    this.offsets.shift();
  }

  clear(): void {
    this.buffer = Buffer.alloc(0);
    this.end = 0;
    this.offsets = [];
  }

  /** The entries, comma-separated, without brackets; later pushes never change these bytes. */
  bytes(): Buffer {
    const first = this.offsets[0];
    return first === undefined ? Buffer.alloc(0) : this.buffer.subarray(first, this.end);
  }

  /** Moves the live entries to a new buffer with room for `more` bytes and as much again. */
  private grow(more: number): void {
    const first = this.offsets[0] ?? this.end;
    const live = this.end - first;
    const buffer = Buffer.allocUnsafe(Math.max(64 * 1024, 2 * (live + more)));
    this.buffer.copy(buffer, 0, first, this.end);
    this.buffer = buffer;
    this.end = live;
    this.offsets = this.offsets.map((offset) => offset - first);
  }
}

/** How a SnapshotWriter paces its writes; each one copies the whole state. */
export interface SnapshotPacing {
  /**
   * Least time from the end of one write to the start of the next background write. A killed
   * process loses at most about this long of the changes that are not saved at once.
   * @default 0 (the next turn of the event loop)
   */
  readonly spacingMs?: number;
  /**
   * After a synchronous write, saveSoon() waits this many times as long as that write took, and
   * every saveSoon() of the wait shares the next write: however large the state grows,
   * synchronous writes then take at most 1/(factor + 1) of the time.
   * @default 0 (the end of the current turn of the event loop)
   */
  readonly groupFactor?: number;
  /** The longest saveSoon() waits for others to share its write. @default 100 */
  readonly maxGroupWaitMs?: number;
}

/**
 * Saves snapshots of a running emulator to one file, always by writing a temporary file and
 * renaming it over the old one, so a reader (or a restart after a crash) sees a whole snapshot.
 *
 * markDirty() coalesces: at most one asynchronous write is in flight, and when it lands the latest
 * state is written once more (after `spacingMs`) if anything changed meanwhile. saveNow() writes
 * synchronously, for changes a client must never be able to repeat after a crash; saveSoon() does
 * the same a little later, in one write for every saveSoon() asked for until then (a group
 * commit). An asynchronous write that was serialised earlier never renames over a newer
 * synchronous one.
 */
export class SnapshotWriter {
  private dirty = false;
  private draining: Promise<void> | null = null;
  /** The saveSoon() write still to come; `write` does it at once. */
  private group: { readonly saved: Promise<Error | null>; readonly write: () => void } | null = null;
  private written = 0;
  private committed = 0;
  private closed = false;
  private closing = false;
  private lastError: unknown = null;
  /** performance.now() when the last write of either kind ended. */
  private lastWriteEnd = Number.NEGATIVE_INFINITY;
  /** How long the last synchronous write took, in ms. */
  private lastSyncCost = 0;
  /** Ends the pause before a background write early (close() does not wait it out). */
  private hurry: (() => void) | null = null;
  private readonly pacing: Required<SnapshotPacing>;

  constructor(
    readonly path: string,
    private readonly serialize: () => string | Uint8Array,
    private readonly warn: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
    pacing: SnapshotPacing = {},
  ) {
    this.pacing = { spacingMs: 0, groupFactor: 0, maxGroupWaitMs: 100, ...pacing };
  }

  /**
   * Creates the folder, removes temporary files that a killed emulator left behind and saves the
   * starting point. Throws when any of it fails, and then saves nothing later.
   */
  start(): void {
    try {
      const folder = dirname(this.path);
      mkdirSync(folder, { recursive: true });
      const prefix = `${basename(this.path)}.tmp-`;
      for (const name of readdirSync(folder)) {
        if (name.startsWith(prefix)) rmSync(join(folder, name), { force: true });
      }
      this.writeSync();
    } catch (error) {
      this.closed = true;
      throw error;
    }
  }

  /** Schedules a save of the state as it will be once the current turn of the event loop ends. */
  markDirty(): void {
    if (this.closed) return;
    this.dirty = true;
    this.draining ??= this.drain();
  }

  /** Saves the current state before returning; answers the error instead of throwing it. */
  saveNow(): Error | null {
    if (this.closed) return null;
    try {
      this.writeSync();
      this.succeeded();
      return null;
    } catch (error) {
      this.failed(error);
      this.markDirty();
      return error instanceof Error ? error : new Error(String(error));
    }
  }

  /**
   * Saves synchronously at the end of this turn of the event loop, or later as `groupFactor`
   * says, in one write shared by every saveSoon() until then: the snapshot holds all of their
   * changes. Resolves with what saveNow() answered, once the file is renamed into place.
   */
  saveSoon(): Promise<Error | null> {
    if (this.closed) return Promise.resolve(null);
    if (this.group !== null) return this.group.saved;
    let write = () => {};
    const saved = new Promise<Error | null>((resolve) => {
      write = () => {
        clearTimeout(timer);
        if (this.group?.saved !== saved) return;
        this.group = null;
        resolve(this.saveNow());
      };
    });
    const wait = Math.min(
      this.lastWriteEnd + this.lastSyncCost * this.pacing.groupFactor - performance.now(),
      this.pacing.maxGroupWaitMs,
    );
    // Without a wait, still after this turn: the saves asked for in it share the write.
    const timer = wait > 0 ? setTimeout(write, wait) : undefined;
    if (wait <= 0) setImmediate(write);
    this.group = { saved, write };
    return saved;
  }

  /** The saveSoon() write still to come, if any: an answer that may have seen its changes waits for it. */
  get pendingSave(): Promise<Error | null> | null {
    return this.group?.saved ?? null;
  }

  /** Writes the final snapshot, stops accepting changes and resolves once it is on disk. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closing = true;
    this.group?.write();
    this.hurry?.();
    this.markDirty();
    while (this.draining) await this.draining;
    this.closed = true;
    if (this.lastError !== null) {
      const reason = this.lastError instanceof Error ? this.lastError.message : String(this.lastError);
      throw new EmulatorConfigError(
        `Could not save the emulator's state to ${this.path}: ${reason}. The file holds the last snapshot that was saved.`,
        [],
        { cause: this.lastError },
      );
    }
  }

  private async drain(): Promise<void> {
    try {
      // Lets every change of the current turn land first, so that they share one write.
      await new Promise<void>((resolve) => setImmediate(resolve));
      while (this.dirty) {
        await this.pause();
        if (this.group !== null) {
          // Its write takes these changes too. Written earlier, a change that waits for that write
          // would be on disk unanswered: a client killed meanwhile would repeat it after a restart.
          await this.group.saved;
          continue;
        }
        this.dirty = false;
        const sequence = ++this.written;
        const temporary = this.temporaryPath(sequence);
        try {
          await writeFile(temporary, this.serialize(), { mode: 0o600 });
          // Renamed synchronously: no synchronous save can slip in between the check and the rename.
          if (sequence > this.committed) {
            renameSync(temporary, this.path);
            this.committed = sequence;
          } else {
            await rm(temporary, { force: true });
          }
          this.succeeded();
        } catch (error) {
          await rm(temporary, { force: true }).catch(() => undefined);
          this.failed(error);
        }
        this.lastWriteEnd = performance.now();
      }
    } finally {
      this.draining = null;
    }
  }

  /** Waits until `spacingMs` have passed since the last write, unless close() is waiting. */
  private async pause(): Promise<void> {
    const remaining = this.lastWriteEnd + this.pacing.spacingMs - performance.now();
    if (remaining <= 0 || this.closing) return;
    await new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.hurry = null;
        resolve();
      };
      const timer = setTimeout(wake, remaining);
      this.hurry = wake;
    });
  }

  private writeSync(): void {
    const started = performance.now();
    this.dirty = false;
    const sequence = ++this.written;
    const temporary = this.temporaryPath(sequence);
    try {
      writeFileSync(temporary, this.serialize(), { mode: 0o600 });
      renameSync(temporary, this.path);
      this.committed = sequence;
    } catch (error) {
      rmSync(temporary, { force: true });
      throw error;
    }
    this.lastWriteEnd = performance.now();
    this.lastSyncCost = this.lastWriteEnd - started;
  }

  private temporaryPath(sequence: number): string {
    return `${this.path}.tmp-${process.pid}-${sequence}`;
  }

  private succeeded(): void {
    if (this.lastError !== null) this.warn(`svc-dsr emulator: saving its state to ${this.path} works again`);
    this.lastError = null;
  }

  private failed(error: unknown): void {
    if (this.lastError === null) {
      const reason = error instanceof Error ? error.message : String(error);
      this.warn(
        `svc-dsr emulator: cannot save its state to ${this.path}: ${reason}; retrying on the next change`,
      );
    }
    this.lastError = error;
  }
}
