/**
 * How the CLI asks the operator function for a change: a SigV4-signed POST to its function URL
 * (AWS_IAM auth, so Lambda authenticates the caller and hands the function their principal), the
 * same POST to a serving local mode's operator endpoint, or, for tests and local-mode code, the
 * same handler called in this process. Whichever way, the function's answer is read the same way.
 */
import { createHash, createHmac } from 'node:crypto';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, Provider, SourceData } from '@smithy/types';
import { recordAuthorisations } from '#shared/call-recorder';
import {
  type OperatorCommand,
  type OperatorCommandName,
  type OperatorResult,
  operatorAnswerSchema,
  operatorResultSchemas,
} from '../../lambdas/operator/commands.ts';
import { makeOperatorHandler } from '../../lambdas/operator/handler.ts';
import type { OperatorDeps } from '../../lambdas/operator/operator.ts';
import { CliError, EXIT } from './io.ts';

/** The operator function's refusal, with its code (a bulk retry counts `running` apart). */
export class OperatorRefusedError extends CliError {
  constructor(
    readonly code: string,
    message: string,
    exitCode: number,
  ) {
    super(message, exitCode);
  }
}

/** Sends one command to the operator function; answers its HTTP status and body. */
export type OperatorTransport = (command: OperatorCommand) => Promise<{ status: number; body: string }>;

/** Runs a command through the operator function and answers its result; a refusal is a CliError. */
export type OperatorInvoker = <C extends OperatorCommandName>(
  command: Extract<OperatorCommand, { command: C }>,
) => Promise<OperatorResult<C>>;

/** The name a local or recorded call gives the operator function (the IAM proof maps it to the deployed one). */
export const OPERATOR_FUNCTION_NAME = 'svc-dsr-operator';

/**
 * An invoker over `transport`. `unknownRequest` words the refusal of an unknown request id as the
 * read commands do (naming the ledger and the target).
 */
export function operatorInvoker(
  transport: OperatorTransport,
  unknownRequest: (requestId: string) => CliError,
): OperatorInvoker {
  return async (command) => {
    const { status, body } = await transport(command);
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      throw new CliError(
        `the operator function answered HTTP ${status} without JSON${status === 403 ? ': is invoking it allowed to you (the OperatorPolicy)?' : ''}`,
        EXIT.failed,
      );
    }
    const answer = operatorAnswerSchema.safeParse(json);
    if (!answer.success) {
      // A function URL's own refusal (IAM) is `{"Message": ...}`.
      const message =
        typeof json === 'object' && json !== null && 'Message' in json ? String(json.Message) : body;
      throw new CliError(`the operator function refused (HTTP ${status}): ${message}`, EXIT.failed);
    }
    const data = answer.data;
    if (!data.ok) {
      if (data.code === 'unknown_request') throw unknownRequest(command.request_id);
      throw new OperatorRefusedError(
        data.code,
        data.message,
        data.code === 'invalid' ? EXIT.usage : EXIT.failed,
      );
    }
    const schema = operatorResultSchemas[command.command];
    const result = schema.safeParse(data.result);
    if (!result.success) {
      throw new CliError(
        `the operator function's answer to ${command.command} is not what this CLI expects: update one of them`,
        EXIT.failed,
      );
    }
    return result.data as OperatorResult<typeof command.command>;
  };
}

/**
 * The handler itself, called in this process with `principal` as the authenticated caller: the
 * same code as behind the function URL, for tests and local-mode code that hold the clients.
 */
export function inProcessTransport(deps: OperatorDeps, principal: () => Promise<string>): OperatorTransport {
  const handler = makeOperatorHandler(() => deps, silentLogger);
  return async (command) => {
    const answer = await handler(functionUrlEvent(await principal(), JSON.stringify(command)));
    return { status: answer.statusCode, body: answer.body };
  };
}

/** A function URL event (payload 2.0) as Lambda builds it for an IAM-authenticated POST. */
export function functionUrlEvent(userArn: string, body: string) {
  return {
    version: '2.0',
    requestContext: { http: { method: 'POST' }, authorizer: { iam: { userArn } } },
    body,
    isBase64Encoded: false,
  };
}

const silentLogger = () => ({ info() {}, warn() {}, error() {}, debug() {} });

function toBytes(data: ArrayBuffer | ArrayBufferView): Uint8Array {
  return ArrayBuffer.isView(data)
    ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
    : new Uint8Array(data);
}

/** Signs with node:crypto's SHA-256 (the signer asks for a hash or HMAC constructor). */
class NodeSha256 {
  #hash: ReturnType<typeof createHash> | ReturnType<typeof createHmac>;
  readonly #secret: string | Uint8Array | undefined;
  constructor(secret?: SourceData) {
    this.#secret = secret === undefined || typeof secret === 'string' ? secret : toBytes(secret);
    this.#hash = this.#fresh();
  }
  #fresh() {
    return this.#secret === undefined ? createHash('sha256') : createHmac('sha256', this.#secret);
  }
  update(data: SourceData): void {
    this.#hash.update(typeof data === 'string' ? data : toBytes(data));
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.#hash.digest());
  }
  reset(): void {
    this.#hash = this.#fresh();
  }
}

/**
 * A SigV4-signed POST (service `lambda`) of the command to `url`: the function URL of a deployed
 * stack, or a serving local mode's operator endpoint. Recorded for the IAM proof as the two
 * authorisations a function URL call needs.
 */
export function signedHttpTransport(
  url: string,
  signing: { region: Provider<string> | string; credentials: Provider<AwsCredentialIdentity> },
  answerMs: number,
): OperatorTransport {
  const signer = new SignatureV4({ service: 'lambda', sha256: NodeSha256, ...signing });
  const target = new URL(url);
  return async (command) => {
    const body = JSON.stringify(command);
    const signed = await signer.sign({
      method: 'POST',
      protocol: target.protocol,
      hostname: target.hostname,
      ...(target.port === '' ? {} : { port: Number(target.port) }),
      path: target.pathname,
      query: {},
      headers: { host: target.host, 'content-type': 'application/json' },
      body,
    });
    recordAuthorisations('InvokeFunctionUrl', [
      {
        action: 'lambda:InvokeFunctionUrl',
        resource: { kind: 'lambda-function', name: OPERATOR_FUNCTION_NAME },
        context: { 'lambda:FunctionUrlAuthType': 'AWS_IAM' },
      },
      {
        action: 'lambda:InvokeFunction',
        resource: { kind: 'lambda-function', name: OPERATOR_FUNCTION_NAME },
        context: { 'lambda:InvokedViaFunctionUrl': 'true' },
      },
    ]);
    const response = await fetch(target, {
      method: 'POST',
      headers: signed.headers,
      body,
      signal: AbortSignal.timeout(answerMs),
    });
    return { status: response.status, body: await response.text() };
  };
}

/** The operator function over `deps`, in this process, acting for `principal` (tests, local-mode code). */
export function inProcessOperator(
  deps: OperatorDeps & { readonly target?: 'aws' | 'local' },
  principal: () => Promise<string>,
): OperatorInvoker {
  return operatorInvoker(
    inProcessTransport(deps, principal),
    (requestId) =>
      new CliError(
        `no request ${requestId} in the ledger (${deps.ledger.tableName}, target ${deps.target ?? 'local'}): check the id, or the --target/--stack-outputs you meant`,
        EXIT.failed,
      ),
  );
}
