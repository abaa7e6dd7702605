/**
 * A local stand-in for Secrets Manager's GetSecretValue, on loopback, so local mode's functions
 * read their secrets through the same Powertools and SDK code path as in Lambda (and the IAM
 * proof observes each read). It serves a fixed set of string secrets; any other call is refused as
 * Secrets Manager would refuse an unknown one.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { z } from 'zod';
import { listenOnLoopback, readBody, safeJson } from '../http.ts';

/** A running stand-in. */
export interface SecretsStandIn {
  /** `http://127.0.0.1:<port>`, for `new SecretsManagerClient({ endpoint })`. */
  readonly endpoint: string;
  close(): Promise<void>;
}

const MAX_BODY = 64 * 1024;
const getSecretValueInput = z.object({ SecretId: z.string().min(1) });

/** Serves `secrets` (id -> value) until closed. */
export async function startSecretsStandIn(
  secrets: Readonly<Record<string, string>>,
): Promise<SecretsStandIn> {
  const created = new Date();
  const server: Server = createServer((request, response) => {
    void answer(request, response).catch((error: unknown) => {
      send(response, 500, 'InternalServiceError', error instanceof Error ? error.message : 'failed');
    });
  });
  const answer = async (request: IncomingMessage, response: ServerResponse) => {
    const target = request.headers['x-amz-target'];
    const body = await readBody(request, MAX_BODY);
    if (target !== 'secretsmanager.GetSecretValue') {
      send(
        response,
        400,
        'UnsupportedOperation',
        `the local Secrets Manager answers GetSecretValue only, not ${String(target)}`,
      );
      return;
    }
    const parsed = getSecretValueInput.safeParse(safeJson(body));
    if (!parsed.success) {
      send(response, 400, 'InvalidParameterException', 'SecretId is required');
      return;
    }
    const id = parsed.data.SecretId;
    const value = secrets[id];
    if (value === undefined) {
      send(response, 400, 'ResourceNotFoundException', "Secrets Manager can't find the specified secret.");
      return;
    }
    const json = JSON.stringify({
      ARN: `arn:aws:secretsmanager:us-east-1:000000000000:secret:${id}-local0`,
      Name: id,
      SecretString: value,
      VersionId: 'local-version-1',
      VersionStages: ['AWSCURRENT'],
      CreatedDate: created.getTime() / 1000,
    });
    response.writeHead(200, { 'content-type': 'application/x-amz-json-1.1' }).end(json);
  };
  return listenOnLoopback(server);
}

export function send(response: ServerResponse, status: number, type: string, message: string): void {
  response
    .writeHead(status, { 'content-type': 'application/x-amz-json-1.1', 'x-amzn-errortype': type })
    .end(JSON.stringify({ __type: type, message }));
}
