/**
 * The queue of requests waiting for an export slot (platform-gate.ts), and the hand-over of a freed
 * slot to one of them.
 *
 * A request that finds every export slot taken does not only sleep: its state machine sends a
 * message to the waiters' queue carrying its request id and task token
 * (`sqs:sendMessage.waitForTaskToken`) and waits for that token, at most as long as its backoff
 * says. Whoever gives a slot back takes the oldest live message, hands its slot to that request
 * (the gate moves it in one conditional write), and answers the token with SendTaskSuccess: that
 * execution runs StartExport at once and finds its slot held for it. So slots go to the waiters in
 * the order they queued, and a request that keeps missing the moment a slot frees cannot starve. A
 * waiter nobody answers times out and tries again, as it would after a plain Wait; a lost wake-up
 * costs time, never the request, and a slot handed to a waiter that timed out is still its own when
 * it comes back.
 */
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { z } from 'zod';
import { errorName } from './errors.ts';

/**
 * The message a waiting execution sends (lib/dsr-workflow.ts builds it in ASL): its task token, its
 * request's id (which the slot is handed to) and how long it waits. No subject identifier.
 */
export const waiterMessageSchema = z.object({
  token: z.string().min(1).max(4096),
  request_id: z.string().min(1).max(128),
  wait_seconds: z.number().int().positive(),
});
export type WaiterMessage = z.infer<typeof waiterMessageSchema>;

/** Answers a task token (SendTaskSuccess); throws an error named as Step Functions names it. */
export type TaskTokenSuccess = (token: string) => Promise<void>;

/** Step Functions' answers for a token whose execution has ended (or that was never one). */
const GONE_TOKEN_ERRORS = new Set(['TaskDoesNotExist', 'InvalidToken']);

/** A waiter this close to its timeout is left to time out: it would not run before then. */
const STALE_MARGIN_MS = 1_000;

/**
 * Receives of ten messages for one slot: waiters that timed out leave their message behind, so
 * the oldest messages are mostly stale under a long queue, and are deleted on the way.
 */
const MAX_RECEIVES = 3;

/** How long a message taken for a wake-up stays hidden from the other releasers. */
const VISIBILITY_SECONDS = 30;

/** What the wake-up logs: nothing of the token. */
export interface WaiterLogger {
  warn(message: string, attributes?: Record<string, unknown>): void;
}

/**
 * How answering a waiter went: `woken`; `timed_out`, when it stopped waiting but its execution
 * goes on (to StartExport, where a slot handed to it is still its own); `ended`, when its
 * execution has ended; `unanswered`, when Step Functions could not be told (its message comes back
 * after its visibility timeout).
 */
export type WaiterAnswer = 'woken' | 'timed_out' | 'ended' | 'unanswered';

/** A waiter taken from the queue: hidden from the other releasers until answered. */
export interface TakenWaiter {
  readonly requestId: string;
  /** SendTaskSuccess to its token; deletes its message unless Step Functions could not be told. Never throws. */
  answer(): Promise<WaiterAnswer>;
}

/** The queue of requests waiting for an export slot, oldest first. */
export class ExportWaiters {
  readonly #sqs: Pick<SQSClient, 'send'>;
  readonly #queueUrl: string;
  readonly #succeed: TaskTokenSuccess;
  readonly #logger: WaiterLogger;
  readonly #now: () => number;

  constructor(
    sqs: Pick<SQSClient, 'send'>,
    queueUrl: string,
    succeed: TaskTokenSuccess,
    options: { logger: WaiterLogger; now?: () => number },
  ) {
    this.#sqs = sqs;
    this.#queueUrl = queueUrl;
    this.#succeed = succeed;
    this.#logger = options.logger;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The oldest request still waiting, if any; messages of waiters past their wait, and unreadable
   * ones, are deleted on the way. Never throws: a queue that cannot be read has no waiter to give,
   * and the slot goes back to the gate.
   */
  async take(): Promise<TakenWaiter | undefined> {
    try {
      for (let receives = 0; receives < MAX_RECEIVES; receives++) {
        const messages = await this.#receive();
        if (messages.length === 0) return undefined;
        const live = this.#firstLive(messages);
        // The messages before it are stale or unreadable.
        await this.#deleteAll(messages.slice(0, live?.index ?? messages.length));
        if (live === undefined) continue;
        // The waiters after it go back to the queue at once, for the next release.
        await this.#showAgain(messages.slice(live.index + 1));
        const { message, waiter } = live;
        return { requestId: waiter.request_id, answer: () => this.#answer(message, waiter.token) };
      }
      return undefined;
    } catch (error) {
      this.#warn(error);
      return undefined;
    }
  }

  /**
   * Up to ten messages, oldest first. A short poll: a release with nobody waiting must not wait for
   * a message. (In AWS a short poll of a queue with few messages may miss them; the waiter is then
   * left to its timeout.)
   */
  async #receive(): Promise<Message[]> {
    const answer = await this.#sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: this.#queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 0,
        VisibilityTimeout: VISIBILITY_SECONDS,
        MessageSystemAttributeNames: ['SentTimestamp'],
      }),
    );
    return answer.Messages ?? [];
  }

  async #deleteAll(messages: readonly Message[]): Promise<void> {
    const entries = receipts(messages);
    if (entries.length === 0) return;
    await this.#sqs.send(new DeleteMessageBatchCommand({ QueueUrl: this.#queueUrl, Entries: entries }));
  }

  async #showAgain(messages: readonly Message[]): Promise<void> {
    const entries = receipts(messages).map((entry) => ({ ...entry, VisibilityTimeout: 0 }));
    if (entries.length === 0) return;
    await this.#sqs.send(
      new ChangeMessageVisibilityBatchCommand({ QueueUrl: this.#queueUrl, Entries: entries }),
    );
  }

  /** The first message whose waiter still waits, and where it is. */
  #firstLive(
    messages: readonly Message[],
  ): { index: number; message: Message; waiter: WaiterMessage } | undefined {
    for (const [index, message] of messages.entries()) {
      const waiter = this.#live(message);
      if (waiter !== undefined) return { index, message, waiter };
    }
    return undefined;
  }

  /** The message's waiter when it still waits, long enough to be woken. */
  #live(message: Message): WaiterMessage | undefined {
    const waiter = parseWaiter(message.Body);
    if (waiter === undefined) {
      this.#logger.warn('an export-slot waiter message that is not one was dropped');
      return undefined;
    }
    // Past its wait (less the margin), its execution has moved on: the message is of no use.
    const sent = Number(message.Attributes?.SentTimestamp);
    const live = Number.isFinite(sent) && sent + waiter.wait_seconds * 1000 - STALE_MARGIN_MS > this.#now();
    return live ? waiter : undefined;
  }

  async #answer(message: Message, token: string): Promise<WaiterAnswer> {
    let answer: WaiterAnswer;
    try {
      await this.#succeed(token);
      answer = 'woken';
    } catch (error) {
      const name = errorName(error) ?? '';
      if (name === 'TaskTimedOut') answer = 'timed_out';
      else if (GONE_TOKEN_ERRORS.has(name)) answer = 'ended';
      else {
        // A throttle, a network fault: the message comes back after its visibility timeout.
        this.#warn(error);
        return 'unanswered';
      }
    }
    try {
      await this.#deleteAll([message]);
    } catch (error) {
      // Answered: a message left behind is found stale or answered again (TaskDoesNotExist) later.
      this.#warn(error);
    }
    return answer;
  }

  #warn(error: unknown): void {
    this.#logger.warn('the export-slot waiters queue could not be used; waiters wait out their backoff', {
      error: errorName(error) ?? 'unknown',
    });
  }
}

/** Batch entries for messages, by their receipt handles. */
function receipts(messages: readonly Message[]): { Id: string; ReceiptHandle: string }[] {
  return messages.flatMap((message, index) =>
    message.ReceiptHandle === undefined ? [] : [{ Id: String(index), ReceiptHandle: message.ReceiptHandle }],
  );
}

function parseWaiter(body: string | undefined): WaiterMessage | undefined {
  try {
    const parsed = waiterMessageSchema.safeParse(JSON.parse(body ?? ''));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
