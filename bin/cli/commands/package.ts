// The `svc-dsr package` command: an access request's package (or raw export), as a link or a copy, through the operator function.
import { createHash } from 'node:crypto';
import { createWriteStream, unlinkSync } from 'node:fs';
import { rename, unlink } from 'node:fs/promises';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { z } from 'zod';
import { MAX_LINK_SECONDS } from '../../../lambdas/operator/commands.ts';
import {
  type CliIo,
  type CommandResult,
  parseReason,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { CliError, checkOutPath, EXIT, parseOption } from '../io.ts';
import { placeholderWarning } from '../package-placeholders.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';

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
  /** Link lifetime in seconds, 1 to 3600 (MAX_LINK_SECONDS). @default 3600 */
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
  .max(
    MAX_LINK_SECONDS,
    `must be at most ${MAX_LINK_SECONDS} seconds (1 hour): the operator function signs the link with its own short-lived credentials; hand out a fresh link when the subject needs one later`,
  );

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

/** What the CLI needs of a target to hand out a package: only the operator function. */
type HandOutContext = Pick<CliContext, 'operatorFunction'>;

/**
 * Link mode: the operator function checks the recorded version is in the bucket at its recorded
 * size, records the hand-out, and answers a presigned GET of it, valid for `expiresIn` seconds
 * (sooner if its own credentials end first: `expires_at` says when). The link is a bearer
 * credential: it is printed once, never logged nor recorded.
 */
export async function runPackageLink(
  context: HandOutContext,
  options: PackageOptions,
  io: CliIo,
): Promise<CommandResult<PackageLinkResult>> {
  const requestId = parseRequestId(options.requestId);
  const { expiresIn, reason } = checkPackageOptions(options);
  const handed = await context.operatorFunction({
    command: 'hand_out_package',
    request_id: requestId,
    raw: options.raw === true,
    hand_out: { delivery: 'link', expires_in: expiresIn },
    ...(reason === undefined ? {} : { reason }),
  });
  const result: PackageLinkResult = {
    request_id: requestId,
    package: handed.package,
    file_name: handed.file_name,
    url: handed.url,
    expires_at: handed.expires_at,
    key: handed.key,
    bytes: handed.bytes,
    sha256: handed.sha256,
  };
  if (options.json === true) writeJson(io, result);
  else {
    // Exactly the link on stdout, so `curl "$(npx svc-dsr package ID)"` works; the note is for people.
    io.out(`${result.url}\n`);
    io.err(
      `${result.package === 'subject_package' ? `the subject package ${result.file_name}` : 'the platform archive'}, valid until ${result.expires_at}; ${result.bytes} bytes, sha256 ${result.sha256}; anyone with this link can download it\n`,
    );
  }
  return { exitCode: EXIT.ok, result };
}

/** An answer to the GET of a presigned link: its HTTP status, and the body when it is 2xx. */
export interface LinkAnswer {
  readonly status: number;
  readonly body?: Readable;
  /** The storage's error code when it refused (`AccessDenied`, `NoSuchKey`...). */
  readonly errorCode?: string;
}

/** Fetches a presigned link. */
export type LinkDownloader = (url: string) => Promise<LinkAnswer>;

/** The GET of a presigned link with Node's fetch; a refusal keeps only the storage's error code. */
export const fetchLink: LinkDownloader = async (url) => {
  const response = await fetch(url);
  if (response.ok && response.body !== null) {
    return { status: response.status, body: Readable.fromWeb(response.body as WebReadableStream) };
  }
  const text = await response.text().catch(() => '');
  const code = /<Code>([A-Za-z]{1,64})<\/Code>/.exec(text)?.[1];
  return { status: response.status, ...(code === undefined ? {} : { errorCode: code }) };
};

/**
 * Downloads the package of a completed request to `out`: the operator function records the
 * hand-out and answers a link of a few minutes, which this process streams (mode 0600, through a
 * temporary file) and checks against the byte count and SHA-256 of the ledger; a mismatch deletes
 * the copy and is exit 1. The link is never printed.
 */
export async function runPackage(
  context: HandOutContext,
  options: PackageOptions,
  io: CliIo,
  download: LinkDownloader = fetchLink,
): Promise<CommandResult<PackageResult>> {
  const requestId = parseRequestId(options.requestId);
  const { out, reason } = checkPackageOptions(options);
  if (out === undefined) throw new CliError('--out: give the file to write the package to');
  await checkOutPath(out, options.force === true);
  const handed = await context.operatorFunction({
    command: 'hand_out_package',
    request_id: requestId,
    raw: options.raw === true,
    hand_out: { delivery: 'file' },
    ...(reason === undefined ? {} : { reason }),
  });
  const what = handed.package === 'subject_package' ? 'subject package' : 'archive';

  let answer: LinkAnswer;
  try {
    answer = await download(handed.url);
  } catch (error) {
    throw new CliError(
      `the download of ${handed.key} failed (${describeFailure(error)}); nothing was written to ${out}`,
      EXIT.failed,
    );
  }
  const body = answer.body;
  if (answer.status < 200 || answer.status > 299 || body === undefined) {
    throw new CliError(
      `the download of ${handed.key} was refused (HTTP ${answer.status}${answer.errorCode === undefined ? '' : ` ${answer.errorCode}`}); nothing was written to ${out}; run the command again for a fresh link`,
      EXIT.failed,
    );
  }

  const hash = createHash('sha256');
  let bytes = 0;
  const total = handed.bytes;
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
      await pipeline(body, tally, createWriteStream(partial, { flags: 'wx', mode: 0o600 }));
    } catch (error) {
      await unlink(partial).catch(() => {});
      throw new CliError(
        `the download of ${handed.key} failed (${describeFailure(error)}); nothing was written to ${out}`,
        EXIT.failed,
      );
    }
    sha256 = hash.digest('hex');
    if (bytes !== handed.bytes || sha256 !== handed.sha256.toLowerCase()) {
      await unlink(partial).catch(() => {});
      throw new CliError(
        `the downloaded ${what} does not match the ledger (${bytes} bytes, sha256 ${sha256}; the ledger says ${handed.bytes} bytes, sha256 ${handed.sha256}); nothing was written; run npx svc-dsr verify ${requestId}`,
        EXIT.failed,
      );
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
    package: handed.package,
    path: out,
    key: handed.key,
    version_id: handed.version_id,
    bytes,
    sha256,
    verified: true,
  };
  if (options.json === true) writeJson(io, result);
  else io.out(`wrote ${out}: ${bytes} bytes, sha256 ${sha256} (matches the ledger)\n`);
  return { exitCode: EXIT.ok, result };
}

/**
 * Why a download failed, in words that never hold the link: the error's name and code, and its
 * cause's, but no message (fetch's and the stream's may quote the URL).
 */
function describeFailure(error: unknown): string {
  const parts: string[] = [];
  for (let current: unknown = error, depth = 0; current instanceof Error && depth < 3; depth += 1) {
    const code = 'code' in current && typeof current.code === 'string' ? ` ${current.code}` : '';
    parts.push(`${current.name}${code}`);
    current = current.cause;
  }
  return parts.length === 0 ? 'unknown error' : parts.join(', caused by ');
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
  const { exitCode } = await withTarget(flags, async (context): Promise<{ exitCode: number }> => {
    const handed =
      options.out === undefined
        ? await runPackageLink(context, options, processIo)
        : await runPackage(context, options, processIo);
    if (handed.exitCode === EXIT.ok && options.raw !== true)
      await warnOfPlaceholders(context, options, processIo);
    return handed;
  });
  process.exitCode = exitCode;
}

/** Warns on stderr when the subject package handed out states placeholder texts (package-placeholders.ts). */
async function warnOfPlaceholders(
  context: Pick<CliContext, 'ledger'>,
  options: PackageOptions,
  io: CliIo,
): Promise<void> {
  const item = await context.ledger.get(options.requestId);
  const warning = placeholderWarning(item?.subject_package?.placeholder_texts);
  if (warning !== undefined) io.err(warning);
}
