// The stack's configuration: the cdk.json settings as a zod schema, their defaults, hints and checks.
import { z } from 'zod';
import {
  PACKAGE_PLACEHOLDERS,
  type PackageSettings,
  packageLanguageSchema,
  packageSettingsSchema,
} from '../lambdas/build-package/settings.ts';
import { QUOTA_SHARE } from '../lambdas/reconciler/quota.ts';
import { MINIMUM_RETENTION_MONTHS } from '../lambdas/shared/audit.ts';
import { ARCHIVE_MAX_EXPANDED_BYTES } from '../lambdas/shared/config.ts';
import { DEFAULT_TIME_ZONE, isTimeZone } from '../lambdas/shared/deadlines.ts';
import { DEFAULTS } from '../lambdas/shared/defaults.ts';
import { downloadPolicySchema } from '../lambdas/shared/download-policy.ts';
import { DEFAULT_SITE_ID, MAX_SITES, siteIdSchema } from '../lambdas/shared/sites.ts';
import { DEFAULT_VERIFICATION_POLICY, verificationPolicySchema } from '../lambdas/shared/verification.ts';

/** The cdk.json context key that holds the configuration. */
export const CONFIG_CONTEXT_KEY = 'svc-dsr';

/**
 * Defaults that let `cdk synth` and the tests run with no configuration at all. None of them names
 * a real platform: the `.invalid` top-level domain never resolves. A stack synthesized with any of
 * them still in place cannot be deployed (see `placeholderKeys`).
 */
export const PLACEHOLDERS = {
  spotId: 'sp_demo',
  platformBaseUrl: 'https://api.example-platform.invalid/api',
  platformExportUrl: 'https://export.example-platform.invalid',
  platformActivityUrl: 'https://activity.example-platform.invalid',
  downloadAllowedHosts: ['*.example-platform.invalid'],
} as const;

/** The values CloudWatch Logs accepts as a retention period, in days. */
export const LOG_RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
] as const;

/** A stage name: it names the stack (`svc-dsr-<stage>`), so it stays short and DNS-safe. */
const STAGE_PATTERN = /^[a-z](?:[a-z0-9-]{0,14}[a-z0-9])?$/;

/** Stage names that always mean production, whatever `production` says. */
export const PRODUCTION_STAGE_NAMES = ['prod', 'production'] as const;

/**
 * Object Lock modes of the audit bucket. COMPLIANCE binds everyone, the root user included;
 * GOVERNANCE can be lifted by anyone granted s3:BypassGovernanceRetention, so it is for test stages.
 */
export const AUDIT_LOCK_MODES = ['COMPLIANCE', 'GOVERNANCE'] as const;

/** The name of the stack of `stage`: stages sit side by side in one account. */
export function stackNameForStage(stage: string): string {
  return `svc-dsr-${stage}`;
}

/** A compliance lock cannot be shortened, so a typo here would bind every record for good. */
const MAX_AUDIT_RETENTION_MONTHS = 120;

/** What to write for each key: the fix half of every error message. */
export const CONFIG_HINTS: Readonly<Record<keyof z.input<typeof baseSchema>, string>> = {
  stage:
    'a short stage name: 1-16 lower-case letters, digits and "-", starting with a letter and not ending with "-", e.g. "dev" or "prod"',
  production:
    'true when the stage holds real subjects\' data (the default), false for a test stage; a stage named "prod" or "production" is always production',
  auditLockMode:
    '"COMPLIANCE" (the default), or "GOVERNANCE" only on a test stage that sets "production": false',
  spotId:
    'the spot id the platform issued for your site, e.g. "sp_AbC123"; with several sites, set it per site in "sites" instead',
  sites:
    '[{"id": "news", "name": "Example News", "spotId": "sp_AbC123"}, ...]: every site of the controller on the platform, 1-16 of them, each with a short id (1-16 lower-case letters, digits and "-"), the name the subject package shows, its spot id, and optionally "existingSecrets" {"ssoAccessToken", "exportToken"} and its own "platformRequestsPerSecond", "platformBurst" and "platformMaxOpenExports"; or leave it out for one site set by "spotId" (docs/deploy.md "Several sites")',
  platformBaseUrl:
    'the https base URL of the platform API (docs/platform-api.md {base_url}), e.g. "https://api.example.com/api"',
  platformExportUrl: 'the https URL of the export service (docs/platform-api.md {export_url})',
  platformActivityUrl: 'the https URL of the activity service (docs/platform-api.md {activity_url})',
  downloadAllowedHosts:
    'a list of hosts export downloads may come from: "host", "host:port" or "*.example.com" (at least two labels after "*.")',
  existingSecrets:
    'the names of three existing Secrets Manager secrets, {"ssoAccessToken", "exportToken", "auditHmacKey"} (letters, digits and /_+=.@-), and optionally "keyArn", the ARN of the KMS key that encrypts them; with "sites", only {"auditHmacKey"} (each site names its own tokens); or leave it out to have the stack create them',
  ssoTokenHeader: 'an HTTP header name, e.g. "x-svc-sso-access-token"',
  userIdField: 'a JSON field name of letters, digits and "_", e.g. "svc_user_id"',
  pollInitialSeconds: 'a whole number of seconds from 1 to 3600, at most pollMaxSeconds',
  pollMaxSeconds:
    'a whole number of seconds from 1 to 86400, between pollInitialSeconds and pollBudgetSeconds',
  pollBudgetSeconds: 'a whole number of seconds from 60 to 2592000 (30 days), at least pollMaxSeconds',
  pollGrowthPercent:
    'a whole number from 1 to 100: each poll wait as a share of the time waited so far (5, the default, notices a ready export within about 5% of its preparation time; 100 doubles each wait)',
  exportMaxAttempts: 'a whole number from 1 to 10',
  archiveMaxExpandedBytes:
    'a whole number of bytes from 1048576 (1 MiB) to 1099511627776 (1 TiB): the most an export archive may expand to before ArchiveExport refuses it with ArchiveTooLargeError (default 4294967296, 4 GiB); docs/cost.md says what one invocation can copy in 15 minutes',
  retryHorizonHours:
    'a whole number of hours from 1 to 48: how long a step keeps retrying throttles and outages (platform and AWS), and how long requests wait out a platform outage, before they fail',
  platformRequestsPerSecond:
    "platform calls per second across every Lambda, from 0.1 to 500 (one DynamoDB item takes about 1,000 writes a second; docs/load-control.md): set it below the platform's published limit",
  platformBurst:
    "a whole number from 1 to 10000: calls that may go at once after a quiet spell; with platformRequestsPerSecond, at most the platform's per-second limit",
  platformMaxOpenExports:
    "a whole number from 1 to 2000: exports open on the platform at once, at most the platform's own cap",
  accessArchiveRetentionDays: 'a whole number of days from 1 to 3650',
  erasureArchiveRetentionDays:
    'a whole number of days from 1 to 3650: how long the archive of an erasure request lives at most when erasureArchiveKeepDays is 0 (an erasure never verified, e.g. failed and awaiting a retry)',
  erasureArchiveKeepDays:
    "a whole number of days from 0 to 3650 (default 0): 0 deletes an erasure request's archive (every version) as soon as the erasure is verified; more keeps it, and the archive bucket expires it that many days after it was stored",
  auditRetentionMonths: `a whole number of months from ${MINIMUM_RETENTION_MONTHS} (CCPA record keeping) to ${MAX_AUDIT_RETENTION_MONTHS}`,
  ledgerMinimiseAfterDays: `a whole number of days from 1 to 3650 (default ${DEFAULTS.ledgerMinimiseAfterDays}, the CCPA §7101 24 months): how long after a request ends or fails the ledger keeps who it names before replacing them with keyed hashes`,
  alarmEmail: 'an e-mail address for alarm notifications, or leave it out',
  ledgerLegacyStatusIndex:
    'true only while migrating a ledger created before the open index (docs/deploy.md), otherwise false or left out',
  deadlineDueSoonDays:
    'a whole number of days from 1 to 60, longer than retryHorizonHours: the deadline margin, at which requests still open are alarmed (DueSoonUnfinished)',
  deadlineSweepMinutes: 'a whole number of minutes from 5 to 1440',
  intakeMaxConcurrency: 'a whole number from 2 to 1000 (the SQS event source maximum concurrency)',
  verification:
    '{"methods": {"<method>": {"acceptedFor": ["access", "erasure", "correction"]}, ...}, "maxAgeDays": 30}: every verification method the privacy team uses, by name (1-64 ASCII letters, digits, "_", "-", "." or ":"; not "*", "none" or "unverified"), each with the request types it is accepted for ([] for a method that never is), and the most days a verification may lie before receipt (1-365); a request with a method not listed is rejected, docs/deploy.md "The verification gate"',
  intakeQueueAgeAlarmMinutes: 'a whole number of minutes from 1 to 1440',
  reconcileMinutes: 'a whole number of minutes from 5 to 1440',
  reconcileMaxResumes: 'a whole number from 0 to 20',
  reconcileQuotaShare: `a number from ${QUOTA_SHARE.min} to ${QUOTA_SHARE.max} (default ${QUOTA_SHARE.default}): the share of the account's Step Functions API quotas (ListExecutions, DescribeExecution, StartExecution) the reconciler may use; the rest stays for everything else in the account and Region`,
  logRetentionDays: `one of ${LOG_RETENTION_DAYS.join(', ')}`,
  eventBusArn:
    'the ARN of an existing EventBridge bus for the status events, e.g. "arn:aws:events:eu-west-1:111122223333:event-bus/privacy", or leave it out to have the stack create one',
  userPoolId:
    'the id of an existing Cognito user pool the API signs people in with, e.g. "eu-west-1_AbCdEf123", or leave it out to have the stack create one (MFA required, no self sign-up); it must hold the groups privacy-team and auditor',
  consoleOrigins:
    'the https origins a browser may call the API from (CORS), e.g. ["https://privacy.example.com"]; none by default, so no page of another origin can call it',
  machineOrganizationId:
    'the id of the AWS organisation ("o-" and 10-32 letters or digits) whose systems may call the API\'s /iam routes with SigV4, or leave it out for this account\'s only',
  timeZone:
    'the controller\'s IANA time zone, e.g. "Europe/Berlin" or "America/Los_Angeles" (default "UTC"): deadlines end at the end of the local day there, and subject packages write their dates in it',
  controllerName:
    'the name of the controller that answers access requests, as the subject package shows it, e.g. "Example News Ltd"',
  controllerContact:
    'how a subject reaches the controller about the answer, e.g. "privacy@example.com, Example News Ltd, 1 Fleet Street, London"',
  packageLanguage:
    'the BCP 47 language of subject packages, e.g. "en" or "en-GB" (default "en"); strings exist for: en',
  accessNotice:
    'the notice texts a subject package states, by the law of the request: {"gdpr": {"purposes", "categories", "recipients", "retention", "rights", "complaint", "source", "automatedDecisions", "transfers"} (Art. 15(1)(a)-(h) and 15(2)), "ccpa": {"categories", "sources", "purposes", "thirdParties"} (§1798.110(a)(1)-(4))}: each 1-2000 characters',
};

const httpsUrl = z.url({ protocol: /^https$/, error: 'expected an https URL' });
const wholeNumber = (min: number, max: number) => z.number().int().min(min).max(max);

const allowedHost = downloadPolicySchema.shape.allowedHosts.element.refine(
  (host) => !host.startsWith('*.') || host.slice(2).split('.').length >= 2,
  'a wildcard must cover a domain of at least two labels, such as *.example.com',
);

const secretName = z.string().regex(/^[A-Za-z0-9/_+=.@-]{1,512}$/, 'expected a Secrets Manager secret name');

const spotIdSchema = z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'expected 1-128 letters, digits, "_" or "-"');

/**
 * One site of the controller on the platform: its own account (spot id), tokens and limits. The
 * limits left out are the top-level ones.
 */
const siteSchema = z.strictObject({
  id: siteIdSchema,
  name: z
    .string()
    .trim()
    .min(1)
    .max(100, 'at most 100 characters')
    .refine((name) => !/\p{Cc}/u.test(name), 'no control characters'),
  spotId: spotIdSchema,
  existingSecrets: z.strictObject({ ssoAccessToken: secretName, exportToken: secretName }).optional(),
  platformRequestsPerSecond: z.number().min(0.1).max(500).optional(),
  platformBurst: z.number().int().min(1).max(10_000).optional(),
  platformMaxOpenExports: z.number().int().min(1).max(2_000).optional(),
});

const baseSchema = z.strictObject({
  stage: z
    .string()
    .regex(STAGE_PATTERN, 'expected 1-16 lower-case letters, digits or "-", starting with a letter')
    .default('dev'),
  production: z.boolean().default(true),
  auditLockMode: z.enum(AUDIT_LOCK_MODES).default('COMPLIANCE'),
  spotId: spotIdSchema.default(PLACEHOLDERS.spotId),
  platformBaseUrl: httpsUrl.default(PLACEHOLDERS.platformBaseUrl),
  platformExportUrl: httpsUrl.default(PLACEHOLDERS.platformExportUrl),
  platformActivityUrl: httpsUrl.default(PLACEHOLDERS.platformActivityUrl),
  downloadAllowedHosts: z
    .array(allowedHost)
    .min(1)
    .default([...PLACEHOLDERS.downloadAllowedHosts]),
  existingSecrets: z
    .strictObject({
      // Required without "sites", refused with them (stackConfigSchema).
      ssoAccessToken: secretName.optional(),
      exportToken: secretName.optional(),
      auditHmacKey: secretName,
      keyArn: z
        .string()
        .regex(/^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key\/[A-Za-z0-9-]+$/, 'expected a KMS key ARN')
        .optional(),
    })
    .optional(),
  sites: z.array(siteSchema).min(1).max(MAX_SITES, `at most ${MAX_SITES} sites`).optional(),
  ssoTokenHeader: z
    .string()
    .regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$/, 'expected an HTTP header name')
    .default(DEFAULTS.ssoTokenHeader),
  userIdField: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'expected a field name')
    .default(DEFAULTS.userIdField),
  pollInitialSeconds: wholeNumber(1, 3600).default(DEFAULTS.pollInitialSeconds),
  pollMaxSeconds: wholeNumber(1, 86_400).default(DEFAULTS.pollMaxSeconds),
  pollBudgetSeconds: wholeNumber(60, 30 * 86_400).default(DEFAULTS.pollBudgetSeconds),
  pollGrowthPercent: wholeNumber(1, 100).default(DEFAULTS.pollGrowthPercent),
  exportMaxAttempts: wholeNumber(1, 10).default(DEFAULTS.exportMaxAttempts),
  archiveMaxExpandedBytes: wholeNumber(
    ARCHIVE_MAX_EXPANDED_BYTES.min,
    ARCHIVE_MAX_EXPANDED_BYTES.max,
  ).default(ARCHIVE_MAX_EXPANDED_BYTES.default),
  retryHorizonHours: wholeNumber(1, 48).default(DEFAULTS.retryHorizonHours),
  platformRequestsPerSecond: z.number().min(0.1).max(500).default(DEFAULTS.platformRequestsPerSecond),
  platformBurst: wholeNumber(1, 10_000).default(DEFAULTS.platformBurst),
  platformMaxOpenExports: wholeNumber(1, 2_000).default(DEFAULTS.platformMaxOpenExports),
  accessArchiveRetentionDays: wholeNumber(1, 3650).default(90),
  erasureArchiveRetentionDays: wholeNumber(1, 3650).default(30),
  /** Days an erasure request's archive is kept once the erasure is verified; 0 deletes it then. */
  erasureArchiveKeepDays: wholeNumber(0, 3650).default(0),
  auditRetentionMonths: wholeNumber(MINIMUM_RETENTION_MONTHS, MAX_AUDIT_RETENTION_MONTHS).default(
    MINIMUM_RETENTION_MONTHS,
  ),
  /** Days after a request ends before the ledger keeps who it names only as keyed hashes (§7101: 24 months). */
  ledgerMinimiseAfterDays: wholeNumber(1, 3650).default(DEFAULTS.ledgerMinimiseAfterDays),
  alarmEmail: z.email().optional(),
  ledgerLegacyStatusIndex: z.boolean().default(false),
  deadlineDueSoonDays: wholeNumber(1, 60).default(7),
  deadlineSweepMinutes: wholeNumber(5, 1440).default(60),
  intakeMaxConcurrency: wholeNumber(2, 1000).default(5),
  verification: verificationPolicySchema.default(DEFAULT_VERIFICATION_POLICY),
  intakeQueueAgeAlarmMinutes: wholeNumber(1, 1440).default(15),
  reconcileMinutes: wholeNumber(5, 1440).default(15),
  reconcileMaxResumes: wholeNumber(0, 20).default(3),
  /** The share of the account's Step Functions API quotas the reconciler paces itself under. */
  reconcileQuotaShare: z.number().min(QUOTA_SHARE.min).max(QUOTA_SHARE.max).default(QUOTA_SHARE.default),
  logRetentionDays: z
    .number()
    .refine((days) => (LOG_RETENTION_DAYS as readonly number[]).includes(days), {
      message: 'CloudWatch Logs does not accept this retention',
    })
    .default(365),
  eventBusArn: z
    .string()
    .regex(
      /^arn:aws[a-z-]*:events:[a-z0-9-]+:\d{12}:event-bus\/[A-Za-z0-9._\-/]{1,256}$/,
      'expected an EventBridge bus ARN',
    )
    .optional(),
  userPoolId: z
    .string()
    .regex(
      /^[a-z]{2}(-[a-z]+)+-\d_[0-9A-Za-z]{1,55}$/,
      'expected a Cognito user pool id, e.g. "eu-west-1_AbCdEf123"',
    )
    .optional(),
  consoleOrigins: z
    .array(
      z
        .url({ protocol: /^https$/, error: 'expected an https origin' })
        .refine(
          (url) => new URL(url).pathname === '/' && !url.endsWith('/'),
          'expected an origin only: https://host, with no path or trailing "/"',
        ),
    )
    .max(10)
    .default([]),
  machineOrganizationId: z
    .string()
    .regex(/^o-[a-z0-9]{10,32}$/, 'expected an AWS organisation id, e.g. "o-a1b2c3d4e5"')
    .optional(),
  timeZone: z
    .string()
    .refine(isTimeZone, 'not an IANA time zone this runtime knows')
    .default(DEFAULT_TIME_ZONE),
  controllerName: packageSettingsSchema.shape.controllerName.default(PACKAGE_PLACEHOLDERS.controllerName),
  controllerContact: packageSettingsSchema.shape.controllerContact.default(
    PACKAGE_PLACEHOLDERS.controllerContact,
  ),
  packageLanguage: packageLanguageSchema.default(PACKAGE_PLACEHOLDERS.language),
  accessNotice: packageSettingsSchema.shape.information.default({ ...PACKAGE_PLACEHOLDERS.information }),
});

/** Stack configuration, from cdk.json context (`svc-dsr` key) or stack props; validated at synth. */
export const stackConfigSchema = baseSchema.superRefine((config, context) => {
  // Compared only when each side is valid on its own, so one bad value yields one message.
  const valid = (key: 'pollInitialSeconds' | 'pollMaxSeconds' | 'pollBudgetSeconds') =>
    baseSchema.shape[key].safeParse(config[key]).success;
  if (
    valid('pollInitialSeconds') &&
    valid('pollMaxSeconds') &&
    config.pollInitialSeconds > config.pollMaxSeconds
  ) {
    context.addIssue({
      code: 'custom',
      path: ['pollMaxSeconds'],
      message: `must be at least pollInitialSeconds (${config.pollInitialSeconds})`,
    });
  }
  if (
    valid('pollMaxSeconds') &&
    valid('pollBudgetSeconds') &&
    config.pollMaxSeconds > config.pollBudgetSeconds
  ) {
    context.addIssue({
      code: 'custom',
      path: ['pollBudgetSeconds'],
      message: `must be at least pollMaxSeconds (${config.pollMaxSeconds})`,
    });
  }
  // The deadline margin: requests still open this long before their deadline are alarmed
  // (DueSoonUnfinished) and keep waiting in their places. An outage fails its requests
  // (platform_outage) after the retry horizon, so a request inside its margin is failed, for an
  // operator to retry, with time left before its deadline only while the horizon is shorter.
  if (
    baseSchema.shape.retryHorizonHours.safeParse(config.retryHorizonHours).success &&
    baseSchema.shape.deadlineDueSoonDays.safeParse(config.deadlineDueSoonDays).success &&
    config.retryHorizonHours >= config.deadlineDueSoonDays * 24
  ) {
    context.addIssue({
      code: 'custom',
      path: ['deadlineDueSoonDays'],
      message: `must be longer than retryHorizonHours (${config.retryHorizonHours} h): the deadline margin, so that a request an outage fails after the horizon still has time before its deadline`,
    });
  }
  siteProblems(config, context);
  const namedProduction = (PRODUCTION_STAGE_NAMES as readonly string[]).includes(config.stage);
  if (namedProduction && config.production === false) {
    context.addIssue({
      code: 'custom',
      path: ['production'],
      message: `stage "${config.stage}" is a production stage by its name and cannot set production to false`,
    });
  } else if (config.auditLockMode === 'GOVERNANCE' && config.production !== false) {
    context.addIssue({
      code: 'custom',
      path: ['auditLockMode'],
      message:
        `GOVERNANCE lets anyone allowed s3:BypassGovernanceRetention delete audit records, which production must not allow (stage "${config.stage}" is production` +
        `${namedProduction ? ' by its name' : ': "production" is true'})`,
    });
  }
});
export type StackConfig = z.infer<typeof stackConfigSchema>;

/**
 * What synth refuses of the sites: two sites with one id or one spot id, a spot id or tokens set
 * both at the top and per site, and tokens of one site configuration missing.
 */
function siteProblems(config: z.infer<typeof baseSchema>, context: z.core.$RefinementCtx): void {
  const tokens = config.existingSecrets;
  if (config.sites === undefined) {
    if (tokens !== undefined && (tokens.ssoAccessToken === undefined || tokens.exportToken === undefined)) {
      context.addIssue({
        code: 'custom',
        path: ['existingSecrets'],
        message: 'names the audit key but not both platform tokens (ssoAccessToken and exportToken)',
      });
    }
    return;
  }
  if (config.spotId !== PLACEHOLDERS.spotId) {
    context.addIssue({
      code: 'custom',
      path: ['spotId'],
      message: 'is set beside "sites": each site has its own spotId, so the top-level one is not used',
    });
  }
  if (tokens?.ssoAccessToken !== undefined || tokens?.exportToken !== undefined) {
    context.addIssue({
      code: 'custom',
      path: ['existingSecrets'],
      message:
        'names platform tokens beside "sites": each site names its own in sites[].existingSecrets, and the top level keeps only auditHmacKey (and keyArn)',
    });
  }
  for (const field of ['id', 'spotId'] as const) {
    const first = new Map<string, number>();
    for (const [index, site] of config.sites.entries()) {
      const seen = first.get(site[field]);
      if (seen === undefined) first.set(site[field], index);
      else {
        context.addIssue({
          code: 'custom',
          path: ['sites', index, field],
          message: `is the ${field} of sites[${seen}] too: every site has its own`,
        });
      }
    }
  }
}

/** A site as the stack deploys it: its limits resolved from its own settings or the top-level ones. */
export interface SiteConfig {
  readonly id: string;
  readonly name: string;
  readonly spotId: string;
  readonly existingSecrets?: { readonly ssoAccessToken: string; readonly exportToken: string };
  readonly platformRequestsPerSecond: number;
  readonly platformBurst: number;
  readonly platformMaxOpenExports: number;
}

/**
 * The configured sites, in the configuration's order: `sites`, or the one site that the top-level
 * spotId, tokens and limits describe, whose id is DEFAULT_SITE_ID and whose name the controller's.
 */
export function configuredSites(config: StackConfig): SiteConfig[] {
  const limits = {
    platformRequestsPerSecond: config.platformRequestsPerSecond,
    platformBurst: config.platformBurst,
    platformMaxOpenExports: config.platformMaxOpenExports,
  };
  if (config.sites === undefined) {
    const tokens = config.existingSecrets;
    return [
      {
        id: DEFAULT_SITE_ID,
        name: config.controllerName,
        spotId: config.spotId,
        ...(tokens?.ssoAccessToken !== undefined && tokens.exportToken !== undefined
          ? { existingSecrets: { ssoAccessToken: tokens.ssoAccessToken, exportToken: tokens.exportToken } }
          : {}),
        ...limits,
      },
    ];
  }
  return config.sites.map((site) => ({
    ...site,
    platformRequestsPerSecond: site.platformRequestsPerSecond ?? limits.platformRequestsPerSecond,
    platformBurst: site.platformBurst ?? limits.platformBurst,
    platformMaxOpenExports: site.platformMaxOpenExports ?? limits.platformMaxOpenExports,
  }));
}
export type StackConfigInput = z.input<typeof stackConfigSchema>;
export type ConfigKey = keyof StackConfig;

/** Every configuration key, in the order the docs list them. */
export const CONFIG_KEYS = Object.keys(baseSchema.shape) as readonly ConfigKey[];

/** A configuration that failed validation; the message lists every problem with its fix. */
export class StackConfigError extends Error {
  override readonly name = 'StackConfigError';

  constructor(readonly problems: readonly string[]) {
    super(problems.join('\n'));
  }
}

/**
 * Validates the raw configuration (an object, or a JSON string as `cdk -c svc-dsr='{...}'` passes
 * it). Throws a StackConfigError naming each key, the value received and the fix.
 */
export function parseStackConfig(raw: unknown): StackConfig {
  const input = fromContext(raw);
  const parsed = stackConfigSchema.safeParse(input ?? {});
  if (parsed.success) return parsed.data;
  throw new StackConfigError(parsed.error.issues.flatMap((issue) => describeIssue(issue, input)));
}

/**
 * The keys still on their placeholder default. Synth accepts them so the stack can be built with no
 * configuration; the stack refuses to deploy with them.
 */
export function placeholderKeys(config: StackConfig): ConfigKey[] {
  const keys: ConfigKey[] = [];
  if (config.sites === undefined && config.spotId === PLACEHOLDERS.spotId) keys.push('spotId');
  if (config.sites?.some((site) => site.spotId === PLACEHOLDERS.spotId)) keys.push('sites');
  if (config.platformBaseUrl === PLACEHOLDERS.platformBaseUrl) keys.push('platformBaseUrl');
  if (config.platformExportUrl === PLACEHOLDERS.platformExportUrl) keys.push('platformExportUrl');
  if (config.platformActivityUrl === PLACEHOLDERS.platformActivityUrl) keys.push('platformActivityUrl');
  if (config.downloadAllowedHosts.some((host) => host.endsWith('.invalid')))
    keys.push('downloadAllowedHosts');
  if (config.controllerName === PACKAGE_PLACEHOLDERS.controllerName) keys.push('controllerName');
  if (config.controllerContact === PACKAGE_PLACEHOLDERS.controllerContact) keys.push('controllerContact');
  if (placeholderNoticeItems(config.accessNotice).length > 0) keys.push('accessNotice');
  return keys;
}

/** The notice items still on their placeholder text, as `gdpr.transfers`, `ccpa.sources`... */
export function placeholderNoticeItems(notice: StackConfig['accessNotice']): string[] {
  const placeholders = PACKAGE_PLACEHOLDERS.information;
  return [
    ...Object.entries(notice.gdpr)
      .filter(([key, text]) => Object.entries(placeholders.gdpr).some(([k, p]) => k === key && p === text))
      .map(([key]) => `gdpr.${key}`),
    ...Object.entries(notice.ccpa)
      .filter(([key, text]) => Object.entries(placeholders.ccpa).some(([k, p]) => k === key && p === text))
      .map(([key]) => `ccpa.${key}`),
  ];
}

/** What the package step is told: who answers, in which language, and each law's notice texts. */
export function packageSettings(
  config: Pick<
    StackConfig,
    'controllerName' | 'controllerContact' | 'packageLanguage' | 'accessNotice' | 'sites'
  >,
): PackageSettings {
  return {
    controllerName: config.controllerName,
    controllerContact: config.controllerContact,
    language: config.packageLanguage,
    information: config.accessNotice,
    // A package over several sites names each; one site's package says what it said before sites.
    ...(config.sites === undefined || config.sites.length < 2
      ? {}
      : { sites: config.sites.map((site) => ({ id: site.id, name: site.name })) }),
  };
}

/**
 * Days of Object Lock retention that cover `months` calendar months from any start date: the
 * longest run of that many months in a four-year cycle (24 months -> 731 days).
 */
export function retentionDaysForMonths(months: number): number {
  let longest = 0;
  for (let start = 0; start < 48; start++) {
    const from = Date.UTC(2024, start, 1);
    const to = Date.UTC(2024, start + months, 1);
    longest = Math.max(longest, Math.round((to - from) / 86_400_000));
  }
  return longest;
}

function fromContext(raw: unknown): unknown {
  if (typeof raw !== 'string') return raw;
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** Keys of earlier versions whose setting moved to another key with another shape. */
const REPLACED_KEYS: Readonly<Record<string, { readonly by: ConfigKey; readonly how: string }>> = {
  acceptedVerificationMethods: {
    by: 'verification',
    how: 'list each method by name with the request types it is accepted for ("*" is gone: every method is named)',
  },
};

function describeIssue(issue: z.core.$ZodIssue, input: unknown): string[] {
  const where = `cdk.json "context": { "${CONFIG_CONTEXT_KEY}": { ... } }`;
  if (issue.code === 'unrecognized_keys' && issue.path.length > 0) {
    const at = issue.path.map(String).join('.');
    const [first] = issue.path;
    return issue.keys.map(
      (key) =>
        `svc-dsr config "${at}.${key}": not a setting of "${String(first)}" (received ${show(valueAt(input, [...issue.path, key]))}). ` +
        `Fix: remove it from ${where}; "${String(first)}" is ${isConfigKey(String(first)) ? CONFIG_HINTS[String(first) as ConfigKey] : 'described in docs/deploy.md'}`,
    );
  }
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((key) => {
      const replaced = REPLACED_KEYS[key];
      if (replaced !== undefined) {
        return (
          `svc-dsr config "${key}": replaced by "${replaced.by}" (received ${show(valueAt(input, [key]))}). ` +
          `Fix: remove it and set "${replaced.by}" in ${where}: ${replaced.how}; docs/deploy.md shows the shape`
        );
      }
      const suggestion = closestKey(key);
      return (
        `svc-dsr config "${key}": not a configuration key (received ${show(valueAt(input, [key]))}). ` +
        `Fix: ${suggestion === undefined ? 'remove it' : `rename it to "${suggestion}"`} in ${where}; the keys are listed in docs/deploy.md`
      );
    });
  }
  const [first] = issue.path;
  if (first === undefined) {
    return [
      `svc-dsr config: expected an object of settings (received ${show(input)}). Fix: set ${where}, or pass the object as stack props.`,
    ];
  }
  const key = String(first);
  const hint = isConfigKey(key) ? CONFIG_HINTS[key] : 'a valid value';
  const path = issue.path.map(String).join('.');
  return [
    `svc-dsr config "${path}": ${issue.message} (received ${show(valueAt(input, issue.path))}). ` +
      `Fix: set "${key}" in ${where} to ${hint}.`,
  ];
}

function isConfigKey(key: string): key is ConfigKey {
  return (CONFIG_KEYS as readonly string[]).includes(key);
}

/** The known key a typo most likely meant: same letters ignoring case, or two edits away. */
function closestKey(key: string): ConfigKey | undefined {
  let best: { key: ConfigKey; distance: number } | undefined;
  for (const candidate of CONFIG_KEYS) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance <= 2 && (best === undefined || distance < best.distance))
      best = { key: candidate, distance };
  }
  return best?.key;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let current: unknown = value;
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = Reflect.get(current, key);
  }
  return current;
}
