// How the CLI writes: its output streams, JSON, tables, CSV cells, terminal-safe text, and argument checks.
import { z } from 'zod';
import { formulaLike } from '#shared/csv-cells';
import { identifierProblem } from '#shared/redact';
import {
  CONTROL_CHARACTERS_MESSAGE,
  DISPLAY_CONTROLS,
  DISPLAY_CONTROLS_BEYOND_C0,
  hasControlCharacters,
  normaliseRequestId,
} from '#shared/request';
import { runRequestIdSchema } from '#shared/sites';
import { CliError, EXIT } from './io.ts';

/** Every character of DISPLAY_CONTROLS, to be shown as an escape. */
const DISPLAY_CONTROLS_ALL = new RegExp(DISPLAY_CONTROLS, 'gv');
/** Those JSON.stringify leaves raw inside strings (it escapes C0 itself; a newline between keys is layout). */
const RAW_IN_JSON = new RegExp(DISPLAY_CONTROLS_BEYOND_C0, 'gv');

/** Where a command writes: `out` is what a script reads (results, JSON), `err` is for people (progress, warnings). */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
}

/** The process's own streams. */
export const processIo: CliIo = {
  out: (text) => {
    process.stdout.write(text);
  },
  err: (text) => {
    process.stderr.write(text);
  },
};

/** An io that keeps everything written, for tests and for callers that print elsewhere. */
export function collectingIo(): CliIo & { stdout(): string; stderr(): string } {
  let stdout = '';
  let stderr = '';
  return {
    out: (text) => {
      stdout += text;
    },
    err: (text) => {
      stderr += text;
    },
    stdout: () => stdout,
    stderr: () => stderr,
  };
}

/** The exit code a command asks for, with what it found (the same object `--json` prints). */
export interface CommandResult<T> {
  readonly exitCode: number;
  readonly result: T;
}

/** Writes one JSON document and a newline (see jsonText). */
export function writeJson(io: CliIo, value: unknown): void {
  io.out(jsonText(value));
}

/**
 * One JSON document and a newline, safe on a terminal: JSON.stringify leaves C1 controls, line and
 * paragraph separators and bidirectional overrides raw inside strings; here they are \uXXXX escapes,
 * which every JSON reader turns back into the same characters.
 */
export function jsonText(value: unknown): string {
  return `${JSON.stringify(value, null, 2).replace(
    RAW_IN_JSON,
    // Each UTF-16 unit as its own escape: JSON has no escape for a code point above U+FFFF.
    (char) =>
      [...Array(char.length).keys()]
        .map((unit) => `\\u${char.charCodeAt(unit).toString(16).padStart(4, '0')}`)
        .join(''),
  )}\n`;
}

/**
 * Text from the ledger (or anything else outside the CLI's control) made safe to print on a terminal:
 * control characters (C0, DEL, C1), line and paragraph separators and bidirectional overrides are
 * shown as escapes (`\x1b`, `\u202e`), so a value can neither run terminal commands, nor fake
 * lines, nor reorder what is shown.
 */
export function terminalText(text: string): string {
  return text.replace(DISPLAY_CONTROLS_ALL, (char) => {
    const code = char.codePointAt(0) ?? 0;
    if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`;
    return code <= 0xffff ? `\\u${code.toString(16).padStart(4, '0')}` : `\\u{${code.toString(16)}}`;
  });
}

/** Left-aligned columns separated by two spaces, with a header row; cells are escaped with terminalText. */
export function formatTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const safeRows = rows.map((row) => row.map(terminalText));
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...safeRows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, column) => (column === cells.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
      .join('  ')
      .trimEnd();
  return `${[line(headers), ...safeRows.map(line)].join('\n')}\n`;
}

/**
 * One CSV cell (RFC 4180), its control characters escaped (terminalText). Cells that a spreadsheet
 * could run as a formula (formulaLike) get a leading apostrophe: free text such as a cancel reason
 * must not execute when an auditor opens the file.
 */
export function csvCell(value: string | number | boolean | null | undefined): string {
  if (value === null || value === undefined) return '';
  // Free text from the ledger is escaped as on a terminal (terminalText): a report may be printed.
  let text = typeof value === 'string' ? terminalText(value) : String(value);
  // Judged before and after the escapes: a cell that reads as text either way is left as it is.
  if (typeof value === 'string' && (formulaLike(value) || formulaLike(text))) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** One CSV line, CRLF-terminated as RFC 4180 asks. */
export function csvRow(cells: readonly (string | number | boolean | null | undefined)[]): string {
  return `${cells.map(csvCell).join(',')}\r\n`;
}

const DAY_MS = 24 * 3600 * 1000;

/** "in 3 days", "due today", "2 days overdue": how a due date relates to now. */
export function describeDue(dueAt: string | undefined, now: Date): string {
  if (dueAt === undefined) return '';
  const days = (Date.parse(dueAt) - now.getTime()) / DAY_MS;
  if (Number.isNaN(days)) return '';
  if (days < 0) {
    const late = Math.floor(-days);
    if (late === 0) return 'overdue by less than a day';
    return `${late} day${late === 1 ? '' : 's'} overdue`;
  }
  const left = Math.floor(days);
  if (left === 0) return 'due within a day';
  return `in ${left} day${left === 1 ? '' : 's'}`;
}

/** A request id, or a site's part of one (a UUID, "_" and the site's id), in lower case as stored. */
const requestIdSchema = z
  .string()
  .refine(
    (value) => runRequestIdSchema.safeParse(value).success,
    "must be a request id (a UUID, e.g. 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f, or a site's part of one, e.g. 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f_news)",
  )
  .transform(normaliseRequestId);

/** Validates a request-id argument (exit 2 when it cannot be one); answers it in lower case, as stored. */
export function parseRequestId(value: unknown): string {
  const parsed = requestIdSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw new CliError(`<request_id>: ${parsed.error.issues[0]?.message ?? 'invalid'}`, EXIT.usage);
}

const reasonSchema = z
  .string({ message: 'is required' })
  .trim()
  .min(1, 'must not be empty: say why, it is kept in the ledger')
  .max(256, 'must be at most 256 characters (it is kept in the audit record)')
  .refine((value) => !hasControlCharacters(value), CONTROL_CHARACTERS_MESSAGE)
  .superRefine((value, context) => {
    // The reason is an audit fact, kept for years under a lock: the same filter applies.
    const problem = identifierProblem(value);
    if (problem !== undefined) {
      context.addIssue({
        code: 'custom',
        message: `${problem}; the reason is kept in the audit record, so say why without personal data or links`,
      });
    }
  });

/** Validates a `--reason` (required, 1-256 characters, no e-mail address or link). */
export function parseReason(value: unknown): string {
  const parsed = reasonSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw new CliError(`--reason: ${parsed.error.issues[0]?.message ?? 'invalid'}`, EXIT.usage);
}
