/**
 * AWS throttling in local mode: each local AWS service answers a seeded share of its calls with the
 * throttling error the real service sends, in its own wire shape, so the SDK's retries and the
 * workflow's Retry run against local mode as they do in AWS. The stand-ins are left as they are:
 * a small wrapper stands in front of each one's HTTP handler.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { z } from 'zod';
import { loadJsonFile } from '../emulator/config-file.ts';
import { createRandom, type Random } from '../emulator/prng.ts';
import { unknownKeys } from '../emulator/rules.ts';

/** The services that can be throttled: the three stand-ins, Lambda invokes and StartExecution. */
export const AWS_FAULT_SERVICES = ['dynamodb', 's3', 'sqs', 'lambda', 'states'] as const;
export type AwsFaultService = (typeof AWS_FAULT_SERVICES)[number];

const keys = ['seed', 'throttle_rate', 'services'];

/** The `--aws-faults` file: `{ "seed": 1, "throttle_rate": 0.05, "services": [...] }`. */
export const awsFaultsSchema = z.strictObject(
  {
    seed: z.number().int({ error: 'must be a whole number' }).default(1),
    throttle_rate: z
      .number({ error: 'must be a number between 0 and 1 (the share of calls throttled)' })
      .min(0, { error: 'must be between 0 and 1 (the share of calls throttled)' })
      .max(1, { error: 'must be between 0 and 1 (the share of calls throttled)' }),
    services: z
      .array(z.enum(AWS_FAULT_SERVICES, { error: `must be one of ${AWS_FAULT_SERVICES.join(', ')}` }))
      .min(1, { error: 'must list at least one service' })
      .default([...AWS_FAULT_SERVICES]),
  },
  { error: unknownKeys(keys) },
);
export type AwsFaults = z.infer<typeof awsFaultsSchema>;

/** Reads and validates an AWS faults file; throws EmulatorConfigError naming each bad field. */
export function loadAwsFaultsFile(path: string): Promise<AwsFaults> {
  return loadJsonFile(path, 'AWS faults file', awsFaultsSchema, 'AWS faults in local mode');
}

/**
 * Decides which calls are throttled. Each service draws from its own seeded stream, one draw per
 * call, so the same seed and the same sequence of calls to a service throttle the same calls,
 * whatever the other services do meanwhile.
 */
export class AwsThrottle {
  readonly #rate: number;
  readonly #streams = new Map<AwsFaultService, Random>();

  constructor(faults: AwsFaults | undefined) {
    this.#rate = faults?.throttle_rate ?? 0;
    for (const service of faults?.services ?? []) {
      this.#streams.set(service, createRandom(faults?.seed ?? 1, `aws-throttle:${service}`));
    }
  }

  /** True when this call to `service` is to be throttled. */
  throttles(service: AwsFaultService): boolean {
    const stream = this.#streams.get(service);
    return stream !== undefined && this.#rate > 0 && stream.next() < this.#rate;
  }
}

/** The services that answer over HTTP here; Lambda invokes run in process (see sfn-runner.ts). */
export type HttpFaultService = Exclude<AwsFaultService, 'lambda'>;

/**
 * Puts the throttle in front of a server's request handlers: a call `serviceOf` names and the
 * throttle picks gets the service's throttling answer, every other call goes to the handlers as
 * before. Works before or after the server listens.
 */
export function throttleServer(
  server: Server,
  throttle: AwsThrottle,
  serviceOf: (request: IncomingMessage) => HttpFaultService | null,
): void {
  const handlers = server.listeners('request');
  server.removeAllListeners('request');
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const service = serviceOf(request);
    if (service !== null && throttle.throttles(service)) {
      answerThrottled(service, request, response);
      return;
    }
    for (const handler of handlers) Reflect.apply(handler, server, [request, response]);
  });
}

/** What each service answers to a throttled call, as AWS sends it. */
const THROTTLE_ANSWERS: Record<
  HttpFaultService,
  { status: number; headers: Record<string, string>; body: string }
> = {
  dynamodb: {
    status: 400,
    headers: { 'content-type': 'application/x-amz-json-1.0' },
    body: JSON.stringify({
      __type: 'com.amazonaws.dynamodb.v20120810#ThrottlingException',
      message: 'Rate of requests exceeds the allowed throughput.',
    }),
  },
  s3: {
    status: 503,
    headers: { 'content-type': 'application/xml' },
    body:
      '<?xml version="1.0" encoding="UTF-8"?>\n' +
      '<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>' +
      '<RequestId>LOCALTHROTTLE</RequestId><HostId>local</HostId></Error>',
  },
  // The JSON protocol with SQS's query-compatible error code, as SQS sends RequestThrottled.
  sqs: {
    status: 403,
    headers: {
      'content-type': 'application/x-amz-json-1.0',
      'x-amzn-query-error': 'RequestThrottled;Sender',
    },
    body: JSON.stringify({ __type: 'com.amazonaws.sqs#RequestThrottled', message: 'Rate exceeded' }),
  },
  states: {
    status: 400,
    headers: { 'content-type': 'application/x-amz-json-1.0' },
    body: JSON.stringify({ __type: 'ThrottlingException', message: 'Rate exceeded' }),
  },
};

function answerThrottled(
  service: HttpFaultService,
  request: IncomingMessage,
  response: ServerResponse,
): void {
  const answer = THROTTLE_ANSWERS[service];
  // The body is read to its end first, so the connection stays usable for the SDK's retry.
  request.resume();
  request.once('end', () => {
    const head = request.method === 'HEAD';
    response.writeHead(answer.status, {
      ...answer.headers,
      'x-amzn-requestid': 'local-throttle',
      'content-length': head ? '0' : String(Buffer.byteLength(answer.body)),
    });
    response.end(head ? undefined : answer.body);
  });
}
