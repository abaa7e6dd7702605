// The functions' environment schemas, parsed once, and the export poll schedule they configure.
import { z } from 'zod';
import { DEFAULT_TIME_ZONE, isTimeZone } from './deadlines.ts';
import { DEFAULTS } from './defaults.ts';
import { ConfigurationError } from './errors.ts';
import { WAITERS_INDEX } from './export-waiters.ts';
import { GATE_SITE_ENV, SITE_IDS_ENV, siteIdSchema, siteIdsEnvSchema } from './sites.ts';
import { VERIFICATION_POLICY_ENV, verificationPolicyEnvSchema } from './verification.ts';

/** A comma-separated list, trimmed, empty entries left out. */
export const csv = z
  .string()
  .default('')
  .transform((value) =>
    value
      .split(',')
      .map((item) => item.trim().toLowerCase())
      .filter((item) => item !== ''),
  );
/** The controller's IANA time zone, in which deadlines and report days are counted. */
export const timeZoneSchema = z
  .string()
  .refine(isTimeZone, 'expected an IANA time zone such as "Europe/Berlin" or "America/Los_Angeles"')
  .default(DEFAULT_TIME_ZONE);
/**
 * What an export archive may expand to (stack setting `archiveMaxExpandedBytes`): the zip-bomb
 * cap of ArchiveExport's check, and the bounds the stack accepts for it.
 */
export const ARCHIVE_MAX_EXPANDED_BYTES = {
  min: 1024 * 1024,
  max: 1024 ** 4,
  default: 4 * 1024 ** 3,
} as const;

const seconds = (fallback: number) => z.coerce.number().int().positive().default(fallback);

/** The platform gate's environment (platform-gate.ts): its table and limits, as the stack sets them. */
export const gateEnvSchema = z.object({
  GATE_TABLE_NAME: z.string().min(1),
  PLATFORM_REQUESTS_PER_SECOND: z.coerce
    .number()
    .positive()
    .max(10_000)
    .default(DEFAULTS.platformRequestsPerSecond),
  PLATFORM_BURST: z.coerce.number().int().min(1).max(10_000).default(DEFAULTS.platformBurst),
  PLATFORM_MAX_OPEN_EXPORTS: z.coerce
    .number()
    .int()
    .min(1)
    .max(2_000)
    .default(DEFAULTS.platformMaxOpenExports),
  OUTAGE_HORIZON_SECONDS: seconds(DEFAULTS.retryHorizonHours * 3600),
  /** The longest wait for a rate slot spent inside the function (longer ones are Step Functions Waits). */
  PLATFORM_MAX_SLEEP_SECONDS: z.coerce
    .number()
    .int()
    .min(2)
    .max(60)
    .default(DEFAULTS.platformMaxSleepSeconds),
  /**
   * The gate table's index of requests waiting for an export slot (export-waiters.ts): set for
   * the functions that give slots back, which hand each slot to the oldest waiter and wake it.
   */
  EXPORT_WAITERS_INDEX: z.literal(WAITERS_INDEX).optional(),
  /**
   * The site these limits are of, when it is not the stack's first: its gate items are its own
   * (sites.ts siteEnvironment sets it; platform-gate.ts gateItemName).
   */
  [GATE_SITE_ENV]: siteIdSchema.optional(),
});
export type GateEnv = z.infer<typeof gateEnvSchema>;

/** Environment of the step Lambdas, validated once at cold start. */
export const stepEnvSchema = z.object({
  TABLE_NAME: z.string().min(1),
  ARCHIVE_BUCKET: z.string().min(1),
  AUDIT_BUCKET: z.string().min(1),
  KMS_KEY_ID: z.string().min(1).optional(),
  AUDIT_KEY_SECRET_ID: z.string().min(1),
  /** Set only for the steps that call the platform with that token. */
  SSO_TOKEN_SECRET_ID: z.string().min(1).optional(),
  EXPORT_TOKEN_SECRET_ID: z.string().min(1).optional(),
  PLATFORM_BASE_URL: z.url(),
  PLATFORM_EXPORT_URL: z.url(),
  PLATFORM_ACTIVITY_URL: z.url(),
  SPOT_ID: z.string().min(1),
  SSO_TOKEN_HEADER: z.string().min(1).default(DEFAULTS.ssoTokenHeader),
  USER_ID_FIELD: z.string().min(1).default(DEFAULTS.userIdField),
  PLATFORM_TIMEOUT_MS: z.coerce.number().int().positive().default(DEFAULTS.platformTimeoutMs),
  DOWNLOAD_ALLOWED_HOSTS: csv,
  DOWNLOAD_INSECURE_HOSTS: csv,
  POLL_INITIAL_SECONDS: seconds(DEFAULTS.pollInitialSeconds),
  POLL_MAX_SECONDS: seconds(DEFAULTS.pollMaxSeconds),
  POLL_BUDGET_SECONDS: seconds(DEFAULTS.pollBudgetSeconds),
  POLL_GROWTH_PERCENT: z.coerce.number().int().min(1).max(100).default(DEFAULTS.pollGrowthPercent),
  EXPORT_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(10).default(DEFAULTS.exportMaxAttempts),
  /** Set for ArchiveExport: the archive's expansion cap in bytes. */
  ARCHIVE_MAX_EXPANDED_BYTES: z.coerce
    .number()
    .int()
    .min(ARCHIVE_MAX_EXPANDED_BYTES.min)
    .max(ARCHIVE_MAX_EXPANDED_BYTES.max)
    .default(ARCHIVE_MAX_EXPANDED_BYTES.default),
  RETRY_AFTER_CAP_SECONDS: z.coerce.number().int().nonnegative().default(DEFAULTS.retryAfterCapSeconds),
  ...gateEnvSchema.shape,
  TIME_ZONE: timeZoneSchema,
  /** The subject package's settings (JSON, build-package/settings.ts); set on the package step only. */
  PACKAGE_SETTINGS: z.string().optional(),
  /**
   * Set on VerifyErasure (stack config `erasureArchiveKeepDays`): 0 deletes an erasure request's
   * archive once the erasure is verified; more keeps it for the archive bucket's lifecycle to expire.
   */
  ERASURE_ARCHIVE_KEEP_DAYS: z.coerce.number().int().min(0).max(3650).optional(),
  METRICS_NAMESPACE: z.string().min(1).default('svc-dsr'),
  /** The `Stack` dimension of the step's metrics; set on StartExport only, which counts the platform's refusals. */
  METRICS_STACK: z.string().min(1).optional(),
});
export type StepEnv = z.infer<typeof stepEnvSchema>;

/**
 * The ledger's retention pass (the deadline sweep): days after a request ends before the fields
 * that name the subject or a person are replaced with keyed hashes (stack config
 * `ledgerMinimiseAfterDays`; §7101 keeps the records 24 months).
 */
export const minimisationEnvSchema = z.object({
  MINIMISE_AFTER_DAYS: z.coerce.number().int().min(1).max(3650).default(DEFAULTS.ledgerMinimiseAfterDays),
  /** The key of the hashes: the audit HMAC key, so the ledger's hashes are the audit records' subject hashes. */
  AUDIT_KEY_SECRET_ID: z.string().min(1),
});

/** Environment of the intake Lambda. */
export const intakeEnvSchema = z.object({
  TABLE_NAME: z.string().min(1),
  AUDIT_BUCKET: z.string().min(1),
  KMS_KEY_ID: z.string().min(1).optional(),
  AUDIT_KEY_SECRET_ID: z.string().min(1),
  STATE_MACHINE_ARN: z.string().min(1),
  QUARANTINE_QUEUE_URL: z.url(),
  TIME_ZONE: timeZoneSchema,
  METRICS_NAMESPACE: z.string().min(1).default('svc-dsr'),
  /** The `Stack` dimension of intake's metrics, as the deadline sweep's. */
  METRICS_STACK: z.string().min(1),
  /** The verification gate (JSON, stack config `verification`): the known methods and the maximum age. */
  [VERIFICATION_POLICY_ENV]: verificationPolicyEnvSchema,
  /** The configured sites, in order: with more than one, a request runs in parts (site-parts.ts). */
  [SITE_IDS_ENV]: siteIdsEnvSchema,
});
export type IntakeEnv = z.infer<typeof intakeEnvSchema>;

/** Parses an environment with `schema`; a failure names every variable and what it needs. */
export function parseEnv<T extends z.ZodType>(
  schema: T,
  env: Record<string, string | undefined>,
): z.infer<T> {
  const parsed = schema.safeParse(env);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
  throw new ConfigurationError(
    `invalid Lambda environment: ${problems.join('; ')}; redeploy the stack to set them`,
  );
}

/**
 * The export poll schedule: each wait `growthPercent` of the time the request has waited for its
 * exports so far plus the first wait, at least `initial`, at most `max`, within `budget` in total.
 * A ready export is noticed within about `growthPercent` of the time it took, so the export slot it
 * holds is free that much sooner (100 doubles each wait). The schedule runs on the time waited over
 * every export attempt, as the budget does: an attempt after a failed export does not start again
 * from the shortest waits, so the attempts together poll no more than one schedule.
 */
export interface PollSchedule {
  readonly initialSeconds: number;
  readonly maxSeconds: number;
  readonly budgetSeconds: number;
  readonly growthPercent: number;
}

/** Seconds to wait before the next poll, once `waitedSeconds` have been waited in all (the jitter aside). */
export function nextWaitSeconds(schedule: PollSchedule, waitedSeconds: number): number {
  const { initialSeconds, maxSeconds, growthPercent } = schedule;
  const grown = Math.round(((waitedSeconds + initialSeconds) * growthPercent) / 100);
  return Math.min(maxSeconds, Math.max(initialSeconds, grown));
}

/** How much longer than the schedule a poll wait may be, at most: a fifth. */
export const POLL_JITTER = 0.2;

/**
 * A poll wait with jitter: between `seconds` and a fifth longer, so requests that arrived together
 * do not poll the platform together. It is never shorter than the schedule, so the number of
 * polls (and the history events they cost) stays within the schedule's worst case.
 */
export function jitteredSeconds(seconds: number, random: () => number = Math.random): number {
  return Math.round(seconds * (1 + POLL_JITTER * Math.min(Math.max(random(), 0), 1)));
}
