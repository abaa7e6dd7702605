/**
 * A virtual-time scheduler for simulations that run real code: every sleep is a timer in a heap,
 * and the clock moves to the earliest timer only when no real work is under way (a DynamoDB call
 * on dynalite, a step's own code). The clock never goes back, and every read of it checks so.
 */

/** A sleep that another task may end early (a task token answered before its timeout). */
export interface Parked {
  /** Resolves `woken` when {@link Parked.wake} ended it, `timed_out` at its timeout. */
  readonly settled: Promise<'woken' | 'timed_out'>;
  /** Ends the sleep now; false when it had already ended. */
  wake(): boolean;
}

interface Timer {
  readonly at: number;
  readonly seq: number;
  fire: (() => void) | undefined;
}

/**
 * The clock and the work it runs. Real work is what is in flight outside the clock (a DynamoDB
 * call on dynalite, tracked by {@link VirtualTime.track}) and what runs in between (a step's own
 * code, its promises); the clock moves to the earliest timer only when nothing is in flight and
 * the event loop has gone round twice with nothing new: no timer set, no call begun or ended.
 * Parallel work inside one task (a Promise.all of calls) needs nothing more.
 */
export class VirtualTime {
  #clock: number;
  #lastRead: number;
  #inFlight = 0;
  /** Bumped by every change the clock must wait for; two quiet turns in a row let it advance. */
  #epoch = 0;
  #seenEpoch = -1;
  #quietTurns = 0;
  #seq = 0;
  #stopped = false;
  #scheduled = false;
  readonly #heap: Timer[] = [];
  readonly #idle: (() => void)[] = [];
  /** Reads of the clock that found it earlier than the read before: must stay 0. */
  backwardSteps = 0;
  /** Timers fired, for the run's figures. */
  timersFired = 0;
  /** Errors of tasks that ended by throwing, by name. */
  readonly taskErrors = new Map<string, number>();

  constructor(start: number) {
    this.#clock = start;
    this.#lastRead = start;
  }

  /** The virtual time, in epoch milliseconds; each read is checked against the one before. */
  now(): number {
    const at = this.#clock;
    if (at < this.#lastRead) this.backwardSteps += 1;
    this.#lastRead = at;
    return at;
  }

  /** Sleeps `ms` of virtual time (none for 0 or less). */
  sleep(ms: number): Promise<void> {
    if (!(ms > 0)) return Promise.resolve();
    return new Promise((resolve) => {
      this.#push(this.#clock + ms, resolve);
    });
  }

  /** Sleeps until woken or for at most `timeoutMs`; without a timeout, until woken. */
  park(timeoutMs?: number): Parked {
    let answer: ((value: 'woken' | 'timed_out') => void) | undefined;
    const settled = new Promise<'woken' | 'timed_out'>((resolve) => {
      answer = resolve;
    });
    let done = false;
    const timer =
      timeoutMs === undefined
        ? undefined
        : this.#push(this.#clock + Math.max(0, timeoutMs), () => {
            done = true;
            answer?.('timed_out');
          });
    return {
      settled,
      wake: () => {
        if (done) return false;
        done = true;
        if (timer !== undefined) timer.fire = undefined;
        this.#changed();
        answer?.('woken');
        return true;
      },
    };
  }

  /** Real work outside the clock: the clock stands still until it ends. */
  async track<T>(work: () => Promise<T>): Promise<T> {
    this.#inFlight += 1;
    this.#changed();
    try {
      return await work();
    } finally {
      this.#inFlight -= 1;
      this.#changed();
    }
  }

  /** Runs `task`; its error is counted by name. */
  spawn(task: () => Promise<void>): Promise<void> {
    this.#changed();
    return task().catch((error: unknown) => {
      const name = error instanceof Error ? error.name : 'unknown';
      this.taskErrors.set(name, (this.taskErrors.get(name) ?? 0) + 1);
    });
  }

  /** Fires no more timers: the tasks still asleep stay asleep. */
  stop(): void {
    this.#stopped = true;
    this.#changed();
  }

  /** Resolves once nothing is in flight and no timer will fire (every timer fired, or stopped). */
  settled(): Promise<void> {
    return new Promise((resolve) => {
      this.#idle.push(resolve);
      this.#changed();
    });
  }

  #push(at: number, fire: () => void): Timer {
    this.#changed();
    const timer: Timer = { at, seq: this.#seq++, fire };
    const heap = this.#heap;
    heap.push(timer);
    let index = heap.length - 1;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      const above = heap[parent];
      if (above === undefined || !earlier(timer, above)) break;
      heap[index] = above;
      index = parent;
    }
    heap[index] = timer;
    return timer;
  }

  #pop(): Timer | undefined {
    const heap = this.#heap;
    const top = heap[0];
    const last = heap.pop();
    if (top === undefined || last === undefined || heap.length === 0) return top;
    let index = 0;
    for (;;) {
      const left = 2 * index + 1;
      const leftTimer = heap[left];
      if (leftTimer === undefined) break;
      const rightTimer = heap[left + 1];
      const [child, childTimer] =
        rightTimer !== undefined && earlier(rightTimer, leftTimer)
          ? [left + 1, rightTimer]
          : [left, leftTimer];
      if (!earlier(childTimer, last)) break;
      heap[index] = childTimer;
      index = child;
    }
    heap[index] = last;
    return top;
  }

  #changed(): void {
    this.#epoch += 1;
    this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#turn();
    });
  }

  /** One turn of the event loop: after two quiet ones with nothing in flight, the clock moves. */
  #turn(): void {
    if (this.#inFlight > 0) return;
    if (this.#epoch !== this.#seenEpoch) {
      this.#seenEpoch = this.#epoch;
      this.#quietTurns = 0;
      this.#schedule();
      return;
    }
    this.#quietTurns += 1;
    if (this.#quietTurns < 2) {
      this.#schedule();
      return;
    }
    this.#advance();
  }

  /** Moves the clock to the earliest live timer and fires every timer due then. */
  #advance(): void {
    if (this.#stopped) {
      this.#wakeIdle();
      return;
    }
    let next = this.#pop();
    while (next !== undefined && next.fire === undefined) next = this.#pop();
    if (next === undefined) {
      this.#wakeIdle();
      return;
    }
    this.#clock = Math.max(this.#clock, next.at);
    const due: Timer[] = [next];
    for (;;) {
      const top = this.#heap[0];
      if (top === undefined || top.at > this.#clock) break;
      const timer = this.#pop();
      if (timer?.fire !== undefined) due.push(timer);
    }
    for (const timer of due) {
      const fire = timer.fire;
      timer.fire = undefined;
      if (fire === undefined) continue;
      this.timersFired += 1;
      fire();
    }
    this.#changed();
  }

  #wakeIdle(): void {
    for (const resolve of this.#idle.splice(0)) resolve();
  }
}

function earlier(a: Timer, b: Timer): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}
