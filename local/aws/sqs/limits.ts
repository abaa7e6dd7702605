/** The local SQS's limits and names: SQS's own (message size, long poll, queue names) and a queue's defaults. */

/** The account every queue URL and ARN names: the local SQS has one. */
export const ACCOUNT = '000000000000';
export const MAX_BODY_BYTES = 262_144;
/** A request's body at most: a batch of ten messages at the largest size, escaped in JSON. */
export const MAX_REQUEST_BYTES = 8 * 1024 * 1024;
export const MAX_WAIT_SECONDS = 20;
export const MAX_BATCH_ENTRIES = 10;
/** Compact a journal while running once it holds this many records more than live messages. */
export const COMPACT_AFTER_DEAD_RECORDS = 10_000;
export const QUEUE_NAME = /^[A-Za-z0-9_-]{1,80}$/;

/** A queue's attributes where its creation sets none. */
export const DEFAULT_ATTRIBUTES: Readonly<Record<string, string>> = {
  VisibilityTimeout: '30',
  MessageRetentionPeriod: '345600',
  MaximumMessageSize: String(MAX_BODY_BYTES),
  DelaySeconds: '0',
  ReceiveMessageWaitTimeSeconds: '0',
};
