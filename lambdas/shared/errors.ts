/**
 * The error classes of svc-dsr. Both the Lambdas (which throw them) and the CDK state machine
 * (which retries or catches them by name) import this one module, so a name can never drift
 * between the code that throws and the definition that handles it.
 */

/**
 * What happens to an error of a class, decided here once for the Lambdas that throw it and the
 * state machine that handles it:
 * - `retry`: Step Functions runs the step again, with backoff and jitter, up to the horizon;
 * - `restart_export`: the workflow goes back to StartExport, which counts a new attempt;
 * - `wait`: the step answers a Wait for capacity and runs again; it never reaches a Catch;
 * - `no_data`: the request ends `completed/no_data` (the subject is gone from the platform);
 * - `cancel`: the execution ends quietly, the ledger already says why;
 * - `fail`: RecordFailure records the error's code, for an operator to read and retry;
 * - `redeliver`: outside the workflow, the event source delivers the batch again.
 */
export type ErrorHandling = 'retry' | 'restart_export' | 'wait' | 'no_data' | 'cancel' | 'fail' | 'redeliver';

/** The handlings in which running the same work again may succeed. */
const RETRYABLE_HANDLINGS: ReadonlySet<ErrorHandling> = new Set([
  'retry',
  'restart_export',
  'wait',
  'redeliver',
]);

/** Base class: every error svc-dsr throws on purpose. Its class's `handling` decides what follows. */
export abstract class DsrError extends Error {
  abstract override readonly name: string;
  static readonly handling: ErrorHandling;
  /** A short machine-readable code recorded in the ledger and the audit trail. */
  abstract readonly code: string;

  /** What happens to this error: its class's `handling`. */
  get handling(): ErrorHandling {
    return (this.constructor as typeof DsrError).handling;
  }

  /** True when running the same work again may succeed. */
  get retryable(): boolean {
    return RETRYABLE_HANDLINGS.has(this.handling);
  }
}

/** The platform answered 429: try again later, after `retryAfterSeconds` when it said so. */
export class PlatformThrottledError extends DsrError {
  override readonly name = 'PlatformThrottledError';
  static override readonly handling: ErrorHandling = 'retry';
  readonly code = 'platform_throttled';
  constructor(
    message: string,
    readonly retryAfterSeconds: number | undefined,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * The platform answered 429 because too many exports are open on its side (its error code
 * `too_many_open_exports`): fewer than the stack's platformMaxOpenExports, as a new platform limit
 * or another system sharing the account makes it. No export began. StartExport turns it into a
 * wait for an export slot, and the gate lowers its cap for a while (platform-gate.ts); anywhere
 * else it is retried as a throttle is.
 */
export class PlatformExportsFullError extends DsrError {
  override readonly name = 'PlatformExportsFullError';
  static override readonly handling: ErrorHandling = 'retry';
  readonly code = 'platform_exports_full';
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
  static override readonly handling: ErrorHandling = 'wait';
  readonly code = 'platform_capacity';
  constructor(
    readonly reason: PlatformWaitReason,
    readonly waitSeconds: number,
    /** What the step answers besides the wait, so the states after it find what they read. */
    readonly carry: Readonly<Record<string, unknown>> = {},
    /**
     * Set on a wait for an export slot when older requests wait for one too: a freed slot goes to
     * them first, and to this one by a wake-up, so it need not look again soon.
     */
    readonly queuedBehind = false,
  ) {
    super(
      `the platform call waits ${waitSeconds} s for ${reason === 'rate' ? 'the shared rate limit' : reason === 'exports' ? 'a free export slot' : 'the platform to come back'}`,
    );
  }

  /** The same wait, answering `carry` besides it. */
  carrying(carry: Readonly<Record<string, unknown>>): PlatformCapacityError {
    return new PlatformCapacityError(this.reason, this.waitSeconds, carry, this.queuedBehind);
  }
}

/**
 * The platform has been down (the shared circuit breaker open) for longer than the outage horizon:
 * the request fails, for an operator to retry once the platform is back.
 */
export class PlatformOutageError extends DsrError {
  override readonly name = 'PlatformOutageError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'platform_outage';
}

/** The platform answered 5xx or refused the connection. */
export class PlatformUnavailableError extends DsrError {
  override readonly name = 'PlatformUnavailableError';
  static override readonly handling: ErrorHandling = 'retry';
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
  static override readonly handling: ErrorHandling = 'retry';
  readonly code = 'platform_timeout';
}

/** The connection dropped before a whole answer arrived. */
export class PlatformConnectionResetError extends DsrError {
  override readonly name = 'PlatformConnectionResetError';
  static override readonly handling: ErrorHandling = 'retry';
  readonly code = 'platform_connection_reset';
}

/**
 * An AWS service throttled the call, failed on its side (5xx) or the connection to it broke: the
 * call is worth repeating later. Step handlers turn the SDK's many spellings of this into this one
 * name (see `awsTransientError`), so the state machine retries them all with one rule.
 */
export class AwsTransientError extends DsrError {
  override readonly name = 'AwsTransientError';
  static override readonly handling: ErrorHandling = 'retry';
  readonly code = 'aws_transient';
}

/** A download ended before the announced number of bytes arrived. */
export class TruncatedDownloadError extends DsrError {
  override readonly name = 'TruncatedDownloadError';
  static override readonly handling: ErrorHandling = 'retry';
  readonly code = 'truncated_download';
}

/**
 * The export POST reached the platform but its answer was an error or never came: an export may
 * have started. Retried only through the workflow, which counts it as an export attempt.
 */
export class ExportStartUncertainError extends DsrError {
  override readonly name = 'ExportStartUncertainError';
  static override readonly handling: ErrorHandling = 'restart_export';
  readonly code = 'export_start_uncertain';
}

/** The platform refused the credentials (401/403): retrying cannot help until a person fixes them. */
export class PlatformAuthError extends DsrError {
  override readonly name = 'PlatformAuthError';
  static override readonly handling: ErrorHandling = 'fail';
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
  static override readonly handling: ErrorHandling = 'fail';
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
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'platform_response_invalid';
}

/** An object the platform should know (an export id) is unknown to it. */
export class PlatformNotFoundError extends DsrError {
  override readonly name = 'PlatformNotFoundError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'platform_not_found';
}

/**
 * The platform answered that the activity call (endpoint 8) is not enabled for the account: only
 * its support can enable it. The subject package is built without conversation details.
 */
export class ActivityNotEnabledError extends DsrError {
  override readonly name = 'ActivityNotEnabledError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'activity_not_enabled';
}

/**
 * An identifier the platform API puts in a URL path cannot be sent there as it is: "." and ".." are
 * path steps to every URL parser and proxy, so the call would reach another path. Retrying cannot
 * help; a person must handle the request with the platform.
 */
export class UnaddressableIdError extends DsrError {
  override readonly name = 'UnaddressableIdError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'unaddressable_id';
}

/**
 * The subject left the platform after it was resolved (an erasure of the same subject, by this
 * service or another): the platform has no data to export, which is the `no_data` outcome.
 */
export class SubjectNotFoundError extends DsrError {
  override readonly name = 'SubjectNotFoundError';
  static override readonly handling: ErrorHandling = 'no_data';
  readonly code = 'subject_not_found';
}

/** A download link points at a host that is not on the allowlist, or is not https. */
export class DownloadHostNotAllowedError extends DsrError {
  override readonly name = 'DownloadHostNotAllowedError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'download_host_not_allowed';
}

/** The download link has expired on the platform (a new export is needed). */
export class DownloadLinkExpiredError extends DsrError {
  override readonly name = 'DownloadLinkExpiredError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'download_link_expired';
}

/**
 * A copy that needs another invocation could not go on: the platform answered a ranged request for
 * the rest of the archive with the whole of it, or with another range (docs/design.md, "Copies
 * longer than one invocation"). Terminal: the next attempt would meet the same platform.
 */
export class DownloadNotResumableError extends DsrError {
  override readonly name = 'DownloadNotResumableError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'download_not_resumable';
}

/** The stored archive is not the zip the platform documents. */
export class InvalidArchiveError extends DsrError {
  override readonly name = 'InvalidArchiveError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'invalid_archive';
}

/**
 * The export expands past the stack's `archiveMaxExpandedBytes`: not a broken zip but one larger
 * than this deployment agreed to check. Terminal, since a retry meets the same archive; the
 * message names the limit and the size, so an operator can raise the setting and retry.
 */
export class ArchiveTooLargeError extends DsrError {
  override readonly name = 'ArchiveTooLargeError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'archive_too_large';
  constructor(
    readonly limitBytes: number,
    /** What the archive was found to expand to; with `atLeast`, a lower bound found while streaming. */
    readonly expandedBytes: number,
    readonly atLeast = false,
  ) {
    super(
      `the archive's entries expand to ${atLeast ? 'more than ' : ''}${expandedBytes} bytes, past the limit of ${limitBytes} (stack setting archiveMaxExpandedBytes); raise the setting to at least ${atLeast ? 'the export size' : expandedBytes} bytes, redeploy, and retry the request`,
    );
  }
}

/** S3 answered a call outside its contract (no ETag, no upload id, no body, another range than asked). */
export class StorageAnswerInvalidError extends DsrError {
  override readonly name = 'StorageAnswerInvalidError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'storage_answer_invalid';
}

/** The export attempts are spent, and the platform reported the last export `failed`. */
export class ExportFailedError extends DsrError {
  override readonly name = 'ExportFailedError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'export_failed';
}

/**
 * The export attempts are spent, and the last one never got an answer that an export started (the
 * POST's answer was lost, or the run died with the POST out): no export is known to have failed,
 * the starts are what failed.
 */
export class ExportStartUnconfirmedError extends DsrError {
  override readonly name = 'ExportStartUnconfirmedError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'export_start_unconfirmed';
}

/** How the last export attempt ended, as the ledger holds it (`export_start`, `export_status`). */
export interface LastExportAttempt {
  readonly start: string | undefined;
  readonly status: string | undefined;
}

/**
 * The error for a request whose export attempts are spent, named after what failed last: an export
 * the platform reported failed (`export_failed`), or a start that got no answer (`export_start_unconfirmed`).
 */
export function exportAttemptsSpentError(spent: number, limit: number, last: LastExportAttempt): DsrError {
  const budget = `the limit is ${limit}; \`npx svc-dsr retry\` gives it a fresh budget`;
  // An item from before the start was recorded has no `export_start`: its export was accepted.
  const start = last.start ?? 'accepted';
  if (start === 'accepted' && last.status === 'failed') {
    return new ExportFailedError(
      `the platform reported the export failed; ${spent} export attempt(s) were made, ${budget}`,
    );
  }
  const how =
    start === 'interrupted'
      ? 'the last start was interrupted before the platform answered'
      : start === 'uncertain'
        ? 'the platform gave no clear answer to the last start'
        : `the last start ${start}, the last export ${last.status ?? 'not started'}`;
  return new ExportStartUnconfirmedError(
    `no export was confirmed started: ${spent} start(s) may have reached the platform and ${how}; ${budget}`,
  );
}

/** The export stayed pending past the total wait budget. */
export class ExportTimedOutError extends DsrError {
  override readonly name = 'ExportTimedOutError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'export_timed_out';
}

/**
 * A correction's re-read found the profile changed by someone else between the read and the
 * write, and again when the correction was made a second time: a person must look at the profile.
 */
export class ProfileChangedConcurrentlyError extends DsrError {
  override readonly name = 'ProfileChangedConcurrentlyError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'profile_changed_concurrently';
}

/** After a deletion the platform still knows the subject. */
export class ErasureNotVerifiedError extends DsrError {
  override readonly name = 'ErasureNotVerifiedError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'erasure_not_verified';
}

/** The request was cancelled while its execution ran: the execution stops without touching the platform. */
export class RequestCancelledError extends DsrError {
  override readonly name = 'RequestCancelledError';
  static override readonly handling: ErrorHandling = 'cancel';
  readonly code = 'request_cancelled';
}

/**
 * The execution is not the request's current run: an operator's retry or the reconciler's resume
 * started a newer one. It stops without touching the platform or the ledger; the newer run goes on.
 */
export class SupersededRunError extends DsrError {
  override readonly name = 'SupersededRunError';
  static override readonly handling: ErrorHandling = 'cancel';
  readonly code = 'superseded_run';
}

/**
 * The platform has no user under the key as submitted, but has one under another spelling of it
 * that looks the same: another Unicode normalisation form (NFC, NFD, NFKC, NFKD), a single-script
 * form of a key that mixes scripts (the Latin-only form of `u-pаul28` with a Cyrillic "а"), or its
 * confusable skeleton (UTS #39). The message names which, never the spelling. Nothing is erased or
 * exported under a spelling nobody submitted, and the request does not end as no_data: the team
 * confirms the key and submits it again.
 */
export class SubjectUnderOtherSpellingError extends DsrError {
  override readonly name = 'SubjectUnderOtherSpellingError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'subject_under_other_spelling';
}

/** The ledger has no record of the request, or a step found it in a state it cannot act on. */
export class LedgerStateError extends DsrError {
  override readonly name = 'LedgerStateError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'ledger_state';
}

/**
 * The request's audit chain is closed by its final record: nothing more may be appended (only an
 * operator's retry of a failed request opens a new segment after it).
 */
export class AuditChainClosedError extends DsrError {
  override readonly name = 'AuditChainClosedError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'audit_chain_closed';
}

/** A stored audit record or daily manifest is not what the trail wrote: evidence to investigate, never to overwrite. */
export class AuditRecordInvalidError extends DsrError {
  override readonly name = 'AuditRecordInvalidError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'audit_record_invalid';
}

/**
 * An audit event the trail refuses to write: a malformed request id, an empty subject identifier,
 * a fact that could carry personal data, or a chain at its most records.
 */
export class AuditEventRefusedError extends DsrError {
  override readonly name = 'AuditEventRefusedError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'audit_event_refused';
}

/** Other writers kept taking the request's next audit record, past the trail's retries. */
export class AuditWriteConflictError extends DsrError {
  override readonly name = 'AuditWriteConflictError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'audit_write_conflict';
}

/** No request with that id is in the ledger: an operator's command named one that was never submitted. */
export class RequestUnknownError extends DsrError {
  override readonly name = 'RequestUnknownError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'request_unknown';
}

/**
 * A ledger rule (can cancel, can extend, can retry, can deny) refuses the change for the request as
 * it stands, or the request changed between the read and the conditional write. The message says
 * which rule applied and what to do instead.
 */
export class LedgerRuleError extends DsrError {
  override readonly name = 'LedgerRuleError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'ledger_rule';
}

/** A step was invoked with input that does not match its contract (a definition/handler mismatch). */
export class StepInputError extends DsrError {
  override readonly name = 'StepInputError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'step_input';
}

/** Configuration (environment, secret, context) is missing or invalid. */
export class ConfigurationError extends DsrError {
  override readonly name = 'ConfigurationError';
  static override readonly handling: ErrorHandling = 'fail';
  readonly code = 'configuration';
}

/** Every error class svc-dsr throws, in the order the state machine lists their names. */
export const ERROR_CLASSES = [
  PlatformThrottledError,
  PlatformExportsFullError,
  PlatformUnavailableError,
  PlatformTimeoutError,
  PlatformConnectionResetError,
  TruncatedDownloadError,
  AwsTransientError,
  PlatformCapacityError,
  ExportStartUncertainError,
  PlatformOutageError,
  PlatformAuthError,
  PlatformRejectedError,
  PlatformResponseInvalidError,
  PlatformNotFoundError,
  ActivityNotEnabledError,
  UnaddressableIdError,
  DownloadHostNotAllowedError,
  DownloadLinkExpiredError,
  DownloadNotResumableError,
  InvalidArchiveError,
  ArchiveTooLargeError,
  StorageAnswerInvalidError,
  ExportFailedError,
  ExportStartUnconfirmedError,
  ExportTimedOutError,
  ErasureNotVerifiedError,
  ProfileChangedConcurrentlyError,
  LedgerStateError,
  AuditChainClosedError,
  AuditRecordInvalidError,
  AuditEventRefusedError,
  AuditWriteConflictError,
  StepInputError,
  ConfigurationError,
  RequestUnknownError,
  LedgerRuleError,
  SubjectNotFoundError,
  RequestCancelledError,
  SupersededRunError,
  SubjectUnderOtherSpellingError,
] as const;

/** The names of the error classes handled as `handling`. */
export function errorNames(handling: ErrorHandling): string[] {
  return ERROR_CLASSES.filter((type) => type.handling === handling).map((type) => type.name);
}

/** Names Step Functions retries with backoff and jitter. */
export const RETRYABLE_ERRORS = errorNames('retry');

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
export const TERMINAL_ERRORS = errorNames('fail');

/** Names that end the execution quietly: the ledger already says why. */
export const CANCEL_ERRORS = errorNames('cancel');

/** Names that end the request as `completed/no_data`: the subject is gone from the platform. */
export const NO_DATA_ERRORS = errorNames('no_data');

/**
 * Names that send the workflow back to StartExport as a new, counted attempt rather than a blind
 * retry of the same call: the platform may or may not have started an export.
 */
export const EXPORT_RESTART_ERRORS = errorNames('restart_export');

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

/** The name of a thrown error (an AWS SDK error's is its service error code); undefined for a non-Error. */
export function errorName(error: unknown): string | undefined {
  return error instanceof Error ? error.name : undefined;
}
