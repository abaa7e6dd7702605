// The `svc-dsr package` command: an access request's package (or raw export), as a link or a copy.
import { createHash } from 'node:crypto';
import { createWriteStream, unlinkSync } from 'node:fs';
import { rename, unlink } from 'node:fs/promises';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, type GetObjectCommandOutput, HeadObjectCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { z } from 'zod';
import type { ArchiveFacts, LedgerItem } from '#shared/ledger';
import {
  type CliIo,
  type CommandResult,
  parseReason,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { CliError, checkOutPath, EXIT, parseOption } from '../io.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';
import { hasName, loadRequest } from './common.ts';

/** Options of `svc-dsr package`. */
export interface PackageOptions {
  readonly requestId: string;
  /**
   * Hand out the platform's raw export zip (portability, evidence) instead of the subject package.
   * @default false: the subject package (index.html, data.json, README.txt, platform/)
   */
  readonly raw?: boolean;
  /** Download the package to this file; without it, the command prints a short-lived link. */
  readonly out?: string;
  /** Link lifetime in seconds, 1 to 604800 (7 days). @default 3600 */
  readonly expiresIn?: string | number;
  /** Replace `out` if it exists. */
  readonly force?: boolean;
  readonly json?: boolean;
  /**
   * Why the archive is handed out, kept in the hand-out's audit record. Required for an erasure
   * request's archive: the copy of the subject's data taken before it was erased.
   */
  readonly reason?: string;
}

/** Which package is handed out: the subject's own, or the platform's raw export zip (`--raw`). */
export type PackageKind = 'subject_package' | 'platform_archive';

/** What `package --json` prints in link mode. */
export interface PackageLinkResult {
  readonly request_id: string;
  readonly package: PackageKind;
  /** The name the browser saves it under (the subject package's `your-data-<date>.zip`). */
  readonly file_name: string;
  /** A presigned GET of the exact archive version; anyone holding it can download until it expires. */
  readonly url: string;
  readonly expires_at: string;
  readonly key: string;
  readonly bytes: number;
  readonly sha256: string;
}

/** What `package --json` prints. */
export interface PackageResult {
  readonly request_id: string;
  readonly package: PackageKind;
  readonly path: string;
  readonly key: string;
  readonly version_id: string | null;
  readonly bytes: number;
  readonly sha256: string;
  /** Always true: a copy whose bytes or SHA-256 differ from the ledger is deleted and the command fails. */
  readonly verified: true;
}

const expiresInSchema = z.coerce
  .number({ message: 'must be a number of seconds' })
  .int('must be a whole number of seconds')
  .min(1, 'must be at least 1 second')
  .max(7 * 24 * 3600, 'must be at most 604800 seconds (7 days, the longest a presigned link can live)');

const PROGRESS_FROM_BYTES = 64 * 1024 * 1024;

/** Checks the options before any AWS call: a bad value is exit 2. */
export function checkPackageOptions(options: PackageOptions): {
  out?: string;
  expiresIn: number;
  reason?: string;
} {
  const expiresIn = parseOption('--expires-in', expiresInSchema, options.expiresIn ?? 3600);
  if (options.out !== undefined && options.out.trim() === '') throw new CliError('--out: give a file path');
  if (options.out === '-') {
    throw new CliError(
      '--out -: the package is a zip file, not text for standard output; give a file path, or leave --out out for a download link',
    );
  }
  return {
    ...(options.out === undefined ? {} : { out: options.out }),
    expiresIn,
    ...(options.reason === undefined ? {} : { reason: parseReason(options.reason) }),
  };
}

/** How an archive was handed out, as its audit record keeps it. */
type HandOut =
  | { readonly delivery: 'link'; readonly link_expires_at: string }
  | { readonly delivery: 'file'; readonly file_mode: '0600' };

/**
 * Records the hand-out, through the operator function, in the request's packages chain (the
 * request's own chain ends with its final record): who (the caller's principal), when (the
 * record's time), how (a link and its expiry, or a file readable only by the operator; never the
 * path, whose name often names the subject), the archive the ledger names, and the reason. Done
 * before the link is printed or the copy put in place: no record, no hand-out.
 */
async function recordHandOut(
  context: Pick<CliContext, 'operatorFunction'>,
  item: LedgerItem,
  archive: Handed,
  handOut: HandOut,
  reason: string | undefined,
): Promise<void> {
  await context.operatorFunction({
    command: 'package_handed_out',
    request_id: item.request_id,
    raw: archive.kind === 'platform_archive',
    hand_out: handOut,
    ...(reason === undefined ? {} : { reason }),
  });
}

/**
 * Link mode: a presigned GET of the archive version the ledger recorded, valid for `expiresIn`
 * seconds. The object is checked to exist with the recorded size first, so a link never points at
 * nothing. The link is a bearer credential: it is printed once, never logged.
 */
export async function runPackageLink(
  context: Pick<CliContext, 'ledger' | 's3' | 'names' | 'target' | 'clock' | 'operatorFunction'>,
  options: PackageOptions,
  io: CliIo,
): Promise<CommandResult<PackageLinkResult>> {
  const requestId = parseRequestId(options.requestId);
  const { expiresIn, reason } = checkPackageOptions(options);
  const item = await loadRequest(context, requestId);
  const archive = packageable(item, reason, options.raw === true);
  const location = {
    Bucket: context.names.ArchiveBucketName,
    Key: archive.key,
    ...(archive.version_id === undefined ? {} : { VersionId: archive.version_id }),
  };
  const head = await context.s3.send(new HeadObjectCommand(location)).catch((error: unknown) => {
    if (hasName(error, 'NotFound') || hasName(error, 'NoSuchKey') || hasName(error, 'NoSuchVersion')) {
      throw new CliError(
        `the ${label(archive)} of request ${requestId} (${archive.key}) is no longer in the bucket; the lifecycle rule may have expired it`,
        EXIT.failed,
      );
    }
    throw error;
  });
  if (head.ContentLength !== archive.bytes) {
    throw new CliError(
      `the stored ${label(archive)} is ${head.ContentLength ?? 'of unknown size'} bytes, the ledger says ${archive.bytes}; run npx svc-dsr verify ${requestId}`,
      EXIT.failed,
    );
  }
  const url = await getSignedUrl(
    context.s3,
    new GetObjectCommand({
      ...location,
      // The subject's browser saves it as your-data-<date>.zip, whatever the key.
      ...(archive.kind === 'subject_package'
        ? { ResponseContentDisposition: `attachment; filename="${archive.fileName}"` }
        : {}),
    }),
    { expiresIn },
  );
  const expiresAt = new Date(context.clock().getTime() + expiresIn * 1000).toISOString();
  await recordHandOut(context, item, archive, { delivery: 'link', link_expires_at: expiresAt }, reason);
  const result: PackageLinkResult = {
    request_id: requestId,
    package: archive.kind,
    file_name: archive.fileName,
    url,
    expires_at: expiresAt,
    key: archive.key,
    bytes: archive.bytes,
    sha256: archive.sha256,
  };
  if (options.json === true) writeJson(io, result);
  else {
    // Exactly the link on stdout, so `curl "$(npx svc-dsr package ID)"` works; the note is for people.
    io.out(`${url}\n`);
    io.err(
      `${archive.kind === 'subject_package' ? `the subject package ${archive.fileName}` : 'the platform archive'}, valid until ${result.expires_at}; ${archive.bytes} bytes, sha256 ${archive.sha256}; anyone with this link can download it\n`,
    );
  }
  return { exitCode: EXIT.ok, result };
}

/**
 * Downloads the archive of a completed request to `out` (streamed, mode 0600, through a temporary
 * file) and checks its byte count and SHA-256 against the ledger; a mismatch deletes the copy and
 * is exit 1.
 */
export async function runPackage(
  context: Pick<CliContext, 'ledger' | 's3' | 'names' | 'target' | 'clock' | 'operatorFunction'>,
  options: PackageOptions,
  io: CliIo,
): Promise<CommandResult<PackageResult>> {
  const requestId = parseRequestId(options.requestId);
  const { out, reason } = checkPackageOptions(options);
  if (out === undefined) throw new CliError('--out: give the file to write the package to');
  const item = await loadRequest(context, requestId);
  const archive = packageable(item, reason, options.raw === true);
  await checkOutPath(out, options.force === true);

  let answer: GetObjectCommandOutput;
  try {
    answer = await context.s3.send(
      new GetObjectCommand({
        Bucket: context.names.ArchiveBucketName,
        Key: archive.key,
        ...(archive.version_id === undefined ? {} : { VersionId: archive.version_id }),
      }),
    );
  } catch (error) {
    if (hasName(error, 'NoSuchKey') || hasName(error, 'NoSuchVersion') || hasName(error, 'NotFound')) {
      throw new CliError(
        `the ${label(archive)} of request ${requestId} (${archive.key}) is no longer in the bucket; the lifecycle rule may have expired it`,
        EXIT.failed,
      );
    }
    throw error;
  }
  if (!(answer.Body instanceof Readable))
    throw new CliError('S3 returned no readable body for the archive', EXIT.failed);

  const hash = createHash('sha256');
  let bytes = 0;
  const total = answer.ContentLength ?? archive.bytes;
  const showProgress = options.json !== true && total >= PROGRESS_FROM_BYTES;
  let shownTenth = 0;
  const tally = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      bytes += chunk.length;
      const tenth = Math.floor((bytes / total) * 10);
      if (showProgress && tenth > shownTenth && tenth < 10) {
        shownTenth = tenth;
        io.err(`package: ${tenth * 10}% of ${total} bytes\n`);
      }
      done(null, chunk);
    },
  });
  const partial = `${out}.partial-${process.pid}`;
  // The partial copy holds personal data: Ctrl-C or SIGTERM while it is written removes it first.
  const interrupted = (signal: NodeJS.Signals) => {
    try {
      unlinkSync(partial);
    } catch {
      // Not created yet, or already gone.
    }
    io.err(`package: stopped by ${signal}; nothing was written to ${out}\n`);
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  let sha256 = '';
  try {
    try {
      // The archive is personal data: only the operator may read the copy.
      await pipeline(answer.Body, tally, createWriteStream(partial, { flags: 'wx', mode: 0o600 }));
    } catch (error) {
      await unlink(partial).catch(() => {});
      throw new CliError(
        `the download of ${archive.key} failed (${error instanceof Error ? error.message : String(error)}); nothing was written to ${out}`,
        EXIT.failed,
      );
    }
    sha256 = hash.digest('hex');
    if (bytes !== archive.bytes || sha256 !== archive.sha256.toLowerCase()) {
      await unlink(partial).catch(() => {});
      throw new CliError(
        `the downloaded ${label(archive)} does not match the ledger (${bytes} bytes, sha256 ${sha256}; the ledger says ${archive.bytes} bytes, sha256 ${archive.sha256}); nothing was written; run npx svc-dsr verify ${requestId}`,
        EXIT.failed,
      );
    }
    try {
      await recordHandOut(context, item, archive, { delivery: 'file', file_mode: '0600' }, reason);
    } catch (error) {
      await unlink(partial).catch(() => {});
      throw error;
    }
    try {
      await rename(partial, out);
    } catch (error) {
      await unlink(partial).catch(() => {});
      throw new CliError(
        `--out: cannot write ${out} (${error instanceof Error ? error.message : String(error)}); nothing was written`,
        EXIT.failed,
      );
    }
  } finally {
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
  }

  const result: PackageResult = {
    request_id: requestId,
    package: archive.kind,
    path: out,
    key: archive.key,
    version_id: archive.version_id ?? null,
    bytes,
    sha256,
    verified: true,
  };
  if (options.json === true) writeJson(io, result);
  else io.out(`wrote ${out}: ${bytes} bytes, sha256 ${sha256} (matches the ledger)\n`);
  return { exitCode: EXIT.ok, result };
}

/** What is handed out: the recorded object, which kind it is, and the name it downloads as. */
interface Handed {
  readonly kind: PackageKind;
  readonly key: string;
  readonly bytes: number;
  readonly sha256: string;
  readonly version_id?: string | undefined;
  readonly fileName: string;
}

/**
 * The package to hand out, or exit 1 saying why not: only a completed request's. By default the
 * subject package (an access request's); with `raw`, the platform archive, an erasure request's
 * only with a reason (its archive is the subject's data taken before erasure).
 */
function packageable(item: LedgerItem, reason: string | undefined, raw: boolean): Handed {
  if (item.status !== 'completed') {
    throw new CliError(
      `request ${item.request_id} is ${item.status}; a package exists only for a completed request`,
      EXIT.failed,
    );
  }
  if (!raw) {
    if (item.type === 'erasure') {
      throw new CliError(
        `request ${item.request_id} is an erasure: it has no subject package. Its platform archive (the subject's data taken before erasure) is handed out only with --raw and --reason`,
        EXIT.failed,
      );
    }
    const built = item.subject_package;
    if (built === undefined) {
      throw new CliError(
        `request ${item.request_id} has no subject package (outcome ${item.outcome ?? 'unknown'}${item.archive === undefined ? '' : '; it completed before subject packages were built'}): ${item.archive === undefined ? 'there is nothing to hand over' : 'hand out the platform archive with --raw'}`,
        EXIT.failed,
      );
    }
    return {
      kind: 'subject_package',
      key: built.key,
      bytes: built.bytes,
      sha256: built.sha256,
      version_id: built.version_id,
      fileName: built.file_name,
    };
  }
  if (item.archive === undefined) {
    throw new CliError(
      `request ${item.request_id} has no archive (outcome ${item.outcome ?? 'unknown'}): there is nothing to hand over`,
      EXIT.failed,
    );
  }
  if (item.type === 'erasure' && reason === undefined) {
    throw new CliError(
      `request ${item.request_id} is an erasure: its archive is the copy of the subject's data taken before it was erased; hand it out only with --reason saying why (kept in the audit record)`,
      EXIT.failed,
    );
  }
  return { kind: 'platform_archive', ...archiveFacts(item.archive) };
}

function label(handed: Handed): string {
  return handed.kind === 'subject_package' ? 'subject package' : 'archive';
}

function archiveFacts(archive: ArchiveFacts): Omit<Handed, 'kind'> {
  return {
    key: archive.key,
    bytes: archive.bytes,
    sha256: archive.sha256,
    version_id: archive.version_id,
    fileName: archive.key.split('/').at(-1) ?? 'archive.zip',
  };
}

export interface PackageFlags extends TargetFlags {
  readonly raw?: boolean;
  readonly out?: string;
  readonly expiresIn?: string;
  readonly force?: boolean;
  readonly json?: boolean;
  readonly reason?: string;
}

/** `svc-dsr package` run with its parsed arguments and flags (registered in ../register/package.ts). */
export async function packageAction(requestId: string, flags: PackageFlags): Promise<void> {
  const options: PackageOptions = {
    requestId: parseRequestId(requestId),
    raw: flags.raw === true,
    ...(flags.out === undefined ? {} : { out: flags.out }),
    ...(flags.expiresIn === undefined ? {} : { expiresIn: flags.expiresIn }),
    force: flags.force === true,
    json: flags.json === true,
    ...(flags.reason === undefined ? {} : { reason: flags.reason }),
  };
  checkPackageOptions(options);
  if (options.out !== undefined) await checkOutPath(options.out, options.force === true);
  const { exitCode } = await withTarget(
    flags,
    async (context): Promise<{ exitCode: number }> =>
      options.out === undefined
        ? runPackageLink(context, options, processIo)
        : runPackage(context, options, processIo),
  );
  process.exitCode = exitCode;
}
