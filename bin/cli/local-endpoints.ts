/**
 * What a serving local mode writes to `<data-dir>/endpoints.json`, and how other commands read it back:
 * the operator commands' view of a local mode (the local package, local/, writes it).
 */
import { readFileSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { stackNamesSchema } from '../../lib/stack-outputs.ts';

/** What `svc-dsr local --serve` writes to `<data-dir>/endpoints.json` so other commands can reach it. */
export const localEndpointsSchema = z.object({
  region: z.string(),
  credentials: z.object({ accessKeyId: z.string(), secretAccessKey: z.string() }),
  endpoints: z.object({ sqs: z.url(), s3: z.url(), dynamodb: z.url(), sfn: z.url() }),
  outputs: stackNamesSchema,
  /** The serving process, so a stale file (its process gone) can be told apart. */
  pid: z.number().int(),
  platform: z.object({ url: z.url(), spot_id: z.string() }),
});
export type LocalEndpoints = z.infer<typeof localEndpointsSchema>;

export const ENDPOINTS_FILE = 'endpoints.json';

/** Writes the endpoints file atomically. */
export async function writeLocalEndpoints(dataDir: string, endpoints: LocalEndpoints): Promise<void> {
  const path = join(dataDir, ENDPOINTS_FILE);
  await writeFile(`${path}.tmp`, `${JSON.stringify(endpoints, null, 2)}\n`);
  await rename(`${path}.tmp`, path);
}

/** Reads the endpoints of a serving local mode; a clear error when none is running. */
export async function readLocalEndpoints(dataDir: string): Promise<LocalEndpoints> {
  const path = join(dataDir, ENDPOINTS_FILE);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch {
    throw new Error(
      `no local mode is serving from ${dataDir}: start one with \`npx svc-dsr local --serve --data-dir ${dataDir}\``,
    );
  }
  const parsed = localEndpointsSchema.safeParse(JSON.parse(text));
  if (!parsed.success)
    throw new Error(`${path} is not a valid endpoints file; restart \`npx svc-dsr local --serve\``);
  if (!processAlive(parsed.data.pid)) {
    throw new Error(
      `the local mode that wrote ${path} is no longer running: start it again with \`npx svc-dsr local --serve --data-dir ${dataDir}\``,
    );
  }
  return parsed.data;
}

/**
 * True while a process with this id runs (one of another user's counts). A zombie, killed and not yet
 * reaped by its parent, still answers a signal but holds nothing: on Linux its state in /proc says so.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return hasCode(error, 'EPERM');
  }
  return !isZombie(pid);
}

function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The state follows the command name, which is in parentheses and may itself hold spaces.
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
  } catch {
    return false;
  }
}

function hasCode(error: unknown, code: string): boolean {
  return error instanceof Error && 'code' in error && error.code === code;
}
