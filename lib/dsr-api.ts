/**
 * The API for people and systems: a Cognito user pool (MFA required, no self sign-up, short
 * sessions, a group per role), an HTTP API whose routes are the route table of lambdas/api (each
 * behind the pool's JWT authorizer, and again under /iam behind IAM authorization for systems),
 * throttled per route, with access logs that name the route template and the person's subject,
 * never a path; and the API function, bound to exactly what its routes do.
 */
import { fileURLToPath } from 'node:url';
import { Aws, type CfnElement, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as apigw from 'aws-cdk-lib/aws-apigatewayv2';
import { HttpIamAuthorizer, HttpUserPoolAuthorizer } from 'aws-cdk-lib/aws-apigatewayv2-authorizers';
import { HttpLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import * as cognito from 'aws-cdk-lib/aws-cognito';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { MACHINE_PREFIX } from '../lambdas/api/api.ts';
import { API_ROLES } from '../lambdas/api/identity.ts';
import { API_ROUTES } from '../lambdas/api/routes.ts';
import { DsrFunction } from './dsr-function.ts';
import { acknowledge } from './nag.ts';

/** Every route's share, for everyone together; each person's own is lambdas/api/throttle.ts. */
export const API_ROUTE_THROTTLE = { rateLimit: 50, burstLimit: 100 } as const;
/** The routes that do more per call (a batch of thousands of lines, a link to a subject's data). */
export const API_HEAVY_ROUTE_THROTTLE = { rateLimit: 2, burstLimit: 5 } as const;
const HEAVY_ROUTES = new Set(['submitBatch', 'handOutPackage', 'getReport', 'verifyRequest']);

/** How long a person stays signed in: an hour's tokens, renewed for at most a working day. */
export const SESSION = { tokenMinutes: 60, refreshHours: 12 } as const;

export interface DsrApiProps {
  readonly ledger: dynamodb.ITable;
  readonly gate: dynamodb.ITable;
  readonly archiveBucket: s3.IBucket;
  readonly auditBucket: s3.IBucket;
  readonly intakeQueue: sqs.IQueue;
  readonly stateMachine: sfn.StateMachine;
  readonly stateMachineKey: kms.IKey;
  readonly defaults: { readonly logRetention: logs.RetentionDays; readonly logKey: kms.IKey };
  /** An existing user pool's id; without it the construct creates one. */
  readonly userPoolId?: string;
  readonly consoleOrigins: readonly string[];
  readonly machineOrganizationId?: string;
  /** What the report and verify routes read: the controller's time zone and each type's archive retention. */
  readonly evidence: {
    readonly timeZone: string;
    readonly accessArchiveRetentionDays: number;
    readonly erasureArchiveRetentionDays: number;
  };
}

export class DsrApi extends Construct {
  readonly userPool: cognito.IUserPool;
  readonly client: cognito.UserPoolClient;
  readonly api: apigw.HttpApi;
  readonly fn: DsrFunction;
  readonly accessLogs: logs.LogGroup;
  /** What a system of the account or organisation needs to call the /iam routes but the package hand-out. */
  readonly machinePolicy: iam.ManagedPolicy;

  constructor(scope: Construct, id: string, props: DsrApiProps) {
    super(scope, id);
    this.userPool =
      props.userPoolId === undefined
        ? this.#userPool()
        : cognito.UserPool.fromUserPoolId(this, 'Pool', props.userPoolId);
    this.client = this.userPool.addClient('ConsoleClient', {
      // A browser holds no secret: the console signs in with SRP, and later with the hosted UI.
      generateSecret: false,
      authFlows: { userSrp: true },
      preventUserExistenceErrors: true,
      enableTokenRevocation: true,
      idTokenValidity: Duration.minutes(SESSION.tokenMinutes),
      accessTokenValidity: Duration.minutes(SESSION.tokenMinutes),
      refreshTokenValidity: Duration.hours(SESSION.refreshHours),
    });
    this.fn = this.#function(props);
    this.accessLogs = new logs.LogGroup(this, 'AccessLogs', {
      retention: props.defaults.logRetention,
      encryptionKey: props.defaults.logKey,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.api = new apigw.HttpApi(this, 'Http', {
      apiName: `${Stack.of(this).stackName}-api`,
      description: 'svc-dsr API: the privacy team, auditors and systems (docs/console-api.md)',
      createDefaultStage: false,
      ...(props.consoleOrigins.length === 0
        ? {}
        : {
            corsPreflight: {
              allowOrigins: [...props.consoleOrigins],
              allowMethods: [apigw.CorsHttpMethod.GET, apigw.CorsHttpMethod.POST],
              allowHeaders: ['authorization', 'content-type'],
              maxAge: Duration.hours(1),
            },
          }),
    });
    const stage = new apigw.HttpStage(this, 'Stage', {
      httpApi: this.api,
      stageName: '$default',
      autoDeploy: true,
      throttle: API_ROUTE_THROTTLE,
    });
    this.#routes();
    this.#stageSettings(stage);
    this.machinePolicy = this.#machinePolicy();
  }

  /** The stack's own pool: people are added by an administrator, each with MFA. */
  #userPool(): cognito.UserPool {
    const pool = new cognito.UserPool(this, 'Pool', {
      selfSignUpEnabled: false,
      signInAliases: { username: true, email: true },
      mfa: cognito.Mfa.REQUIRED,
      mfaSecondFactor: { otp: true, sms: false },
      passwordPolicy: {
        minLength: 14,
        requireDigits: true,
        requireLowercase: true,
        requireUppercase: true,
        requireSymbols: true,
        tempPasswordValidity: Duration.days(3),
      },
      accountRecovery: cognito.AccountRecovery.EMAIL_ONLY,
      featurePlan: cognito.FeaturePlan.PLUS,
      standardThreatProtectionMode: cognito.StandardThreatProtectionMode.FULL_FUNCTION,
      deletionProtection: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    for (const role of API_ROLES) {
      new cognito.CfnUserPoolGroup(this, `Group-${role}`, {
        userPoolId: pool.userPoolId,
        groupName: role,
        description:
          role === 'auditor'
            ? 'svc-dsr auditors: read requests, timelines, reports and verifications; change nothing'
            : 'svc-dsr privacy team: submit, follow and act on requests; hand out packages',
      });
    }
    return pool;
  }

  #function(props: DsrApiProps): DsrFunction {
    const fn = new DsrFunction(this, 'Function', {
      ...props.defaults,
      entry: fileURLToPath(new URL('../lambdas/api/handler.ts', import.meta.url)),
      description: "svc-dsr API: answers the privacy team's, auditors' and systems' calls under their roles",
      // A batch of thousands of lines is judged and sent in seconds; a hand-out is a HEAD and a record;
      // a report or a verification stops in time to say so (lambdas/api/evidence.ts).
      timeout: Duration.seconds(30),
      memorySize: 1024,
    });
    fn.bindLedger(props.ledger, 'api')
      .bindPlatformGate(props.gate, { admits: false, slots: false, callers: true })
      .bindAuditBucket(props.auditBucket)
      .bindAuditEvidence(props.auditBucket)
      .bindArchiveBucket(props.archiveBucket, 'operator')
      .bindStateMachine(props.stateMachine, 'operator', props.stateMachineKey)
      .bindQueue(props.intakeQueue, 'send', 'INTAKE_QUEUE_URL')
      .bindEnvironment('ACCOUNT_ID', Aws.ACCOUNT_ID)
      .bindEnvironment('MACHINE_ORGANIZATION_ID', props.machineOrganizationId ?? '')
      .bindEnvironment('TIME_ZONE', props.evidence.timeZone)
      .bindEnvironment('ACCESS_ARCHIVE_RETENTION_DAYS', String(props.evidence.accessArchiveRetentionDays))
      .bindEnvironment('ERASURE_ARCHIVE_RETENTION_DAYS', String(props.evidence.erasureArchiveRetentionDays));
    return fn;
  }

  /** Each route of the table, once for people (JWT) and once under /iam for systems (IAM). */
  #routes(): void {
    const integration = new HttpLambdaIntegration('Integration', this.fn.function, {
      payloadFormatVersion: apigw.PayloadFormatVersion.VERSION_2_0,
    });
    const people = new HttpUserPoolAuthorizer('People', this.userPool, { userPoolClients: [this.client] });
    const systems = new HttpIamAuthorizer();
    for (const route of API_ROUTES) {
      const method = apigw.HttpMethod[route.method];
      this.api.addRoutes({ path: route.path, methods: [method], integration, authorizer: people });
      this.api.addRoutes({
        path: `${MACHINE_PREFIX}${route.path}`,
        methods: [method],
        integration,
        authorizer: systems,
      });
    }
  }

  /** Access logs and the heavier routes' own throttle on the stage. */
  #stageSettings(stage: apigw.HttpStage): void {
    const cfn = stage.node.defaultChild as apigw.CfnStage;
    cfn.accessLogSettings = {
      destinationArn: this.accessLogs.logGroupArn,
      // The route's template, never the path: a path could hold what a caller typed.
      format: JSON.stringify({
        requestId: '$context.requestId',
        time: '$context.requestTime',
        route: '$context.routeKey',
        status: '$context.status',
        bytes: '$context.responseLength',
        latencyMs: '$context.responseLatency',
        person: '$context.authorizer.claims.sub',
        system: '$context.identity.userArn',
        authorizerError: '$context.authorizer.error',
        integrationError: '$context.integrationErrorMessage',
      }),
    };
    const heavy: Record<string, { ThrottlingRateLimit: number; ThrottlingBurstLimit: number }> = {};
    for (const route of API_ROUTES.filter((each) => HEAVY_ROUTES.has(each.operationId))) {
      for (const path of [route.path, `${MACHINE_PREFIX}${route.path}`]) {
        heavy[`${route.method} ${path}`] = {
          ThrottlingRateLimit: API_HEAVY_ROUTE_THROTTLE.rateLimit,
          ThrottlingBurstLimit: API_HEAVY_ROUTE_THROTTLE.burstLimit,
        };
      }
    }
    cfn.routeSettings = heavy;
    // The routes must exist before the stage names them.
    for (const child of this.api.node.children) {
      if (child instanceof apigw.HttpRoute) cfn.node.addDependency(child);
    }
  }

  /** Invoke on every /iam route but the package hand-out: a system granted that has a statement of its own. */
  #machinePolicy(): iam.ManagedPolicy {
    const routes = API_ROUTES.filter((route) => route.operationId !== 'handOutPackage');
    const resourceOf = (route: (typeof API_ROUTES)[number]) =>
      `$default/${route.method}${MACHINE_PREFIX}${route.path.replace(/\{request_id\}/g, '*')}`;
    const policy = new iam.ManagedPolicy(this, 'MachinePolicy', {
      description:
        "svc-dsr: what a system needs to submit, follow and act on requests through the API's /iam routes (no package hand-out)",
      statements: [
        new iam.PolicyStatement({
          actions: ['execute-api:Invoke'],
          resources: routes.map((route) =>
            Stack.of(this).formatArn({
              service: 'execute-api',
              resource: this.api.apiId,
              resourceName: resourceOf(route),
            }),
          ),
        }),
      ],
    });
    const api = `<${Stack.of(this).getLogicalId(this.api.node.defaultChild as CfnElement)}>`;
    acknowledge(
      policy,
      'AwsSolutions-IAM5',
      "Each /iam route of this API's stage that takes a request id: the id in the path is the one wildcard",
      routes
        .filter((route) => route.path.includes('{request_id}'))
        .map(
          (route) =>
            `Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:${api}/${resourceOf(route)}`,
        ),
    );
    return policy;
  }
}
