// The CLI's option parsing with zod, requests files read as text, and checks on an output path.
import { readFile, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import { CliError } from './exit.ts';

export { CliError, EXIT, isCliError, shellWord, writeQuietlyToClosedPipes } from './exit.ts';

/** Validates a parsed option with zod and turns a failure into a CliError naming the flag. */
export function parseOption<T extends z.ZodType>(flag: string, schema: T, value: unknown): z.infer<T> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const reasons = parsed.error.issues.map((issue) => issue.message).join('; ');
  throw new CliError(`${flag}: ${reasons} (received ${JSON.stringify(value)})`);
}

export const portSchema = z.coerce
  .number({ message: 'must be a number' })
  .int('must be a whole number')
  .min(0, 'must be 0 (any free port) to 65535')
  .max(65535, 'must be 0 (any free port) to 65535');

export const hostSchema = z.string().min(1, 'must not be empty');

/**
 * Reads a requests file as text for `submit --file` and `local --requests`, the same way for both:
 * UTF-8, with a byte-order mark at the start (as some editors and spreadsheets write) removed.
 */
export async function readRequestsText(flag: string, path: string): Promise<string> {
  let text: string;
  try {
    // `-` is standard input, as most tools read it: `generate-requests | npx svc-dsr submit --file -`.
    text = path === '-' ? await readStdin() : await readFile(path, 'utf8');
  } catch (error) {
    const code = error instanceof Error && 'code' in error ? String(error.code) : '';
    throw new CliError(
      code === 'ENOENT'
        ? `${flag}: ${path} does not exist; check the path`
        : `${flag}: cannot read ${path} (${error instanceof Error ? error.message : String(error)})`,
    );
  }
  return text.startsWith('\uFEFF') ? text.slice(1) : text;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

export { jsonLines } from '#shared/submission';

/**
 * `--out` must name a file in a folder that exists: a folder, or a path whose folder is missing,
 * is exit 2 before anything is downloaded; an existing file needs `--force`.
 */
export async function checkOutPath(out: string, force: boolean, basename = 'archive.zip'): Promise<void> {
  const target = await stat(out).catch(() => undefined);
  if (target?.isDirectory() === true) {
    throw new CliError(
      `--out: ${out} is a directory; give a file path, e.g. ${out.replace(/\/+$/, '')}/${basename}`,
    );
  }
  if (target !== undefined && !force) {
    throw new CliError(`--out: ${out} already exists; choose another path or pass --force to replace it`);
  }
  const folder = dirname(out);
  const parent = await stat(folder).catch(() => undefined);
  if (parent === undefined) {
    throw new CliError(`--out: the folder ${folder} does not exist; create it first (mkdir -p ${folder})`);
  }
  if (!parent.isDirectory()) throw new CliError(`--out: ${folder} is not a folder; give a file path`);
}
