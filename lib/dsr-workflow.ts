import { Duration } from 'aws-cdk-lib';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as tasks from 'aws-cdk-lib/aws-stepfunctions-tasks';
import { Construct } from 'constructs';
import { EXPORT_RESTART_ERRORS, NO_DATA_ERRORS, RETRYABLE_ERRORS } from '../lambdas/shared/errors.ts';
import type { StepName } from '../lambdas/steps.ts';
import { acknowledge, nagArn } from './nag.ts';

export interface DsrWorkflowProps {
  /** The Lambda of each step. */
  readonly functions: Readonly<Record<StepName, lambda.IFunction>>;
  /** Longest an execution may run: the export wait budget plus the time the other steps take. */
  readonly executionTimeout: Duration;
  /**
   * Where execution events are logged (all events, without execution data: state carries step
   * facts only, but nothing needs to copy it into a second store). @default no logging
   */
  readonly logDestination?: logs.ILogGroup;
  /** Encrypts execution history and logged events with this key. @default AWS-owned key */
  readonly encryptionKey?: kms.IKey;
  /** X-Ray tracing of executions. @default false */
  readonly tracing?: boolean;
}

/** Retry of transient platform and download errors: backoff with full jitter. */
const TRANSIENT_RETRY: sfn.RetryProps = {
  errors: [...RETRYABLE_ERRORS],
  interval: Duration.seconds(2),
  backoffRate: 2,
  maxAttempts: 6,
  maxDelay: Duration.minutes(5),
  jitterStrategy: sfn.JitterType.FULL,
};

/**
 * The data-subject request workflow (DESIGN.md section 4), Standard type, JSONPath. State carries
 * request and step facts only; identifiers stay in the ledger.
 */
export class DsrWorkflow extends Construct {
  readonly stateMachine: sfn.StateMachine;

  constructor(scope: Construct, id: string, props: DsrWorkflowProps) {
    super(scope, id);
    const fn = props.functions;

    const task = (
      name: string,
      step: StepName,
      payload: Record<string, unknown>,
      resultPath: string | null,
    ) =>
      new tasks.LambdaInvoke(this, name, {
        lambdaFunction: fn[step],
        payload: sfn.TaskInput.fromObject(payload),
        payloadResponseOnly: true,
        resultPath: resultPath === null ? sfn.JsonPath.DISCARD : resultPath,
        taskTimeout: sfn.Timeout.duration(Duration.minutes(15)),
      });
    const requestId = { 'request_id.$': '$.request_id' };

    const recordFailure = task(
      'RecordFailure',
      'RecordFailure',
      { ...requestId, 'error.$': '$.error' },
      '$.failure',
    );
    recordFailure.addRetry(TRANSIENT_RETRY);
    const failed = new sfn.Fail(this, 'RequestFailed', {
      errorPath: '$.error.Error',
      cause: 'see the ledger entry of this request',
    });
    const cancelled = new sfn.Succeed(this, 'Cancelled');
    recordFailure.next(
      new sfn.Choice(this, 'WasCancelled?')
        .when(sfn.Condition.stringEquals('$.failure.status', 'cancelled'), cancelled)
        .when(
          sfn.Condition.stringEquals('$.failure.status', 'completed'),
          new sfn.Succeed(this, 'CompletedMeanwhile'),
        )
        .otherwise(failed),
    );

    // Every task ends in RecordFailure when it fails for good; nothing is retried on States.ALL.
    const guard = <T extends tasks.LambdaInvoke>(
      state: T,
      extraRetries: sfn.RetryProps[] = [],
      catches: { errors: string[]; next: sfn.IChainable }[] = [],
    ): T => {
      for (const retry of extraRetries) state.addRetry(retry);
      state.addRetry(TRANSIENT_RETRY);
      for (const { errors, next } of catches) state.addCatch(next, { errors, resultPath: '$.error' });
      state.addCatch(recordFailure, { errors: ['States.ALL'], resultPath: '$.error' });
      return state;
    };

    const outcome = (name: string, value: 'exported' | 'erased' | 'no_data') =>
      guard(task(name, 'RecordOutcome', { ...requestId, outcome: value }, '$.result')).next(
        new sfn.Succeed(this, `${name}Done`),
      );
    const recordNoData = outcome('RecordNoData', 'no_data');
    // The subject erased meanwhile (by a request of its own): the platform has no data, a valid answer.
    const subjectGone = [{ errors: [...NO_DATA_ERRORS], next: recordNoData }];

    const resolve = guard(task('ResolveSubject', 'ResolveSubject', requestId, '$.subject'));
    const startExport = guard(
      task('StartExport', 'StartExport', requestId, '$.export'),
      [
        // A new, counted export attempt: StartExport's ledger check decides whether one is allowed.
        {
          errors: [...EXPORT_RESTART_ERRORS],
          interval: Duration.seconds(30),
          backoffRate: 2,
          maxAttempts: 2,
        },
      ],
      subjectGone,
    );
    const waitForExport = new sfn.Wait(this, 'WaitForExport', {
      time: sfn.WaitTime.secondsPath('$.export.wait_seconds'),
    });
    const checkExport = guard(
      task(
        'CheckExport',
        'CheckExport',
        { ...requestId, 'waited.$': '$.export.wait_seconds', 'export_id.$': '$.export.export_id' },
        '$.export',
      ),
      [],
      subjectGone,
    );
    const archive = guard(task('ArchiveExport', 'ArchiveExport', requestId, '$.archive'), [], subjectGone);
    const erase = guard(task('EraseSubject', 'EraseSubject', requestId, '$.erasure'));
    const verifyErasure = guard(task('VerifyErasure', 'VerifyErasure', requestId, '$.erasure_verification'), [
      { errors: ['ErasureNotVerifiedError'], interval: Duration.seconds(10), backoffRate: 2, maxAttempts: 3 },
    ]);

    const definition = resolve.next(
      new sfn.Choice(this, 'AlreadyCompleted?')
        .when(
          sfn.Condition.booleanEquals('$.subject.already_completed', true),
          new sfn.Succeed(this, 'NothingToDo'),
        )
        .when(sfn.Condition.booleanEquals('$.subject.found', false), recordNoData)
        .otherwise(
          startExport
            .next(waitForExport)
            .next(checkExport)
            .next(
              new sfn.Choice(this, 'ExportReady?')
                .when(
                  sfn.Condition.stringEquals('$.export.status', 'completed'),
                  archive.next(
                    new sfn.Choice(this, 'RequestType?')
                      .when(
                        sfn.Condition.stringEquals('$.type', 'erasure'),
                        erase.next(verifyErasure).next(outcome('RecordErased', 'erased')),
                      )
                      .otherwise(outcome('RecordExported', 'exported')),
                  ),
                )
                .when(sfn.Condition.stringEquals('$.export.status', 'failed'), startExport)
                .otherwise(waitForExport),
            ),
        ),
    );

    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromChainable(definition),
      timeout: props.executionTimeout,
      tracingEnabled: props.tracing ?? false,
      ...(props.logDestination
        ? {
            logs: {
              destination: props.logDestination,
              level: sfn.LogLevel.ALL,
              includeExecutionData: false,
            },
          }
        : {}),
      ...(props.encryptionKey
        ? {
            encryptionConfiguration: new sfn.CustomerManagedEncryptionConfiguration(
              props.encryptionKey,
              Duration.minutes(5),
            ),
          }
        : {}),
    });
    this.#acknowledgeWildcards(props);
  }

  /** The wildcards CDK's own grants put in the state machine role's policy, each for its reason. */
  #acknowledgeWildcards(props: DsrWorkflowProps): void {
    const policy = this.stateMachine.role.node.tryFindChild('DefaultPolicy');
    if (policy === undefined) return;
    const invocable = [...new Set(Object.values(props.functions))];
    acknowledge(
      policy,
      'AwsSolutions-IAM5',
      'LambdaInvoke grants each step function and its versions (<arn>:*); every ARN is a function of this workflow',
      invocable.map((fn) => `Resource::${nagArn(fn)}:*`),
    );
    const unscoped = [
      ...(props.tracing ? ['X-Ray (PutTraceSegments, PutTelemetryRecords, GetSampling*)'] : []),
      ...(props.logDestination
        ? ['CloudWatch Logs vended log delivery (CreateLogDelivery and friends)']
        : []),
    ];
    if (unscoped.length > 0) {
      acknowledge(
        policy,
        'AwsSolutions-IAM5',
        `${unscoped.join(' and ')} do not support resource-level permissions`,
        ['Resource::*'],
      );
    }
  }
}
