import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { DEADLINE_METRICS } from '../../lambdas/deadline-sweep/deadline-sweep.ts';
import { EXPORT_METRICS, HEARTBEAT_METRICS } from '../../lambdas/shared/metrics.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
const stack = new DsrStack(app, 'Test', { config: productionConfig });
const resources = Template.fromStack(stack).toJSON().Resources as Record<
  string,
  { Type: string; Properties: CfnObject }
>;
const ofType = (type: string) =>
  Object.entries(resources).filter(([, resource]) => resource.Type === type) as [
    string,
    { Type: string; Properties: CfnObject },
  ][];
const alarms: (CfnObject & { name: string })[] = ofType('AWS::CloudWatch::Alarm').map(([id, alarm]) => ({
  ...alarm.Properties,
  // The construct id: the logical id without the `Alarms` scope and the hash.
  name: id.replace(/^Alarms/, '').replace(/[0-9A-F]{8}$/, ''),
}));
const functionNames = Object.keys(stack.functions);
const idOf = (type: string, prefix: string) => {
  const found = ofType(type).filter(([id]) => id.startsWith(prefix));
  expect(found, prefix).toHaveLength(1);
  return found[0]?.[0] ?? '';
};

describe('alarms that speak when things go quiet', () => {
  it('watches the heartbeat of every scheduled function, silence included', () => {
    // Assess
    const scheduled = ofType('AWS::Events::Rule')
      .filter(([, rule]) => rule.Properties.ScheduleExpression !== undefined)
      .flatMap(([, rule]) => rule.Properties.Targets.map((target: CfnObject) => target.Arn['Fn::GetAtt'][0]))
      .map((fnId: string) => functionNames.find((name) => fnId.startsWith(`${name}Function`)));
    expect(scheduled.sort()).toEqual(['DeadlineSweep', 'Reconciler']);
    const published: Record<string, string> = {
      DeadlineSweep: HEARTBEAT_METRICS.deadlineSweep,
      Reconciler: HEARTBEAT_METRICS.reconciler,
    };
    for (const name of scheduled) {
      const heartbeat = alarms.find((alarm) => alarm.name === `${name}Silent`);
      expect(heartbeat, `${name}Silent`).toMatchObject({
        MetricName: published[name ?? ''],
        Namespace: 'svc-dsr',
        Statistic: 'Sum',
        ComparisonOperator: 'LessThanThreshold',
        Threshold: 1,
        TreatMissingData: 'breaching',
        EvaluationPeriods: 2,
        DatapointsToAlarm: 2,
      });
    }
    // The reconciler runs every 15 minutes and the sweep every hour by default.
    expect(alarms.find((alarm) => alarm.name === 'ReconcilerSilent')?.Period).toBe(900);
    expect(alarms.find((alarm) => alarm.name === 'DeadlineSweepSilent')?.Period).toBe(3600);
  });

  it('chooses what missing data means for every alarm: only heartbeats breach, pass counts keep their state', () => {
    // Assess
    for (const alarm of alarms) {
      const expected = alarm.name.endsWith('Silent')
        ? 'breaching'
        : [
              'DueSoonUnfinished',
              'OverdueRequests',
              'ReceiptConfirmationsDueSoon',
              'ReceiptConfirmationsOverdue',
              'ResponseNoticesDueSoon',
              'ResponseNoticesOverdue',
              'StuckRequests',
              'PlatformDown',
            ].includes(alarm.name)
          ? 'ignore'
          : 'notBreaching';
      expect({ alarm: alarm.name, missing: alarm.TreatMissingData }).toEqual({
        alarm: alarm.name,
        missing: expected,
      });
    }
  });

  it('says the configured export cap is above the platform cap on the first start the platform refused for it, and StartExport publishes the count', () => {
    // Assess
    expect(alarms.find((alarm) => alarm.name === 'ExportCapAbovePlatform')).toMatchObject({
      MetricName: EXPORT_METRICS.platformRefusals,
      Namespace: 'svc-dsr',
      Statistic: 'Sum',
      Period: 3600,
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
      Dimensions: [
        { Name: 'Stack', Value: 'Test' },
        { Name: 'service', Value: 'svc-dsr' },
      ],
      AlarmDescription: expect.stringContaining('platformMaxOpenExports'),
    });
    const environmentOf = (prefix: string) =>
      ofType('AWS::Lambda::Function').find(([id]) => id.startsWith(prefix))?.[1].Properties.Environment
        .Variables;
    expect(environmentOf('StartExport')).toMatchObject({
      METRICS_NAMESPACE: 'svc-dsr',
      METRICS_STACK: 'Test',
    });
    // Only StartExport publishes it.
    expect(environmentOf('CheckExport')).not.toHaveProperty('METRICS_STACK');
  });

  it('warns of a CCPA receipt confirmation before its date, from the sweep', () => {
    // Assess
    expect(alarms.find((alarm) => alarm.name === 'ReceiptConfirmationsDueSoon')).toMatchObject({
      MetricName: DEADLINE_METRICS.receiptsDueSoon,
      Namespace: 'svc-dsr',
      Statistic: 'Maximum',
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Dimensions: [
        { Name: 'Stack', Value: 'Test' },
        { Name: 'service', Value: 'svc-dsr' },
      ],
    });
  });

  it('warns of a response or denial notice before its date, and alarms once one is overdue, from the sweep', () => {
    // Assess
    const sweepCount = (metricName: string) => ({
      MetricName: metricName,
      Namespace: 'svc-dsr',
      Statistic: 'Maximum',
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'ignore',
      Dimensions: [
        { Name: 'Stack', Value: 'Test' },
        { Name: 'service', Value: 'svc-dsr' },
      ],
    });
    expect(alarms.find((alarm) => alarm.name === 'ResponseNoticesDueSoon')).toMatchObject(
      sweepCount(DEADLINE_METRICS.noticesDueSoon),
    );
    expect(alarms.find((alarm) => alarm.name === 'ResponseNoticesOverdue')).toMatchObject(
      sweepCount(DEADLINE_METRICS.noticesOverdue),
    );
    expect(DEADLINE_METRICS.noticesOverdue).toBe('ResponseNoticesOverdue');
  });

  it('gives the status events a KMS-encrypted failure queue, alarmed on its first message', () => {
    // Assess
    const queue = idOf('AWS::SQS::Queue', 'StatusEventsFailureQueue');
    expect(resources[queue]?.Properties).toMatchObject({
      KmsMasterKeyId: { 'Fn::GetAtt': [idOf('AWS::KMS::Key', 'DataKey'), 'Arn'] },
      MessageRetentionPeriod: 14 * 24 * 3600,
    });
    const [, mapping] = ofType('AWS::Lambda::EventSourceMapping').find(
      ([, candidate]) => candidate.Properties.StartingPosition === 'TRIM_HORIZON',
    ) ?? ['', { Properties: {} }];
    expect(mapping.Properties).toMatchObject({
      FunctionName: { Ref: idOf('AWS::Lambda::Function', 'StatusEventsFunction') },
      MaximumRecordAgeInSeconds: 24 * 3600,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [queue, 'Arn'] } } },
    });
    expect(alarms.find((alarm) => alarm.name === 'StatusEventsFailed')).toMatchObject({
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [queue, 'QueueName'] } }],
      Threshold: 1,
    });
  });

  it('alarms on the age of the status events not yet published, hours before the source gives them up', () => {
    // Assess
    const alarm = alarms.find((candidate) => candidate.name === 'StatusEventsIteratorAge');
    expect(alarm).toMatchObject({
      Namespace: 'AWS/Lambda',
      MetricName: 'IteratorAge',
      Statistic: 'Maximum',
      Threshold: 3600 * 1000,
      Dimensions: [
        { Name: 'FunctionName', Value: { Ref: idOf('AWS::Lambda::Function', 'StatusEventsFunction') } },
      ],
    });
    expect(alarm?.Threshold).toBeLessThan(24 * 3600 * 1000);
  });
});

describe('the alarms table of docs/deploy.md', () => {
  const deploy = readFileSync(new URL('../../docs/deploy.md', import.meta.url), 'utf8');
  const rows = new Map(
    [...deploy.matchAll(/^\| `([^`]+)`[^|]*\|[^|]*\| `(\w+)` \|$/gm)].map((match) => [match[1], match[2]]),
  );
  const documentedName = (name: string) => {
    const perFunction = /^(.+)(Errors|Throttles)$/.exec(name);
    return perFunction !== null && functionNames.includes(perFunction[1] ?? '')
      ? `<function>${perFunction[2]}`
      : name;
  };

  it('lists every alarm of the stack with the missing-data choice it has, and no other', () => {
    // Assess
    const synthesized = new Map(alarms.map((alarm) => [documentedName(alarm.name), alarm.TreatMissingData]));
    expect(Object.fromEntries(rows)).toEqual(Object.fromEntries(synthesized));
  });

  it('counts the alarms the deploy creates', () => {
    // Assess
    expect(deploy).toContain(`the alarm topic and ${alarms.length} alarms`);
    expect(deploy).toContain(`each of the ${functionNames.length} functions`);
  });
});
