import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { PACKAGE_PLACEHOLDERS } from '../../lambdas/build-package/settings.ts';
import { minimisationEnvSchema, stepEnvSchema } from '../../lambdas/shared/config.ts';
import { DEFAULTS } from '../../lambdas/shared/defaults.ts';
import { DEFAULT_SITE_ID, MAX_SITES } from '../../lambdas/shared/sites.ts';
import {
  CONFIG_KEYS,
  type ConfigKey,
  configuredSites,
  PLACEHOLDERS,
  parseStackConfig,
  placeholderKeys,
  placeholderNoticeItems,
  retentionDaysForMonths,
  StackConfigError,
} from '../../lib/config.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { productionConfig } from './fixtures.ts';

function problemsOf(raw: unknown): string[] {
  try {
    parseStackConfig(raw);
  } catch (error) {
    if (error instanceof StackConfigError) return [...error.problems];
    throw error;
  }
  throw new Error('expected the configuration to be refused');
}

describe('parseStackConfig', () => {
  it('accepts no configuration at all, with placeholder platform settings and documented defaults', () => {
    // Act
    const config = parseStackConfig(undefined);

    // Assess
    expect(config).toMatchObject({
      spotId: PLACEHOLDERS.spotId,
      platformBaseUrl: PLACEHOLDERS.platformBaseUrl,
      ssoTokenHeader: 'x-svc-sso-access-token',
      userIdField: 'svc_user_id',
      pollInitialSeconds: 30,
      pollMaxSeconds: 7200,
      pollBudgetSeconds: 259_200,
      pollGrowthPercent: 5,
      exportMaxAttempts: 3,
      archiveMaxExpandedBytes: 4 * 1024 ** 3,
      accessArchiveRetentionDays: 90,
      erasureArchiveRetentionDays: 30,
      erasureArchiveKeepDays: 0,
      auditRetentionMonths: 24,
      ledgerMinimiseAfterDays: 730,
      deadlineDueSoonDays: 7,
      deadlineSweepMinutes: 60,
      intakeMaxConcurrency: 5,
      verification: {
        methods: {
          email_link: { acceptedFor: ['access', 'erasure'] },
          account_login: { acceptedFor: ['access', 'erasure', 'correction'] },
          id_document: { acceptedFor: ['access', 'erasure', 'correction'] },
          authorized_agent: { acceptedFor: ['access', 'erasure', 'correction'] },
        },
        maxAgeDays: 30,
      },
      intakeQueueAgeAlarmMinutes: 15,
      retryHorizonHours: 6,
      platformRequestsPerSecond: 10,
      platformBurst: 10,
      platformMaxOpenExports: 25,
      reconcileMinutes: 15,
      reconcileMaxResumes: 3,
      reconcileQuotaShare: 0.5,
      logRetentionDays: 365,
      timeZone: 'UTC',
      stage: 'dev',
      production: true,
      auditLockMode: 'COMPLIANCE',
    });
    expect(config.existingSecrets).toBeUndefined();
    expect(config.alarmEmail).toBeUndefined();
  });

  it('accepts the JSON string that `cdk -c svc-dsr=...` passes', () => {
    // Act
    const config = parseStackConfig(JSON.stringify({ spotId: 'sp_live', exportMaxAttempts: 5 }));

    // Assess
    expect(config.spotId).toBe('sp_live');
    expect(config.exportMaxAttempts).toBe(5);
  });

  // One bad value per key: the message must name the key, quote what it received and say what to write.
  const invalid: Record<ConfigKey, { value: unknown; fix: RegExp }> = {
    stage: { value: 'Prod_EU', fix: /a short stage name: 1-16 lower-case letters/ },
    production: { value: 'yes', fix: /true when the stage holds real subjects' data/ },
    auditLockMode: {
      value: 'governance',
      fix: /"COMPLIANCE" \(the default\), or "GOVERNANCE" only on a test stage/,
    },
    spotId: { value: 'sp demo', fix: /spot id the platform issued/ },
    platformBaseUrl: { value: 'http://api.example.com', fix: /https base URL of the platform API/ },
    platformExportUrl: { value: 'export.example.com', fix: /https URL of the export service/ },
    platformActivityUrl: { value: 42, fix: /https URL of the activity service/ },
    downloadAllowedHosts: { value: [], fix: /list of hosts export downloads may come from/ },
    existingSecrets: { value: 'svc-dsr/platform', fix: /names of three existing Secrets Manager secrets/ },
    sites: { value: 'news', fix: /every site of the controller/ },
    ssoTokenHeader: { value: 'x token', fix: /HTTP header name/ },
    userIdField: { value: 'user-id', fix: /JSON field name/ },
    pollInitialSeconds: { value: 0, fix: /whole number of seconds from 1 to 3600/ },
    pollMaxSeconds: { value: 1.5, fix: /whole number of seconds from 1 to 86400/ },
    pollBudgetSeconds: { value: 31 * 86_400, fix: /2592000 \(30 days\)/ },
    pollGrowthPercent: { value: 0, fix: /whole number from 1 to 100: each poll wait/ },
    exportMaxAttempts: { value: 11, fix: /whole number from 1 to 10/ },
    archiveMaxExpandedBytes: { value: 1000, fix: /from 1048576 \(1 MiB\) to 1099511627776 \(1 TiB\)/ },
    accessArchiveRetentionDays: { value: -1, fix: /whole number of days from 1 to 3650/ },
    erasureArchiveRetentionDays: { value: '30', fix: /whole number of days from 1 to 3650/ },
    erasureArchiveKeepDays: { value: -1, fix: /from 0 to 3650 \(default 0\): 0 deletes/ },
    auditRetentionMonths: { value: 12, fix: /from 24 \(CCPA record keeping\) to 120/ },
    ledgerMinimiseAfterDays: { value: 0, fix: /whole number of days from 1 to 3650 \(default 730/ },
    alarmEmail: { value: 'ops-at-example.com', fix: /e-mail address for alarm notifications/ },
    ledgerLegacyStatusIndex: {
      value: 'yes',
      fix: /true only while migrating a ledger created before the open index/,
    },
    deadlineDueSoonDays: { value: 0, fix: /whole number of days from 1 to 60/ },
    deadlineSweepMinutes: { value: 1, fix: /whole number of minutes from 5 to 1440/ },
    intakeMaxConcurrency: { value: 1, fix: /whole number from 2 to 1000/ },
    verification: { value: 'email_link', fix: /every verification method the privacy team uses, by name/ },
    intakeQueueAgeAlarmMinutes: { value: 0, fix: /whole number of minutes from 1 to 1440/ },
    retryHorizonHours: { value: 0, fix: /whole number of hours from 1 to 48/ },
    platformRequestsPerSecond: { value: 0, fix: /from 0.1 to 500/ },
    platformBurst: { value: 0, fix: /whole number from 1 to 10000/ },
    platformMaxOpenExports: { value: 2001, fix: /whole number from 1 to 2000/ },
    reconcileMinutes: { value: 2, fix: /whole number of minutes from 5 to 1440/ },
    reconcileMaxResumes: { value: 21, fix: /whole number from 0 to 20/ },
    reconcileQuotaShare: {
      value: 0,
      fix: /a number from 0.05 to 1 \(default 0.5\): the share of the account's Step Functions API quotas/,
    },
    logRetentionDays: { value: 100, fix: /one of 1, 3, 5, 7, 14, 30/ },
    timeZone: { value: 'Europe/Atlantis', fix: /the controller's IANA time zone/ },
    eventBusArn: { value: 'privacy-bus', fix: /the ARN of an existing EventBridge bus/ },
    userPoolId: { value: 'my-pool', fix: /the id of an existing Cognito user pool/ },
    consoleOrigins: { value: 42, fix: /the https origins a browser may call the API from/ },
    machineOrganizationId: { value: '123456789012', fix: /the id of the AWS organisation/ },
    controllerName: { value: '', fix: /the name of the controller that answers access requests/ },
    controllerContact: { value: 7, fix: /how a subject reaches the controller/ },
    packageLanguage: { value: 'de', fix: /the BCP 47 language of subject packages/ },
    accessNotice: {
      value: 'see our privacy notice',
      fix: /the notice texts a subject package states, by the law of the request/,
    },
  };

  it('has a refusal case for every configuration key', () => {
    // Assess
    expect(Object.keys(invalid).sort()).toEqual([...CONFIG_KEYS].sort());
  });

  for (const [key, { value, fix }] of Object.entries(invalid)) {
    it(`refuses an invalid ${key}, naming the key, the value received and the fix`, () => {
      // Act
      const problems = problemsOf({ [key]: value });

      // Assess
      expect(problems).toHaveLength(1);
      const [problem] = problems;
      expect(problem).toContain(`svc-dsr config "${key}`);
      expect(problem).toContain(`(received ${JSON.stringify(value)})`);
      expect(problem).toContain(`Fix: set "${key}" in cdk.json "context": { "svc-dsr"`);
      expect(problem).toMatch(fix);
    });
  }

  it('names the entry of a list that is wrong', () => {
    // Act
    const problems = problemsOf({
      downloadAllowedHosts: ['downloads.example.com', 'https://cdn.example.com/x'],
    });

    // Assess
    expect(problems).toEqual([expect.stringContaining('"downloadAllowedHosts.1"')]);
    expect(problems[0]).toContain('(received "https://cdn.example.com/x")');
  });

  it('refuses a wildcard that would allow downloads from a whole top-level domain', () => {
    // Act
    const problems = problemsOf({ downloadAllowedHosts: ['*.com'] });

    // Assess
    expect(problems[0]).toContain('a wildcard must cover a domain of at least two labels');
  });

  it('refuses a poll schedule whose cap is below its first wait or above its budget', () => {
    // Act / Assess
    expect(problemsOf({ pollInitialSeconds: 600, pollMaxSeconds: 300 })).toEqual([
      expect.stringContaining('"pollMaxSeconds": must be at least pollInitialSeconds (600) (received 300)'),
    ]);
    expect(problemsOf({ pollMaxSeconds: 7200, pollBudgetSeconds: 3600 })).toEqual([
      expect.stringContaining('"pollBudgetSeconds": must be at least pollMaxSeconds (7200) (received 3600)'),
    ]);
  });

  it('refuses a deadline margin no longer than the outage horizon', () => {
    // Act / Assess
    expect(problemsOf({ retryHorizonHours: 24, deadlineDueSoonDays: 1 })).toEqual([
      expect.stringContaining('"deadlineDueSoonDays": must be longer than retryHorizonHours (24 h)'),
    ]);
    expect(parseStackConfig({ retryHorizonHours: 23, deadlineDueSoonDays: 1 }).deadlineDueSoonDays).toBe(1);
  });

  it('refuses a stage name that is too long, upper-case or ends with a hyphen', () => {
    // Act / Assess
    for (const stage of ['a-very-long-stage-name', 'Dev', 'dev-', '1dev', '']) {
      expect(problemsOf({ stage })).toEqual([
        expect.stringContaining(`"stage": expected 1-16 lower-case letters`),
      ]);
    }
    expect(parseStackConfig({ stage: 'prod-eu-2' }).stage).toBe('prod-eu-2');
  });

  it('refuses GOVERNANCE audit locks in production, naming the value and the fix', () => {
    // Act / Assess
    expect(problemsOf({ auditLockMode: 'GOVERNANCE' })).toEqual([
      'svc-dsr config "auditLockMode": GOVERNANCE lets anyone allowed s3:BypassGovernanceRetention delete audit records, which production must not allow' +
        ' (stage "dev" is production: "production" is true) (received "GOVERNANCE").' +
        ' Fix: set "auditLockMode" in cdk.json "context": { "svc-dsr": { ... } } to "COMPLIANCE" (the default), or "GOVERNANCE" only on a test stage that sets "production": false.',
    ]);
    expect(
      parseStackConfig({ stage: 'test', production: false, auditLockMode: 'GOVERNANCE' }).auditLockMode,
    ).toBe('GOVERNANCE');
  });

  it('treats a stage named prod or production as production whatever the production setting says', () => {
    // Act / Assess
    for (const stage of ['prod', 'production']) {
      expect(problemsOf({ stage, production: false, auditLockMode: 'GOVERNANCE' })).toEqual([
        expect.stringContaining(
          `"production": stage "${stage}" is a production stage by its name and cannot set production to false (received false)`,
        ),
      ]);
    }
  });

  it('refuses existing secrets that do not name all three', () => {
    // Act
    const problems = problemsOf({
      existingSecrets: { ssoAccessToken: 'svc-dsr/sso', exportToken: 'svc-dsr/export' },
    });

    // Assess
    expect(problems[0]).toContain('"existingSecrets');
    expect(problems[0]).toMatch(/names of three existing Secrets Manager secrets/);
  });

  it('refuses an unknown key and suggests the one a typo meant', () => {
    // Act
    const problems = problemsOf({ pollMaxSecond: 600, colour: 'blue' });

    // Assess
    expect(problems).toEqual([
      expect.stringContaining(
        '"pollMaxSecond": not a configuration key (received 600). Fix: rename it to "pollMaxSeconds"',
      ),
      expect.stringContaining('"colour": not a configuration key (received "blue"). Fix: remove it'),
    ]);
  });

  it('refuses a configuration that is not an object', () => {
    // Act / Assess
    expect(problemsOf('not json')).toEqual([
      expect.stringContaining('svc-dsr config: expected an object of settings (received "not json")'),
    ]);
    expect(problemsOf([1, 2])).toEqual([expect.stringContaining('(received [1,2])')]);
  });

  it('refuses a verification list that names "*", a spelling of not verified or a look-alike, saying which and how to fix it', () => {
    // Act
    const problems = problemsOf({
      verification: {
        methods: {
          '*': { acceptedFor: ['access', 'erasure'] },
          unverified: { acceptedFor: ['access'] },
          '\u0435mail_link': { acceptedFor: ['access'] },
          id_document: { acceptedFor: ['access', 'rectification'] },
        },
        maxAgeDays: 0,
      },
    });

    // Assess
    expect(problems).toEqual([
      expect.stringContaining(
        'svc-dsr config "verification.methods.*": "*" is not a method: name each method the stack accepts, e.g. "email_link" (received {"acceptedFor":["access","erasure"]}). Fix: set "verification" in cdk.json',
      ),
      expect.stringContaining(
        '"verification.methods.unverified": "unverified" says the identity was not verified',
      ),
      expect.stringContaining('"verification.methods.\u0435mail_link": "\u0435mail_link" holds U+0435'),
      expect.stringContaining(
        '"verification.methods.id_document.acceptedFor.1": must be access, erasure or correction (received "rectification")',
      ),
      expect.stringContaining('"verification.maxAgeDays": Too small: expected number to be >=1 (received 0)'),
    ]);
    for (const problem of problems)
      expect(problem).toMatch(/every verification method the privacy team uses/);
  });

  it('refuses a verification list that accepts nothing, and two spellings of one method', () => {
    // Act / Assess
    expect(problemsOf({ verification: { methods: { pending: { acceptedFor: [] } } } })).toEqual([
      expect.stringContaining('"verification.methods": accepts no method for any request type'),
    ]);
    expect(
      problemsOf({
        verification: {
          methods: { email_link: { acceptedFor: ['access'] }, 'EMAIL-LINK': { acceptedFor: ['erasure'] } },
        },
      }),
    ).toEqual([expect.stringContaining('"EMAIL-LINK" and "email_link" are the same method')]);
  });

  it('keeps a verification list with a method accepted for no type, in canonical spelling', () => {
    // Act
    const config = parseStackConfig({
      verification: {
        methods: { 'Email-Link': { acceptedFor: ['access', 'erasure'] }, pending: { acceptedFor: [] } },
        maxAgeDays: 14,
      },
    });

    // Assess
    expect(config.verification).toEqual({
      methods: { email_link: { acceptedFor: ['access', 'erasure'] }, pending: { acceptedFor: [] } },
      maxAgeDays: 14,
    });
  });

  it('refuses the replaced acceptedVerificationMethods key, pointing to verification', () => {
    // Act / Assess
    expect(problemsOf({ acceptedVerificationMethods: { access: ['*'], erasure: ['*'] } })).toEqual([
      'svc-dsr config "acceptedVerificationMethods": replaced by "verification" (received {"access":["*"],"erasure":["*"]}).' +
        ' Fix: remove it and set "verification" in cdk.json "context": { "svc-dsr": { ... } }: list each method by name' +
        ' with the request types it is accepted for ("*" is gone: every method is named); docs/deploy.md shows the shape',
    ]);
  });

  it('lists every problem at once', () => {
    // Act / Assess
    expect(problemsOf({ spotId: '', exportMaxAttempts: 0, alarmEmail: 'x' })).toHaveLength(3);
  });
});

describe('defaults', () => {
  it('fills an empty stack config and an unset Lambda environment with the same values', () => {
    // Act
    const config = parseStackConfig(undefined);

    // Assess
    const env = stepEnvSchema.parse({
      TABLE_NAME: 't',
      ARCHIVE_BUCKET: 'a',
      AUDIT_BUCKET: 'b',
      AUDIT_KEY_SECRET_ID: 's',
      PLATFORM_BASE_URL: 'https://platform.example',
      PLATFORM_EXPORT_URL: 'https://export.example',
      PLATFORM_ACTIVITY_URL: 'https://activity.example',
      SPOT_ID: 'spot',
      GATE_TABLE_NAME: 'g',
    });
    expect({
      header: env.SSO_TOKEN_HEADER,
      field: env.USER_ID_FIELD,
      poll: [
        env.POLL_INITIAL_SECONDS,
        env.POLL_MAX_SECONDS,
        env.POLL_BUDGET_SECONDS,
        env.POLL_GROWTH_PERCENT,
      ],
      attempts: env.EXPORT_MAX_ATTEMPTS,
      gate: [env.PLATFORM_REQUESTS_PER_SECOND, env.PLATFORM_BURST, env.PLATFORM_MAX_OPEN_EXPORTS],
      horizon: env.OUTAGE_HORIZON_SECONDS,
    }).toEqual({
      header: config.ssoTokenHeader,
      field: config.userIdField,
      poll: [
        config.pollInitialSeconds,
        config.pollMaxSeconds,
        config.pollBudgetSeconds,
        config.pollGrowthPercent,
      ],
      attempts: config.exportMaxAttempts,
      gate: [config.platformRequestsPerSecond, config.platformBurst, config.platformMaxOpenExports],
      horizon: config.retryHorizonHours * 3600,
    });
    expect(config.pollBudgetSeconds).toBe(DEFAULTS.pollBudgetSeconds);
    const minimise = minimisationEnvSchema.parse({ AUDIT_KEY_SECRET_ID: 's' });
    expect(minimise.MINIMISE_AFTER_DAYS).toBe(config.ledgerMinimiseAfterDays);
  });
});

describe('placeholderKeys', () => {
  it('lists every platform setting still on its placeholder', () => {
    // Act / Assess
    expect(placeholderKeys(parseStackConfig({}))).toEqual([
      'spotId',
      'platformBaseUrl',
      'platformExportUrl',
      'platformActivityUrl',
      'downloadAllowedHosts',
      'controllerName',
      'controllerContact',
      'accessNotice',
    ]);
  });

  it.each([
    ['gdpr', 'transfers'],
    ['ccpa', 'sources'],
  ] as const)('reports accessNotice while its %s.%s text is still the placeholder', (law, item) => {
    // Prepare
    const { accessNotice, ...rest } = productionConfig;
    const placeholder = (PACKAGE_PLACEHOLDERS.information[law] as Record<string, string>)[item];

    // Act
    const config = parseStackConfig({
      ...rest,
      accessNotice: { ...accessNotice, [law]: { ...accessNotice[law], [item]: placeholder } },
    });

    // Assess
    expect(placeholderKeys(config)).toEqual(['accessNotice']);
    expect(placeholderNoticeItems(config.accessNotice)).toEqual([`${law}.${item}`]);
  });

  it('takes 2,000 characters for each of the 13 texts and refuses one more, naming the item', () => {
    // Assess
    const long = 'é'.repeat(2000);
    const fill = (notice: Record<string, string>) =>
      Object.fromEntries(Object.keys(notice).map((key) => [key, long]));
    const longest = {
      gdpr: fill(productionConfig.accessNotice.gdpr),
      ccpa: fill(productionConfig.accessNotice.ccpa),
    };
    expect(parseStackConfig({ ...productionConfig, accessNotice: longest }).accessNotice).toEqual(longest);
    const problems = problemsOf({
      ...productionConfig,
      accessNotice: { ...longest, ccpa: { ...longest.ccpa, thirdParties: `${long}x` } },
    });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/"accessNotice\.ccpa\.thirdParties": must be at most 2000 characters/);
  });

  it('refuses the GDPR-only shape of earlier versions, showing the shape by law', () => {
    // Act
    const problems = problemsOf({ ...productionConfig, accessNotice: productionConfig.accessNotice.gdpr });

    // Assess
    expect(problems.join('\n')).toMatch(/"accessNotice".*"gdpr": \{.*"ccpa": \{/);
  });

  for (const key of [
    'spotId',
    'platformBaseUrl',
    'platformExportUrl',
    'platformActivityUrl',
    'downloadAllowedHosts',
    'controllerName',
    'controllerContact',
    'accessNotice',
  ] as const) {
    it(`reports ${key} alone when only it is missing`, () => {
      // Prepare
      const { [key]: _missing, ...rest } = productionConfig;

      // Act / Assess
      expect(placeholderKeys(parseStackConfig(rest))).toEqual([key]);
    });
  }

  it('is empty for a complete configuration', () => {
    // Act / Assess
    expect(placeholderKeys(parseStackConfig(productionConfig))).toEqual([]);
  });
});

describe('retentionDaysForMonths', () => {
  it('covers the longest run of that many calendar months', () => {
    // Act / Assess
    expect(retentionDaysForMonths(1)).toBe(31);
    expect(retentionDaysForMonths(12)).toBe(366);
    expect(retentionDaysForMonths(24)).toBe(731);
    expect(retentionDaysForMonths(36)).toBe(1096);
  });
});

describe('the stack and its configuration', () => {
  it('fails synth with the message when cdk.json context is invalid', () => {
    // Prepare
    const app = new App({
      context: { 'aws:cdk:bundling-stacks': [], 'svc-dsr': { ...productionConfig, auditRetentionMonths: 6 } },
    });

    // Act / Assess
    expect(() => new DsrStack(app, 'Test')).toThrow(
      /svc-dsr config "auditRetentionMonths": .*\(received 6\)\. Fix: set "auditRetentionMonths"/,
    );
  });

  it('fails synth on a verification list with "*", and gives intake the configured list', () => {
    // Prepare
    const refused = new App({
      context: {
        'aws:cdk:bundling-stacks': [],
        'svc-dsr': { ...productionConfig, verification: { methods: { '*': { acceptedFor: ['access'] } } } },
      },
    });

    // Act / Assess
    expect(() => new DsrStack(refused, 'Test')).toThrow(
      /svc-dsr config "verification\.methods\.\*": "\*" is not a method/,
    );

    // Prepare
    const verification = { methods: { id_document: { acceptedFor: ['erasure'] } }, maxAgeDays: 7 };
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });

    // Act
    const stack = new DsrStack(app, 'Test', { config: { ...productionConfig, verification } });

    // Assess
    Template.fromStack(stack).hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ VERIFICATION_POLICY: JSON.stringify(verification) }) },
    });
    const variables = Object.values(Template.fromStack(stack).findResources('AWS::Lambda::Function')).map(
      (resource) => resource.Properties.Environment?.Variables ?? {},
    );
    expect(variables.filter((env) => 'VERIFICATION_POLICY' in env)).toHaveLength(1);
  });

  it('prefers configuration passed as props over context', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [], 'svc-dsr': { spotId: 'sp_context' } } });

    // Act
    const stack = new DsrStack(app, 'Test', { config: productionConfig });

    // Assess
    expect(stack.config.spotId).toBe(productionConfig.spotId);
  });

  it('synthesizes with placeholders but warns and adds a rule that makes CloudFormation refuse the deploy', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });

    // Act
    const stack = new DsrStack(app, 'Test', { config: { ...productionConfig, spotId: undefined } });

    // Assess
    const template = Template.fromStack(stack).toJSON();
    const rule = template.Rules?.RequireDeploymentConfig;
    expect(rule?.Assertions).toEqual([
      {
        Assert: { 'Fn::Equals': ['placeholder', 'configured'] },
        AssertDescription: expect.stringContaining(
          'svc-dsr is not configured for deployment: spotId still hold placeholder values',
        ),
      },
    ]);
    Annotations.fromStack(stack).hasWarning('/Test', Match.stringLikeRegexp('spotId still hold placeholder'));
  });

  it('locks audit records in GOVERNANCE mode on a test stage and warns at synth that they are not evidence', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });

    // Act
    const stack = new DsrStack(app, 'Test', {
      config: { ...productionConfig, stage: 'test', production: false, auditLockMode: 'GOVERNANCE' },
    });

    // Assess
    Template.fromStack(stack).hasResourceProperties('AWS::S3::Bucket', {
      ObjectLockConfiguration: { Rule: { DefaultRetention: { Mode: 'GOVERNANCE', Days: 731 } } },
    });
    Annotations.fromStack(stack).hasWarning(
      '/Test',
      Match.stringLikeRegexp('stage "test" locks audit records in GOVERNANCE mode .*not evidence'),
    );
  });

  it('refuses to synthesize a production stack with GOVERNANCE audit locks', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });

    // Act / Assess
    expect(
      () => new DsrStack(app, 'Test', { config: { ...productionConfig, auditLockMode: 'GOVERNANCE' } }),
    ).toThrow(/"auditLockMode": GOVERNANCE .*\(received "GOVERNANCE"\)\. Fix: set "auditLockMode"/);
  });

  it('adds no GOVERNANCE warning to a COMPLIANCE stack', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });

    // Act
    const stack = new DsrStack(app, 'Test', { config: productionConfig });

    // Assess
    Annotations.fromStack(stack).hasNoWarning('/Test', Match.stringLikeRegexp('GOVERNANCE'));
  });

  it('adds no such rule once every platform setting is configured', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });

    // Act
    const stack = new DsrStack(app, 'Test', { config: productionConfig });

    // Assess
    expect(Template.fromStack(stack).toJSON().Rules?.RequireDeploymentConfig).toBeUndefined();
  });
});

describe('docs/deploy.md', () => {
  const deployDoc = readFileSync(new URL('../../docs/deploy.md', import.meta.url), 'utf8');

  it('documents every configuration key with its default', () => {
    // Act
    const defaults = parseStackConfig({});

    // Assess
    for (const key of CONFIG_KEYS) {
      const row = deployDoc.split('\n').find((line) => line.startsWith(`| \`${key}\``));
      expect({ key, documented: row !== undefined }).toEqual({ key, documented: true });
      const value = defaults[key];
      if (typeof value === 'number')
        expect({ key, row }).toEqual({ key, row: expect.stringContaining(`\`${value}\``) });
    }
  });
});

describe('sites', () => {
  const news = { id: 'news', name: 'Example News', spotId: 'sp_news' };
  const shop = { id: 'shop-de', name: 'Example Shop DE', spotId: 'sp_shop', platformMaxOpenExports: 5 };

  it('is one site, "main", with the top-level spot id, tokens and limits when none are listed', () => {
    // Act
    const sites = configuredSites(
      parseStackConfig({
        spotId: 'sp_live',
        platformMaxOpenExports: 40,
        existingSecrets: { ssoAccessToken: 'sso', exportToken: 'export', auditHmacKey: 'audit' },
      }),
    );

    // Assess
    expect(sites).toEqual([
      expect.objectContaining({
        id: DEFAULT_SITE_ID,
        spotId: 'sp_live',
        platformMaxOpenExports: 40,
        existingSecrets: { ssoAccessToken: 'sso', exportToken: 'export' },
      }),
    ]);
  });

  it('lists each site in order, its own limits first and the top-level ones for the rest', () => {
    // Act
    const sites = configuredSites(parseStackConfig({ platformBurst: 7, sites: [news, shop] }));

    // Assess
    expect(sites.map((site) => [site.id, site.platformBurst, site.platformMaxOpenExports])).toEqual([
      ['news', 7, 25],
      ['shop-de', 7, 5],
    ]);
  });

  it('refuses two sites with one id or one spot id, naming the later one', () => {
    // Act
    const problems = problemsOf({
      sites: [news, { ...shop, id: 'news' }, { ...shop, id: 'blog', spotId: 'sp_news' }],
    });

    // Assess
    expect(problems).toEqual([
      expect.stringContaining('"sites.1.id": is the id of sites[0] too'),
      expect.stringContaining('"sites.2.spotId": is the spotId of sites[0] too'),
    ]);
  });

  it('refuses a top-level spot id or platform tokens beside sites: each setting has one place', () => {
    // Act
    const problems = problemsOf({
      spotId: 'sp_live',
      existingSecrets: { ssoAccessToken: 'sso', exportToken: 'export', auditHmacKey: 'audit' },
      sites: [news],
    });

    // Assess
    expect(problems).toEqual([
      expect.stringContaining('"spotId": is set beside "sites"'),
      expect.stringContaining('"existingSecrets": names platform tokens beside "sites"'),
    ]);
  });

  it('takes the audit key alone at the top level beside sites', () => {
    // Act
    const config = parseStackConfig({ existingSecrets: { auditHmacKey: 'audit' }, sites: [news] });

    // Assess
    expect(config.existingSecrets).toEqual({ auditHmacKey: 'audit' });
  });

  it('refuses the audit key alone without sites: the one site needs its tokens', () => {
    // Act
    const problems = problemsOf({ existingSecrets: { auditHmacKey: 'audit' } });

    // Assess
    expect(problems[0]).toContain('"existingSecrets": names the audit key but not both platform tokens');
  });

  it(`refuses more than ${MAX_SITES} sites, an empty list and a site with an unknown key`, () => {
    // Act
    const many = problemsOf({
      sites: Array.from({ length: MAX_SITES + 1 }, (_, index) => ({
        ...news,
        id: `s${index}`,
        spotId: `sp_${index}`,
      })),
    });
    const empty = problemsOf({ sites: [] });
    const unknown = problemsOf({ sites: [{ ...news, spot: 'sp_x' }] });

    // Assess
    expect(many[0]).toContain(`at most ${MAX_SITES} sites`);
    expect(empty[0]).toContain('"sites"');
    expect(unknown[0]).toContain('"sites.0.spot": not a setting of "sites"');
  });

  it('keeps a site on the placeholder spot id from deploying', () => {
    // Act
    const keys = placeholderKeys(parseStackConfig({ sites: [news, { ...shop, spotId: 'sp_demo' }] }));

    // Assess
    expect(keys).toContain('sites');
    expect(keys).not.toContain('spotId');
  });
});
