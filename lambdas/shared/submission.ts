/**
 * Submitted requests read and judged before anything is sent, the same for `svc-dsr submit` and the
 * API: a CSV, JSONL or JSON text into numbered lines, each line checked against the request schema
 * intake applies, repeats within the text found, and the warnings intake will give listed. Nothing
 * here quotes a line: it may hold a primary_key.
 */
import { CsvError, parse } from 'csv-parse/sync';
import { CORRECTABLE_FIELDS } from './profile-fields.ts';
import {
  type DsrRequest,
  fingerprint,
  formatIssues,
  INTAKE_WARNING_TEXT,
  type IntakeWarning,
  MAX_REQUEST_BYTES,
  requestWarnings,
  safeParseRequest,
  submittedRequestIdSchema,
} from './request.ts';
import { parseStrictJson } from './strict-json.ts';
import { unlistableMethodError } from './verification.ts';

/** A text that cannot be read as requests at all (not one line judged): the message says why and the fix. */
export class SubmissionFileError extends Error {
  override readonly name = 'SubmissionFileError';
}

/** The lines of a JSONL text, numbered from 1, each without its line ending. */
export function jsonLines(text: string): { line: number; body: string }[] {
  const lines = text.split('\n').map((raw, index) => ({
    line: index + 1,
    body: raw.endsWith('\r') ? raw.slice(0, -1) : raw,
  }));
  if (lines.at(-1)?.body === '') lines.pop();
  return lines;
}

/** The formats a text of requests comes in. */
export const SUBMISSION_FORMATS = ['csv', 'jsonl', 'json'] as const;
export type SubmissionFormat = (typeof SUBMISSION_FORMATS)[number];

/** The candidates of a text in `format`; `flag` and `file` name it in an error (`--file: a.csv`). */
export function candidatesOf(
  text: string,
  format: SubmissionFormat,
  file: string,
  flag = '--file',
): Candidate[] {
  return format === 'csv'
    ? csvCandidates(text, file, flag)
    : format === 'json'
      ? jsonCandidates(text, file, flag)
      : jsonlCandidates(text, file, flag);
}

/** Each line's verdict: bad (with why), a repeat of an earlier line, or valid (with intake's warnings). */
export interface Judged {
  readonly bad: { line: number; request_id: string | null; errors: string[] }[];
  readonly duplicates: { line: number; request_id: string; first_line: number }[];
  readonly valid: ValidLine[];
  readonly warnings: { line: number; request_id: string; code: IntakeWarning; message: string }[];
}

/**
 * Judges every candidate: the request schema's errors, a request id used again (with the same
 * content, sent once; with other content, a bad line, as intake would reject it as a conflict),
 * and intake's warnings of a valid line.
 */
export function judgeCandidates(candidates: readonly Candidate[]): Judged {
  const judged: Judged = { bad: [], duplicates: [], valid: [], warnings: [] };
  const seen = new Map<string, { line: number; fingerprint: string }>();
  for (const candidate of candidates) {
    const checked = checkCandidate(candidate);
    if ('errors' in checked) {
      judged.bad.push({ line: candidate.line, request_id: checked.requestId, errors: checked.errors });
      continue;
    }
    const { request } = checked;
    const print = fingerprint(request);
    const earlier = seen.get(request.request_id);
    if (earlier !== undefined) {
      if (earlier.fingerprint === print) {
        judged.duplicates.push({
          line: candidate.line,
          request_id: request.request_id,
          first_line: earlier.line,
        });
      } else {
        judged.bad.push({
          line: candidate.line,
          request_id: request.request_id,
          errors: [
            `request_id: already used on line ${earlier.line} with different content; intake would reject this as a conflict: give it its own request_id`,
          ],
        });
      }
      continue;
    }
    seen.set(request.request_id, { line: candidate.line, fingerprint: print });
    judged.valid.push({ line: candidate.line, request, body: checked.body });
    for (const code of requestWarnings(request)) {
      judged.warnings.push({
        line: candidate.line,
        request_id: request.request_id,
        code,
        message: INTAKE_WARNING_TEXT[code],
      });
    }
  }
  return judged;
}

/**
 * The longest JSONL line read: SQS's message size limit. A request is at most MAX_REQUEST_BYTES as
 * the message sent, but its line may hold white space and escapes the message drops, so a line up
 * to the queue's own limit is read and judged; a longer one is refused unread.
 */
export const MAX_LINE_BYTES = 256 * 1024;

export const JSON_FORMAT_HINT =
  'a .json file holds one request object or an array of them; a .jsonl file one request object per line';

/** CSV header names and the request field each fills. Both spellings of the verification fields work. */
export const CSV_COLUMNS: Record<string, string> = {
  request_id: 'request_id',
  type: 'type',
  regulation: 'regulation',
  primary_key: 'primary_key',
  received_at: 'received_at',
  'verification.method': 'verification.method',
  verification_method: 'verification.method',
  'verification.verified_by': 'verification.verified_by',
  verified_by: 'verification.verified_by',
  verification_verified_by: 'verification.verified_by',
  'verification.verified_at': 'verification.verified_at',
  verified_at: 'verification.verified_at',
  verification_verified_at: 'verification.verified_at',
  reference: 'reference',
  submitted_by: 'submitted_by',
  channel: 'channel',
  // Site ids separated by spaces ("news shop"): a comma would need quoting, and ";" is the column
  // separator of some spreadsheets.
  sites: 'sites',
  // A correction's new values, one column per profile field; an empty cell corrects nothing.
  ...Object.fromEntries(CORRECTABLE_FIELDS.map((field) => [`corrections.${field}`, `corrections.${field}`])),
};
export const REQUIRED_FIELDS = [
  'request_id',
  'type',
  'regulation',
  'primary_key',
  'received_at',
  'verification.method',
  'verification.verified_by',
  'verification.verified_at',
];

export interface Candidate {
  readonly line: number;
  readonly value?: unknown;
  /** Set when the line could not even be turned into an object. */
  readonly problem?: string;
}

export interface ValidLine {
  readonly line: number;
  readonly request: DsrRequest;
  readonly body: string;
}

/** Standard input without --format: JSON when it is one JSON document, JSONL when it starts with `{`, else CSV. */
export function sniffFormat(text: string): 'csv' | 'jsonl' | 'json' {
  const start = text.trimStart()[0];
  if (start === '[') return 'json';
  if (start !== '{') return 'csv';
  return parseStrictJson(text).ok ? 'json' : 'jsonl';
}

/** A JSON document: one request object, or an array of them numbered from 1 as "lines". */
export function jsonCandidates(text: string, file: string, flag = '--file'): Candidate[] {
  const read = parseStrictJson(text);
  if (!read.ok) {
    throw new SubmissionFileError(
      `${flag}: ${file} is not one JSON document (${read.problem}); ${JSON_FORMAT_HINT}: name it accordingly or pass --format`,
    );
  }
  if (Array.isArray(read.value)) return read.value.map((value, index) => ({ line: index + 1, value }));
  if (read.value !== null && typeof read.value === 'object') return [{ line: 1, value: read.value }];
  throw new SubmissionFileError(
    `${flag}: ${file} holds neither a request object nor an array of them; ${JSON_FORMAT_HINT}`,
  );
}

/** The site ids of a `--sites` flag or a CSV cell, split at `separator`; the request schema judges them. */
export function siteList(text: string, separator: RegExp): string[] {
  return text
    .trim()
    .split(separator)
    .map((id) => id.trim())
    .filter((id) => id !== '');
}

export function jsonlCandidates(text: string, file: string, flag = '--file'): Candidate[] {
  // A JSON document (an array, or an object over several lines) read as JSONL fails on every line:
  // say which format it is instead.
  const start = text.trimStart()[0];
  if ((start === '[' || (start === '{' && text.trim().includes('\n'))) && parseStrictJson(text).ok) {
    throw new SubmissionFileError(
      `${flag}: ${file} is one JSON document, not JSONL; ${JSON_FORMAT_HINT}: name it .json or pass --format json`,
    );
  }
  const candidates: Candidate[] = [];
  for (const { line, body } of jsonLines(text)) {
    if (body.trim() === '') continue;
    const bytes = Buffer.byteLength(body, 'utf8');
    if (bytes > MAX_LINE_BYTES) {
      candidates.push({
        line,
        problem: `is ${bytes} bytes; a line may hold at most ${MAX_LINE_BYTES} (the queue's message size limit), and a request at most ${MAX_REQUEST_BYTES} as a message: not read`,
      });
      continue;
    }
    // The strict reader refuses a repeated key (JSON.parse would keep the last one silently) and
    // never quotes the line, which may hold a primary_key.
    const read = parseStrictJson(body);
    if (!read.ok) {
      candidates.push({ line, problem: `${read.problem}; each line must be one JSON object` });
      continue;
    }
    candidates.push({ line, value: read.value });
  }
  return candidates;
}

export function csvCandidates(text: string, file: string, flag = '--file'): Candidate[] {
  const records = parseCsv(text);
  const header = records.shift();
  if (header === undefined)
    throw new SubmissionFileError(`${flag}: ${file} is empty; the first row must name the columns`);
  if (header.error !== undefined)
    throw new SubmissionFileError(`${flag}: ${file} line ${header.line}: ${header.error}`);
  const names = header.cells.map((cell) => cell.trim().toLowerCase());
  const unknown = names.filter((name) => CSV_COLUMNS[name] === undefined);
  if (unknown.length === names.length) {
    // Probably a data row: do not echo it, it may hold a primary_key.
    throw new SubmissionFileError(
      `${flag}: the first row of ${file} names no known column; add a header row such as ${REQUIRED_FIELDS.join(',')}`,
    );
  }
  if (unknown.length > 0) {
    throw new SubmissionFileError(
      `${flag}: ${file} has unknown column(s) ${unknown.map((name) => `"${name}"`).join(', ')}; the columns are ${Object.keys(CSV_COLUMNS).join(', ')}`,
    );
  }
  const fields = names.map((name) => CSV_COLUMNS[name] ?? name);
  const repeated = fields.find((field, index) => fields.indexOf(field) !== index);
  if (repeated !== undefined)
    throw new SubmissionFileError(`${flag}: ${file} names the column for ${repeated} twice`);
  const missing = REQUIRED_FIELDS.filter((field) => !fields.includes(field));
  if (missing.length > 0) {
    throw new SubmissionFileError(
      `${flag}: ${file} lacks the column(s) ${missing.join(', ')}; every request needs them`,
    );
  }
  return records.map((record): Candidate => {
    if (record.error !== undefined) return { line: record.line, problem: record.error };
    if (record.cells.length !== fields.length) {
      return {
        line: record.line,
        problem: `has ${record.cells.length} cells, but the header has ${fields.length} columns`,
      };
    }
    const value: Record<string, unknown> = {};
    const verification: Record<string, string> = {};
    const corrections: Record<string, string> = {};
    record.cells.forEach((cell, column) => {
      const field = fields[column];
      // An empty cell is an absent field, so an optional column may be left blank.
      if (field === undefined || cell === '') return;
      if (field.startsWith('verification.')) verification[field.slice('verification.'.length)] = cell;
      else if (field.startsWith('corrections.')) corrections[field.slice('corrections.'.length)] = cell;
      else if (field === 'sites') value.sites = siteList(cell, /\s+/);
      else value[field] = cell;
    });
    if (Object.keys(verification).length > 0) value.verification = verification;
    if (Object.keys(corrections).length > 0) value.corrections = corrections;
    return { line: record.line, value };
  });
}

export interface CsvRecord {
  readonly line: number;
  readonly cells: string[];
  readonly error?: string;
}

/** A line break as CSV files write them: CRLF, LF or a lone CR. */
const LINE_BREAK = /\r\n|\r|\n/g;
/** Blank lines (perhaps holding spaces) before a record, which csv-parse skips. */
const BLANK_LINES = /^(?:[ \t]*(?:\r\n|\r|\n))*/;

const breaksIn = (text: string) => text.match(LINE_BREAK)?.length ?? 0;

/**
 * RFC 4180 by csv-parse: quoted cells may hold commas, doubled quotes and line breaks; a stray
 * quote inside an unquoted cell is kept as text; blank lines are skipped. Each record carries the
 * line it starts on, counted here from the bytes each record took. A quoted cell that is never
 * closed ends the file with a record that says so, after the records read before it.
 */
export function parseCsv(text: string): CsvRecord[] {
  const records: CsvRecord[] = [];
  const bytes = Buffer.from(text.startsWith('\uFEFF') ? text.slice(1) : text);
  let offset = 0;
  let line = 1;
  // The line the record in `bytes` from `offset` up to `end` starts on; moves past it.
  const nextRecordLine = (end: number) => {
    const segment = bytes.subarray(offset, end).toString();
    const start = line + breaksIn(BLANK_LINES.exec(segment)?.[0] ?? '');
    line += breaksIn(segment);
    offset = end;
    return start;
  };
  try {
    parse(bytes, {
      relax_column_count: true,
      relax_quotes: true,
      skip_empty_lines: true,
      record_delimiter: ['\r\n', '\n', '\r'],
      on_record: (record, context) => {
        records.push({ line: nextRecordLine(context.bytes), cells: record });
        return null;
      },
    });
  } catch (error) {
    if (!(error instanceof CsvError)) throw error;
    // The parser's own message may quote the cell, which may be a subject's identifier: not echoed.
    records.push({
      line: nextRecordLine(bytes.length),
      cells: [],
      error:
        error.code === 'CSV_QUOTE_NOT_CLOSED'
          ? 'a quoted cell that starts here is never closed (a " is missing), so the rest of the file was read into it'
          : `is not valid CSV from here on (${error.code}); check its quotes and line ends`,
    });
  }
  return records;
}

export type Checked = { request: DsrRequest; body: string } | { requestId: string | null; errors: string[] };

export function checkCandidate(candidate: Candidate): Checked {
  if (candidate.problem !== undefined) return { requestId: null, errors: [candidate.problem] };
  const { value } = candidate;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { requestId: null, errors: ['must be a JSON object with the request fields'] };
  }
  const parsed = safeParseRequest(value);
  const requestId = 'request_id' in value ? submittedRequestIdSchema.safeParse(value.request_id) : undefined;
  const id = requestId?.success ? requestId.data : null;
  if (!parsed.success) return { requestId: id, errors: formatIssues(parsed.error.issues) };
  // The stack's list of methods is checked at intake; a method no list can hold is refused here.
  const unlistable = unlistableMethodError(parsed.data.verification.method);
  if (unlistable !== undefined) return { requestId: id, errors: [unlistable] };
  const body = JSON.stringify(parsed.data);
  const bytes = Buffer.byteLength(body, 'utf8');
  if (bytes > MAX_REQUEST_BYTES) {
    return { requestId: id, errors: [`is ${bytes} bytes as a message; the limit is ${MAX_REQUEST_BYTES}`] };
  }
  return { request: parsed.data, body };
}

/** What the ledger holds under a line's request id: its status and fingerprint, and a denial. */
export interface RecordedLine {
  readonly status: string;
  readonly fingerprint: string;
  readonly denial?: { readonly code: string; readonly reason?: string };
}

/** How many ledger reads run at once when checking lines against the ledger. */
const PARALLEL_READS = 8;

/** Each line's ledger item (its status and fingerprint), read a few at a time. */
export async function readRecorded(
  ledger: { get(requestId: string): Promise<RecordedLine | undefined> },
  lines: readonly ValidLine[],
): Promise<(RecordedLine | undefined)[]> {
  const found: (RecordedLine | undefined)[] = new Array(lines.length);
  let next = 0;
  const worker = async () => {
    for (let index = next++; index < lines.length; index = next++) {
      const entry = lines[index];
      if (entry === undefined) continue;
      const item = await ledger.get(entry.request.request_id);
      found[index] =
        item === undefined
          ? undefined
          : {
              status: item.status,
              fingerprint: item.fingerprint,
              ...(item.denial === undefined ? {} : { denial: item.denial }),
            };
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_READS, lines.length) }, worker));
  return found;
}

/**
 * The valid lines against what the ledger holds (`found`, by line): one it holds with the same
 * fingerprint was submitted before (sent again, intake counts a duplicate), one with another
 * fingerprint is a conflict (not sent: intake would quarantine it).
 */
export function classifyAgainstLedger(
  valid: readonly ValidLine[],
  found: readonly (RecordedLine | undefined)[],
): {
  already: { line: number; request_id: string; status: string }[];
  conflicts: { line: number; request_id: string; status: string }[];
  toSend: ValidLine[];
} {
  const already: { line: number; request_id: string; status: string }[] = [];
  const conflicts: { line: number; request_id: string; status: string }[] = [];
  const toSend: ValidLine[] = [];
  valid.forEach((entry, index) => {
    const item = found[index];
    const facts = { line: entry.line, request_id: entry.request.request_id };
    if (item === undefined) toSend.push(entry);
    else if (item.fingerprint === fingerprint(entry.request)) {
      already.push({ ...facts, status: item.status });
      toSend.push(entry);
    } else conflicts.push({ ...facts, status: item.status });
  });
  return { already, conflicts, toSend };
}
