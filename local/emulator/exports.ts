/**
 * The platform's exports (docs/platform-api.md, endpoints 6 and 7, and the download link): each export from its
 * start through its polls, its link, its downloads and the link's expiry, the archive it serves, and
 * its form in a snapshot.
 */
import { randomBytes } from 'node:crypto';
import { snapshotExportFiles } from './archive.ts';
import type { ExportIdShape, ResolvedFaults } from './faults.ts';
import type { PlatformData, UserRecord } from './platform.ts';
import { pseudoRandomBytes, type Random } from './prng.ts';
import type { ExportSnapshot } from './snapshot-schema.ts';
import { type DeflatedEntry, exactSize, planZip, type ZipPlan } from './zip.ts';

export type ExportOutcome = 'completed' | 'failed';

/** What endpoint 6 answers, in the shape the fault profile's export_id_shape chose. */
export type ExportIdBody = number | string | Record<string, unknown>;

export interface ExportRecord {
  number: number;
  publicId: string;
  idBody: ExportIdBody;
  svcUserId: string;
  primaryKey: string | null;
  createdAt: number;
  readyAfterPolls: number;
  outcome: ExportOutcome;
  polls: number;
  linkToken: string | null;
  linkCreatedAt: number | null;
  linkExpiresAt: number | null;
  paddingBytes: number;
  /** The seed the padding entry is generated from (the profile's seed when the export started). */
  paddingSeed: number;
  /**
   * The four JSON entries as captured when the export started, already deflated; null once the
   * link has expired, when nothing can download them any more.
   */
  files: DeflatedEntry[] | null;
  /** The archive's length in bytes (its Content-Length), kept when the entries are dropped. */
  byteSize: number;
  downloads: number;
}

export type ExportStatusAnswer =
  | { status: 'pending' }
  | { status: 'failed' }
  | { status: 'completed'; link: string };

/** Exports as a snapshot saves them. */
export interface SavedExports {
  exportCounter: number;
  exports: ExportSnapshot[];
}

/** What the exports need from the emulator around them. */
export interface ExportHooks {
  readonly now: () => number;
  /**
   * Called after every change a snapshot must record; `durable` when a client must not be able to
   * repeat the change after a crash (an export start, a new download link).
   */
  readonly changed: (durable: boolean) => void;
}

/** Every export the platform started, by its public id and by its download link. */
export class ExportBook {
  private readonly records = new Map<string, ExportRecord>();
  private readonly downloads = new Map<string, ExportRecord>();
  private exportCounter = 0;
  /** Each export's snapshot JSON, made again after a change to the export. */
  private readonly savedBytes = new WeakMap<ExportRecord, Buffer>();

  /** No exports, or the exports a snapshot saved, with their links. */
  constructor(
    private readonly hooks: ExportHooks,
    saved?: SavedExports,
  ) {
    if (saved === undefined) return;
    for (const entry of saved.exports) {
      const record = restoredExport(entry);
      this.records.set(record.publicId, record);
      if (record.linkToken !== null) this.downloads.set(record.linkToken, record);
    }
    this.exportCounter = saved.exportCounter;
  }

  /**
   * Starts the next export of a user's data as the fault profile says: its id's shape, its padding,
   * its outcome (scripted, or drawn from `random` at the profile's failure rate).
   */
  start(user: UserRecord, data: PlatformData, faults: ResolvedFaults, random: Random): ExportRecord {
    this.exportCounter += 1;
    const number = this.exportCounter;
    const shape = faults.export_id_shape;
    const publicId = shape === 'bare_string' ? `exp_${number.toString(36).padStart(6, '0')}` : String(number);
    const paddingBytes = faults.export_padding_bytes;
    const paddingSeed = faults.seed;
    const files = snapshotExportFiles(data, user);
    // A scripted outcome (export_outcomes[n-1] for the n-th export) wins over the failure rate.
    const scripted = faults.export_outcomes[number - 1];
    const failed =
      scripted !== undefined
        ? scripted === 'failed'
        : faults.export_failure_rate > 0 && random.next() < faults.export_failure_rate;
    const record: ExportRecord = {
      number,
      publicId,
      idBody: exportIdBody(shape, number, publicId),
      svcUserId: user.svcUserId,
      primaryKey: user.primaryKey,
      createdAt: this.hooks.now(),
      readyAfterPolls: faults.export_ready_after_polls,
      outcome: failed ? 'failed' : 'completed',
      polls: 0,
      linkToken: null,
      linkCreatedAt: null,
      linkExpiresAt: null,
      paddingBytes,
      paddingSeed,
      files,
      downloads: 0,
      byteSize: exportZip(files, paddingBytes, paddingSeed).size,
    };
    this.records.set(publicId, record);
    this.hooks.changed(true);
    return record;
  }

  /**
   * Exports started and not yet downloaded, failed (as polled) or expired: what max_open_exports
   * caps. On the way it drops the entries of every export whose link has expired.
   */
  open(): number {
    const now = this.hooks.now();
    let open = 0;
    for (const record of this.records.values()) {
      const expired = record.linkExpiresAt !== null && now >= record.linkExpiresAt;
      if (expired) this.dropArchive(record);
      else if (record.downloads === 0 && currentStatus(record) !== 'failed') open += 1;
    }
    return open;
  }

  find(publicId: string): ExportRecord | undefined {
    return this.records.get(publicId);
  }

  /**
   * Counts a status poll and answers it: pending for the first N polls, then the outcome. The first
   * completed answer makes the download link, valid for `linkTtlSeconds` and served under `baseUrl`.
   */
  poll(record: ExportRecord, linkTtlSeconds: number, baseUrl: string): ExportStatusAnswer {
    record.polls += 1;
    this.savedBytes.delete(record);
    this.hooks.changed(false);
    if (record.polls <= record.readyAfterPolls) return { status: 'pending' };
    if (record.outcome === 'failed') return { status: 'failed' };
    if (record.linkToken === null) {
      const token = randomBytes(24).toString('base64url');
      record.linkToken = token;
      record.linkCreatedAt = this.hooks.now();
      record.linkExpiresAt = record.linkCreatedAt + linkTtlSeconds * 1000;
      this.downloads.set(token, record);
      this.hooks.changed(true);
    }
    return { status: 'completed', link: `${baseUrl}/_downloads/${record.linkToken}.zip` };
  }

  /** The export behind a download link; an expired link's entries are dropped on the way. */
  findDownload(token: string): ExportRecord | undefined {
    const record = this.downloads.get(token);
    if (record?.linkExpiresAt != null && this.hooks.now() >= record.linkExpiresAt) this.dropArchive(record);
    return record;
  }

  /** Counts a download of an export's archive (HEAD requests do not count). */
  countDownload(record: ExportRecord): void {
    record.downloads += 1;
    this.savedBytes.delete(record);
    this.hooks.changed(false);
  }

  /** Makes an export's link expire now; undefined when unknown, false when it has no link yet. */
  expire(publicId: string): boolean | undefined {
    const record = this.records.get(publicId);
    if (!record) return undefined;
    if (record.linkExpiresAt === null) return false;
    record.linkExpiresAt = this.hooks.now();
    this.dropArchive(record);
    this.savedBytes.delete(record);
    this.hooks.changed(false);
    return true;
  }

  /** The exports as GET /_emulator/exports shows them. */
  view(): Record<string, unknown>[] {
    const now = this.hooks.now();
    return [...this.records.values()].map((record) => ({
      id: record.publicId,
      svc_user_id: record.svcUserId,
      primary_key: record.primaryKey,
      status: currentStatus(record),
      outcome: record.outcome,
      polls: record.polls,
      ready_after_polls: record.readyAfterPolls,
      created_at: new Date(record.createdAt).toISOString(),
      link_created_at: record.linkCreatedAt === null ? null : new Date(record.linkCreatedAt).toISOString(),
      link_expires_at: record.linkExpiresAt === null ? null : new Date(record.linkExpiresAt).toISOString(),
      link_expired: record.linkExpiresAt !== null && now >= record.linkExpiresAt,
      byte_size: record.byteSize,
      padding_bytes: record.paddingBytes,
      downloads: record.downloads,
    }));
  }

  /** The exports as a snapshot holds them; serialise it before the next change. */
  toSnapshot(): SavedExports {
    return { exportCounter: this.exportCounter, exports: [...this.records.values()].map(savedExport) };
  }

  /**
   * The text of toSnapshot()'s keys, as JSON.stringify writes them but without the braces, in
   * pieces for one Buffer.concat: an export's entry is made again only after it changed.
   */
  snapshotParts(): Uint8Array[] {
    const parts: Uint8Array[] = [Buffer.from(`"exportCounter":${this.exportCounter},"exports":[`)];
    let first = true;
    for (const record of this.records.values()) {
      if (!first) parts.push(COMMA);
      first = false;
      parts.push(this.exportBytes(record));
    }
    parts.push(Buffer.from(']'));
    return parts;
  }

  /** JSON.stringify(savedExport(record)) as UTF-8; every change to an export forgets it. */
  private exportBytes(record: ExportRecord): Buffer {
    let bytes = this.savedBytes.get(record);
    if (bytes === undefined) {
      const { files, ...fields } = record;
      bytes = exactSize(
        Buffer.concat([
          Buffer.from(`${JSON.stringify(fields).slice(0, -1)},"files":`),
          files === null ? NULL : filesBytes(files),
          Buffer.from('}'),
        ]),
      );
      this.savedBytes.set(record, bytes);
    }
    return bytes;
  }

  /** Forgets an expired export's entries: no link serves them any more (the record itself stays). */
  private dropArchive(record: ExportRecord): void {
    if (record.files === null) return;
    record.files = null;
    this.savedBytes.delete(record);
    this.hooks.changed(false);
  }
}

function currentStatus(record: ExportRecord): string {
  return record.polls <= record.readyAfterPolls ? 'pending' : record.outcome;
}

/**
 * An export's archive, planned for one download: the captured entries, plus padding regenerated
 * from its seed and size. Undefined once the entries are dropped (the link has expired).
 */
export function exportArchive(record: ExportRecord): ZipPlan | undefined {
  return record.files === null ? undefined : exportZip(record.files, record.paddingBytes, record.paddingSeed);
}

/** The archive: the captured JSON entries, plus padding regenerated from its seed and size. */
function exportZip(files: DeflatedEntry[], paddingBytes: number, paddingSeed: number): ZipPlan {
  return planZip(
    files,
    paddingBytes > 0
      ? [
          {
            name: 'padding.bin',
            size: paddingBytes,
            chunks: () => pseudoRandomBytes(paddingSeed, paddingBytes),
          },
        ]
      : [],
  );
}

const COMMA = Buffer.from(',');
const NULL = Buffer.from('null');

// Snapshot JSON of an export's entries, which are replaced (dropped), never changed.
const savedFiles = new WeakMap<DeflatedEntry[], Buffer>();

function filesBytes(files: DeflatedEntry[]): Buffer {
  let bytes = savedFiles.get(files);
  if (bytes === undefined) {
    bytes = exactSize(Buffer.from(JSON.stringify(files.map(savedFile))));
    savedFiles.set(files, bytes);
  }
  return bytes;
}

function savedExport(record: ExportRecord): ExportSnapshot {
  const { files, ...fields } = record;
  return { ...fields, files: files === null ? null : files.map(savedFile) };
}

function savedFile(file: DeflatedEntry): NonNullable<ExportSnapshot['files']>[number] {
  return { name: file.name, crc32: file.crc32, size: file.size, deflated: file.deflated.toString('base64') };
}

function restoredExport(saved: ExportSnapshot): ExportRecord {
  const files =
    saved.files?.map((file) => ({
      name: file.name,
      crc32: file.crc32,
      size: file.size,
      deflated: exactSize(Buffer.from(file.deflated, 'base64')),
    })) ?? null;
  const byteSize =
    saved.byteSize ?? (files === null ? 0 : exportZip(files, saved.paddingBytes, saved.paddingSeed).size);
  return { ...saved, files, byteSize };
}

function exportIdBody(shape: ExportIdShape, number: number, publicId: string): ExportIdBody {
  switch (shape) {
    case 'id_number':
      return { id: number };
    case 'id_string':
      return { id: publicId };
    case 'export_id':
      return { export_id: publicId };
    case 'exportId':
      return { exportId: publicId };
    case 'data.id':
      return { data: { id: publicId } };
    case 'bare_number':
      return number;
    case 'bare_string':
      return publicId;
  }
}
