/**
 * One queue in memory: its messages by id, its attributes, its journal (none without a root), and the
 * long polls waiting for its next message.
 */
import { type Journal, type JournalRecord, snapshotOf } from './journal.ts';
import { COMPACT_AFTER_DEAD_RECORDS } from './limits.ts';
import type { Message } from './messages.ts';

export class Queue {
  readonly messages = new Map<string, Message>();
  #waiters = new Set<() => void>();

  constructor(
    readonly name: string,
    readonly created: number,
    public attributes: Record<string, string>,
    readonly journal: Journal | undefined,
  ) {}

  number(attribute: string, fallback: number): number {
    const value = Number(this.attributes[attribute]);
    return Number.isFinite(value) ? value : fallback;
  }

  /** Wakes every long poll waiting on this queue. */
  notify(): void {
    for (const wake of this.#waiters) wake();
    this.#waiters.clear();
  }

  /** Resolves at the next send, or after `ms`. */
  waitForMessage(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#waiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#waiters.add(wake);
    });
  }

  async persist(records: readonly JournalRecord[], durable: boolean): Promise<void> {
    if (this.journal === undefined) return;
    await this.journal.append(records, durable);
    if (this.journal.records - this.messages.size > COMPACT_AFTER_DEAD_RECORDS) {
      this.journal.compact(snapshotOf(this.messages));
    }
  }
}
