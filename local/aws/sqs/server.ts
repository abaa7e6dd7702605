/**
 * A local SQS that keeps what it acknowledged: the SQS JSON protocol on loopback (`protocol.ts`),
 * with each queue's messages in an append-only journal under `<root>/<queue>/journal.jsonl`
 * (`journal.ts`, `store.ts`). A send or a delete is answered only once its record is on the disk
 * (written and fdatasync'ed; concurrent calls share one flush), so what a producer was told is sent
 * survives a kill, and a deleted message never comes back. A message that was received but not
 * deleted becomes visible again after a restart, as it would once its visibility timeout ran out.
 * The journal is replayed and compacted at start, and compacted again while it runs once dead
 * records outnumber live ones. A deleted or purged message's body is blanked in its send line as
 * soon as the delete is on the disk, so a processed request does not stay readable there.
 *
 * Without a root it keeps everything in memory, for tests. Standard queues only: no FIFO, tags or
 * permissions, which svc-dsr does not use. This file starts the server and names the operations.
 */
import { createServer, type Server } from 'node:http';
import { listen, trackSockets } from '../../http.ts';
import { answer, reply, type SqsAction } from './protocol.ts';
import {
  createQueue,
  getQueueAttributes,
  getQueueUrl,
  listQueues,
  purgeQueue,
  setQueueAttributes,
} from './queue-operations.ts';
import {
  changeMessageVisibility,
  changeMessageVisibilityBatch,
  deleteMessage,
  deleteMessageBatch,
} from './receipts.ts';
import { receiveMessage } from './receive.ts';
import { sendMessage, sendMessageBatch } from './send.ts';
import { QueueStore, type SqsOperation } from './store.ts';

/** Options for {@link startDiskSqs}. */
export interface DiskSqsOptions {
  /** Folder for the queues' journals, kept across restarts. @default in memory */
  readonly root?: string;
  readonly region?: string;
  /** Loopback host to bind. @default 127.0.0.1 */
  readonly host?: string;
  /** Called with the HTTP server before it listens (local mode's throttling wraps it). */
  readonly wrapServer?: (server: Server) => void;
}

/** A running local SQS; `close()` stops it and ends any long poll under way. */
export interface DiskSqs {
  readonly endpoint: string;
  close(): Promise<void>;
}

/** The operations the local SQS answers, by the name `X-Amz-Target` gives after `AmazonSQS.`. */
const OPERATIONS: Readonly<Record<string, SqsOperation>> = {
  CreateQueue: createQueue,
  GetQueueUrl: getQueueUrl,
  ListQueues: listQueues,
  GetQueueAttributes: getQueueAttributes,
  SetQueueAttributes: setQueueAttributes,
  SendMessage: sendMessage,
  SendMessageBatch: sendMessageBatch,
  ReceiveMessage: receiveMessage,
  DeleteMessage: deleteMessage,
  DeleteMessageBatch: deleteMessageBatch,
  ChangeMessageVisibility: changeMessageVisibility,
  ChangeMessageVisibilityBatch: changeMessageVisibilityBatch,
  PurgeQueue: purgeQueue,
};

/** Starts the local SQS on a free loopback port, replaying the journals under `root`. */
export async function startDiskSqs(options: DiskSqsOptions = {}): Promise<DiskSqs> {
  const store = QueueStore.open(options.region ?? 'us-east-1', options.root);
  const actions: Record<string, SqsAction> = Object.fromEntries(
    Object.entries(OPERATIONS).map(([name, operation]) => [
      name,
      (input: unknown) => operation(store, input),
    ]),
  );
  const server = createServer((request, response) => {
    answer(actions, request, response).catch((error: unknown) => {
      reply(response, 500, { __type: 'com.amazonaws.sqs#InternalError', message: String(error) });
    });
  });
  options.wrapServer?.(server);
  const sockets = trackSockets(server);
  const { endpoint } = await listen(server, 0, options.host ?? '127.0.0.1');
  return {
    endpoint,
    close() {
      store.stopPolls();
      return new Promise<void>((resolve, reject) => {
        server.close((error) => {
          store.closeJournals();
          if (error) reject(error);
          else resolve();
        });
        server.closeIdleConnections();
        // Give a long poll that was just woken the moment it needs to answer, then cut the rest.
        setTimeout(() => {
          for (const socket of sockets) socket.destroy();
        }, 50).unref();
      });
    },
  };
}
