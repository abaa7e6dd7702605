/**
 * The settings' defaults, in one place: the stack config (lib/config.ts) fills an operator's
 * omissions from them, and the Lambdas' environment schemas (config.ts) fall back on them when a
 * variable is unset, so a function deployed by an older stack behaves as a new stack would set it.
 */
export const DEFAULTS = {
  /** The header that carries the SSO access token to the platform. */
  ssoTokenHeader: 'x-svc-sso-access-token',
  /** The field of the platform's user that holds its id. */
  userIdField: 'svc_user_id',
  /**
   * The export poll schedule: the first wait, the longest, the total, and how fast the waits grow
   * (each a share of the time waited so far, so a ready export is noticed within about that share
   * of its preparation time; 100 doubles each wait).
   */
  pollInitialSeconds: 30,
  pollMaxSeconds: 7200,
  pollBudgetSeconds: 72 * 3600,
  pollGrowthPercent: 5,
  /** Export attempts per request. */
  exportMaxAttempts: 3,
  /** How long a request waits out transient errors and a platform outage before it fails. */
  retryHorizonHours: 6,
  /** The platform gate: calls per second, their burst, and exports open at once. */
  platformRequestsPerSecond: 10,
  platformBurst: 10,
  platformMaxOpenExports: 25,
  /** How long one platform call may take before it is abandoned as a timeout. */
  platformTimeoutMs: 10_000,
  /** The longest wait for a rate slot a platform call spends inside the function. */
  platformMaxSleepSeconds: 3,
  /** The longest Retry-After a step waits out inside the function before it tries once more. */
  retryAfterCapSeconds: 20,
  /** Days after a request ends before the ledger replaces who it names with keyed hashes (CCPA §7101: 24 months). */
  ledgerMinimiseAfterDays: 730,
} as const;
