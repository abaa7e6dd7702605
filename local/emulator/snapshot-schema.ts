/**
 * The snapshot file's layout: what a saved emulator holds, checked with zod down to every cross
 * reference, so a restore never builds an emulator from a file that is cut short, edited or foreign.
 */
import { z } from 'zod';
import { MAX_CALLS } from './calls.ts';
import { FAULT_KINDS, faultProfileSchema, LIMIT_ANSWERS, resolveFaults } from './faults.ts';
import { NOTIFICATION_VALUES, roleSchema, unknownKeys } from './rules.ts';
import { emulatorStateSchema } from './state.ts';
import { entryMatches, MAX_STREAM_ENTRY_BYTES } from './zip.ts';

/** The value of a snapshot file's `format` key: what tells it apart from any other JSON file. */
export const SNAPSHOT_FORMAT = 'svc-dsr-emulator-snapshot';
/** The snapshot layout this emulator writes and reads. */
export const SNAPSHOT_VERSION = 1;

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
