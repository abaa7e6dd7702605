/**
 * The error classes of svc-dsr. Both the Lambdas (which throw them) and the CDK state machine
 * (which retries or catches them by name) import this one module, so a name can never drift
 * between the code that throws and the definition that handles it.
 */

/** Base class: every error svc-dsr throws on purpose. `retryable` decides Retry versus Catch. */
export abstract class DsrError extends Error {
  abstract override readonly name: string;
  abstract readonly retryable: boolean;
  /** A short machine-readable code recorded in the ledger and the audit trail. */
  abstract readonly code: string;
}

/** The platform answered 429: try again later, after `retryAfterSeconds` when it said so. */
export class PlatformThrottledError extends DsrError {
  override readonly name = 'PlatformThrottledError';
  readonly retryable = true;
  readonly code = 'platform_throttled';
  constructor(
    message: string,
    readonly retryAfterSeconds: number | undefined,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Why a platform call waits before it is made: the shared rate limit, the cap on open exports, or an outage. */
export type PlatformWaitReason = 'rate' | 'exports' | 'outage';

/**
 * svc-dsr's own load control has no room for this platform call yet: the step ends with a wait
 * (a Step Functions Wait of `waitSeconds`) and runs again. Never a failure: step handlers turn it
 * into the step's `platform_wait` answer, and it never reaches a Catch.
 */
export class PlatformCapacityError extends DsrError {
  override readonly name = 'PlatformCapacityError';
  readonly retryable = true;
  readonly code = 'platform_capacity';
  constructor(
    readonly reason: PlatformWaitReason,
    readonly waitSeconds: number,
    /** What the step answers besides the wait, so the states after it find what they read. */
    readonly carry: Readonly<Record<string, unknown>> = {},
  ) {
    super(
      `the platform call waits ${waitSeconds} s for ${reason === 'rate' ? 'the shared rate limit' : reason === 'exports' ? 'a free export slot' : 'the platform to come back'}`,
    );
  }

  /** The same wait, answering `carry` besides it. */
  carrying(carry: Readonly<Record<string, unknown>>): PlatformCapacityError {
    return new PlatformCapacityError(this.reason, this.waitSeconds, carry);
  }
}

/**
 * The platform has been down (the shared circuit breaker open) for longer than the outage horizon:
 * the request fails, for an operator to retry once the platform is back.
 */
export class PlatformOutageError extends DsrError {
  override readonly name = 'PlatformOutageError';
  readonly retryable = false;
  readonly code = 'platform_outage';
}

/** The platform answered 5xx or refused the connection. */
export class PlatformUnavailableError extends DsrError {
  override readonly name = 'PlatformUnavailableError';
  readonly retryable = true;
  readonly code = 'platform_unavailable';
  constructor(
    message: string,
    readonly status: number | undefined,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The platform did not answer within the client's timeout. */
export class PlatformTimeoutError extends DsrError {
  override readonly name = 'PlatformTimeoutError';
  readonly retryable = true;
  readonly code = 'platform_timeout';
}

/** The connection dropped before a whole answer arrived. */
export class PlatformConnectionResetError extends DsrError {
  override readonly name = 'PlatformConnectionResetError';
  readonly retryable = true;
  readonly code = 'platform_connection_reset';
}

/**
 * An AWS service throttled the call, failed on its side (5xx) or the connection to it broke: the
 * call is worth repeating later. Step handlers turn the SDK's many spellings of this into this one
 * name (see `awsTransientError`), so the state machine retries them all with one rule.
 */
export class AwsTransientError extends DsrError {
  override readonly name = 'AwsTransientError';
  readonly retryable = true;
  readonly code = 'aws_transient';
}

/** A download ended before the announced number of bytes arrived. */
export class TruncatedDownloadError extends DsrError {
  override readonly name = 'TruncatedDownloadError';
  readonly retryable = true;
  readonly code = 'truncated_download';
}

/**
 * The export POST reached the platform but its answer was an error or never came: an export may
 * have started. Retried only through the workflow, which counts it as an export attempt.
 */
export class ExportStartUncertainError extends DsrError {
  override readonly name = 'ExportStartUncertainError';
  readonly retryable = true;
  readonly code = 'export_start_uncertain';
}

/** The platform refused the credentials (401/403): retrying cannot help until a person fixes them. */
export class PlatformAuthError extends DsrError {
  override readonly name = 'PlatformAuthError';
  readonly retryable = false;
  readonly code = 'platform_auth';
  constructor(
    message: string,
    readonly status: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The platform rejected the request itself (4xx other than 401/403/404/429). */
export class PlatformRejectedError extends DsrError {
  override readonly name = 'PlatformRejectedError';
  readonly retryable = false;
  readonly code = 'platform_rejected';
  constructor(
    message: string,
    readonly status: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The platform answered with a body that does not match the documented shape. */
export class PlatformResponseInvalidError extends DsrError {
  override readonly name = 'PlatformResponseInvalidError';
  readonly retryable = false;
  readonly code = 'platform_response_invalid';
}

/** An object the platform should know (an export id) is unknown to it. */
export class PlatformNotFoundError extends DsrError {
  override readonly name = 'PlatformNotFoundError';
  readonly retryable = false;
  readonly code = 'platform_not_found';
}

/**
 * The platform answered that the activity call (endpoint 8) is not enabled for the account: only
 * its support can enable it. The subject package is built without conversation details.
 */
export class ActivityNotEnabledError extends DsrError {
  override readonly name = 'ActivityNotEnabledError';
  readonly retryable = false;
  readonly code = 'activity_not_enabled';
}

/**
 * An identifier the platform API puts in a URL path cannot be sent there as it is: "." and ".." are
 * path steps to every URL parser and proxy, so the call would reach another path. Retrying cannot
 * help; a person must handle the request with the platform.
 */
export class UnaddressableIdError extends DsrError {
  override readonly name = 'UnaddressableIdError';
  readonly retryable = false;
  readonly code = 'unaddressable_id';
}

/**
 * The subject left the platform after it was resolved (an erasure of the same subject, by this
 * service or another): the platform has no data to export, which is the `no_data` outcome.
 */
export class SubjectNotFoundError extends DsrError {
  override readonly name = 'SubjectNotFoundError';
  readonly retryable = false;
  readonly code = 'subject_not_found';
}

/** A download link points at a host that is not on the allowlist, or is not https. */
export class DownloadHostNotAllowedError extends DsrError {
  override readonly name = 'DownloadHostNotAllowedError';
  readonly retryable = false;
  readonly code = 'download_host_not_allowed';
}

/** The download link has expired on the platform (a new export is needed). */
export class DownloadLinkExpiredError extends DsrError {
  override readonly name = 'DownloadLinkExpiredError';
  readonly retryable = false;
  readonly code = 'download_link_expired';
}

/** The stored archive is not the zip the platform documents. */
export class InvalidArchiveError extends DsrError {
  override readonly name = 'InvalidArchiveError';
  readonly retryable = false;
  readonly code = 'invalid_archive';
}

/** The platform reported the export `failed` more often than the attempt limit allows. */
export class ExportFailedError extends DsrError {
  override readonly name = 'ExportFailedError';
  readonly retryable = false;
  readonly code = 'export_failed';
}

/** The export stayed pending past the total wait budget. */
export class ExportTimedOutError extends DsrError {
  override readonly name = 'ExportTimedOutError';
  readonly retryable = false;
  readonly code = 'export_timed_out';
}

/** After a deletion the platform still knows the subject. */
export class ErasureNotVerifiedError extends DsrError {
  override readonly name = 'ErasureNotVerifiedError';
  readonly retryable = false;
  readonly code = 'erasure_not_verified';
}

/** The request was cancelled while its execution ran: the execution stops without touching the platform. */
export class RequestCancelledError extends DsrError {
  override readonly name = 'RequestCancelledError';
  readonly retryable = false;
  readonly code = 'request_cancelled';
}

/** The ledger has no record of the request, or a step found it in a state it cannot act on. */
export class LedgerStateError extends DsrError {
  override readonly name = 'LedgerStateError';
  readonly retryable = false;
  readonly code = 'ledger_state';
}

/**
 * The request's audit chain is closed by its final record: nothing more may be appended (only an
 * operator's retry of a failed request opens a new segment after it).
 */
export class AuditChainClosedError extends DsrError {
  override readonly name = 'AuditChainClosedError';
  readonly retryable = false;
  readonly code = 'audit_chain_closed';
}

/** No request with that id is in the ledger: an operator's command named one that was never submitted. */
export class RequestUnknownError extends DsrError {
  override readonly name = 'RequestUnknownError';
  readonly retryable = false;
  readonly code = 'request_unknown';
}

/**
 * A ledger rule (can cancel, can extend, can retry, can deny) refuses the change for the request as
 * it stands, or the request changed between the read and the conditional write. The message says
 * which rule applied and what to do instead.
 */
export class LedgerRuleError extends DsrError {
  override readonly name = 'LedgerRuleError';
  readonly retryable = false;
  readonly code = 'ledger_rule';
}

/** A step was invoked with input that does not match its contract (a definition/handler mismatch). */
export class StepInputError extends DsrError {
  override readonly name = 'StepInputError';
  readonly retryable = false;
  readonly code = 'step_input';
}

/** Configuration (environment, secret, context) is missing or invalid. */
export class ConfigurationError extends DsrError {
  override readonly name = 'ConfigurationError';
  readonly retryable = false;
  readonly code = 'configuration';
}

/**
 * EventBridge refused some status events. The stream batch that carried them is delivered again,
 * so the events are late rather than lost (consumers de-duplicate by the detail's `event_id`).
 */
export class StatusEventsNotPublishedError extends DsrError {
  override readonly name = 'StatusEventsNotPublishedError';
  readonly retryable = true;
  readonly code = 'status_events_not_published';
}

/** A local data dir is held by another live process (local/data-dir-lock.ts); the message names it. */
export class DataDirInUseError extends DsrError {
  override readonly name = 'DataDirInUseError';
  readonly retryable = false;
  readonly code = 'data_dir_in_use';
}

/** Names Step Functions retries with backoff and jitter. */
export const RETRYABLE_ERRORS = [
  'PlatformThrottledError',
  'PlatformUnavailableError',
  'PlatformTimeoutError',
  'PlatformConnectionResetError',
  'TruncatedDownloadError',
  'AwsTransientError',
] as const;

/**
 * Lambda's own errors when it could not run the function (throttled, a service fault, the SDK
 * inside Step Functions losing the call): the function did not run, so running it again is safe.
 */
export const LAMBDA_SERVICE_ERRORS = [
  'Lambda.TooManyRequestsException',
  'Lambda.ServiceException',
  'Lambda.SdkClientException',
  'Lambda.AWSLambdaException',
  'Lambda.ClientExecutionTimeoutException',
] as const;

/** Names that go straight to RecordFailure. */
export const TERMINAL_ERRORS = [
  'PlatformOutageError',
  'PlatformAuthError',
  'PlatformRejectedError',
  'PlatformResponseInvalidError',
  'PlatformNotFoundError',
  'ActivityNotEnabledError',
  'UnaddressableIdError',
  'DownloadHostNotAllowedError',
  'DownloadLinkExpiredError',
  'InvalidArchiveError',
  'ExportFailedError',
  'ExportTimedOutError',
  'ErasureNotVerifiedError',
  'LedgerStateError',
  'AuditChainClosedError',
  'StepInputError',
  'ConfigurationError',
] as const;

/** Names that end the execution quietly: the ledger already says why. */
export const CANCEL_ERRORS = ['RequestCancelledError'] as const;

/** Names that end the request as `completed/no_data`: the subject is gone from the platform. */
export const NO_DATA_ERRORS = ['SubjectNotFoundError'] as const;

/**
 * Names that send the workflow back to StartExport as a new, counted attempt rather than a blind
 * retry of the same call: the platform may or may not have started an export.
 */
export const EXPORT_RESTART_ERRORS = ['ExportStartUncertainError'] as const;

export type RetryableErrorName = (typeof RETRYABLE_ERRORS)[number];
export type TerminalErrorName = (typeof TERMINAL_ERRORS)[number];

/** True when `error` is one of ours and worth retrying. */
export function isRetryable(error: unknown): boolean {
  return error instanceof DsrError && error.retryable;
}

/** The ledger code of an ASL error name: `PlatformThrottledError` -> `platform_throttled`, `States.Timeout` -> `states_timeout`. */
export function errorCodeOf(errorName: string): string {
  const base = errorName.replace(/^States\./, 'States').replace(/Error$/, '');
  const snake = base.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
  return /^[a-z0-9_]{1,64}$/.test(snake) ? snake : 'unknown';
}

/** SDK error names that mean "throttled": DynamoDB, S3, KMS, SQS, Step Functions, Secrets Manager, Lambda. */
const AWS_THROTTLE_NAMES = new Set([
  'ThrottlingException',
  'Throttling',
  'ThrottledException',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'TooManyRequestsException',
  'SlowDown',
  'RequestThrottled',
  'RequestThrottledException',
  'KMSInternalException',
  'InternalServerError',
  'InternalServerErrorException',
  'InternalFailure',
  'InternalError',
  'ServiceUnavailable',
  'ServiceUnavailableException',
  'TransactionInProgressException',
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
]);

/** Node's codes for a connection that broke or never came up. */
const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'ENOTFOUND',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * The AwsTransientError for an AWS SDK error that is worth retrying (a throttle, a 5xx, a broken
 * connection), or undefined for anything else (svc-dsr's own errors, a refused condition, an access
 * denial). The message names the service's error only, never the request's contents.
 */
export function awsTransientError(error: unknown, depth = 0): AwsTransientError | undefined {
  if (!(error instanceof Error) || error instanceof DsrError) return undefined;
  // A wrapper (Powertools' GetParameterError) keeps the SDK's error as its cause.
  if (depth < 3 && error.cause !== undefined) {
    const inner = awsTransientError(error.cause, depth + 1);
    if (inner !== undefined) return inner;
  }
  const metadata = '$metadata' in error ? (error.$metadata as { httpStatusCode?: unknown }) : undefined;
  const status = typeof metadata?.httpStatusCode === 'number' ? metadata.httpStatusCode : undefined;
  const retryable =
    '$retryable' in error && typeof error.$retryable === 'object' && error.$retryable !== null;
  const code = 'code' in error && typeof error.code === 'string' ? error.code : undefined;
  const transient =
    AWS_THROTTLE_NAMES.has(error.name) ||
    (code !== undefined && NETWORK_CODES.has(code)) ||
    (metadata !== undefined && (retryable || status === 429 || (status !== undefined && status >= 500)));
  if (!transient) return undefined;
  const what = status === undefined ? error.name : `${error.name}, HTTP ${status}`;
  return new AwsTransientError(
    `an AWS service call failed transiently (${what}${code === undefined ? '' : `, ${code}`}); it is retried with backoff`,
    { cause: error },
  );
}
