/**
 * The CLI's optional defaults file: the options people repeat (target, data dir, stack outputs),
 * kept once. It is the first of `SVC_DSR_CLI_CONFIG`, `./.svc-dsr.json`, and
 * `$XDG_CONFIG_HOME/svc-dsr/config.json` (`~/.config/svc-dsr/config.json`) that is given or exists.
 * Its values stand in for the environment variables the options already read (SVC_DSR_TARGET,
 * ...), so a flag wins over the environment, and the environment over the file. `npm start`
 * reads none of them, so the demo never empties a folder named here.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { z } from 'zod';
import { CliError } from './exit.ts';

/** The file's schema, built when there is a file: every command starts without loading zod. */
async function defaultsSchema() {
  const { z } = await import('zod');
  return z.strictObject({
    target: z.enum(['aws', 'local'], { message: 'must be "aws" or "local"' }).optional(),
    data_dir: z.string().min(1).optional(),
    stack_outputs: z.string().min(1).optional(),
    stack: z.string().min(1).optional(),
    config: z.string().min(1).optional(),
  });
}
type Defaults = z.infer<Awaited<ReturnType<typeof defaultsSchema>>>;

/** Each key, the variable it stands in for, and whether it names a file (read relative to the defaults file). */
const STANDS_IN_FOR: Record<keyof Defaults, { env: string; path: boolean }> = {
  target: { env: 'SVC_DSR_TARGET', path: false },
  data_dir: { env: 'SVC_DSR_DATA_DIR', path: true },
  stack_outputs: { env: 'SVC_DSR_STACK_OUTPUTS', path: true },
  stack: { env: 'SVC_DSR_STACK', path: false },
  config: { env: 'SVC_DSR_CONFIG', path: true },
};

/** The defaults file in effect, if any. */
export function defaultsFilePath(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): string | undefined {
  const named = env.SVC_DSR_CLI_CONFIG;
  if (named !== undefined && named !== '') return resolve(cwd, named);
  const here = join(cwd, '.svc-dsr.json');
  if (existsSync(here)) return here;
  const home = join(env.XDG_CONFIG_HOME || join(env.HOME ?? homedir(), '.config'), 'svc-dsr', 'config.json');
  return existsSync(home) ? home : undefined;
}

/**
 * Reads the defaults file, if there is one, into the environment variables not already set.
 * Returns its path. A file that cannot be read, is not JSON or holds an unknown key or a bad
 * value is a CliError naming the file and the key.
 */
export async function applyDefaultsFile(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): Promise<string | undefined> {
  const path = defaultsFilePath(env, cwd);
  if (path === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new CliError(
      `the defaults file ${path} cannot be read as JSON (${error instanceof Error ? error.message : String(error)}); fix it, or point SVC_DSR_CLI_CONFIG at another file`,
    );
  }
  const parsed = (await defaultsSchema()).safeParse(value);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown key(s) ${issue.keys.join(', ')}`
        : `${issue.path.join('.') || 'the file'}: ${issue.message}`,
    );
    throw new CliError(
      `the defaults file ${path}: ${problems.join('; ')}; it may hold ${Object.keys(STANDS_IN_FOR).join(', ')}`,
    );
  }
  for (const [key, given] of Object.entries(parsed.data) as [keyof Defaults, string | undefined][]) {
    const { env: name, path: isPath } = STANDS_IN_FOR[key];
    if (given === undefined || (env[name] !== undefined && env[name] !== '')) continue;
    env[name] = isPath ? resolve(dirname(path), given) : given;
  }
  return path;
}
