// The stack configuration local mode synthesizes: from a given file, cdk.json, or the defaults.
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { CONFIG_CONTEXT_KEY } from '../../lib/config.ts';
import { CliError, EXIT } from './io.ts';

/** Where local mode's stack configuration came from, and the raw settings (validated at synth). */
export interface LocalStackConfig {
  /** The settings object as cdk.json holds it under `context["svc-dsr"]`; undefined for the defaults. */
  readonly config: unknown;
  /** The file it was read from, or undefined when there was none. */
  readonly source?: string;
}

const objectSchema = z.record(z.string(), z.unknown());
const cdkJsonSchema = z.looseObject({ context: objectSchema });

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The configuration local mode synthesizes the stack with: the same settings a deploy uses. From
 * `file` when given (a cdk.json, whose `context["svc-dsr"]` is read, or a file holding the settings
 * object itself), else from `cdk.json` in `cwd` as `cdk synth` reads it, else the defaults. The
 * settings are validated when the stack is synthesized, with the same messages as `cdk synth`.
 */
export async function localStackConfig(
  file: string | undefined,
  cwd = process.cwd(),
): Promise<LocalStackConfig> {
  const path = file === undefined ? join(cwd, 'cdk.json') : resolve(cwd, file);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    const missing = error instanceof Error && 'code' in error && error.code === 'ENOENT';
    if (file === undefined && missing) return { config: undefined };
    throw new CliError(`--config: cannot read ${path} (${messageOf(error)})`, EXIT.usage);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new CliError(`${path} is not JSON (${messageOf(error)})`, EXIT.usage);
  }
  if (!objectSchema.safeParse(json).success)
    throw new CliError(`${path} does not hold a JSON object`, EXIT.usage);
  const cdkJson = cdkJsonSchema.safeParse(json);
  if (cdkJson.success) return { config: cdkJson.data.context[CONFIG_CONTEXT_KEY], source: path };
  // A file of its own holds the settings object itself, as `cdk -c svc-dsr=...` takes it.
  return file === undefined ? { config: undefined, source: path } : { config: json, source: path };
}
