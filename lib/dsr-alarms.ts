// The operator's alarms on one SNS topic: dead letters, quarantine, failed runs, overdue, Lambda errors.
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
  /**
   * The deadline sweep's ReceiptConfirmationsDueSoon: CCPA receipts to confirm within a few
   * business days, alarmed before the date. @default no alarm
   */
  readonly receiptsDueSoon?: cloudwatch.IMetric;
  /**
   * The deadline sweep's ResponseNoticesDueSoon: response and denial notices not recorded and due
   * within the due-soon window, alarmed before the date. @default no alarm
   */
  readonly noticesDueSoon?: cloudwatch.IMetric;
  /** The deadline sweep's ResponseNoticesOverdue: response and denial notices past their date. @default no alarm */
  readonly noticesOverdue?: cloudwatch.IMetric;
  /**
   * The scheduled passes by name, each with its heartbeat (the Sum of a metric it publishes once per
   * completed run) and its schedule: silence for two runs is an alarm.
   */
  readonly heartbeats: Readonly<
    Record<string, { readonly metric: cloudwatch.Metric; readonly every: Duration }>
  >;
  /** Where the status-events source puts the batches it gave up on. */
  readonly statusEventsFailureQueue: sqs.IQueue;
  /** The status-events function: the age of the ledger stream records it has yet to publish. */
  readonly statusEventsFunction: lambda.IFunction;
  /** The iterator-age alarm fires past this, well before the source gives records up. @default 1 hour */
  readonly statusEventsMaxAge?: Duration;
  /** The reconciler's StuckRequests: open requests it found with no running execution. */
  readonly stuckRequests: cloudwatch.IMetric;
  /** The reconciler's PlatformDownSeconds: how long the shared circuit has been open. */
  readonly platformDownSeconds: cloudwatch.IMetric;
  /**
   * With several sites, each site's own PlatformDownSeconds (its Site dimension) by a readable
   * suffix of its alarm: one platform-down alarm per site, naming it, in place of the stack-wide
   * one. @default the stack-wide alarm only
   */
  readonly platformDownBySite?: Readonly<
    Record<string, { readonly site: string; readonly metric: cloudwatch.IMetric }>
  >;
  /** The platform-down alarm fires once the platform has been down this long. @default 15 minutes */
  readonly platformDownAlarmAfter?: Duration;
  /**
   * StartExport's PlatformExportRefusals (Sum): starts the platform refused for too many open
   * exports, which says platformMaxOpenExports is above the platform's cap. @default no alarm
   */
  readonly platformExportRefusals?: cloudwatch.IMetric;
}

const FIVE_MINUTES = Duration.minutes(5);

/**
 * What an alarm makes of a period without data, chosen per alarm (docs/deploy.md lists them):
 * - `breaching`: silence is the failure (a heartbeat);
 * - `notBreaching`: no data means none of what is counted (AWS publishes queue, execution and
 *   Lambda metrics only while there is activity);
 * - `ignore`: the count is published by a pass on every run, so silence says the pass did not run,
 *   which the pass's heartbeat alarm reports; the alarm keeps its state rather than reading the
 *   silence as a recovery.
 */
export type MissingData = 'breaching' | 'notBreaching' | 'ignore';
const MISSING_DATA: Readonly<Record<MissingData, cloudwatch.TreatMissingData>> = {
  breaching: cloudwatch.TreatMissingData.BREACHING,
  notBreaching: cloudwatch.TreatMissingData.NOT_BREACHING,
  ignore: cloudwatch.TreatMissingData.IGNORE,
};

interface AlarmOptions {
  readonly missing: MissingData;
  /** @default 1 of 1 */
  readonly evaluation?: { readonly evaluationPeriods: number; readonly datapointsToAlarm: number };
  /** @default 1 */
  readonly threshold?: number;
  /** @default GREATER_THAN_OR_EQUAL_TO_THRESHOLD */
  readonly comparison?: cloudwatch.ComparisonOperator;
}

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
    this.#heartbeatAlarms(props.heartbeats);
    this.#statusEventAlarms(props);
  }

  /**
   * Each scheduled pass's heartbeat: fewer than one in each of two periods of its schedule (one
   * when two would pass a day, CloudWatch's longest evaluation), silence included, is an alarm.
   */
  #heartbeatAlarms(heartbeats: DsrAlarmsProps['heartbeats']): void {
    for (const [name, { metric, every }] of Object.entries(heartbeats)) {
      const periods = every.toMinutes() * 2 <= 24 * 60 ? 2 : 1;
      this.#add(
        `${name}Silent`,
        metric.with({ statistic: 'Sum', period: every }),
        `The ${name} pass has not completed in ${periods * every.toMinutes()} minutes (it runs every ${every.toMinutes()}): it is failing, timing out or not scheduled, and the alarms on its counts cannot speak; its log group says why`,
        {
          missing: 'breaching',
          evaluation: { evaluationPeriods: periods, datapointsToAlarm: periods },
          comparison: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        },
      );
    }
  }

  /** Status events: batches the stream source gave up on, and records waiting too long. */
  #statusEventAlarms(props: DsrAlarmsProps): void {
    this.#add(
      'StatusEventsFailed',
      props.statusEventsFailureQueue.metricApproximateNumberOfMessagesVisible({
        period: FIVE_MINUTES,
        statistic: 'Maximum',
      }),
      'Status events were not published: the ledger stream source gave up on a batch and left its place (shard and sequence numbers) in the status-events failure queue; the events are lost to EventBridge, so tell their consumers (docs/events.md)',
      { missing: 'notBreaching' },
    );
    const maxAge = props.statusEventsMaxAge ?? Duration.hours(1);
    this.#add(
      'StatusEventsIteratorAge',
      props.statusEventsFunction.metric('IteratorAge', { period: FIVE_MINUTES, statistic: 'Maximum' }),
      `Status events are over ${maxAge.toMinutes()} minutes behind the ledger: the status-events function is failing or throttled, and records older than a day are given up to the failure queue`,
      { missing: 'notBreaching', threshold: maxAge.toMilliseconds() },
    );
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
      { missing: 'notBreaching' },
    );
    this.#add(
      'Quarantined',
      props.quarantineQueue.metricApproximateNumberOfMessagesVisible({
        period: FIVE_MINUTES,
        statistic: 'Maximum',
      }),
      'Messages that could not be accepted are in the quarantine queue, each with its reason attribute',
      { missing: 'notBreaching' },
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
        { missing: 'notBreaching', evaluation: { evaluationPeriods: 3, datapointsToAlarm: 3 } },
      );
    }
    this.#add(
      'IntakeQueueAge',
      props.intakeQueue.metricApproximateAgeOfOldestMessage({ period: FIVE_MINUTES, statistic: 'Maximum' }),
      `The oldest request on the intake queue has waited over ${props.intakeQueueMaxAge.toMinutes()} minutes: intake is not keeping up or is failing`,
      { missing: 'notBreaching', threshold: props.intakeQueueMaxAge.toSeconds() },
    );
  }

  /** Requests at risk: due soon, overdue, stuck, held by a platform outage, unconfirmed receipts, unsent answers. */
  #requestAlarms(props: DsrAlarmsProps): void {
    this.#add(
      'DueSoonUnfinished',
      props.dueSoonRequests,
      'Open requests are due within the configured days and not finished; svc-dsr list --status running and --status failed name them',
      { missing: 'ignore' },
    );
    this.#add(
      'StuckRequests',
      props.stuckRequests,
      'The reconciler found open requests with no running execution (resumed, or recorded failed as stranded); their execution histories say why',
      { missing: 'ignore' },
    );
    const platformDown = {
      missing: 'ignore' as const,
      threshold: (props.platformDownAlarmAfter ?? Duration.minutes(15)).toSeconds(),
    };
    const bySite = Object.entries(props.platformDownBySite ?? {});
    if (bySite.length < 2) {
      this.#add(
        'PlatformDown',
        props.platformDownSeconds,
        'The platform has been down (the shared circuit breaker open) for a while: requests wait, up to retryHorizonHours, then fail as platform_outage; watch DueSoonUnfinished',
        platformDown,
      );
    }
    for (const [suffix, { site, metric }] of bySite.length < 2 ? [] : bySite) {
      this.#add(
        `PlatformDown${suffix}`,
        metric,
        `The platform account of site ${site} has been down (its circuit breaker open) for a while: that site's parts of requests wait, up to retryHorizonHours, then fail as platform_outage while the other sites go on; svc-dsr status shows each site`,
        platformDown,
      );
    }
    if (props.platformExportRefusals !== undefined) {
      this.#add(
        'ExportCapAbovePlatform',
        props.platformExportRefusals,
        'The platform refused export starts for too many open exports: platformMaxOpenExports is above what the platform allows (a new platform limit, or another system on the account). Requests wait for a slot and the gate works to the lower cap for an hour at a time; set platformMaxOpenExports to the platform cap',
        { missing: 'notBreaching' },
      );
    }
    this.#add(
      'OverdueRequests',
      props.overdueRequests,
      'Open requests are past their statutory due date; svc-dsr list --overdue names them',
      { missing: 'ignore' },
    );
    if (props.receiptsOverdue !== undefined) {
      this.#add(
        'ReceiptConfirmationsOverdue',
        props.receiptsOverdue,
        'CCPA requests are past their receipt confirm-by date (10 business days, section 7021) with no receipt notice recorded; svc-dsr list --receipt-overdue names them, svc-dsr notice --kind receipt records the confirmation',
        { missing: 'ignore' },
      );
    }
    if (props.receiptsDueSoon !== undefined) {
      // Before the date: a person still has days to send the confirmation.
      this.#add(
        'ReceiptConfirmationsDueSoon',
        props.receiptsDueSoon,
        'CCPA receipt confirmations (section 7021, 10 business days) are due within three business days and not recorded; send them and record each with svc-dsr notice --kind receipt (the sweep log names the requests)',
        { missing: 'ignore' },
      );
    }
    if (props.noticesDueSoon !== undefined) {
      // Before the date: the answer can still be sent in time.
      this.#add(
        'ResponseNoticesDueSoon',
        props.noticesDueSoon,
        'Response or denial notices are due within the configured days and not recorded (a GDPR denial is due one month after receipt, extension or not); tell each subject and record it with svc-dsr notice --kind response or --kind denial (the sweep log names the requests)',
        { missing: 'ignore' },
      );
    }
    if (props.noticesOverdue !== undefined) {
      this.#add(
        'ResponseNoticesOverdue',
        props.noticesOverdue,
        'Completed or denied requests are past the due date of their response or denial notice with none recorded; svc-dsr list --notice-overdue names them, svc-dsr notice records the notice',
        { missing: 'ignore' },
      );
    }
    if (props.overdueAtIntake !== undefined) {
      // At once, not at the next sweep: the request was late before the workflow saw it.
      this.#add(
        'OverdueAtIntake',
        props.overdueAtIntake,
        'A request arrived already past its statutory due date (it was accepted and is being answered); svc-dsr list --overdue names it, its ledger item says overdue_at_intake',
        { missing: 'notBreaching' },
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
      this.#add(id, metric, description, { missing: 'notBreaching' });
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
        { missing: 'notBreaching', evaluation: { evaluationPeriods: 3, datapointsToAlarm: 2 } },
      );
      this.#add(
        `${name}Throttles`,
        fn.metricThrottles({ period: FIVE_MINUTES, statistic: 'Sum' }),
        `The ${name} Lambda is throttled: the account or function concurrency limit is reached`,
        { missing: 'notBreaching' },
      );
    }
  }

  #add(id: string, metric: cloudwatch.IMetric, description: string, options: AlarmOptions): void {
    const alarm = new cloudwatch.Alarm(this, id, {
      metric,
      threshold: options.threshold ?? 1,
      comparisonOperator:
        options.comparison ?? cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      ...(options.evaluation ?? { evaluationPeriods: 1, datapointsToAlarm: 1 }),
      treatMissingData: MISSING_DATA[options.missing],
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
