import { App } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { MAX_SITES, siteEnvironment } from '../../lambdas/shared/sites.ts';
import type { StackConfigInput } from '../../lib/config.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

const { spotId: _spotId, ...shared } = productionConfig;
const sites = [
  { id: 'news', name: 'Example News', spotId: 'sp_news' },
  {
    id: 'shop',
    name: 'Example Shop',
    spotId: 'sp_shop',
    existingSecrets: { ssoAccessToken: 'shop/sso', exportToken: 'shop/export' },
    platformMaxOpenExports: 5,
  },
  { id: 'blog', name: 'Example Blog', spotId: 'sp_blog', platformRequestsPerSecond: 2 },
];

function synth(config: StackConfigInput): { stack: DsrStack; template: Template } {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new DsrStack(app, 'Test', { config });
  return { stack, template: Template.fromStack(stack) };
}

const { stack, template } = synth({ ...shared, sites });
const resources = template.toJSON().Resources as Record<string, { Type: string; Properties: CfnObject }>;

function environmentOf(step: string): Record<string, unknown> {
  const fn = Object.values(resources).find(
    (resource) =>
      resource.Type === 'AWS::Lambda::Function' &&
      resource.Properties.Environment?.Variables?.DSR_STEP === step,
  );
  if (fn === undefined) throw new Error(`no function for ${step}`);
  return fn.Properties.Environment.Variables;
}

function resolvedJson(value: unknown): Record<string, Record<string, unknown>> {
  // SITES is a JSON string, or a Fn::Join where it holds a reference (a created secret's ARN).
  const text = stack.resolve(value);
  return JSON.parse(typeof text === 'string' ? text : JSON.stringify(text));
}

describe('a stack of several sites', () => {
  it('tells every step the sites in order, and every site but the first its own spot id, limits and token ids', () => {
    // Act
    const env = environmentOf('StartExport');
    const others = resolvedJson(env.SITES);

    // Assess
    expect(env.SITE_IDS).toBe('news,shop,blog');
    expect(env.SPOT_ID).toBe('sp_news');
    expect(Object.keys(others)).toEqual(['shop', 'blog']);
    expect(others.shop).toEqual({ spot: 'sp_shop', sso: 'shop/sso', export: 'shop/export', cap: '5' });
    // blog's secrets are the stack's own, found by their names; its burst and cap are the first site's
    expect(others.blog).toEqual({ spot: 'sp_blog', rps: '2' });
    expect(env.SITE_SECRETS_PREFIX).toBe('Test/sites/');
    const blog = siteEnvironment(
      {
        ...env,
        SITES: JSON.stringify(others),
        SSO_TOKEN_SECRET_ID: 'arn',
        EXPORT_TOKEN_SECRET_ID: 'arn',
      } as Record<string, string>,
      'blog',
    );
    expect(blog).toEqual(
      expect.objectContaining({
        SPOT_ID: 'sp_blog',
        GATE_SITE: 'blog',
        SSO_TOKEN_SECRET_ID: 'Test/sites/blog/sso-access-token',
        EXPORT_TOKEN_SECRET_ID: 'Test/sites/blog/export-token',
        PLATFORM_REQUESTS_PER_SECOND: '2',
        PLATFORM_MAX_OPEN_EXPORTS: '25',
      }),
    );
  });

  it('gives a step only the token ids of its own calls, for every site', () => {
    // Act
    const others = resolvedJson(environmentOf('ResolveSubject').SITES);

    // Assess
    expect(others.shop?.sso).toBe('shop/sso');
    expect(others.shop).not.toHaveProperty('export');
    expect(resolvedJson(environmentOf('RecordOutcome').SITES).shop).toEqual({ spot: 'sp_shop', cap: '5' });
    expect(environmentOf('RecordOutcome')).not.toHaveProperty('SITE_SECRETS_PREFIX');
  });

  it("creates each site's secrets under ids and names of its own, and grants a step each site's tokens it reads", () => {
    // Act
    const secrets = Object.entries(resources).filter(([, r]) => r.Type === 'AWS::SecretsManager::Secret');
    const resolvePolicy = Object.entries(resources).find(
      ([id, r]) => r.Type === 'AWS::IAM::Policy' && id.startsWith('ResolveSubjectRoleDefaultPolicy'),
    )?.[1];
    const granted = JSON.stringify(
      resolvePolicy?.Properties.PolicyDocument.Statement.filter((statement: CfnObject) =>
        [statement.Action].flat().includes('secretsmanager:GetSecretValue'),
      ),
    );

    // Assess: the audit key, and news's and blog's tokens (shop's exist already)
    expect(secrets.map(([id]) => id.replace(/[0-9A-F]{8}$/, '')).sort()).toEqual([
      'AuditKeySecret',
      'SiteBlogExportTokenSecret',
      'SiteBlogSsoTokenSecret',
      'SiteNewsExportTokenSecret',
      'SiteNewsSsoTokenSecret',
    ]);
    expect(granted).toContain(':secret:shop/sso-??????');
    expect(granted).not.toContain('shop/export');
    expect(granted).toContain('SiteBlogSsoTokenSecret');
    expect(granted).not.toContain('SiteBlogExportTokenSecret');
  });

  it('keeps the secrets of the one site of a configuration without sites under the ids they have always had', () => {
    // Act
    const { template: single } = synth(productionConfig);
    const ids = Object.entries(single.toJSON().Resources as Record<string, { Type: string }>)
      .filter(([, r]) => r.Type === 'AWS::SecretsManager::Secret')
      .map(([id]) => id.replace(/[0-9A-F]{8}$/, ''))
      .sort();

    // Assess
    expect(ids).toEqual(['AuditKeySecret', 'ExportTokenSecret', 'SsoTokenSecret']);
    expect(single.toJSON().Resources).not.toHaveProperty('SITES');
  });

  it(`fits the functions' environments with ${MAX_SITES} sites`, () => {
    // Act: synth measures every environment at its longest and throws past Lambda's 4 KB
    const many = Array.from({ length: MAX_SITES }, (_, index) => ({
      id: `site-${String(index).padStart(2, '0')}-abcdefg`.slice(0, 16),
      name: `Site ${index}`,
      spotId: `sp_${'x'.repeat(20)}${index}`,
    }));
    const build = () => synth({ ...shared, sites: many });

    // Assess
    expect(build).not.toThrow();
  });

  it('deploys several sites: synth reports no error', () => {
    // Act
    const errors = Annotations.fromStack(stack).findError('*', Match.anyValue());

    // Assess
    expect(errors).toEqual([]);
  });

  it("gives RecordOutcome, which builds the package over the sites, BuildPackage's reach and time", () => {
    // Prepare
    const fn = (step: string) =>
      Object.entries(resources).find(
        ([, resource]) =>
          resource.Type === 'AWS::Lambda::Function' &&
          resource.Properties.Environment?.Variables?.DSR_STEP === step,
      ) ?? ['', { Properties: {} as CfnObject }];
    const [recordId, record] = fn('RecordOutcome');
    const [, single] = (() => {
      const one = synth({ ...shared, sites: sites.slice(0, 1) }).template.toJSON()
        .Resources as typeof resources;
      return (
        Object.entries(one).find(
          ([, resource]) =>
            resource.Type === 'AWS::Lambda::Function' &&
            resource.Properties.Environment?.Variables?.DSR_STEP === 'RecordOutcome',
        ) ?? ['', { Properties: {} as CfnObject }]
      );
    })();

    // Act
    const role = record.Properties.Role?.['Fn::GetAtt']?.[0];
    const statements = Object.values(resources)
      .filter(
        (resource) =>
          resource.Type === 'AWS::IAM::Policy' &&
          JSON.stringify(resource.Properties.Roles ?? []).includes(String(role)),
      )
      .flatMap((policy) => policy.Properties.PolicyDocument.Statement as CfnObject[]);
    const actions = statements.flatMap((statement) => [statement.Action].flat());

    // Assess
    expect(recordId).not.toBe('');
    expect(record.Properties).toMatchObject({
      Timeout: 900,
      MemorySize: 1024,
      EphemeralStorage: { Size: 4096 },
    });
    expect(record.Properties.Environment.Variables).toHaveProperty('ARCHIVE_BUCKET');
    expect(actions).toEqual(expect.arrayContaining(['s3:GetObject', 's3:PutObject']));
    // One site: RecordOutcome stays as it was, a short step with no archive access.
    expect(single.Properties.Timeout).toBeLessThan(900);
    expect(single.Properties.MemorySize).toBe(512);
  });

  it('raises one platform-down alarm per site, on its Site dimension, in place of the stack-wide one', () => {
    // Act
    const alarms = Object.entries(resources).filter(
      ([, resource]) => resource.Type === 'AWS::CloudWatch::Alarm',
    );
    const down = alarms.filter(([id]) => id.includes('PlatformDown'));
    const one = synth({ ...shared, sites: sites.slice(0, 1) }).template.toJSON()
      .Resources as typeof resources;
    const oneDown = Object.keys(one).filter(
      (id) => one[id]?.Type === 'AWS::CloudWatch::Alarm' && id.includes('PlatformDown'),
    );

    // Assess
    expect(down).toHaveLength(3);
    expect(down.map(([, alarm]) => alarm.Properties.Dimensions)).toEqual(
      ['news', 'shop', 'blog'].map((site) => expect.arrayContaining([{ Name: 'Site', Value: site }])),
    );
    expect(down.map(([, alarm]) => alarm.Properties.AlarmDescription)).toEqual(
      ['news', 'shop', 'blog'].map((site) => expect.stringContaining(`site ${site} has been down`)),
    );
    expect(oneDown).toHaveLength(1);
  });

  it.each([1, 8, MAX_SITES])(
    "prints the history budget and execution timeout of each part for %i site(s), within AWS's limits",
    (count) => {
      // Prepare
      const listed = Array.from({ length: count }, (_, index) => ({
        id: `s${index}`,
        name: `Site ${index}`,
        spotId: `sp_${index}`,
      }));

      // Act
      const { stack: synthesized } = synth({ ...shared, sites: listed });
      const infos = Annotations.fromStack(synthesized)
        .findInfo('*', Match.stringLikeRegexp('part of a request runs in an execution of its own'))
        .map((info) => String(info.entry.data));

      // Assess
      expect(infos).toHaveLength(1);
      const [, events, seconds] = /at most ([\d,]+) events and ([\d,]+) s/.exec(infos[0] ?? '') ?? [];
      expect(Number(events?.replaceAll(',', ''))).toBeLessThanOrEqual(12_500);
      expect(Number(seconds?.replaceAll(',', ''))).toBeLessThanOrEqual(365 * 86_400);
      expect(infos[0]).toContain(`${count} site${count === 1 ? '' : 's'}:`);
    },
  );
});
