/**
 * The operator function behind its function URL (auth type AWS_IAM): Lambda has checked the
 * caller's SigV4 signature and IAM permission before the event arrives, and puts the caller's
 * principal in `requestContext.authorizer.iam`. That principal, and nothing in the body, is who
 * acted (docs/security.md).
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { z } from 'zod';
import { parseEnv } from '#shared/config';
import { Ledger } from '#shared/ledger';
import { functionLogger } from '#shared/powertools';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '#shared/sdk-clients';
import type { StepLogger } from '#shared/step-deps';
import { OPERATOR_COMMANDS, type OperatorAnswer, operatorCommandSchema } from './commands.ts';
import { auditableOperator } from './identity.ts';
import { type OperatorDeps, OperatorInputError, OperatorRefusal, runOperatorCommand } from './operator.ts';

/** The part of a function URL event (payload format 2.0) the function reads. */
export const functionUrlEventSchema = z.object({
  requestContext: z.object({
    http: z.object({ method: z.string() }),
    authorizer: z.object({ iam: z.object({ userArn: z.string().min(1) }).optional() }).optional(),
  }),
  body: z.string().optional(),
  isBase64Encoded: z.boolean().optional(),
});

/** The function URL's answer: an HTTP status and the JSON answer. */
export interface FunctionUrlResponse {
  readonly statusCode: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** Environment of the operator function. */
export const operatorEnvSchema = z.object({
  TABLE_NAME: z.string().min(1),
  ARCHIVE_BUCKET: z.string().min(1),
  AUDIT_BUCKET: z.string().min(1),
  STATE_MACHINE_ARN: z.string().min(1),
});

/** Largest command body taken: commands are a few hundred bytes. */
const MAX_BODY_BYTES = 16 * 1024;

/** The handler over `deps`: parse the event, take the principal, run the command, answer. */
export function makeOperatorHandler(deps: () => OperatorDeps, logger: () => StepLogger = functionLogger) {
  return async (event: unknown): Promise<FunctionUrlResponse> => {
    const parsed = functionUrlEventSchema.safeParse(event);
    if (!parsed.success)
      return answer(400, { ok: false, code: 'invalid', message: 'not a function URL request' });
    const { requestContext, body, isBase64Encoded } = parsed.data;
    // Without IAM auth on the URL there is no authenticated principal, and nobody to record.
    const principal = requestContext.authorizer?.iam?.userArn;
    if (principal === undefined) {
      return answer(403, {
        ok: false,
        code: 'forbidden',
        message:
          'the operator function acts only for an IAM-authenticated caller (function URL with AWS_IAM)',
      });
    }
    if (requestContext.http.method !== 'POST') {
      return answer(400, { ok: false, code: 'invalid', message: 'send the command with POST' });
    }
    const text = isBase64Encoded === true ? Buffer.from(body ?? '', 'base64').toString('utf8') : (body ?? '');
    if (Buffer.byteLength(text) > MAX_BODY_BYTES) {
      return answer(400, {
        ok: false,
        code: 'invalid',
        message: `the command is over ${MAX_BODY_BYTES} bytes`,
      });
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return answer(400, { ok: false, code: 'invalid', message: 'the command is not JSON' });
    }
    const command = operatorCommandSchema.safeParse(json);
    const unknown = unknownCommand(json);
    if (unknown !== undefined) {
      return answer(400, {
        ok: false,
        code: 'invalid',
        message: `command: this operator function does not know "${unknown}" (it knows ${OPERATOR_COMMANDS.join(', ')}): the CLI and the deployed stack are of different versions; update the older one (npx cdk deploy, or the CLI)`,
      });
    }
    if (!command.success) {
      const issue = command.error.issues[0];
      const where = issue?.path.map(String).join('.') ?? '';
      return answer(400, {
        ok: false,
        code: 'invalid',
        message: `${where === '' ? 'the command' : where}: ${issue?.message ?? 'invalid'}`,
      });
    }
    const operator = auditableOperator(principal);
    const log = logger();
    try {
      const result = await runOperatorCommand(deps(), operator, command.data);
      log.info('operator command applied', {
        command: command.data.command,
        request_id: command.data.request_id,
        operator,
      });
      return answer(200, { ok: true, result });
    } catch (error) {
      if (error instanceof OperatorRefusal) {
        log.info('operator command refused', {
          command: command.data.command,
          request_id: command.data.request_id,
          operator,
          code: error.code,
        });
        return answer(409, { ok: false, code: error.code, message: error.message });
      }
      if (error instanceof OperatorInputError) {
        return answer(400, { ok: false, code: 'invalid', message: error.message });
      }
      log.error('operator command failed', {
        command: command.data.command,
        request_id: command.data.request_id,
        error: error instanceof Error ? error.name : 'unknown',
      });
      return answer(500, {
        ok: false,
        code: 'internal',
        message: `the operator function failed: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`,
      });
    }
  };
}

/** The command a body names when this function does not know it (a CLI or a stack of another version). */
function unknownCommand(json: unknown): string | undefined {
  if (typeof json !== 'object' || json === null || !('command' in json)) return undefined;
  const name = json.command;
  if (typeof name !== 'string' || (OPERATOR_COMMANDS as readonly string[]).includes(name)) return undefined;
  // Only a plain name is echoed back: the body is the caller's.
  return /^[a-z_]{1,40}$/.test(name) ? name : 'that command';
}

function answer(statusCode: number, body: OperatorAnswer): FunctionUrlResponse {
  return { statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}

/** The operator's deps in a Lambda, from its environment (the API function builds its own on them). */
export function operatorDepsOf(env: z.infer<typeof operatorEnvSchema>, dynamo: DynamoDBClient): OperatorDeps {
  return {
    ledger: new Ledger(dynamo, env.TABLE_NAME),
    s3: prepareSdkClient(new S3Client(CACHED_MIDDLEWARE)),
    sfn: prepareSdkClient(new SFNClient(CACHED_MIDDLEWARE)),
    names: {
      ArchiveBucketName: env.ARCHIVE_BUCKET,
      AuditBucketName: env.AUDIT_BUCKET,
      StateMachineArn: env.STATE_MACHINE_ARN,
    },
    clock: () => new Date(),
  };
}

let lambdaDeps: OperatorDeps | undefined;

function operatorDepsFromEnv(): OperatorDeps {
  lambdaDeps ??= operatorDepsOf(
    parseEnv(operatorEnvSchema, process.env),
    prepareSdkClient(new DynamoDBClient(CACHED_MIDDLEWARE)),
  );
  return lambdaDeps;
}

export const handler = makeOperatorHandler(operatorDepsFromEnv);
