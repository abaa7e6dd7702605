/**
 * An execution's record on disk: `<dataDir>/<name>.json`, written whole or not at all, and read
 * back only when it is the record of the execution its name says (`executions.ts` keeps them).
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { ConfigurationError } from '../../lambdas/shared/errors.ts';
import type { ExecutionRecord } from './executions.ts';

/** What Step Functions accepts as an execution name. */
export const NAME = /^[A-Za-z0-9_-]{1,80}$/;

const RECORD_FILE = /^([A-Za-z0-9_-]{1,80})\.json$/;

const recordSchema = z.object({
  name: z.string().regex(NAME),
  executionArn: z.string().min(1),
  input: z.unknown(),
  status: z.enum(['RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED', 'TIMED_OUT']),
  startDate: z.iso.datetime(),
  stopDate: z.iso.datetime().optional(),
  output: z.unknown().optional(),
  error: z.string().optional(),
  cause: z.string().optional(),
  events: z.array(z.looseObject({ type: z.string() })),
});

/** Every record in `dataDir`, which is created if missing; a `.json` file that is not a record stops the load. */
export async function loadRecords(dataDir: string): Promise<ExecutionRecord[]> {
  await mkdir(dataDir, { recursive: true });
  const records: ExecutionRecord[] = [];
  for (const file of (await readdir(dataDir)).sort()) {
    const fileName = RECORD_FILE.exec(file)?.[1];
    if (fileName === undefined) continue;
    records.push(await readRecordFile(join(dataDir, file), fileName));
  }
  return records;
}

/** The record in `path`, which must be the record of the execution `name`. */
export async function readRecordFile(path: string, name: string): Promise<ExecutionRecord> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (error) {
    throw new ConfigurationError(
      isMissing(error)
        ? `${path} is gone: the record of execution ${name} was removed while the shim ran`
        : `${path} is not JSON; the executions directory holds only execution records`,
      { cause: error },
    );
  }
  const parsed = recordSchema.safeParse(json);
  if (!parsed.success) {
    throw new ConfigurationError(
      `${path} is not an execution record (the executions directory holds only those): ${z.prettifyError(parsed.error)}`,
    );
  }
  if (parsed.data.name !== name) {
    throw new ConfigurationError(
      `${path} holds the record of execution ${parsed.data.name}; rename the file to ${parsed.data.name}.json`,
    );
  }
  return parsed.data;
}

function isMissing(error: unknown): boolean {
  return error instanceof Error && 'code' in error && error.code === 'ENOENT';
}

/** Write to a temporary file and rename it over the record, so a reader never sees half a record. */
export async function writeAtomically(path: string, text: string): Promise<void> {
  const temporary = join(dirname(path), `.${randomUUID()}.tmp`);
  try {
    await writeFile(temporary, text);
    await rename(temporary, path);
  } catch (error) {
    await rm(temporary, { force: true });
    throw error;
  }
}
