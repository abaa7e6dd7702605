/**
 * Runs a bench process with the memory a Lambda function has: in a Linux memory cgroup limited to
 * the function's size, so that Node sizes its heap as it does in Lambda (from the memory it is
 * given, about 560 MiB of heap for 1,024 MB) and a process that needs more is stopped, as Lambda
 * stops it. On this 24 GiB host Node would otherwise allow a heap of about 4 GiB and collect its
 * garbage later, so a peak measured without the limit says little about the function.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Where the limit is set: cgroup v1's memory controller, or cgroup v2. */
type Controller = { readonly root: string; readonly limitFile: string };

function controller(): Controller | undefined {
  const v1 = '/sys/fs/cgroup/memory';
  if (existsSync(join(v1, 'memory.limit_in_bytes'))) return { root: v1, limitFile: 'memory.limit_in_bytes' };
  const v2 = '/sys/fs/cgroup';
  const controllers = join(v2, 'cgroup.controllers');
  if (existsSync(controllers) && readFileSync(controllers, 'utf8').split(/\s+/).includes('memory')) {
    return { root: v2, limitFile: 'memory.max' };
  }
  return undefined;
}

/** A command limited to `mebibytes` of memory, and how to remove the limit; undefined when none can be set. */
export function limitedTo(
  mebibytes: number,
  command: string,
  args: readonly string[],
): { command: string; args: string[]; dispose(): void } | undefined {
  const found = controller();
  if (found === undefined) return undefined;
  const group = join(found.root, `svc-dsr-bench-${process.pid}-${mebibytes}`);
  try {
    mkdirSync(group, { recursive: true });
    writeFileSync(join(group, found.limitFile), String(mebibytes * 1024 * 1024));
  } catch {
    // Not allowed here (no root, or a read-only hierarchy).
    return undefined;
  }
  return {
    command: 'sh',
    // The shell joins the group, then becomes the command: the limit covers it from its first byte.
    args: ['-c', `echo $$ > ${join(group, 'cgroup.procs')} && exec "$@"`, 'sh', command, ...args],
    dispose: () => {
      try {
        rmdirSync(group);
      } catch {
        // Still in use by a process that outlived its run; the host removes it at reboot.
      }
    },
  };
}
