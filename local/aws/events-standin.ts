/**
 * A local stand-in for EventBridge's PutEvents, on loopback: local mode's status events go through
 * the same SDK call as in AWS (and the IAM proof observes it), and each event is appended as one
 * JSON line to `<dir>/<YYYY-MM-DD>.jsonl` (the day of the event, UTC), where a person or a script
 * can read them. Any other call is refused.
 */
import { randomUUID } from 'node:crypto';
import { appendFile, mkdir } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { z } from 'zod';
import { listenOnLoopback, readBody, safeJson } from '../http.ts';
import { send } from './secrets-standin.ts';

/** PutEvents' limit on a request's entries, 256 KB. */
const MAX_PUT_EVENTS_BYTES = 256 * 1024;

/** One event as the stand-in keeps it: the shape EventBridge hands a rule's target. */
export interface LocalEvent {
  readonly id: string;
  readonly 'detail-type': string;
  readonly source: string;
  readonly time: string;
  readonly 'event-bus': string;
  readonly detail: unknown;
}

export interface EventsStandIn {
  /** `http://127.0.0.1:<port>`, for `new EventBridgeClient({ endpoint })`. */
  readonly endpoint: string;
  close(): Promise<void>;
}

const putEventsInput = z.object({
  Entries: z
    .array(
      z.object({
        Source: z.string().min(1),
        DetailType: z.string().min(1),
        Detail: z.string(),
        EventBusName: z.string().min(1),
        Time: z.union([z.number(), z.string()]).optional(),
      }),
    )
    .min(1)
    .max(10),
});

/** Serves PutEvents until closed, keeping every event under `dir` and handing it to `onEvent`. */
export async function startEventsStandIn(
  dir: string,
  onEvent: (event: LocalEvent) => void = () => {},
): Promise<EventsStandIn> {
  await mkdir(dir, { recursive: true });
  // One append at a time, so the lines of a file keep the order the events were put in.
  let appending = Promise.resolve();
  const answer = async (request: IncomingMessage, response: ServerResponse) => {
    const target = request.headers['x-amz-target'];
    const body = await readBody(request, MAX_PUT_EVENTS_BYTES);
    if (target !== 'AWSEvents.PutEvents') {
      send(
        response,
        400,
        'UnsupportedOperation',
        `the local EventBridge answers PutEvents only, not ${String(target)}`,
      );
      return;
    }
    const parsed = putEventsInput.safeParse(safeJson(body));
    if (!parsed.success) {
      send(response, 400, 'ValidationException', z.prettifyError(parsed.error));
      return;
    }
    const events = parsed.data.Entries.map(
      (entry): LocalEvent => ({
        id: randomUUID(),
        'detail-type': entry.DetailType,
        source: entry.Source,
        time: timeOf(entry.Time),
        'event-bus': entry.EventBusName,
        detail: safeJson(entry.Detail) ?? entry.Detail,
      }),
    );
    appending = appending.then(async () => {
      for (const event of events) {
        await appendFile(join(dir, `${event.time.slice(0, 10)}.jsonl`), `${JSON.stringify(event)}\n`);
        onEvent(event);
      }
    });
    await appending;
    response
      .writeHead(200, { 'content-type': 'application/x-amz-json-1.1' })
      .end(JSON.stringify({ FailedEntryCount: 0, Entries: events.map((event) => ({ EventId: event.id })) }));
  };
  const server: Server = createServer((request, response) => {
    void answer(request, response).catch((error: unknown) => {
      send(response, 500, 'InternalException', error instanceof Error ? error.message : 'failed');
    });
  });
  return listenOnLoopback(server);
}

/** The SDK sends Time as epoch seconds. */
function timeOf(time: number | string | undefined): string {
  if (time === undefined) return new Date().toISOString();
  const date = typeof time === 'number' ? new Date(time * 1000) : new Date(time);
  return Number.isNaN(date.getTime()) ? new Date().toISOString() : date.toISOString();
}
