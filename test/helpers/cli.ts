import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('../../bin/svc-dsr.mjs', import.meta.url));

/** Runs the CLI to completion as a user would and returns its exit code and output. */
export function runCli(args: string[], options: { env?: Record<string, string>; timeoutMs?: number } = {}) {
  return runProcess(process.execPath, [CLI, ...args], options);
}

/**
 * Runs a program to completion and returns its exit code and output; `input`, when given, is its
 * standard input (else it has none).
 */
export function runProcess(
  command: string,
  args: readonly string[],
  options: { env?: Record<string, string>; timeoutMs?: number; cwd?: string; input?: string } = {},
) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(command, args, {
      env: { ...process.env, ...options.env },
      stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    });
    child.stdin?.end(options.input);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} did not finish in time; stderr: ${stderr}`));
    }, options.timeoutMs ?? 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Starts a long-running CLI command and resolves with its first stdout line. */
export function spawnCli(
  args: string[],
): Promise<{ child: ChildProcessWithoutNullStreams; firstLine: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: 'pipe' });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const lines = createInterface({ input: child.stdout });
    lines.once('line', (line) => resolve({ child, firstLine: line }));
    child.once('exit', (code) => reject(new Error(`exited ${code} before printing; stderr: ${stderr}`)));
  });
}

/** Resolves with the exit code once the child has exited. */
export function exited(child: ChildProcessWithoutNullStreams): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
}

/** A `svc-dsr local --serve` process and what it has written to stderr so far. */
export interface ServingLocal {
  readonly child: ChildProcessWithoutNullStreams;
  stderr(): string;
}

/** Starts `svc-dsr local --serve --data-dir <dataDir>` and resolves once it says it is serving. */
export function serveLocal(dataDir: string, args: readonly string[] = []): Promise<ServingLocal> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, 'local', '--serve', '--data-dir', dataDir, ...args], {
      stdio: 'pipe',
    });
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`local mode did not start serving in time: ${stderr}`));
    }, 90_000);
    child.stdout.resume();
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes('serving:')) {
        clearTimeout(timer);
        resolve({ child, stderr: () => stderr });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`local mode exited (${code}) before serving: ${stderr}`));
    });
  });
}

/** Sends `signal` to a serving local mode (SIGKILL: no chance to tidy up) and waits until it is gone. */
export async function killServer(server: ServingLocal, signal: NodeJS.Signals): Promise<void> {
  if (server.child.exitCode !== null || server.child.signalCode !== null) return;
  const gone = exited(server.child);
  server.child.kill(signal);
  await gone;
}
