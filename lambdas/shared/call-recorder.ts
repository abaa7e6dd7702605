/**
 * Records every AWS call svc-dsr makes as the IAM authorisation AWS would perform for it: who made
 * it, the IAM action(s), the resource(s) and the request context that policies test. Nothing is
 * recorded unless a sink is installed (the IAM proof in the test suite, or `SVC_DSR_RECORD_CALLS`
 * naming a file), so a Lambda pays one branch per call.
 *
 * The action and resource come from the SDK command and its input, in a middleware every client
 * gets through {@link prepareSdkClient}'s caller: a call added anywhere is recorded without anyone
 * remembering to list it. What a service does on the caller's behalf (the KMS use of an encrypted
 * bucket, queue, table or secret) depends on the deployed resources, so the proof derives it from
 * the template; the record keeps the facts that derivation needs (bucket, queue, table, secret).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { appendFileSync } from 'node:fs';
import type { InitializeMiddleware, MetadataBearer, MiddlewareStack } from '@smithy/types';

/** A resource as the call names it; the proof maps local names to the deployed ARNs. */
export type CallResource =
  | { readonly kind: 's3-bucket'; readonly bucket: string }
  | { readonly kind: 's3-object'; readonly bucket: string; readonly key: string }
  | { readonly kind: 'dynamodb-table'; readonly table: string; readonly index?: string }
  | { readonly kind: 'sqs-queue'; readonly queue: string }
  | { readonly kind: 'states-machine'; readonly arn: string }
  | { readonly kind: 'states-execution'; readonly arn: string }
  | { readonly kind: 'secret'; readonly id: string }
  | { readonly kind: 'event-bus'; readonly bus: string }
  | { readonly kind: 'lambda-function'; readonly name: string }
  | { readonly kind: 'any' };

/** One IAM authorisation a call needs. */
export interface RecordedCall {
  /** The function that made the call (a step name, `Intake`, `DeadlineSweep`), or `CLI`. */
  readonly caller: string;
  /** The SDK operation, e.g. `PutObject`. */
  readonly operation: string;
  /** The IAM action, e.g. `s3:PutObject`. */
  readonly action: string;
  readonly resource: CallResource;
  /** Request context keys that policies may test, as IAM sees them. */
  readonly context: Readonly<Record<string, string>>;
}

/**
 * Where recorded calls go. `nth` counts the authorisations of one SDK call from 0, so a sink that
 * counts calls rather than authorisations counts the records with `nth` 0.
 */
export type CallSink = (call: RecordedCall, nth: number) => void;

/** Callers that are not a function of the stack. */
export const CALLERS = {
  /** The operator CLI, with the operator policy. */
  cli: 'CLI',
  /** Lambda's SQS event source mapping for intake, which uses the intake function's role. */
  intakeEventSource: 'IntakeEventSource',
  /** Local mode's own set-up and recovery (what CloudFormation or an operator does in AWS). */
  localRuntime: 'LocalRuntime',
} as const;

/** The caller used when no {@link runAsCaller} scope is active. */
const UNSCOPED = 'unscoped';

const callerScope = new AsyncLocalStorage<string>();
let defaultCaller: string = process.env.DSR_CALLER ?? UNSCOPED;
let sink: CallSink | undefined = fileSinkFromEnv(process.env.SVC_DSR_RECORD_CALLS);

/** Installs (or, with undefined, removes) the sink; returns the one it replaces. */
export function setCallSink(next: CallSink | undefined): CallSink | undefined {
  const previous = sink;
  sink = next;
  return previous;
}

/** Names the caller of every call made outside a {@link runAsCaller} scope (the CLI, a Lambda). */
export function setDefaultCaller(caller: string): void {
  defaultCaller = caller;
}

/** Runs `work` with every AWS call it makes attributed to `caller` (local mode runs every function in one process). */
export function runAsCaller<T>(caller: string, work: () => T): T {
  return callerScope.run(caller, work);
}

/**
 * Records the authorisations of a call made without an SDK client (a SigV4-signed HTTPS request,
 * such as a function URL's), attributed like any other call.
 */
export function recordAuthorisations(
  operation: string,
  authorisations: readonly Omit<RecordedCall, 'caller' | 'operation'>[],
): void {
  if (sink === undefined) return;
  const caller = callerScope.getStore() ?? defaultCaller;
  for (const [nth, call] of authorisations.entries()) sink({ caller, operation, ...call }, nth);
}

/** A sink that appends one JSON line per call to `path` (whole lines: concurrent writers do not interleave). */
export function fileCallSink(path: string): CallSink {
  return (call) => appendFileSync(path, `${JSON.stringify(call)}\n`);
}

function fileSinkFromEnv(path: string | undefined): CallSink | undefined {
  return path === undefined || path === '' ? undefined : fileCallSink(path);
}

/** The part of an SDK v3 client the recorder touches. */
interface RecordableClient {
  // biome-ignore lint/suspicious/noExplicitAny: every client's stack, whatever its input and output types
  readonly middlewareStack: Pick<MiddlewareStack<any, any>, 'add'>;
}

/** The name the recording middleware is registered under. */
export const CALL_RECORDER_MIDDLEWARE = 'svcDsrCallRecorder';

/** Adds the recording middleware to a client; returns the client. */
export function recordCalls<T extends RecordableClient>(client: T): T {
  const recorder: InitializeMiddleware<object, MetadataBearer> = (next, context) => async (args) => {
    if (sink !== undefined) {
      const service =
        SERVICE_PREFIX[context.clientName ?? ''] ?? (context.clientName ?? 'unknown').toLowerCase();
      const operation = (context.commandName ?? 'Unknown').replace(/Command$/, '');
      const caller = callerScope.getStore() ?? defaultCaller;
      for (const [nth, call] of authorisationsFor(service, operation, asRecord(args.input)).entries()) {
        sink({ caller, operation, ...call }, nth);
      }
    }
    return next(args);
  };
  client.middlewareStack.add(recorder, {
    step: 'initialize',
    name: CALL_RECORDER_MIDDLEWARE,
    override: true,
  });
  return client;
}

/** IAM service prefix by SDK client name. */
const SERVICE_PREFIX: Readonly<Record<string, string>> = {
  S3Client: 's3',
  DynamoDBClient: 'dynamodb',
  SQSClient: 'sqs',
  SFNClient: 'states',
  SecretsManagerClient: 'secretsmanager',
  EventBridgeClient: 'events',
  STSClient: 'sts',
};

type Authorisation = Omit<RecordedCall, 'caller' | 'operation'>;

/**
 * The IAM authorisations an SDK operation needs, from its input. Most operations need the action
 * of their own name on the resource their input names; the exceptions are S3's (multipart upload
 * and HEAD are authorised as PutObject and GetObject, versions and tags as actions of their own,
 * listing on the bucket) and the batch forms of SQS.
 */
export function authorisationsFor(
  service: string,
  operation: string,
  input: Readonly<Record<string, unknown>>,
): Authorisation[] {
  const one = (
    action: string,
    resource: CallResource,
    context: Record<string, string> = {},
  ): Authorisation => ({
    action: `${service}:${action}`,
    resource,
    context,
  });
  switch (service) {
    case 's3':
      return s3Authorisations(input, operation, one);
    case 'dynamodb': {
      const table = text(input.TableName);
      if (table === undefined) {
        const tables = Object.keys(asRecord(input.RequestItems));
        return tables.map((name) => one(operation, { kind: 'dynamodb-table', table: name }));
      }
      const index = text(input.IndexName);
      return [one(operation, { kind: 'dynamodb-table', table, ...(index ? { index } : {}) })];
    }
    case 'sqs': {
      const queue = queueName(text(input.QueueUrl) ?? text(input.QueueName));
      return [one(operation.replace(/Batch$/, ''), queue ? { kind: 'sqs-queue', queue } : { kind: 'any' })];
    }
    case 'states': {
      const machine = text(input.stateMachineArn);
      if (machine !== undefined) return [one(operation, { kind: 'states-machine', arn: machine })];
      const execution = text(input.executionArn);
      if (execution !== undefined) return [one(operation, { kind: 'states-execution', arn: execution })];
      return [one(operation, { kind: 'any' })];
    }
    case 'secretsmanager': {
      const id = text(input.SecretId);
      return [one(operation, id ? { kind: 'secret', id } : { kind: 'any' })];
    }
    case 'events': {
      // PutEvents is authorised once per bus its entries name (an entry without one goes to the default bus).
      const entries = Array.isArray(input.Entries) ? input.Entries : [];
      const buses = new Set(entries.map((entry) => text(asRecord(entry).EventBusName) ?? 'default'));
      return [...buses].map((bus) => one(operation, { kind: 'event-bus', bus }));
    }
    default:
      return [one(operation, { kind: 'any' })];
  }
}

function s3Authorisations(
  input: Readonly<Record<string, unknown>>,
  operation: string,
  one: (action: string, resource: CallResource, context?: Record<string, string>) => Authorisation,
): Authorisation[] {
  const bucket = text(input.Bucket) ?? '';
  const key = text(input.Key);
  const object: CallResource = { kind: 's3-object', bucket, key: key ?? '' };
  const versioned = text(input.VersionId) !== undefined;
  switch (operation) {
    case 'PutObject':
    case 'CreateMultipartUpload': {
      const context = s3WriteContext(input);
      const tagged = text(input.Tagging) !== undefined;
      return [one('PutObject', object, context), ...(tagged ? [one('PutObjectTagging', object)] : [])];
    }
    case 'UploadPart':
    case 'CompleteMultipartUpload':
      return [one('PutObject', object)];
    case 'GetObject':
    case 'HeadObject':
      return [one(versioned ? 'GetObjectVersion' : 'GetObject', object)];
    case 'DeleteObject':
      return [one(versioned ? 'DeleteObjectVersion' : 'DeleteObject', object)];
    case 'ListObjectsV2':
    case 'ListObjects': {
      const prefix = text(input.Prefix);
      return [
        one('ListBucket', { kind: 's3-bucket', bucket }, prefix === undefined ? {} : { 's3:prefix': prefix }),
      ];
    }
    case 'ListObjectVersions': {
      const prefix = text(input.Prefix);
      return [
        one(
          'ListBucketVersions',
          { kind: 's3-bucket', bucket },
          prefix === undefined ? {} : { 's3:prefix': prefix },
        ),
      ];
    }
    default:
      return key === undefined ? [one(operation, { kind: 's3-bucket', bucket })] : [one(operation, object)];
  }
}

/** The condition keys S3 sets from a write's headers. */
function s3WriteContext(input: Readonly<Record<string, unknown>>): Record<string, string> {
  const context: Record<string, string> = {};
  const ifNoneMatch = text(input.IfNoneMatch);
  if (ifNoneMatch !== undefined) context['s3:if-none-match'] = ifNoneMatch;
  const lockMode = text(input.ObjectLockMode);
  if (lockMode !== undefined) context['s3:object-lock-mode'] = lockMode;
  const retainUntil = input.ObjectLockRetainUntilDate;
  if (retainUntil instanceof Date) context['s3:object-lock-retain-until-date'] = retainUntil.toISOString();
  const sse = text(input.ServerSideEncryption);
  if (sse !== undefined) context['s3:x-amz-server-side-encryption'] = sse;
  const kmsKey = text(input.SSEKMSKeyId);
  if (kmsKey !== undefined) context['s3:x-amz-server-side-encryption-aws-kms-key-id'] = kmsKey;
  return context;
}

/** A queue's name from its URL (the last path segment) or its name. */
function queueName(urlOrName: string | undefined): string | undefined {
  if (urlOrName === undefined) return undefined;
  const segments = urlOrName.split('/').filter((segment) => segment !== '');
  return segments.at(-1);
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function asRecord(value: unknown): Readonly<Record<string, unknown>> {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};
}
