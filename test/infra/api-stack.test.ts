/** The API as synth deploys it: its user pool, its authorizers, the routes of the OpenAPI document, throttles, logs and CORS. */
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { MACHINE_PREFIX } from '../../lambdas/api/api.ts';
import { apiEnvSchema } from '../../lambdas/api/handler.ts';
import { openApiDocument } from '../../lambdas/api/openapi.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

function synth(config: Record<string, unknown> = {}) {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new DsrStack(app, 'Api', { config: { ...productionConfig, ...config } });
  const template = Template.fromStack(stack);
  return { stack, template, resources: template.toJSON().Resources as Record<string, CfnObject> };
}

const { stack, template, resources } = synth();
const ofType = (type: string) => Object.entries(resources).filter(([, resource]) => resource.Type === type);

describe('the API in the template', () => {
  it('creates a user pool with MFA required, no self sign-up, a group per role, and an hour-long session', () => {
    // Assess
    template.hasResourceProperties('AWS::Cognito::UserPool', {
      MfaConfiguration: 'ON',
      AdminCreateUserConfig: { AllowAdminCreateUserOnly: true },
      EnabledMfas: ['SOFTWARE_TOKEN_MFA'],
    });
    expect(
      ofType('AWS::Cognito::UserPoolGroup')
        .map(([, group]) => group.Properties.GroupName)
        .sort(),
    ).toEqual(['auditor', 'privacy-team']);
    template.hasResourceProperties('AWS::Cognito::UserPoolClient', {
      GenerateSecret: false,
      IdTokenValidity: 60,
      AccessTokenValidity: 60,
      RefreshTokenValidity: 720,
    });
  });

  it("serves every route of docs/openapi.json behind the pool's JWT authorizer, and again under /iam behind IAM", () => {
    // Prepare
    const documented = Object.entries(
      openApiDocument('0.1.0').paths as Record<string, Record<string, unknown>>,
    ).flatMap(([path, methods]) => Object.keys(methods).map((method) => `${method.toUpperCase()} ${path}`));
    const routes = ofType('AWS::ApiGatewayV2::Route').map(([, route]) => route.Properties);
    const [authorizer] = ofType('AWS::ApiGatewayV2::Authorizer');

    // Assess
    expect(
      routes
        .filter((route) => route.AuthorizationType === 'JWT')
        .map((route) => route.RouteKey)
        .sort(),
    ).toEqual([...documented].sort());
    expect(
      routes
        .filter((route) => route.AuthorizationType === 'AWS_IAM')
        .map((route) => route.RouteKey)
        .sort(),
    ).toEqual(documented.map((key) => key.replace(' ', ` ${MACHINE_PREFIX}`)).sort());
    expect(routes).toHaveLength(documented.length * 2);
    expect(authorizer?.[1].Properties).toMatchObject({
      AuthorizerType: 'JWT',
      IdentitySource: ['$request.header.Authorization'],
    });
    expect(JSON.stringify(authorizer?.[1].Properties.JwtConfiguration.Issuer)).toContain('cognito-idp');
  });

  it('throttles every route and the heavy ones harder, and logs the route template, never a path', () => {
    // Assess
    const [[, stage] = ['', {}]] = ofType('AWS::ApiGatewayV2::Stage');
    expect(stage.Properties.DefaultRouteSettings).toMatchObject({
      ThrottlingRateLimit: 50,
      ThrottlingBurstLimit: 100,
    });
    expect(stage.Properties.RouteSettings['POST /requests/batch']).toEqual({
      ThrottlingRateLimit: 2,
      ThrottlingBurstLimit: 5,
    });
    expect(stage.Properties.RouteSettings['POST /requests/{request_id}/package']).toBeDefined();
    const format = stage.Properties.AccessLogSettings.Format as string;
    expect(format).toContain('$context.routeKey');
    expect(format).not.toMatch(/\$context\.(path|resourcePath)|querystring|requestOverride/);
  });

  it('allows no browser origin by default, and only the configured console origins when given', () => {
    // Act
    const withConsole = synth({ consoleOrigins: ['https://privacy.example.com'] }).resources;

    // Assess
    for (const [, api] of ofType('AWS::ApiGatewayV2::Api'))
      expect(api.Properties.CorsConfiguration).toBeUndefined();
    const cors = Object.values(withConsole).find((resource) => resource.Type === 'AWS::ApiGatewayV2::Api')
      ?.Properties.CorsConfiguration;
    expect(cors).toMatchObject({
      AllowOrigins: ['https://privacy.example.com'],
      AllowMethods: ['GET', 'POST'],
    });
  });

  it('gives systems a policy of every /iam route but the package hand-out', () => {
    // Assess
    const policy = resources[stack.getLogicalId(stack.api.machinePolicy.node.defaultChild as never)];
    const text = JSON.stringify(policy?.Properties.PolicyDocument);
    expect(text).toContain('/iam/requests/*/cancel');
    expect(text).not.toContain('package');
  });

  it('sets every variable the API function reads', () => {
    // Assess
    const fn = resources[stack.getLogicalId(stack.api.fn.function.node.defaultChild as never)];
    const set = Object.keys(fn?.Properties.Environment.Variables ?? {});
    expect(set).toEqual(expect.arrayContaining(Object.keys(apiEnvSchema.shape)));
  });
});
