/**
 * The bench's figures in one dated place: each section's printed table, as the run printed it, in
 * a Markdown file (local/bench/RESULTS.md unless BENCH_RESULTS names another), under a heading that says
 * when and on what it was measured. A run replaces the sections it ran and keeps the others, so
 * the file always holds the latest figure of every section and the date it was taken.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';

export const DEFAULT_RESULTS_FILE = fileURLToPath(new URL('RESULTS.md', import.meta.url));

const HEADER = `# Benchmark results

Written by \`npm run bench\` (local/bench/index.ts): each section is the table its last run printed, under
the date and the machine it ran on. A run replaces the sections it ran (\`BENCH_ONLY\` picks them)
and keeps the others. Compare figures only within one section: each carries its own baseline,
measured in the same run.
`;

/** What a section's heading says of the run: when, and on what. */
export interface RunFacts {
  readonly at: Date;
  readonly machine: string;
}

export function currentRunFacts(now = new Date()): RunFacts {
  const [cpu] = cpus();
  const load = loadavg()
    .map((value) => value.toFixed(1))
    .join(' ');
  return {
    at: now,
    machine: `${cpus().length} cores (${cpu?.model.trim() ?? 'unknown'}), Node ${process.version}, load average ${load} at the end`,
  };
}

const begin = (name: string) => `<!-- section ${name} -->`;
const end = (name: string) => `<!-- /section ${name} -->`;

/** The file's text with the section `name` set to `lines`, every other section as it was. */
export function withSection(
  previous: string,
  name: string,
  lines: readonly string[],
  facts: RunFacts,
): string {
  const block = [
    begin(name),
    `## ${name}`,
    '',
    `Measured ${facts.at.toISOString()} on ${facts.machine}.`,
    '',
    '```text',
    // A fence inside the captured text would end the block early.
    ...lines.map((line) => stripAnsi(line).replaceAll('```', "'''")),
    '```',
    end(name),
  ].join('\n');
  const body = previous.startsWith('# Benchmark results') ? previous : HEADER;
  const from = body.indexOf(begin(name));
  const to = body.indexOf(end(name));
  if (from !== -1 && to > from) return body.slice(0, from) + block + body.slice(to + end(name).length);
  return `${body.trimEnd()}\n\n${block}\n`;
}

function stripAnsi(text: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the escape sequences are what it removes
  return text.replace(/\u001b\[[0-9;]*m/g, '');
}

/**
 * Runs one bench section, printing as it always did, and records what it printed in the results
 * file. The section is recorded even when it fails, with the error's message last, so a file never
 * shows an older figure as if it were this run's.
 */
export async function section(
  name: string,
  run: () => Promise<void>,
  file = process.env.BENCH_RESULTS ?? DEFAULT_RESULTS_FILE,
): Promise<void> {
  const lines: string[] = [];
  const print = console.log;
  console.log = (...args: unknown[]) => {
    print(...args);
    lines.push(args.map(String).join(' '));
  };
  try {
    await run();
  } catch (error) {
    lines.push(`FAILED: ${error instanceof Error ? error.message : String(error)}`);
    throw error;
  } finally {
    console.log = print;
    const previous = existsSync(file) ? readFileSync(file, 'utf8') : '';
    writeFileSync(file, withSection(previous, name, lines, currentRunFacts()));
  }
}
