import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { VirtualTime } from '../../bench/virtual-time.ts';

describe('VirtualTime', () => {
  it('wakes sleepers in the order of their times, each at its time, the clock never going back', async () => {
    // Prepare
    const time = new VirtualTime(1000);
    const woke: [string, number][] = [];
    const sleeper = (name: string, ms: number) =>
      time.spawn(async () => {
        await time.sleep(ms);
        woke.push([name, time.now()]);
        await time.sleep(ms);
        woke.push([`${name} again`, time.now()]);
      });

    // Act
    void sleeper('slow', 300);
    void sleeper('quick', 100);
    await time.settled();

    // Assess
    expect(woke).toEqual([
      ['quick', 1100],
      ['quick again', 1200],
      ['slow', 1300],
      ['slow again', 1600],
    ]);
    expect(time.backwardSteps).toBe(0);
  });

  it('holds the clock while real work is in flight, so that a sleeper does not run ahead of it', async () => {
    // Prepare
    const time = new VirtualTime(0);
    const seen: string[] = [];

    // Act: one task's real work takes 50 ms of wall time; another sleeps 1 ms of virtual time.
    void time.spawn(async () => {
      await time.track(async () => {
        await delay(50);
        seen.push(`work done at ${time.now()}`);
      });
    });
    void time.spawn(async () => {
      await time.sleep(1);
      seen.push(`sleeper at ${time.now()}`);
    });
    await time.settled();

    // Assess
    expect(seen).toEqual(['work done at 0', 'sleeper at 1']);
  });

  it('ends a parked sleep when woken, and at its timeout when not', async () => {
    // Prepare
    const time = new VirtualTime(0);
    const answers: [string, number][] = [];
    const woken = time.park(10_000);
    const left = time.park(500);

    // Act
    void time.spawn(async () => {
      answers.push([await woken.settled, time.now()]);
    });
    void time.spawn(async () => {
      answers.push([await left.settled, time.now()]);
    });
    void time.spawn(async () => {
      await time.sleep(200);
      woken.wake();
    });
    await time.settled();

    // Assess
    expect(answers).toEqual([
      ['woken', 200],
      ['timed_out', 500],
    ]);
    expect(woken.wake()).toBe(false);
  });

  it('fires no timer once stopped', async () => {
    // Prepare
    const time = new VirtualTime(0);
    let late = false;
    void time.spawn(async () => {
      await time.sleep(100);
      time.stop();
    });
    void time.spawn(async () => {
      await time.sleep(200);
      late = true;
    });

    // Act
    await time.settled();

    // Assess
    expect(late).toBe(false);
    expect(time.now()).toBe(100);
  });
});
