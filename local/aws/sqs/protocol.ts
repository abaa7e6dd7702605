/**
 * The local SQS's wire: the SQS JSON protocol (AWS JSON 1.0, `X-Amz-Target: AmazonSQS.<Op>`) and
 * the query protocol (`Action=<Op>`, form in, XML out: `query-protocol.ts`), a
 * request's routing to its operation, the batch rules every `...Batch` operation shares, and the
 * error answers the SDK turns into its named exceptions.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { readBody } from '../../http.ts';
import { MAX_BATCH_ENTRIES, MAX_REQUEST_BYTES } from './limits.ts';
import { parseQueryRequest, replyQuery, replyQueryFailure } from './query-protocol.ts';

/** An SQS error as the wire carries it: a code for `__type` and the query-compatible header. */
export class SqsFailure extends Error {
  override readonly name = 'SqsFailure';
  constructor(
    readonly code: string,
    message: string,
    readonly queryCode = code,
    readonly status = 400,
  ) {
    super(message);
  }
}

/** One operation: the request's JSON in, the answer's JSON out; an {@link SqsFailure} is an error answer. */
export type SqsAction = (input: unknown) => unknown;

/** A batch entry that failed alone, as a batch answer lists it. */
export interface BatchFailure {
  Id: string;
  Code: string;
  Message: string;
  SenderFault: true;
}

export function batchFailure(id: string, code: string, message: string): BatchFailure {
  return { Id: id, Code: code, Message: message, SenderFault: true };
}

/** A batch's entries, checked as SQS checks them: one to ten, with distinct Ids. */
export function batchEntries<T extends { Id: string }>(input: unknown, entry: z.ZodType<T>): T[] {
  const { Entries } = z.object({ Entries: z.array(entry) }).parse(input);
  if (Entries.length === 0) {
    throw new SqsFailure(
      'EmptyBatchRequest',
      'There should be at least one entry in the request.',
      'AWS.SimpleQueueService.EmptyBatchRequest',
    );
  }
  if (Entries.length > MAX_BATCH_ENTRIES) {
    throw new SqsFailure(
      'TooManyEntriesInBatchRequest',
      `Maximum number of entries per request are ${MAX_BATCH_ENTRIES}. You have sent ${Entries.length}.`,
      'AWS.SimpleQueueService.TooManyEntriesInBatchRequest',
    );
  }
  if (new Set(Entries.map((item) => item.Id)).size !== Entries.length) {
    throw new SqsFailure(
      'BatchEntryIdsNotDistinct',
      'Two or more batch entries in the request have the same Id.',
      'AWS.SimpleQueueService.BatchEntryIdsNotDistinct',
    );
  }
  return Entries;
}

/** Runs `act` on each entry: an {@link SqsFailure} fails that entry alone, as SQS answers a batch. */
export function eachEntry<T extends { Id: string }>(
  entries: readonly T[],
  act: (entry: T) => void,
): { passed: T[]; failed: BatchFailure[] } {
  const passed: T[] = [];
  const failed: BatchFailure[] = [];
  for (const entry of entries) {
    try {
      act(entry);
      passed.push(entry);
    } catch (error) {
      if (!(error instanceof SqsFailure)) throw error;
      failed.push(batchFailure(entry.Id, error.code, error.message));
    }
  }
  return { passed, failed };
}

/**
 * Answers one request with the operation its `X-Amz-Target` names. A failure of SQS's own, or a
 * request that is not JSON or not of the operation's shape, is an error answer; anything else
 * rejects, for the server to answer 500.
 */
export async function answer(
  actions: Readonly<Record<string, SqsAction>>,
  request: IncomingMessage,
  response: ServerResponse,
): Promise<void> {
  const body = await readBody(request, MAX_REQUEST_BYTES);
  const target = request.headers['x-amz-target'];
  if (target === undefined) {
    await answerQuery(actions, request, body, response);
    return;
  }
  const action = actions[String(target).replace(/^AmazonSQS\./, '')];
  if (action === undefined) {
    const failure = new SqsFailure(
      'InvalidAction',
      `The action ${JSON.stringify(target)} is not valid for this endpoint; the local SQS speaks the JSON protocol (X-Amz-Target: AmazonSQS.<Operation>) and the query protocol (Action=<Operation>).`,
    );
    replyFailure(response, failure);
    return;
  }
  try {
    const input: unknown = body.length === 0 ? {} : JSON.parse(body.toString('utf8'));
    reply(response, 200, await action(input));
  } catch (error) {
    const failure = asFailure(error);
    if (failure === undefined) throw error;
    replyFailure(response, failure);
  }
}

/** A failure of SQS's own, or a request not of the operation's shape; undefined for anything else. */
function asFailure(error: unknown): SqsFailure | undefined {
  if (error instanceof SqsFailure) return error;
  if (error instanceof z.ZodError || error instanceof SyntaxError) {
    return new SqsFailure(
      'InvalidParameterValue',
      `The request is not valid: ${error.message}`,
      'InvalidParameterValue',
    );
  }
  return undefined;
}

/** The query protocol: parameters in the form body (or the URL's query), the answer in XML. */
async function answerQuery(
  actions: Readonly<Record<string, SqsAction>>,
  request: IncomingMessage,
  body: Buffer,
  response: ServerResponse,
): Promise<void> {
  const url = request.url ?? '/';
  const params = new URLSearchParams(url.includes('?') ? url.slice(url.indexOf('?') + 1) : '');
  for (const [name, value] of new URLSearchParams(body.toString('utf8'))) params.append(name, value);
  const { action: name, input } = parseQueryRequest(params);
  // A queue URL in the path (`/<account>/<queue>`) names the queue, as SQS's query protocol allows.
  if (input.QueueUrl === undefined && /^\/[^/?]+\/[^/?]+/.test(url)) {
    input.QueueUrl = `http://${request.headers.host ?? 'localhost'}${url.split('?')[0]}`;
  }
  const action = Object.hasOwn(actions, name) ? actions[name] : undefined;
  if (action === undefined) {
    replyQueryFailure(
      response,
      new SqsFailure('InvalidAction', `The action ${JSON.stringify(name)} is not valid for this endpoint.`),
    );
    return;
  }
  try {
    replyQuery(response, name, await action(input));
  } catch (error) {
    const failure = asFailure(error);
    if (failure === undefined) throw error;
    replyQueryFailure(response, failure);
  }
}

export function reply(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/x-amz-json-1.0',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

function replyFailure(response: ServerResponse, failure: SqsFailure): void {
  response.setHeader('x-amzn-query-error', `${failure.queryCode};Sender`);
  reply(response, failure.status, { __type: `com.amazonaws.sqs#${failure.code}`, message: failure.message });
}
