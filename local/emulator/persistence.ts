/**
 * The emulator's state on disk: a snapshot file written atomically and paced, read back on start,
 * so a restarted emulator has the users, exports and calls it had. The file's layout and its checks
 * are in snapshot-schema.ts.
 */
import { mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';
import { EmulatorConfigError, parseWith } from './config-file.ts';
import { unknownKeys } from './rules.ts';
import {
  type EmulatorSnapshot,
  emulatorSnapshotSchema,
  SNAPSHOT_FORMAT,
  SNAPSHOT_VERSION,
} from './snapshot-schema.ts';

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
  const sites = await loadSnapshotSites(path);
  if (sites === undefined) return undefined;
  const [only, ...others] = sites;
  if (only === undefined || others.length > 0) {
    throw unusable(
      path,
      `it holds ${sites.length} sites, and this reader takes one.`,
      undefined,
      [],
      'Read it with loadSnapshotSites().',
    );
  }
  return only;
}

/**
 * Reads and validates a persist file of one site or of several (a `sites` list of one-site
 * snapshots under the same format and version); undefined when it does not exist yet. Errors as
 * loadSnapshotFile's, and duplicate spot ids are refused.
 */
export async function loadSnapshotSites(path: string): Promise<EmulatorSnapshot[] | undefined> {
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
  const outcome = Object.hasOwn(header.data, 'sites')
    ? parseWith(multiSiteSnapshotSchema, document)
    : parseWith(
        emulatorSnapshotSchema.transform((site) => ({ sites: [site] })),
        document,
      );
  if (outcome.success) return outcome.value.sites;
  const lines = outcome.problems.map((problem) => `  - ${problem.field}: ${problem.message}`);
  throw unusable(path, `it is corrupt:\n${lines.join('\n')}`, undefined, outcome.problems);
}

/** A persist file of several sites: each site's snapshot as a one-site file holds it. */
const multiSiteSnapshotSchema = z
  .strictObject(
    {
      format: z.literal(SNAPSHOT_FORMAT),
      version: z.literal(SNAPSHOT_VERSION),
      savedAt: z.string(),
      sites: z.array(emulatorSnapshotSchema).min(1, { error: 'must hold at least one site' }),
    },
    { error: unknownKeys(['format', 'version', 'savedAt', 'sites']) },
  )
  .superRefine((document, context) => {
    const seen = new Map<string, number>();
    document.sites.forEach((site, index) => {
      const earlier = seen.get(site.spotId);
      if (earlier === undefined) seen.set(site.spotId, index);
      else
        context.addIssue({
          code: 'custom',
          path: ['sites', index, 'spotId'],
          message: `duplicates sites[${earlier}].spotId; each site is saved once`,
        });
    });
  });

/**
 * The persist file's bytes for several sites, from each site's own snapshot bytes; one site is
 * saved in the one-site form, byte for byte as before.
 */
export function sitesSnapshotBytes(sites: readonly Buffer[], savedAt: string): Buffer {
  const [only, ...others] = sites;
  if (only !== undefined && others.length === 0) return only;
  const head = JSON.stringify({ format: SNAPSHOT_FORMAT, version: SNAPSHOT_VERSION, savedAt });
  const parts: Buffer[] = [Buffer.from(`${head.slice(0, -1)},"sites":[`)];
  sites.forEach((site, index) => {
    if (index > 0) parts.push(Buffer.from(','));
    parts.push(site);
  });
  parts.push(Buffer.from(']}'));
  return Buffer.concat(parts);
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
