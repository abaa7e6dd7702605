import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { SnapshotWriter } from '#local/emulator/persistence';
import {
  EmulatorConfigError,
  type EmulatorOptions,
  emulatorControl,
  type RunningEmulator,
  startEmulator,
} from '#local/emulator/server';
import { emulatorSnapshotSchema } from '#local/emulator/snapshot-schema';
import {
  EXPORT_TOKEN,
  exportUntilLink,
  getJson,
  postJson,
  putJson,
  query,
  retrievalSchema,
  SPOT_ID,
  SSO_TOKEN,
  ssoHeaders,
  testOptions,
} from './helpers.ts';

// Holding asynchronous writes shows what only the synchronous saves put on disk: what a kill -9 at
// that moment would leave behind.
const asyncWrites = vi.hoisted(() => ({ held: false, waiting: [] as (() => void)[], finished: 0 }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...actual,
    writeFile: async (...args: Parameters<typeof actual.writeFile>) => {
      if (asyncWrites.held) await new Promise<void>((resolve) => asyncWrites.waiting.push(resolve));
      await actual.writeFile(...args);
      asyncWrites.finished += 1;
    },
  };
});

function releaseAsyncWrites(): void {
  asyncWrites.held = false;
  for (const resolve of asyncWrites.waiting.splice(0)) resolve();
}

const REPO = fileURLToPath(new URL('../../../../', import.meta.url));
const CHILD = fileURLToPath(new URL('./fixtures/persisted-emulator.ts', import.meta.url));

let folder: string;
let file: string;
const started: RunningEmulator[] = [];

beforeEach(async () => {
  folder = await mkdtemp(join(tmpdir(), 'emulator-persist-'));
  file = join(folder, 'platform.json');
});

afterEach(async () => {
  releaseAsyncWrites();
  for (const emulator of started.splice(0)) await emulator.close().catch(() => undefined);
  await rm(folder, { recursive: true, force: true });
});

async function start(options: EmulatorOptions = {}, persistPath = file): Promise<RunningEmulator> {
  const emulator = await startEmulator({ ...testOptions, persistPath, ...options });
  started.push(emulator);
  return emulator;
}

const exportCredentials = { access_token: EXPORT_TOKEN, spot_id: SPOT_ID };
const statusSchema = z.object({ status: z.string(), link: z.string().optional() });
const commentsSchema = z.object({
  comments: z.array(z.object({ id: z.string(), author_svc_user_id: z.string() }).passthrough()),
});
const usersSchema = z.object({
  users: z.array(z.object({ svc_user_id: z.string(), user_name: z.string(), registered: z.boolean() })),
});
const callsSchema = z.object({
  calls: z.array(z.object({ seq: z.number(), method: z.string(), path: z.string() }).passthrough()),
  dropped: z.number(),
});

const retrieve = (url: string, primaryKey: string) =>
  getJson(`${url}/sso/v1/user/${primaryKey}`, { headers: ssoHeaders });
const deleteUser = (url: string, primaryKey: string) =>
  getJson(`${url}/sso/v1/user/${primaryKey}`, { method: 'DELETE', headers: ssoHeaders });
const startExport = (url: string, userId: string) =>
  postJson(`${url}/gdpr/export`, { ...exportCredentials, user_id: userId });
const exportStatus = async (url: string, id: string) =>
  statusSchema.parse((await getJson(`${url}/gdpr/export/status/${id}?${query(exportCredentials)}`)).body);
const comments = async (url: string) =>
  commentsSchema.parse((await getJson(`${url}/_emulator/comments`)).body).comments;
const guests = async (url: string) =>
  usersSchema
    .parse((await getJson(`${url}/_emulator/users`)).body)
    .users.filter((user) => !user.registered)
    .map(({ svc_user_id, user_name }) => ({ svc_user_id, user_name }));
const calls = async (url: string) => callsSchema.parse((await getJson(`${url}/_emulator/calls`)).body).calls;
const saved = async (path = file) => emulatorSnapshotSchema.parse(JSON.parse(await readFile(path, 'utf8')));

async function download(link: string): Promise<{ status: number; bytes: Buffer }> {
  const response = await fetch(link);
  return { status: response.status, bytes: Buffer.from(await response.arrayBuffer()) };
}

async function startError(options: EmulatorOptions): Promise<EmulatorConfigError> {
  try {
    const emulator = await startEmulator(options);
    started.push(emulator);
  } catch (error) {
    if (error instanceof EmulatorConfigError) return error;
    throw error;
  }
  throw new Error('startEmulator did not reject');
}

describe('persistence across a restart', () => {
  it('serves the same platform after close and a restart on a new port', async () => {
    // Prepare
    const first = await start({ faults: { export_ready_after_polls: 1, export_padding_bytes: 5_000 } });
    expect((await deleteUser(first.url, 'pk-alice')).status).toBe(200);
    const relinked = await comments(first.url);
    const completed = await exportUntilLink(first.url, 'u_bob');
    const archive = await download(completed.link);
    expect(await startExport(first.url, 'u_carol')).toEqual({ status: 200, body: { id: 2 } });
    expect((await exportStatus(first.url, '2')).status).toBe('pending');
    const exportsBefore = emulatorControl(first).exports();
    const callsBefore = await calls(first.url);
    await first.close();

    // Act
    const second = await start({ state: {} });

    // Assess
    expect(emulatorControl(second).exports()).toEqual(exportsBefore);
    expect((await retrieve(second.url, 'pk-alice')).status).toBe(404);
    expect((await deleteUser(second.url, 'pk-alice')).status).toBe(404);
    expect((await retrieve(second.url, 'pk-bob')).status).toBe(200);
    expect(await comments(second.url)).toEqual(relinked);
    const status = await exportStatus(second.url, completed.id);
    const linkPath = new URL(completed.link).pathname;
    expect(status).toEqual({ status: 'completed', link: `${second.url}${linkPath}` });
    const again = await download(`${second.url}${linkPath}`);
    expect(again.status).toBe(200);
    expect(again.bytes.equals(archive.bytes)).toBe(true);
    expect((await exportStatus(second.url, '2')).status).toBe('completed');
    expect(await startExport(second.url, 'u_carol')).toEqual({ status: 200, body: { id: 3 } });
    const callsAfter = await calls(second.url);
    expect(callsAfter.slice(0, callsBefore.length)).toEqual(callsBefore);
    expect(callsAfter.map((call) => call.seq)).toEqual(callsAfter.map((_, index) => index + 1));
    expect(callsAfter.length).toBe(callsBefore.length + 7);
  });

  it('continues the seeded name stream, so later names are the ones a single run would have made', async () => {
    // Prepare
    const afterRestart = async (url: string) => {
      const created = await postJson(
        `${url}/sso/v1/user?${query({ spot_id: SPOT_ID, primary_key: 'pk-erin', display_name: 'Erin' })}`,
        {},
        ssoHeaders,
      );
      await deleteUser(url, 'pk-bob');
      return { created: retrievalSchema.parse(created.body).user.user_name, guests: await guests(url) };
    };
    const reference = await startEmulator({ ...testOptions, faults: { seed: 11 } });
    started.push(reference);
    await deleteUser(reference.url, 'pk-alice');
    const expected = await afterRestart(reference.url);
    const first = await start({ faults: { seed: 11 } });
    await deleteUser(first.url, 'pk-alice');
    await first.close();

    // Act
    const second = await start();
    const actual = await afterRestart(second.url);

    // Assess
    expect(expected.guests).toHaveLength(2);
    expect(expected.created).toMatch(/^Erin[a-z0-9]{6}$/);
    expect(actual).toEqual(expected);
  });

  it('lets a given fault profile replace the saved one and keeps the saved tokens and baseline', async () => {
    // Prepare
    const first = await start({ faults: { seed: 5, export_ready_after_polls: 0 } });
    await deleteUser(first.url, 'pk-alice');
    await first.close();

    // Act
    const second = await startEmulator({
      persistPath: file,
      faults: { seed: 5, export_ready_after_polls: 3 },
    });
    started.push(second);

    // Assess
    expect(second.ssoAccessToken).toBe(SSO_TOKEN);
    expect(second.exportToken).toBe(EXPORT_TOKEN);
    expect(second.spotId).toBe(SPOT_ID);
    expect((await retrieve(second.url, 'pk-alice')).status).toBe(404);
    await fetch(`${second.url}/_emulator/reset`, { method: 'POST' });
    expect((await getJson(`${second.url}/_emulator/faults`)).body).toMatchObject({
      seed: 5,
      export_ready_after_polls: 3,
    });
    expect((await retrieve(second.url, 'pk-alice')).status).toBe(200);
  });

  it('saves control API changes soon after they happen, and keeps them across a restart', async () => {
    // Prepare
    const first = await start({ faults: { export_ready_after_polls: 0 } });
    const completed = await exportUntilLink(first.url, 'u_bob');

    // Act
    await fetch(`${first.url}/_emulator/exports/${completed.id}/expire`, { method: 'POST' });
    await putJson(`${first.url}/_emulator/activity`, { enabled: false });
    await putJson(`${first.url}/_emulator/faults`, { seed: 9, export_ready_after_polls: 4 });

    // Assess
    await vi.waitFor(async () => {
      const snapshot = await saved();
      expect(snapshot.activityEnabled).toBe(false);
      expect(snapshot.faults.export_ready_after_polls).toBe(4);
    });
    await first.close();
    const second = await start();
    expect((await getJson(`${second.url}/_emulator/activity`)).body).toEqual({ enabled: false });
    expect((await getJson(`${second.url}/_emulator/faults`)).body).toMatchObject({
      seed: 9,
      export_ready_after_polls: 4,
    });
    expect((await download(completed.link.replace(first.url, second.url))).status).toBe(410);
  });

  it('writes the last change before close() resolves', async () => {
    // Prepare
    const emulator = await start();
    await Promise.all(Array.from({ length: 20 }, () => retrieve(emulator.url, 'pk-bob')));

    // Act
    emulatorControl(emulator).setActivityEnabled(false);
    await emulator.close();

    // Assess
    const snapshot = await saved();
    expect(snapshot.activityEnabled).toBe(false);
    expect(snapshot.calls).toHaveLength(20);
    expect(await readdir(folder)).toEqual(['platform.json']);
  });
});

describe('persistence when the emulator is killed', () => {
  it('has a deletion and an export start on disk before their answers, while polls may still be in flight', async () => {
    // Prepare
    const emulator = await start({ faults: { export_ready_after_polls: 1 } });
    asyncWrites.held = true;

    // Act
    expect((await deleteUser(emulator.url, 'pk-alice')).status).toBe(200);
    expect(await startExport(emulator.url, 'u_bob')).toEqual({ status: 200, body: { id: 1 } });
    expect((await exportStatus(emulator.url, '1')).status).toBe('pending');
    const crashed = join(folder, 'crashed.json');
    copyFileSync(file, crashed);

    // Assess
    const onDisk = await saved(crashed);
    expect(onDisk.platform.users.map((user) => user.svcUserId)).not.toContain('u_alice');
    expect(onDisk.exports.map((record) => [record.publicId, record.polls])).toEqual([['1', 0]]);
    expect(onDisk.calls.map((call) => call.method)).toEqual(['DELETE', 'POST']);
    releaseAsyncWrites();
    const restarted = await start({}, crashed);
    expect((await retrieve(restarted.url, 'pk-alice')).status).toBe(404);
    expect(await startExport(restarted.url, 'u_carol')).toEqual({ status: 200, body: { id: 2 } });
  });

  it('keeps a DELETE and an export start when the process is killed with SIGKILL right after the answers', async () => {
    // Prepare
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, file], {
      cwd: REPO,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = once(child, 'exit');
    try {
      const [line] = await Promise.race([
        once(createInterface({ input: child.stdout }), 'line'),
        exited.then(() => Promise.reject(new Error('the emulator child exited before printing its url'))),
      ]);
      const { url } = z.object({ url: z.string() }).parse(JSON.parse(String(line)));
      expect(await startExport(url, 'u_bob')).toEqual({ status: 200, body: { id: 1 } });

      // Act
      expect((await deleteUser(url, 'pk-alice')).status).toBe(200);
      child.kill('SIGKILL');
      const [, signal] = await exited;
      expect(signal).toBe('SIGKILL');
    } finally {
      child.kill('SIGKILL');
    }

    // Assess
    const restarted = await start();
    const before = await calls(restarted.url);
    expect(
      before.filter((call) => call.method === 'DELETE' && call.path === '/sso/v1/user/pk-alice'),
    ).toHaveLength(1);
    expect(before.filter((call) => call.method === 'POST' && call.path === '/gdpr/export')).toHaveLength(1);
    expect((await retrieve(restarted.url, 'pk-alice')).status).toBe(404);
    expect((await deleteUser(restarted.url, 'pk-alice')).status).toBe(404);
    expect((await exportStatus(restarted.url, '1')).status).toBe('pending');
    expect(await startExport(restarted.url, 'u_carol')).toEqual({ status: 200, body: { id: 2 } });
  });
});

describe('persist file problems', () => {
  it('refuses a file that is not JSON, naming the file, and never quotes a token from it', async () => {
    // Prepare
    const first = await start();
    await first.close();
    const text = await readFile(file, 'utf8');
    await writeFile(file, text.slice(0, text.indexOf(SSO_TOKEN) + SSO_TOKEN.length));

    // Act
    const error = await startError({ persistPath: file });

    // Assess
    expect(error.message).toContain(file);
    expect(error.message).toContain('not valid JSON');
    expect(error.message).toContain('Delete the file to start fresh');
    expect(error.message).not.toContain(SSO_TOKEN);
  });

  it('refuses a JSON file that is not a snapshot', async () => {
    // Prepare
    await writeFile(file, JSON.stringify(testOptions.state));

    // Act
    const error = await startError({ persistPath: file });

    // Assess
    expect(error.message).toContain(`${file} cannot be used: it is not an emulator snapshot`);
    expect(error.message).toContain('Delete the file');
  });

  it('refuses a snapshot of another version', async () => {
    // Prepare
    const first = await start();
    await first.close();
    const document = JSON.parse(await readFile(file, 'utf8'));
    await writeFile(file, JSON.stringify({ ...document, version: 2 }));

    // Act
    const error = await startError({ persistPath: file });

    // Assess
    expect(error.message).toContain('snapshot version 2');
  });

  it('lists each inconsistent field of a corrupt snapshot', async () => {
    // Prepare
    const first = await start({ faults: { export_ready_after_polls: 0 } });
    await exportUntilLink(first.url, 'u_bob');
    await first.close();
    const snapshot = await saved();
    const [comment] = snapshot.platform.comments;
    const [record] = snapshot.exports;
    const [entry] = record?.files ?? [];
    if (!comment || !entry) throw new Error('the saved state has no comment or export file');
    comment.authorId = 'u_nobody';
    entry.deflated = Buffer.from('not the archive entry').toString('base64');
    await writeFile(file, JSON.stringify({ ...snapshot, ssoAccessToken: 5 }));

    // Act
    const error = await startError({ persistPath: file });

    // Assess
    expect(error.problems.map((problem) => problem.field)).toEqual(['ssoAccessToken']);
    await writeFile(file, JSON.stringify(snapshot));
    const inconsistent = await startError({ persistPath: file });
    expect(inconsistent.problems.map((problem) => problem.field)).toEqual([
      'platform.comments[0].authorId',
      'exports[0].files[0].deflated',
    ]);
    expect(inconsistent.message).toContain(`${file} cannot be used: it is corrupt`);
    expect(inconsistent.message).not.toContain(EXPORT_TOKEN);
  });

  it('refuses a spot id other than the saved one', async () => {
    // Prepare
    const first = await start();
    await first.close();

    // Act
    const error = await startError({ persistPath: file, spotId: 'sp_other' });

    // Assess
    expect(error.message).toContain(`saved for spot_id "${SPOT_ID}", not "sp_other"`);
  });

  it('refuses a path that cannot be read, telling to check the path', async () => {
    // Prepare
    await writeFile(join(folder, 'a-file'), 'x');
    const path = join(folder, 'a-file', 'platform.json');

    // Act
    const error = await startError({ ...testOptions, persistPath: path });

    // Assess
    expect(error.message).toContain(`${path} cannot be used: it cannot be read`);
    expect(error.message).toContain('Check the path');
  });

  it('removes temporary files that a killed emulator left behind', async () => {
    // Prepare
    await writeFile(`${file}.tmp-4242-7`, '{');

    // Act
    await start();

    // Assess
    expect(await readdir(folder)).toEqual(['platform.json']);
  });
});

describe('SnapshotWriter', () => {
  it('never lets an older asynchronous write replace a newer synchronous save', async () => {
    // Prepare
    let version = 0;
    const writer = new SnapshotWriter(file, () => `v${++version}`);
    writer.markDirty();
    asyncWrites.held = true;
    await vi.waitFor(() => expect(asyncWrites.waiting).toHaveLength(1));
    const finished = asyncWrites.finished;

    // Act
    expect(writer.saveNow()).toBeNull();
    releaseAsyncWrites();

    // Assess
    await vi.waitFor(() => expect(asyncWrites.finished).toBe(finished + 1));
    await vi.waitFor(async () => expect(await readdir(folder)).toEqual(['platform.json']));
    expect(await readFile(file, 'utf8')).toBe('v2');
    await writer.close();
    expect(await readFile(file, 'utf8')).toBe('v3');
  });

  it('throws from start() when the file cannot be written, and then saves nothing later', async () => {
    // Prepare
    await writeFile(join(folder, 'a-file'), 'x');
    const warnings: string[] = [];
    const writer = new SnapshotWriter(
      join(folder, 'a-file', 'platform.json'),
      () => '{}',
      (line) => warnings.push(line),
    );

    // Act
    const starting = () => writer.start();

    // Assess
    expect(starting).toThrow(/ENOTDIR|EEXIST/);
    writer.markDirty();
    await writer.close();
    expect(warnings).toEqual([]);
    expect(await readdir(folder)).toEqual(['a-file']);
  });

  it('warns once when saving fails and makes close() reject naming the file', async () => {
    // Prepare
    const warnings: string[] = [];
    const path = join(folder, 'gone', 'platform.json');
    const writer = new SnapshotWriter(
      path,
      () => '{}',
      (line) => warnings.push(line),
    );

    // Act
    const error = writer.saveNow();
    writer.markDirty();
    const closing = writer.close();

    // Assess
    expect(error).toBeInstanceOf(Error);
    await expect(closing).rejects.toThrow(`Could not save the emulator's state to ${path}`);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(path);
  });
});

describe('SnapshotWriter.saveSoon', () => {
  /** Blocks the thread, so that a write takes a known time. */
  const blockFor = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

  /** A started writer whose saves take 20 ms and which groups saveSoon() calls for 50 times that. */
  function slowGroupingWriter(): SnapshotWriter {
    let version = 0;
    const writer = new SnapshotWriter(
      file,
      () => {
        blockFor(20);
        return `v${++version}`;
      },
      undefined,
      { groupFactor: 50, maxGroupWaitMs: 60_000 },
    );
    writer.start();
    return writer;
  }

  it('writes once for every saveSoon() of a turn, and resolves only when that write is on disk', async () => {
    // Prepare
    let version = 0;
    const writer = new SnapshotWriter(file, () => `v${++version}`);
    writer.start();

    // Act
    const first = writer.saveSoon();
    const second = writer.saveSoon();
    const pending = writer.pendingSave;
    const onDiskBefore = readFileSync(file, 'utf8');

    // Assess
    expect(second).toBe(first);
    expect(pending).toBe(first);
    expect(onDiskBefore).toBe('v1');
    expect(await first).toBeNull();
    expect(await readFile(file, 'utf8')).toBe('v2');
    expect(writer.pendingSave).toBeNull();
    await writer.close();
  });

  it('waits groupFactor times the last synchronous write, and close() writes the waiting group at once', async () => {
    // Prepare
    const writer = slowGroupingWriter();

    // Act
    const saved = writer.saveSoon();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const onDiskWhileWaiting = await readFile(file, 'utf8');
    const closed = performance.now();
    await writer.close();

    // Assess
    expect(onDiskWhileWaiting).toBe('v1');
    expect(await saved).toBeNull();
    expect(await readFile(file, 'utf8')).toBe('v3');
    expect(performance.now() - closed).toBeLessThan(500);
  });

  it('holds background writes while a saveSoon() waits, so no change is on disk before its answer', async () => {
    // Prepare
    const writer = slowGroupingWriter();

    // Act
    writer.markDirty();
    const saved = writer.saveSoon();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const onDiskWhileWaiting = await readFile(file, 'utf8');
    await writer.close();

    // Assess
    expect(onDiskWhileWaiting).toBe('v1');
    expect(await saved).toBeNull();
  });

  it('spaces background writes by spacingMs, and close() does not wait out the spacing', async () => {
    // Prepare
    let version = 0;
    const writer = new SnapshotWriter(file, () => `v${++version}`, undefined, { spacingMs: 60_000 });
    writer.start();

    // Act
    writer.markDirty();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const onDiskWhileSpaced = await readFile(file, 'utf8');
    const closed = performance.now();
    await writer.close();

    // Assess
    expect(onDiskWhileSpaced).toBe('v1');
    expect(await readFile(file, 'utf8')).toBe('v2');
    expect(performance.now() - closed).toBeLessThan(500);
  });
});

describe('persistence of a busy emulator', () => {
  it('answers concurrent DELETEs only once a snapshot holding each of them is on disk', async () => {
    // Prepare
    const emulator = await start();
    asyncWrites.held = true;

    // Act
    const answers = await Promise.all(
      ['pk-alice', 'pk-bob', 'pk-carol'].map((key) => deleteUser(emulator.url, key)),
    );
    const onDisk = await saved();

    // Assess
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200]);
    expect(onDisk.platform.users.filter((user) => user.registered)).toEqual([]);
    expect(onDisk.calls.map((call) => call.method)).toEqual(['DELETE', 'DELETE', 'DELETE']);
  });
});
