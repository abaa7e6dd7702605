import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { type StopIo, stopServing } from '#local/cli/serve-stop';

/** A process stand-in: signals sent by the test, exits and lines recorded. */
function fakeProcess() {
  const handlers = new Set<(signal: string) => void>();
  const exits: number[] = [];
  const said: string[] = [];
  const io: StopIo = {
    onSignal(handler) {
      handlers.add(handler);
      return () => handlers.delete(handler);
    },
    say: (text) => said.push(text),
    exit: (code) => exits.push(code),
    now: () => Date.now(),
  };
  const send = (signal: string) => {
    for (const handler of handlers) handler(signal);
  };
  return { io, exits, said, send, handlers };
}

const times = { graceMs: 5, limitMs: 200, sameSignalMs: 20 };

describe('stopServing', () => {
  it('passes the grace to the stop and exits with the code once it has finished', async () => {
    // Prepare
    const fake = fakeProcess();
    const graces: number[] = [];

    // Act
    const code = await stopServing(
      'SIGTERM',
      0,
      async (graceMs) => {
        graces.push(graceMs);
      },
      fake.io,
      times,
    );
    await delay(10);

    // Assess
    expect(code).toBe(0);
    expect(graces).toEqual([5]);
    expect(fake.exits).toEqual([0]);
    expect(fake.handlers.size).toBe(0);
    expect(fake.said.join('')).toContain('SIGTERM: stopping');
  });

  it('exits 1 at once when the signal comes again while it stops', async () => {
    // Prepare: a stop that never finishes.
    const fake = fakeProcess();
    let started = false;
    void stopServing(
      'SIGINT',
      0,
      async () => {
        started = true;
        await new Promise(() => {});
      },
      fake.io,
      times,
    );
    expect(started).toBe(true);

    // Act
    await delay(30);
    fake.send('SIGINT');

    // Assess
    expect(fake.exits).toEqual([1]);
    expect(fake.said.join('')).toContain('SIGINT again: exiting now');
  });

  it('takes a repeat sooner than sameSignalMs for the same signal (Ctrl-C through the launcher)', async () => {
    // Prepare
    const fake = fakeProcess();
    let finish: () => void = () => {};
    const stopped = stopServing(
      'SIGINT',
      0,
      () =>
        new Promise<void>((resolve) => {
          finish = resolve;
        }),
      fake.io,
      { ...times, sameSignalMs: 10_000 },
    );

    // Act
    fake.send('SIGINT');
    finish();

    // Assess
    expect(await stopped).toBe(0);
    await delay(10);
    expect(fake.exits).toEqual([0]);
  });

  it('exits 1 when the stop has not finished within limitMs', async () => {
    // Prepare
    const fake = fakeProcess();

    // Act
    void stopServing('SIGTERM', 0, () => new Promise(() => {}), fake.io, times);
    await delay(times.limitMs + 50);

    // Assess
    expect(fake.exits).toEqual([1]);
    expect(fake.said.join('')).toContain('not stopped within 0.2 s');
  });

  it('exits 1 when the stop fails', async () => {
    // Prepare
    const fake = fakeProcess();

    // Act
    const code = await stopServing(
      'SIGTERM',
      0,
      async () => {
        throw new Error('records not written');
      },
      fake.io,
      times,
    );
    await delay(10);

    // Assess
    expect(code).toBe(1);
    expect(fake.exits).toEqual([1]);
    expect(fake.said.join('')).toContain('stopping failed: records not written');
  });
});
