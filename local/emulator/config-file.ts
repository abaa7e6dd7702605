/**
 * Reading the emulator's state and fault files: JSON parsed and validated with zod, and an error that
 * lists every bad field with its fix.
 */
import { readFile } from 'node:fs/promises';
import type { z } from 'zod';
import { type FieldProblem, fieldProblems } from './rules.ts';

/** A state or fault file that cannot be used; the message lists every bad field and the fix. */
export class EmulatorConfigError extends Error {
  override readonly name = 'EmulatorConfigError';
  readonly problems: FieldProblem[];

  constructor(message: string, problems: FieldProblem[] = [], options?: { cause?: unknown }) {
    super(message, options);
    this.problems = problems;
  }
}

export type ParseOutcome<T> = { success: true; value: T } | { success: false; problems: FieldProblem[] };

export function parseWith<S extends z.ZodType>(schema: S, document: unknown): ParseOutcome<z.infer<S>> {
  const result = schema.safeParse(document);
  if (result.success) return { success: true, value: result.data };
  return { success: false, problems: fieldProblems(result.error.issues) };
}

/**
 * Reads a JSON file and validates it, failing with one message that names the file, each bad
 * field and what was expected, and where the format is documented.
 */
export async function loadJsonFile<S extends z.ZodType>(
  path: string,
  what: string,
  schema: S,
  docSection: string,
): Promise<z.infer<S>> {
  const fix = `See docs/emulator.md, section "${docSection}", for the format.`;
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new EmulatorConfigError(
      `Cannot read ${what} ${path}: ${reason}. Check the path and try again.`,
      [],
      {
        cause: error,
      },
    );
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new EmulatorConfigError(
      `${what} ${path} is not valid JSON (${reason}). Fix the syntax. ${fix}`,
      [],
      {
        cause: error,
      },
    );
  }
  const outcome = parseWith(schema, document);
  if (outcome.success) return outcome.value;
  const lines = outcome.problems.map((problem) => `  - ${problem.field}: ${problem.message}`);
  throw new EmulatorConfigError(
    `${what} ${path} is invalid:\n${lines.join('\n')}\nFix the fields listed above and try again. ${fix}`,
    outcome.problems,
  );
}
