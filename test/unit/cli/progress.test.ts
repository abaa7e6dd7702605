import { describe, expect, it } from 'vitest';
import { formatSeconds, startProgress } from '../../../bin/cli/progress.ts';

/** A stream that keeps what is written, and a clock the test moves. */
function fixture(isTTY: boolean) {
  const written: string[] = [];
  let now = 1_000_000;
  return {
    stream: { isTTY, write: (text: string) => written.push(text) },
    written,
    clock: () => now,
    advance(ms: number) {
      now += ms;
    },
  };
}

describe('startProgress', () => {
  it('redraws one live line in place on a terminal, with done/total, rate and ETA', () => {
    const { stream, written, clock, advance } = fixture(true);
    let done = 0;
    const progress = startProgress({
      stream,
      label: 'requests settled',
      total: 100,
      done: () => done,
      clock,
    });
    advance(10_000);
    done = 25;
    progress.tick();
    expect(written.at(-1)).toBe('\r\u001b[2K25/100 requests settled (2.5/s, ETA 30 s; 10 s so far)');
    progress.note('submitted 100 line(s)');
    expect(written.slice(-2)).toEqual([
      '\r\u001b[2Ksubmitted 100 line(s)\n',
      '\r\u001b[2K25/100 requests settled (2.5/s, ETA 30 s; 10 s so far)',
    ]);
    advance(30_000);
    progress.finish(100);
    expect(written.at(-1)).toBe('\r\u001b[2K100/100 requests settled in 40 s\n');
    expect(
      written.filter((text) => text.includes('requests settled (')).every((text) => !text.includes('\n')),
    ).toBe(true);
  });

  it('writes whole plain lines, at most one per period, elsewhere, and ends at the count it is given', () => {
    const { stream, written, clock, advance } = fixture(false);
    let done = 0;
    const progress = startProgress({
      stream,
      label: 'requests settled',
      total: 500,
      done: () => done,
      clock,
      plainEveryMs: 2000,
    });
    done = 10;
    advance(1000);
    progress.tick();
    expect(written).toEqual([]);
    advance(1000);
    progress.tick();
    advance(500);
    done = 20;
    progress.tick();
    expect(written).toEqual(['10/500 requests settled (5.0/s, ETA 1 min 38 s; 2 s so far)\n']);
    advance(2000);
    progress.finish(498);
    expect(written.at(-1)).toBe('498/500 requests settled in 5 s\n');
    expect(written.join('')).not.toContain('\r');
    expect(written.join('')).not.toContain('\u001b');
  });

  it('formats durations a person reads at a glance', () => {
    expect(formatSeconds(0.4)).toBe('0 s');
    expect(formatSeconds(200)).toBe('3 min 20 s');
    expect(formatSeconds(3900)).toBe('1 h 05 min');
  });
});
