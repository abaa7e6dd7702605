/**
 * Progress of long work on stderr: on a terminal one live line redrawn in place (done/total, rate,
 * ETA), otherwise a plain line every few seconds, so a log or a pipe gets whole lines and no
 * control characters. The last line always shows the count it was finished with.
 */

/** Where progress is written: a terminal gets a live line. */
export interface ProgressStream {
  readonly isTTY?: boolean;
  write(text: string): unknown;
}

export interface ProgressOptions {
  readonly stream: ProgressStream;
  /** What is counted, e.g. "requests settled". */
  readonly label: string;
  readonly total: number;
  /** How many are done now; read at each redraw. */
  readonly done: () => number;
  readonly clock?: () => number;
  /** Redraw period on a terminal. @default 250 ms */
  readonly liveEveryMs?: number;
  /** Period of the plain lines elsewhere. @default 2000 ms */
  readonly plainEveryMs?: number;
}

export interface Progress {
  /** Draws the line now (on a terminal), or a plain line if one is due. */
  tick(): void;
  /** Writes a whole line of its own (above the live line on a terminal). */
  note(text: string): void;
  /** Stops the timer and writes the final line with `done`. */
  finish(done: number): void;
}

/** Starts a progress display; call `finish` once the work has ended. */
export function startProgress(options: ProgressOptions): Progress {
  const clock = options.clock ?? Date.now;
  const live = options.stream.isTTY === true;
  const startedAt = clock();
  let lastPlainAt = startedAt;
  let lastShown = -1;
  let finished = false;

  const line = (done: number) => {
    const elapsedSeconds = Math.max((clock() - startedAt) / 1000, 0.001);
    const rate = done / elapsedSeconds;
    const remaining = options.total - done;
    const eta = done === 0 || remaining <= 0 ? '' : `, ETA ${formatSeconds(remaining / rate)}`;
    return `${done}/${options.total} ${options.label} (${rate.toFixed(1)}/s${eta}; ${formatSeconds(elapsedSeconds)} so far)`;
  };
  const tick = () => {
    if (finished) return;
    const done = Math.min(options.done(), options.total);
    if (live) {
      options.stream.write(`\r\u001b[2K${line(done)}`);
      return;
    }
    const now = clock();
    if (done === lastShown || now - lastPlainAt < (options.plainEveryMs ?? 2000)) return;
    lastPlainAt = now;
    lastShown = done;
    options.stream.write(`${line(done)}\n`);
  };
  const timer = setInterval(tick, live ? (options.liveEveryMs ?? 250) : 250);
  timer.unref();
  return {
    tick,
    note(text) {
      options.stream.write(live ? `\r\u001b[2K${text}\n` : `${text}\n`);
      tick();
    },
    finish(done) {
      if (finished) return;
      finished = true;
      clearInterval(timer);
      const text = `${done}/${options.total} ${options.label} in ${formatSeconds((clock() - startedAt) / 1000)}`;
      options.stream.write(live ? `\r\u001b[2K${text}\n` : `${text}\n`);
    },
  };
}

/** "45 s", "3 min 20 s", "1 h 05 min". */
export function formatSeconds(seconds: number): string {
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) return `${whole} s`;
  if (whole < 3600) return `${Math.floor(whole / 60)} min ${String(whole % 60).padStart(2, '0')} s`;
  return `${Math.floor(whole / 3600)} h ${String(Math.floor((whole % 3600) / 60)).padStart(2, '0')} min`;
}
