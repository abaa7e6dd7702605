/**
 * How `svc-dsr local --serve` stops on SIGTERM or SIGINT: at once, whatever its executions wait for.
 * Polling stops, calls in flight get a short grace, and the executions still running are left
 * RUNNING in their records, as a killed process leaves them, so the next start resumes them.
 */

/** The times that bound a stop. */
export const SERVE_STOP = {
  /** How long calls and executions in flight get to end before they are left for the next start. */
  graceMs: 500,
  /** A stop that has not finished by then exits 1. */
  limitMs: 10_000,
  /**
   * A repeat of the signal sooner than this is the same one: Ctrl-C reaches the process from the
   * terminal and again through the launcher (bin/svc-dsr.mjs) that forwards it.
   */
  sameSignalMs: 300,
} as const;

/** What {@link stopServing} acts on; the process, but for tests. */
export interface StopIo {
  /** Registers a handler for the next SIGINT or SIGTERM; returns the function that removes it. */
  readonly onSignal: (handler: (signal: string) => void) => () => void;
  readonly say: (text: string) => void;
  readonly exit: (code: number) => void;
  readonly now: () => number;
}

const processIo: StopIo = {
  onSignal(handler) {
    process.on('SIGINT', handler);
    process.on('SIGTERM', handler);
    return () => {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    };
  },
  say: (text) => process.stderr.write(text),
  exit: (code) => process.exit(code),
  now: () => Date.now(),
};

/**
 * Stops serving after `signal`: `stop(graceMs)` stops polling and closes local mode. When it has
 * finished the process exits with `code` (a timer or socket left behind does not hold it up); a
 * second signal, or `limitMs` without finishing, exits 1 at once. Resolves with the code.
 */
export async function stopServing(
  signal: string,
  code: number,
  stop: (graceMs: number) => Promise<void>,
  io: StopIo = processIo,
  times: { readonly graceMs: number; readonly limitMs: number; readonly sameSignalMs: number } = SERVE_STOP,
): Promise<number> {
  const signalledAt = io.now();
  io.say(
    `svc-dsr local: ${signal}: stopping; running executions stay RUNNING and resume on the next start (${signal} again exits at once)\n`,
  );
  let ended = false;
  const giveUp = (reason: string) => {
    if (ended) return;
    ended = true;
    io.say(`svc-dsr local: ${reason}: exiting now; the next start resumes what was running\n`);
    io.exit(1);
  };
  const removeHandler = io.onSignal((again) => {
    if (io.now() - signalledAt >= times.sameSignalMs) giveUp(`${again} again`);
  });
  const limit = setTimeout(() => giveUp(`not stopped within ${times.limitMs / 1000} s`), times.limitMs);
  try {
    await stop(times.graceMs);
  } catch (error) {
    io.say(`svc-dsr local: stopping failed: ${error instanceof Error ? error.message : String(error)}\n`);
    code = 1;
  } finally {
    clearTimeout(limit);
    removeHandler();
  }
  if (!ended) {
    ended = true;
    io.say('svc-dsr local: stopped\n');
    // Once the stack above has returned (the exit code is set), nothing left behind keeps it alive.
    setTimeout(() => io.exit(code), 0).unref();
  }
  return code;
}
