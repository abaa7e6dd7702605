/**
 * What every command shares and the entry needs before any command loads: the exit codes, the error
 * the CLI reports as one line, quiet handling of closed pipes, and shell quoting. Nothing heavy.
 */
/** Exit codes scripts can rely on. */
export const EXIT = {
  ok: 0,
  /** The command ran but what it was asked to do failed. */
  failed: 1,
  /** The command line or an input file was invalid; nothing was done. */
  usage: 2,
} as const;

/**
 * Makes the process go on quietly when whoever reads its output goes away (`svc-dsr list | head -2`):
 * after a write to a closed pipe (EPIPE) nothing more is written there, and the command finishes
 * what it was doing (a submit sends every line it took) and exits with its own code, so
 * `set -o pipefail` still sees an invalid file as one. A closed stderr is ignored likewise. Any
 * other failure to write (a full disk behind `> file`) ends the command with one line and exit 1.
 */
export function writeQuietlyToClosedPipes(): void {
  const closed = (error: NodeJS.ErrnoException) =>
    error.code === 'EPIPE' || error.code === 'ERR_STREAM_DESTROYED';
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (!closed(error)) {
        // A full disk or a broken device behind the output: one line, not a stack trace.
        if (stream === process.stdout)
          process.stderr.write(`svc-dsr: cannot write the output: ${error.code ?? error.message}\n`);
        process.exit(EXIT.failed);
      }
      // Nothing can reach a reader that has left: later writes are dropped, not queued.
      stream.write = ((_chunk: unknown, ...rest: unknown[]) => {
        const done = rest.find((arg) => typeof arg === 'function');
        if (typeof done === 'function') queueMicrotask(() => done());
        return true;
      }) as typeof stream.write;
    });
  }
}

/** An error the CLI reports as one clear line (what was wrong, how to fix it) and an exit code. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly exitCode: number = EXIT.usage,
  ) {
    super(message);
  }
}

/** A word as a POSIX shell reads it back: as is when plain, else in single quotes. */
export function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

/**
 * True for a CliError, including one thrown by the commands that run through tsx (local,
 * emulator, start): they load this module a second time, so their CliError is another class.
 */
export function isCliError(error: unknown): error is CliError {
  return (
    error instanceof CliError ||
    (error instanceof Error &&
      error.name === 'CliError' &&
      'exitCode' in error &&
      typeof error.exitCode === 'number')
  );
}
