// The `svc-dsr submit` command: a request from flags, or a CSV or JSON Lines file, to the intake queue.
import { randomUUID } from 'node:crypto';
import { extname } from 'node:path';
import { z } from 'zod';
import { sendAll } from '#shared/intake-send';
import { CORRECTABLE_FIELDS } from '#shared/profile-fields';
import { fingerprint, type IntakeWarning } from '#shared/request';
import { parseStrictJson } from '#shared/strict-json';
import {
  type Candidate,
  candidatesOf,
  classifyAgainstLedger,
  jsonCandidates,
  judgeCandidates,
  type RecordedLine,
  readRecorded,
  SubmissionFileError,
  siteList,
  sniffFormat,
  type ValidLine,
} from '#shared/submission';
import { type CliIo, type CommandResult, processIo, writeJson } from '../format.ts';
import { CliError, EXIT, jsonLines, parseOption, readRequestsText } from '../io.ts';

import { DEFAULT_WAIT_SECONDS } from '../register/submit.ts';
import { type CliContext, type TargetFlags, withLazyTarget } from '../target.ts';

export { MAX_LINE_BYTES, parseCsv } from '#shared/submission';

/** The fields of one request given as flags. */
export interface RequestFlags {
  readonly requestId?: string;
  readonly type?: string;
  readonly regulation?: string;
  readonly primaryKey?: string;
  readonly receivedAt?: string;
  readonly verificationMethod?: string;
  readonly verifiedBy?: string;
  readonly verifiedAt?: string;
  readonly reference?: string;
  readonly submittedBy?: string;
  readonly channel?: string;
  /** The sites the request covers, comma-separated (`--sites news,shop`); left out, every site. */
  readonly sites?: string;
  /** A correction's `field=value` pairs (`--correct`), one per field. */
  readonly correct?: readonly string[];
}

/** What to submit and how. Either `file` or `request`. */
export interface SubmitOptions {
  readonly file?: string;
  /** `csv`, `jsonl` or `json`; default from the file's extension (or, for `-`, its content). */
  readonly format?: string;
  readonly request?: RequestFlags;
  readonly dryRun?: boolean;
  readonly json?: boolean;
  /** A progress line on stderr every this many lines (not with `json`). @default 1000 */
  readonly progressEvery?: number;
  /**
   * How long to wait, after sending, for intake to record the requests sent, so that a conflict
   * with a request another submit sent a moment earlier is reported; 0 does not wait. @default 30
   */
  readonly waitSeconds?: number;
}

/** The result of a submit; `--json` prints exactly this. No primary_key anywhere. */
export interface SubmitSummary {
  readonly dry_run: boolean;
  readonly source: 'flags' | 'csv' | 'jsonl' | 'json';
  /** Requests read (blank lines are not counted). */
  readonly lines: number;
  /** Lines that passed validation (sent or, in a dry run, would be sent). */
  readonly valid: number;
  readonly sent: { line: number; request_id: string }[];
  readonly bad_lines: { line: number; request_id: string | null; errors: string[] }[];
  /**
   * What intake will warn of in a valid line (INTAKE_WARNINGS), e.g. a primary_key that mixes
   * scripts: sent all the same; never the value itself.
   */
  readonly warnings: { line: number; request_id: string; code: IntakeWarning; message: string }[];
  /** A request id that appears again with the same content: sent once. */
  readonly duplicates: { line: number; request_id: string; first_line: number }[];
  /** Valid lines SQS did not take (after one retry), or not attempted after the queue kept failing. */
  readonly failed: { line: number; request_id: string; code: string; message: string }[];
  /** Whether the ledger was read before sending (false in a dry run, or when it could not be read). */
  readonly ledger_checked: boolean;
  /** Requests the ledger already holds with the same content: sent again, intake counts them as duplicates. */
  readonly already_submitted: { line: number; request_id: string; status: string }[];
  /** Requests the ledger holds with other content under the same request_id: not sent (intake would quarantine them). */
  readonly conflicts: { line: number; request_id: string; status: string }[];
  /** Whether submit waited for intake's verdict on what it sent (not in a dry run, nor with a wait of 0). */
  readonly intake_checked: boolean;
  /**
   * Sent requests intake found in the ledger with other content, recorded from another submission
   * (often another submit a moment earlier): intake quarantined them as conflicts.
   */
  readonly intake_conflicts: { line: number; request_id: string; status: string }[];
  /** Sent requests intake had not recorded by the end of the wait: sent, with no verdict yet. */
  readonly unconfirmed: { line: number; request_id: string }[];
  /**
   * Sent requests intake recorded as denied (the verification gate, docs/deploy.md), with the
   * reason it recorded: which methods the stack accepts instead.
   */
  readonly denied: { line: number; request_id: string; code: string; reason: string | null }[];
}

/** What submit needs from the target; with a ledger, it checks each request against it before sending. */
export type SubmitTarget = Pick<CliContext, 'sqs' | 'names'> & {
  readonly ledger?: Pick<CliContext['ledger'], 'get'>;
};

/** The first pause between two looks at the ledger while waiting for intake, and the longest. */
const FIRST_LOOK_MS = 250;
const LONGEST_LOOK_MS = 2000;

const _BATCH_SIZE = 10;
const _PARALLEL_BATCHES = 4;
const DEFAULT_PROGRESS_EVERY = 1000;

const waitSchema = z.coerce
  .number({ message: 'must be a number of seconds' })
  .min(0, 'must be 0 (do not wait) to 3600 seconds')
  .max(3600, 'must be 0 (do not wait) to 3600 seconds');

const formatSchema = z.enum(['csv', 'jsonl', 'json'], { message: 'must be "csv", "jsonl" or "json"' });

/** The flag of each request field, so an error names what the operator typed. */
const FLAG_OF: Record<string, string> = {
  request_id: '--request-id',
  type: '--type',
  regulation: '--regulation',
  primary_key: '--primary-key',
  received_at: '--received-at',
  verification: '--verification-method, --verified-by and --verified-at',
  'verification.method': '--verification-method',
  'verification.verified_by': '--verified-by',
  'verification.verified_at': '--verified-at',
  reference: '--reference',
  submitted_by: '--submitted-by',
  channel: '--channel',
  sites: '--sites',
  corrections: '--correct',
  ...Object.fromEntries(CORRECTABLE_FIELDS.map((field) => [`corrections.${field}`, `--correct ${field}=`])),
};

/**
 * Validates one request (flags) or every line of a CSV/JSONL file and, unless `dryRun`, sends the
 * valid ones to the intake queue with SendMessageBatch. `connect` is called only when something is
 * to be sent. Exit code: 1 when a valid line could not be sent, else 2 when a line was bad, else 0.
 */
export async function runSubmit(
  options: SubmitOptions,
  io: CliIo,
  connect: () => Promise<SubmitTarget>,
): Promise<CommandResult<SubmitSummary>> {
  const { source, candidates } = await readCandidates(options);
  const { bad, duplicates, valid, warnings } = judgeCandidates(candidates);

  if (source === 'flags' && bad.length > 0) {
    const errors = flagErrors(bad.flatMap((entry) => entry.errors));
    throw new CliError(`the request is invalid: ${errors.join('; ')}`, EXIT.usage);
  }

  const dryRun = options.dryRun === true;
  let sent: SubmitSummary['sent'] = [];
  let failed: SubmitSummary['failed'] = [];
  let checked: LedgerCheck = { checked: false, already: [], conflicts: [], toSend: valid };
  let verdict: IntakeVerdict = { checked: false, conflicts: [], unconfirmed: [], denied: [] };
  if (!dryRun && valid.length > 0) {
    // A dry run never connects; a real one reads the ledger first and holds back the conflicts.
    const target = await connect();
    checked = await checkLedger(target, valid, io);
    if (checked.toSend.length > 0) {
      const progress = progressReporter(io, options, candidates.length, checked.toSend);
      ({ sent, failed } = await sendAll(
        { sqs: target.sqs, queueUrl: target.names.IntakeQueueUrl },
        checked.toSend,
        progress,
      ));
    }
    const sentIds = new Set(sent.map((entry) => entry.request_id));
    const waitSeconds = options.waitSeconds ?? DEFAULT_WAIT_SECONDS;
    verdict = await awaitIntake(
      target,
      checked.toSend.filter((entry) => sentIds.has(entry.request.request_id)),
      waitSeconds,
      io,
    );
  }

  const summary: SubmitSummary = {
    dry_run: dryRun,
    source,
    lines: candidates.length,
    valid: valid.length,
    sent,
    bad_lines: bad,
    warnings,
    duplicates,
    failed,
    ledger_checked: checked.checked,
    already_submitted: checked.already,
    conflicts: checked.conflicts,
    intake_checked: verdict.checked,
    intake_conflicts: verdict.conflicts,
    unconfirmed: verdict.unconfirmed,
    denied: verdict.denied,
  };
  // A line sent but not taken (the queue refused it, or intake found other content) failed: exit 1.
  const exitCode =
    failed.length > 0 || verdict.conflicts.length > 0
      ? EXIT.failed
      : bad.length > 0 || checked.conflicts.length > 0
        ? EXIT.usage
        : EXIT.ok;
  if (options.json === true) writeJson(io, summary);
  else printSummary(io, summary);
  return { exitCode, result: summary };
}

interface LedgerCheck {
  readonly checked: boolean;
  readonly already: SubmitSummary['already_submitted'];
  readonly conflicts: SubmitSummary['conflicts'];
  /** The valid lines that are no conflict. */
  readonly toSend: readonly ValidLine[];
}

function unreachable(io: CliIo, error: unknown): undefined {
  io.err(
    `submit: the ledger was not checked for earlier submissions (${error instanceof Error ? error.message : String(error)})\n`,
  );
  return undefined;
}

/**
 * Reads each valid request's ledger item before anything is sent: one the ledger holds with the
 * same fingerprint was submitted before (a duplicate), one with another fingerprint is a conflict
 * (intake would quarantine it). A ledger that cannot be read is reported, and nothing is held back.
 */
async function checkLedger(
  target: SubmitTarget,
  valid: readonly ValidLine[],
  io: CliIo,
): Promise<LedgerCheck> {
  const { ledger } = target;
  if (ledger === undefined) return { checked: false, already: [], conflicts: [], toSend: valid };
  let found: (RecordedLine | undefined)[];
  try {
    found = await readRecorded(ledger, valid);
  } catch (error) {
    // A send that follows meets the same trouble (no credentials, nothing listening) and says so.
    unreachable(io, error);
    return { checked: false, already: [], conflicts: [], toSend: valid };
  }
  return { checked: true, ...classifyAgainstLedger(valid, found) };
}

interface IntakeVerdict {
  readonly checked: boolean;
  readonly conflicts: SubmitSummary['intake_conflicts'];
  readonly unconfirmed: SubmitSummary['unconfirmed'];
  readonly denied: SubmitSummary['denied'];
}

/**
 * Waits until intake has recorded each request sent, reading the ledger with growing pauses, for at
 * most `waitSeconds`. The ledger's check before sending cannot see a request another submit sent a
 * moment earlier and intake has not recorded yet; both would be sent, and intake quarantines the
 * later one as a conflict. Once intake has recorded the request_id, the ledger tells which content
 * won: a fingerprint other than this line's is reported as a conflict. Whichever of two racing
 * submits loses hears of it, whatever the order their messages reach intake in.
 */
async function awaitIntake(
  target: SubmitTarget,
  sent: readonly ValidLine[],
  waitSeconds: number,
  io: CliIo,
): Promise<IntakeVerdict> {
  const { ledger } = target;
  if (ledger === undefined || waitSeconds <= 0 || sent.length === 0) {
    return { checked: false, conflicts: [], unconfirmed: [], denied: [] };
  }
  const deadline = Date.now() + waitSeconds * 1000;
  const conflicts: IntakeVerdict['conflicts'] = [];
  const denied: IntakeVerdict['denied'] = [];
  let pending = [...sent];
  for (let pause = FIRST_LOOK_MS; ; pause = Math.min(pause * 2, LONGEST_LOOK_MS)) {
    let found: (RecordedLine | undefined)[];
    try {
      found = await readRecorded(ledger, pending);
    } catch (error) {
      io.err(
        `submit: the ledger could not be read for intake's verdict (${error instanceof Error ? error.message : String(error)}); the requests were sent\n`,
      );
      break;
    }
    const waiting: ValidLine[] = [];
    pending.forEach((entry, index) => {
      const item = found[index];
      if (item === undefined) waiting.push(entry);
      else if (item.fingerprint !== fingerprint(entry.request)) {
        conflicts.push({ line: entry.line, request_id: entry.request.request_id, status: item.status });
      } else if (item.status === 'denied' && item.denial !== undefined) {
        denied.push({
          line: entry.line,
          request_id: entry.request.request_id,
          code: item.denial.code,
          reason: item.denial.reason ?? null,
        });
      }
    });
    pending = waiting;
    if (pending.length === 0 || Date.now() + pause > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
  conflicts.sort((a, b) => a.line - b.line);
  denied.sort((a, b) => a.line - b.line);
  const unconfirmed = pending.map((entry) => ({ line: entry.line, request_id: entry.request.request_id }));
  return { checked: true, conflicts, unconfirmed, denied };
}

/** What intake recorded of a line: enough to tell a conflict and a denial. */
async function readCandidates(
  options: SubmitOptions,
): Promise<{ source: SubmitSummary['source']; candidates: Candidate[] }> {
  const given = Object.entries(options.request ?? {}).filter(([, value]) => value !== undefined);
  if (options.file === undefined) {
    if (options.format !== undefined)
      throw new CliError('--format applies to --file; drop it or pass --file');
    return { source: 'flags', candidates: [{ line: 1, value: requestFromFlags(options.request ?? {}) }] };
  }
  if (given.length > 0) {
    const flags = given.map(([field]) => `--${field.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`);
    throw new CliError(
      `--file submits the requests in the file; drop ${flags.join(', ')} (or drop --file to submit one request from flags)`,
    );
  }
  const named = fileFormat(options.file, options.format);
  const text = await readRequestsText('--file', options.file);
  const format = named ?? sniffFormat(text);
  const file = options.file === '-' ? 'standard input' : options.file;
  let candidates: Candidate[];
  try {
    candidates = candidatesOf(text, format, file);
  } catch (error) {
    if (error instanceof SubmissionFileError) throw new CliError(error.message);
    throw error;
  }
  // A file with nothing to submit is a mistake (the wrong file, an export cut short), whatever its format.
  if (candidates.length === 0) throw new CliError(`--file: ${file} holds no requests; check the file`);
  return { source: format, candidates };
}

/** The format the flags or the extension name; undefined for `-` without --format (see sniffFormat). */
function fileFormat(file: string, format: string | undefined): 'csv' | 'jsonl' | 'json' | undefined {
  if (format !== undefined) return parseOption('--format', formatSchema, format);
  if (file === '-') return undefined;
  const extension = extname(file).toLowerCase();
  if (extension === '.csv') return 'csv';
  if (extension === '.jsonl' || extension === '.ndjson') return 'jsonl';
  if (extension === '.json') return 'json';
  throw new CliError(
    `--file: cannot tell the format of ${file} from its extension; name it .csv, .jsonl or .json, or pass --format csv|jsonl|json`,
  );
}

/**
 * The request lines of `svc-dsr local --requests`: a JSONL text as it is, or one JSON document (a
 * `.json` file, or text that is one document: an array, or an object over several lines) read as
 * `submit --file` reads it, one request per line.
 */
export function requestLines(text: string, file: string): string[] {
  const start = text.trimStart()[0];
  const document =
    (file !== '-' && extname(file).toLowerCase() === '.json') ||
    ((start === '[' || (start === '{' && text.trim().includes('\n'))) && parseStrictJson(text).ok);
  if (!document) return jsonLines(text).map(({ body }) => body);
  const shown = file === '-' ? 'standard input' : file;
  try {
    return jsonCandidates(text, shown, '--requests').map(({ value }) => JSON.stringify(value));
  } catch (error) {
    if (error instanceof SubmissionFileError) throw new CliError(error.message);
    throw error;
  }
}

function requestFromFlags(flags: RequestFlags): Record<string, unknown> {
  const verification = {
    method: flags.verificationMethod,
    verified_by: flags.verifiedBy,
    verified_at: flags.verifiedAt,
  };
  return {
    request_id: flags.requestId ?? randomUUID(),
    type: flags.type,
    regulation: flags.regulation,
    primary_key: flags.primaryKey,
    received_at: flags.receivedAt,
    verification,
    ...(flags.reference === undefined ? {} : { reference: flags.reference }),
    ...(flags.submittedBy === undefined ? {} : { submitted_by: flags.submittedBy }),
    ...(flags.channel === undefined ? {} : { channel: flags.channel }),
    ...(flags.sites === undefined ? {} : { sites: siteList(flags.sites, /,/) }),
    ...(flags.correct === undefined ? {} : { corrections: correctionsFromFlags(flags.correct) }),
  };
}

/**
 * The `corrections` object of `--correct field=value` flags, split at the first "=" (a value may
 * hold more). The request schema judges the fields and values; a message never quotes a value.
 */
function correctionsFromFlags(pairs: readonly string[]): Record<string, string> {
  const corrections: Record<string, string> = {};
  for (const pair of pairs) {
    const equals = pair.indexOf('=');
    if (equals <= 0) {
      throw new CliError(
        `--correct takes field=value, e.g. --correct display_name="Ada L."; one has ${equals === 0 ? 'no field before "="' : 'no "="'} (fields: ${CORRECTABLE_FIELDS.join(', ')})`,
        EXIT.usage,
      );
    }
    const field = pair.slice(0, equals).trim();
    if (Object.hasOwn(corrections, field))
      throw new CliError(
        `--correct names ${(CORRECTABLE_FIELDS as readonly string[]).includes(field) ? field : 'a field'} twice: give each field once`,
        EXIT.usage,
      );
    corrections[field] = pair.slice(equals + 1);
  }
  return corrections;
}

/** Rewrites `field: message` into `--flag: message` for a request given as flags. */
function flagErrors(errors: readonly string[]): string[] {
  return errors.map((error) => {
    const colon = error.indexOf(': ');
    const field = colon === -1 ? '' : error.slice(0, colon);
    const flag = FLAG_OF[field];
    return flag === undefined ? error : `${flag}: ${error.slice(colon + 2)}`;
  });
}

type Progress = (done: number) => void;

function progressReporter(
  io: CliIo,
  options: SubmitOptions,
  total: number,
  valid: readonly ValidLine[],
): Progress {
  const every = options.progressEvery ?? DEFAULT_PROGRESS_EVERY;
  if (options.json === true || valid.length <= every) return () => {};
  let reported = 0;
  return (done) => {
    if (done - reported < every && done !== valid.length) return;
    reported = done;
    const percent = Math.floor((done / valid.length) * 100);
    io.err(`submit: ${done}/${valid.length} valid lines sent (${percent}%) of ${total} read\n`);
  };
}

function printSummary(io: CliIo, summary: SubmitSummary): void {
  for (const bad of summary.bad_lines) {
    const id = bad.request_id === null ? '' : ` (request ${bad.request_id})`;
    io.err(`line ${bad.line}${id}: ${bad.errors.join('; ')}\n`);
  }
  for (const warning of summary.warnings) {
    const where =
      summary.source === 'flags' ? 'submit' : `line ${warning.line} (request ${warning.request_id})`;
    io.err(`${where}: warning ${warning.code}: ${warning.message}\n`);
  }
  for (const duplicate of summary.duplicates) {
    io.err(
      `line ${duplicate.line}: request ${duplicate.request_id} repeats line ${duplicate.first_line} with the same content; ${summary.dry_run ? 'counted' : 'sent'} once\n`,
    );
  }
  for (const already of summary.already_submitted) {
    io.err(
      `line ${already.line}: request ${already.request_id} is already in the ledger with the same content (${already.status}); sent again as a duplicate, which changes nothing\n`,
    );
  }
  for (const conflict of summary.conflicts) {
    io.err(
      `line ${conflict.line}: request ${conflict.request_id} is already in the ledger (${conflict.status}) with different content; not sent, since intake would quarantine it as a conflict: give it its own request_id, or check it with npx svc-dsr status ${conflict.request_id}\n`,
    );
  }
  for (const conflict of summary.intake_conflicts) {
    io.err(
      `line ${conflict.line}: request ${conflict.request_id} was sent, but intake holds that request_id with other content (${conflict.status}), sent by another submission, perhaps a moment earlier: intake quarantined this one as a conflict. Check it with npx svc-dsr status ${conflict.request_id}, and give this request its own request_id\n`,
    );
  }
  for (const denial of summary.denied) {
    const at = summary.source === 'flags' ? 'submit' : `line ${denial.line}`;
    io.err(
      `${at}: request ${denial.request_id} was denied at intake: ${denial.code}${denial.reason === null ? '' : `: ${denial.reason}`}\n`,
    );
  }
  if (summary.unconfirmed.length > 0) {
    io.err(
      `submit: intake had not recorded ${summary.unconfirmed.length} of the requests sent by the end of the wait; they are sent and wait in the queue: follow them with npx svc-dsr status <request_id>\n`,
    );
  }
  for (const failure of summary.failed) {
    io.err(
      `line ${failure.line}: request ${failure.request_id} was not sent: ${failure.code}: ${failure.message}\n`,
    );
  }
  const bad = summary.bad_lines.length;
  const badText = `${bad} bad line${bad === 1 ? '' : 's'}`;
  if (summary.dry_run) {
    io.out(
      summary.source === 'flags'
        ? 'dry run: the request is valid; nothing was sent\n'
        : `dry run: ${summary.valid} valid, ${badText} of ${summary.lines}; nothing was sent\n`,
    );
    if (summary.valid > 0) io.err(`dry run: ${INTAKE_CHECKS}\n`);
    return;
  }
  for (const entry of summary.sent) io.out(`${entry.request_id}\n`);
  const parts = [`${summary.sent.length} sent`];
  if (summary.source !== 'flags') parts.push(badText);
  if (summary.duplicates.length > 0) parts.push(`${summary.duplicates.length} repeated`);
  if (summary.already_submitted.length > 0)
    parts.push(`${summary.already_submitted.length} already in the ledger`);
  if (summary.conflicts.length > 0) parts.push(`${summary.conflicts.length} in conflict with the ledger`);
  if (summary.failed.length > 0) parts.push(`${summary.failed.length} not sent`);
  if (summary.intake_conflicts.length > 0)
    parts.push(`${summary.intake_conflicts.length} quarantined by intake as a conflict`);
  io.err(`submit: ${parts.join(', ')}\n`);
}

export interface SubmitFlags extends TargetFlags, RequestFlags {
  readonly wait?: string;
  readonly file?: string;
  readonly format?: string;
  readonly dryRun?: boolean;
  readonly json?: boolean;
}

/**
 * What only intake can judge: the deployed stack's verification gate, which a dry run (it never
 * connects) does not know and which differs from stage to stage.
 */
const INTAKE_CHECKS =
  'verification.method and the age of verified_at are checked at intake against the stack\'s list of methods (stack config "verification", docs/deploy.md): a method not on it is rejected there, and one not accepted for the request type, or a verification older than the maximum age, is denied';

/** `svc-dsr submit` run with its parsed arguments and flags (registered in ../register/submit.ts). */
export async function submitAction(flags: SubmitFlags): Promise<void> {
  const { file, format, dryRun, json, wait, ...rest } = flags;
  const waitSeconds = wait === undefined ? undefined : parseOption('--wait', waitSchema, wait);
  const request: RequestFlags = {
    requestId: rest.requestId,
    type: rest.type,
    regulation: rest.regulation,
    primaryKey: rest.primaryKey,
    receivedAt: rest.receivedAt,
    verificationMethod: rest.verificationMethod,
    verifiedBy: rest.verifiedBy,
    verifiedAt: rest.verifiedAt,
    reference: rest.reference,
    submittedBy: rest.submittedBy,
    channel: rest.channel,
    sites: rest.sites,
    correct: rest.correct,
  };
  const { exitCode } = await withLazyTarget(flags, (connect) =>
    runSubmit(
      {
        ...(file === undefined ? {} : { file }),
        ...(format === undefined ? {} : { format }),
        request,
        dryRun: dryRun === true,
        json: json === true,
        ...(waitSeconds === undefined ? {} : { waitSeconds }),
      },
      processIo,
      connect,
    ),
  );
  process.exitCode = exitCode;
}
