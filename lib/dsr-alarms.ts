import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';

export interface DsrAlarmsProps {
  /** Encrypts the alarm topic; its key policy must let CloudWatch use it. */
  readonly topicKey: kms.IKey;
  /** Subscribed to the topic when given (the address must confirm the subscription). */
  readonly email?: string;
  readonly intakeQueue: sqs.IQueue;
  /** The intake queue alarm fires when its oldest message is older than this. */
  readonly intakeQueueMaxAge: Duration;
  readonly intakeDeadLetterQueue: sqs.IQueue;
  readonly quarantineQueue: sqs.IQueue;
  readonly stateMachine: sfn.IStateMachine;
  /** Every Lambda of the stack, by a readable name used in the alarm description. */
  readonly functions: Readonly<Record<string, lambda.IFunction>>;
  /** The deadline sweep's OverdueRequests metric. */
  readonly overdueRequests: cloudwatch.IMetric;
  /** Intake's OverdueAtIntake metric: requests already past their due date when received. @default no alarm */
  readonly overdueAtIntake?: cloudwatch.IMetric;
  /** The deadline sweep's DueSoonRequests metric: open requests due within the configured days. */
  readonly dueSoonRequests: cloudwatch.IMetric;
  /** The deadline sweep's ReceiptConfirmationsOverdue: CCPA receipts not confirmed by their date. @default no alarm */
  readonly receiptsOverdue?: cloudwatch.IMetric;
  /** The reconciler's StuckRequests: open requests it found with no running execution. */
  readonly stuckRequests: cloudwatch.IMetric;
  /** The reconciler's PlatformDownSeconds: how long the shared circuit has been open. */
  readonly platformDownSeconds: cloudwatch.IMetric;
  /** The platform-down alarm fires once the platform has been down this long. @default 15 minutes */
  readonly platformDownAlarmAfter?: Duration;
}

const FIVE_MINUTES = Duration.minutes(5);

/**
 * The alarms an operator must see, all on one KMS-encrypted SNS topic: dead letters, quarantined
 * messages, failed or timed-out executions, overdue requests, and Lambda errors and throttles.
 */
export class DsrAlarms extends Construct {
  readonly topic: sns.Topic;
  readonly alarms: cloudwatch.Alarm[] = [];

  constructor(scope: Construct, id: string, props: DsrAlarmsProps) {
    super(scope, id);
    this.topic = new sns.Topic(this, 'Topic', {
      displayName: 'svc-dsr alarms',
      masterKey: props.topicKey,
      enforceSSL: true,
    });
    // The topic policy CDK writes for enforceSSL replaces the default one, so CloudWatch must be
    // let in explicitly: only this account's alarms.
    this.topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'AllowThisAccountsAlarms',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [this.topic.topicArn],
        conditions: alarmSourceConditions(Stack.of(this)),
      }),
    );
    if (props.email !== undefined) {
      this.topic.addSubscription(new subscriptions.EmailSubscription(props.email));
    }

    this.#queueAlarms(props);
    this.#requestAlarms(props);
    this.#executionAlarms(props.stateMachine);
    this.#functionAlarms(props.functions);
  }

  /** The queues: dead letters and quarantined messages (the first, then growth), and intake's age. */
  #queueAlarms(props: DsrAlarmsProps): void {
    this.#add(
      'IntakeDeadLetters',
      props.intakeDeadLetterQueue.metricApproximateNumberOfMessagesVisible({
        period: FIVE_MINUTES,
        statistic: 'Maximum',
      }),
      'Intake messages failed five times and sit in the dead-letter queue; inspect them and redrive (docs/deploy.md)',
    );
    this.#add(
      'Quarantined',
      props.quarantineQueue.metricApproximateNumberOfMessagesVisible({
        period: FIVE_MINUTES,
        statistic: 'Maximum',
      }),
      'Messages that could not be accepted are in the quarantine queue, each with its reason attribute',
    );
    for (const [id, queue, what] of [
      ['IntakeDeadLettersGrowing', props.intakeDeadLetterQueue, 'dead-letter'],
      ['QuarantineGrowing', props.quarantineQueue, 'quarantine'],
    ] as const) {
      // The first message is alarmed above; a queue that keeps growing is a second, louder signal.
      this.#add(
        id,
        new cloudwatch.MathExpression({
          expression: 'DIFF(visible)',
          usingMetrics: {
            visible: queue.metricApproximateNumberOfMessagesVisible({
              period: FIVE_MINUTES,
              statistic: 'Maximum',
            }),
          },
          period: FIVE_MINUTES,
          label: `growth of the ${what} queue`,
        }),
        `The ${what} queue grew in each of the last three five-minute periods: something keeps failing`,
        { evaluationPeriods: 3, datapointsToAlarm: 3 },
      );
    }
    this.#add(
      'IntakeQueueAge',
      props.intakeQueue.metricApproximateAgeOfOldestMessage({ period: FIVE_MINUTES, statistic: 'Maximum' }),
      `The oldest request on the intake queue has waited over ${props.intakeQueueMaxAge.toMinutes()} minutes: intake is not keeping up or is failing`,
      { evaluationPeriods: 1, datapointsToAlarm: 1 },
      props.intakeQueueMaxAge.toSeconds(),
    );
  }

  /** Requests at risk: due soon, overdue, stuck, held by a platform outage, unconfirmed receipts. */
  #requestAlarms(props: DsrAlarmsProps): void {
    this.#add(
      'DueSoonUnfinished',
      props.dueSoonRequests,
      'Open requests are due within the configured days and not finished; svc-dsr list --status running and --status failed name them',
    );
    this.#add(
      'StuckRequests',
      props.stuckRequests,
      'The reconciler found open requests with no running execution (resumed, or recorded failed as stranded); their execution histories say why',
    );
    this.#add(
      'PlatformDown',
      props.platformDownSeconds,
      'The platform has been down (the shared circuit breaker open) for a while: requests wait, up to retryHorizonHours, then fail as platform_outage; watch DueSoonUnfinished',
      undefined,
      (props.platformDownAlarmAfter ?? Duration.minutes(15)).toSeconds(),
    );
    this.#add(
      'OverdueRequests',
      props.overdueRequests,
      'Open requests are past their statutory due date; svc-dsr list --overdue names them',
    );
    if (props.receiptsOverdue !== undefined) {
      this.#add(
        'ReceiptConfirmationsOverdue',
        props.receiptsOverdue,
        'CCPA requests are past their receipt confirm-by date (10 business days, section 7021) with no receipt notice recorded; svc-dsr list --receipt-overdue names them, svc-dsr notice --kind receipt records the confirmation',
      );
    }
    if (props.overdueAtIntake !== undefined) {
      // At once, not at the next sweep: the request was late before the workflow saw it.
      this.#add(
        'OverdueAtIntake',
        props.overdueAtIntake,
        'A request arrived already past its statutory due date (it was accepted and is being answered); svc-dsr list --overdue names it, its ledger item says overdue_at_intake',
      );
    }
  }

  /** Executions throttled, aborted, failed or timed out. */
  #executionAlarms(machine: DsrAlarmsProps['stateMachine']): void {
    const executions = { period: FIVE_MINUTES, statistic: 'Sum' } as const;
    for (const [id, metric, description] of [
      [
        'ExecutionsThrottled',
        machine.metricThrottled(executions),
        'Step Functions throttled executions of the workflow: the account quota for state transitions is reached',
      ],
      [
        'ExecutionsAborted',
        machine.metricAborted(executions),
        'An execution was stopped; unless an operator cancelled its request, svc-dsr retry resumes it',
      ],
      [
        'ExecutionsFailed',
        machine.metricFailed(executions),
        'A request failed after its retries; svc-dsr status <request_id> shows the error, svc-dsr retry runs it again',
      ],
      [
        'ExecutionsTimedOut',
        machine.metricTimedOut(executions),
        'An execution ran past its timeout (export budget plus a day); the request needs an operator',
      ],
    ] as const) {
      this.#add(id, metric, description);
    }
  }

  /** Each function's errors (persisting ones only) and throttles. */
  #functionAlarms(functions: DsrAlarmsProps['functions']): void {
    for (const [name, fn] of Object.entries(functions)) {
      // Transient platform errors are retried by the workflow and also count as Lambda errors, so
      // only errors that persist for two of three five-minute periods raise this alarm.
      this.#add(
        `${name}Errors`,
        fn.metricErrors({ period: FIVE_MINUTES, statistic: 'Sum' }),
        `The ${name} Lambda has been failing for at least ten minutes`,
        { evaluationPeriods: 3, datapointsToAlarm: 2 },
      );
      this.#add(
        `${name}Throttles`,
        fn.metricThrottles({ period: FIVE_MINUTES, statistic: 'Sum' }),
        `The ${name} Lambda is throttled: the account or function concurrency limit is reached`,
      );
    }
  }

  #add(
    id: string,
    metric: cloudwatch.IMetric,
    description: string,
    evaluation: { evaluationPeriods: number; datapointsToAlarm: number } = {
      evaluationPeriods: 1,
      datapointsToAlarm: 1,
    },
    threshold = 1,
  ): void {
    const alarm = new cloudwatch.Alarm(this, id, {
      metric,
      threshold,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      ...evaluation,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      alarmDescription: `svc-dsr: ${description}`,
    });
    alarm.addAlarmAction(new actions.SnsAction(this.topic));
    alarm.addOkAction(new actions.SnsAction(this.topic));
    this.alarms.push(alarm);
  }
}

/** The conditions that let only this account's CloudWatch alarms act through a service grant. */
export function alarmSourceConditions(stack: Stack): Record<string, Record<string, string>> {
  return {
    StringEquals: { 'aws:SourceAccount': stack.account },
    ArnLike: {
      'aws:SourceArn': `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:*`,
    },
  };
}
