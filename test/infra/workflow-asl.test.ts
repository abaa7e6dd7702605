import { describe, expect, it } from 'vitest';
import {
  CANCEL_ERRORS,
  EXPORT_RESTART_ERRORS,
  LAMBDA_SERVICE_ERRORS,
  NO_DATA_ERRORS,
  RETRYABLE_ERRORS,
  TERMINAL_ERRORS,
} from '#shared/errors';
import { ARCHIVE_MAX_INVOCATIONS } from '../../lambdas/archive-export/continuation.ts';
import { PACKAGE_MAX_PASSES } from '../../lambdas/build-package/continuation.ts';
import { resolveStateMachine } from '../../lib/asl.ts';
import { synthesizeTemplate } from '../../lib/template.ts';

type State = {
  Type: string;
  Retry?: {
    ErrorEquals: string[];
    JitterStrategy?: string;
    BackoffRate?: number;
    IntervalSeconds?: number;
    MaxAttempts?: number;
    MaxDelaySeconds?: number;
  }[];
  Resource?: string;
  Catch?: { ErrorEquals: string[]; Next: string; ResultPath?: string }[];
  SecondsPath?: string;
  Next?: string;
  Parameters?: Record<string, unknown>;
};

const template = synthesizeTemplate();
const { definition } = resolveStateMachine(template);
const states = definition.States as Record<string, State>;
const tasks = Object.entries(states).filter(
  ([, state]) => state.Type === 'Task' && state.Resource?.includes(':lambda:') === true,
);
const RECORD_OUTCOMES = new Set([
  'RecordNoData',
  'RecordExported',
  'RecordErased',
  'RecordCorrected',
  'RecordCorrectedWithChanges',
]);

describe('the synthesized state machine', () => {
  it('waits for an export slot by writing its task token into the request waiter item of the gate table', () => {
    // Assess
    const slotWait = states.StartExportWaitsForSlot as State & { TimeoutSecondsPath?: string };
    const gateTable = Object.entries(template.Resources as Record<string, { Type: string }>).find(
      ([id, resource]) => resource.Type === 'AWS::DynamoDB::Table' && id.startsWith('PlatformGate'),
    )?.[0];

    expect(slotWait.Resource).toBe('arn:aws:states:::aws-sdk:dynamodb:updateItem.waitForTaskToken');
    expect(slotWait.TimeoutSecondsPath).toBe('$.export.platform_wait.seconds');
    expect(slotWait.Parameters).toEqual({
      TableName: gateTable,
      Key: { gate: { 'S.$': "States.Format('waiter#{}', $.request_id)" } },
      UpdateExpression: 'SET #token = :token, wait_seconds = :wait',
      ConditionExpression: 'attribute_exists(#since)',
      ExpressionAttributeNames: { '#token': 'token', '#since': 'since' },
      ExpressionAttributeValues: {
        ':token': { 'S.$': '$$.Task.Token' },
        ':wait': { 'N.$': 'States.JsonToString($.export.platform_wait.seconds)' },
      },
    });
    // Unanswered, it runs StartExport as the plain Wait would; unwritten, it falls back to that Wait.
    expect(slotWait.Catch).toEqual([
      { ErrorEquals: ['States.Timeout'], Next: 'StartExport', ResultPath: null },
      { ErrorEquals: ['States.ALL'], Next: 'StartExportWaitsForPlatform', ResultPath: null },
    ]);
    expect(slotWait.Next).toBe('StartExport');
  });

  it('sends a found correction to CorrectSubject, never to an export, and records the outcome it answers', () => {
    // Assess
    expect(states['AlreadyCompleted?']).toMatchObject({
      Choices: expect.arrayContaining([
        { Variable: '$.type', StringEquals: 'correction', Next: 'CorrectSubject' },
      ]),
      Default: 'StartExport',
    });
    expect(states.CorrectSubject).toMatchObject({
      Next: 'CorrectSubjectAdmitted?',
      ResultPath: '$.correction',
    });
    expect(states['CorrectSubjectAdmitted?']).toMatchObject({ Default: 'CorrectedAsRequested?' });
    expect(states['CorrectedAsRequested?']).toMatchObject({
      Choices: [
        {
          Variable: '$.correction.outcome',
          StringEquals: 'corrected_with_changes',
          Next: 'RecordCorrectedWithChanges',
        },
      ],
      Default: 'RecordCorrected',
    });
    expect(states.RecordCorrected).toMatchObject({ Parameters: { outcome: 'corrected' } });
    // ProfileChangedConcurrentlyError is not retried by the state machine: CorrectSubject has done it once.
    for (const rule of states.CorrectSubject?.Retry ?? []) {
      expect(rule.ErrorEquals).not.toContain('ProfileChangedConcurrentlyError');
    }
  });

  it('has one task per workflow step invocation', () => {
    // Assess
    expect(tasks.map(([name]) => name).sort()).toEqual(
      [
        'ArchiveExport',
        'BuildPackage',
        'CheckExport',
        'ContinuePackage',
        'CorrectSubject',
        'EraseSubject',
        'RecordCorrected',
        'RecordCorrectedWithChanges',
        'RecordErased',
        'RecordExported',
        'RecordFailure',
        'RecordNoData',
        'ResolveSubject',
        'StartExport',
        'VerifyErasure',
      ].sort(),
    );
  });

  it('retries the retryable names, AWS throttles and Lambda service errors for 6 h with backoff and full jitter, on every task', () => {
    // Assess
    expect(RETRYABLE_ERRORS).toContain('AwsTransientError');
    for (const [name, state] of tasks) {
      const rules = state.Retry?.filter((rule) => rule.ErrorEquals.includes('PlatformThrottledError')) ?? [];
      expect({ name, errors: rules.map((rule) => rule.ErrorEquals) }).toEqual({
        name,
        errors: [[...RETRYABLE_ERRORS, ...LAMBDA_SERVICE_ERRORS]],
      });
      // No second rule for Lambda's errors (CDK's default): one horizon for every transient error.
      const lambdaRules = state.Retry?.filter((rule) => rule.ErrorEquals.includes(LAMBDA_SERVICE_ERRORS[0]));
      expect(lambdaRules).toHaveLength(1);
      const [retry] = rules;
      expect(retry).toMatchObject({
        JitterStrategy: 'FULL',
        IntervalSeconds: 4,
        BackoffRate: 4,
        MaxDelaySeconds: 7200,
        MaxAttempts: 12,
      });
      // Full jitter waits half the nominal delay on average: the expected horizon is 6 h or more.
      let nominal = 0;
      for (let attempt = 0; attempt < (retry?.MaxAttempts ?? 0); attempt++) {
        nominal += Math.min(7200, 4 * 4 ** attempt);
      }
      expect(nominal / 2).toBeGreaterThanOrEqual(6 * 3600);
    }
  });

  it('never retries on States.ALL', () => {
    // Assess
    for (const [, state] of tasks) {
      for (const rule of state.Retry ?? []) expect(rule.ErrorEquals).not.toContain('States.ALL');
    }
  });

  it('sends every failure of every task except RecordFailure to RecordFailure', () => {
    // Assess
    const subjectGone = { ErrorEquals: [...NO_DATA_ERRORS], Next: 'RecordNoData', ResultPath: '$.error' };
    // The steps that act on a resolved subject: one gone meanwhile is a no_data answer.
    const exportTasks = new Set(['StartExport', 'CheckExport', 'ArchiveExport', 'CorrectSubject']);
    for (const [name, state] of tasks.filter(([taskName]) => taskName !== 'RecordFailure')) {
      expect({ name, catch: state.Catch }).toEqual({
        name,
        catch: RECORD_OUTCOMES.has(name)
          ? [
              { ErrorEquals: [...CANCEL_ERRORS], Next: 'RecordFailure', ResultPath: '$.error' },
              { ErrorEquals: ['States.ALL'], Next: 'OutcomeNotRecorded', ResultPath: '$.error' },
            ]
          : [
              ...(exportTasks.has(name) ? [subjectGone] : []),
              { ErrorEquals: ['States.ALL'], Next: 'RecordFailure', ResultPath: '$.error' },
            ],
      });
    }
    expect(states.OutcomeNotRecorded).toMatchObject({ Type: 'Pass', Next: 'RecordFailure' });
  });

  it('never retries the archive errors and sends them from ArchiveExport to RecordFailure', () => {
    // Assess
    const archive = states.ArchiveExport;
    for (const name of ['InvalidArchiveError', 'ArchiveTooLargeError']) {
      expect(TERMINAL_ERRORS).toContain(name);
      expect(archive?.Retry?.some((rule) => rule.ErrorEquals.includes(name))).toBe(false);
      const handler = archive?.Catch?.find(
        (rule) => rule.ErrorEquals.includes(name) || rule.ErrorEquals.includes('States.ALL'),
      );
      expect({ name, next: handler?.Next }).toEqual({ name, next: 'RecordFailure' });
    }
  });

  it('records the failure in the ledger itself when RecordFailure cannot run, only while the request is open', () => {
    // Assess
    expect(states.RecordFailure?.Catch).toEqual([
      { ErrorEquals: ['States.ALL'], Next: 'RecordFailedInLedger', ResultPath: '$.record_failure_error' },
    ]);
    const direct = states.RecordFailedInLedger as State & { Parameters: Record<string, unknown> };
    expect(direct.Resource).toBe('arn:aws:states:::dynamodb:updateItem');
    expect(direct.Parameters).toMatchObject({
      UpdateExpression: 'SET #status = :failed, #error = :error',
      ConditionExpression: 'attribute_exists(request_id) AND #status IN (:received, :running)',
    });
    expect(JSON.stringify(direct.Parameters)).toContain('record_failure_failed');
    // Only error names go into the ledger message, never a Cause.
    expect(JSON.stringify(direct.Parameters)).not.toContain('Cause');
    expect(direct.Retry?.[0]?.ErrorEquals).toContain('DynamoDB.ProvisionedThroughputExceededException');
    expect(direct.Catch).toEqual([
      { ErrorEquals: ['States.ALL'], Next: 'RequestFailed', ResultPath: '$.record_failure_error' },
    ]);
    expect(direct.Next).toBe('RequestFailed');
  });

  it('restarts an uncertain export start as a new counted attempt', () => {
    // Assess
    expect(EXPORT_RESTART_ERRORS).toEqual(['ExportStartUncertainError']);
    const restart = states.StartExport?.Retry?.find((rule) =>
      rule.ErrorEquals.includes('ExportStartUncertainError'),
    );
    expect(restart).toBeDefined();
  });

  it('waits between polls for the seconds CheckExport chose', () => {
    // Assess
    expect(states.WaitForExport).toMatchObject({
      Type: 'Wait',
      SecondsPath: '$.export.wait_seconds',
      Next: 'CheckExport',
    });
  });

  it('gives CheckExport the wait it chose and the export StartExport answered', () => {
    // Assess
    expect(states.CheckExport?.Parameters).toEqual({
      'request_id.$': '$.request_id',
      'execution.$': '$$.Execution.Name',
      'waited.$': '$.export.wait_seconds',
      'export_id.$': '$.export.export_id',
    });
  });

  it('gives every step Lambda the name of the execution, so a superseded run can stop itself', () => {
    // Assess
    for (const [name, state] of tasks) {
      const payload = (state.Parameters?.Payload ?? state.Parameters ?? {}) as Record<string, unknown>;
      if (!('request_id.$' in payload)) continue;
      expect({ name, execution: payload['execution.$'] }).toEqual({ name, execution: '$$.Execution.Name' });
    }
  });

  it('passes only the request id (and step facts) to the Lambdas', () => {
    // Assess
    for (const [name, state] of tasks) {
      const payload = JSON.stringify(state.Parameters?.Payload ?? state.Parameters ?? {});
      expect({ name, leaks: /primary_key|svc_user_id|link|token/.test(payload) }).toEqual({
        name,
        leaks: false,
      });
      expect(payload).toContain('request_id');
    }
  });

  it('runs BuildPackage again with the continuation it answered, at most PACKAGE_MAX_PASSES passes, then fails', () => {
    // Assess
    type ChoiceState = State & {
      Choices?: Record<string, unknown>[];
      Default?: string;
      ResultPath?: string;
    };
    const admitted = states['BuildPackageAdmitted?'] as ChoiceState;
    const continues = states['PackageContinues?'] as ChoiceState;

    expect(states.BuildPackage?.Next).toBe('BuildPackageAdmitted?');
    expect(admitted.Choices).toContainEqual({
      Variable: '$.subject_package.continuation',
      IsPresent: true,
      Next: 'PackageContinues?',
    });
    expect(admitted.Default).toBe('RecordExported');
    expect(continues.Choices).toEqual([
      {
        Variable: '$.subject_package.continuation.pass',
        NumericLessThanEquals: PACKAGE_MAX_PASSES,
        Next: 'ContinuePackage',
      },
    ]);
    expect(continues.Default).toBe('PackageUnfinished');
    expect(states.PackageUnfinished).toMatchObject({
      Type: 'Pass',
      Parameters: { Error: 'PackageUnfinished' },
      ResultPath: '$.error',
      Next: 'RecordFailure',
    });
    // The same function, with the continuation; its answer goes where BuildPackage's went.
    expect(states.ContinuePackage?.Resource).toBe(states.BuildPackage?.Resource);
    expect(states.ContinuePackage?.Parameters).toEqual({
      'request_id.$': '$.request_id',
      'execution.$': '$$.Execution.Name',
      'continuation.$': '$.subject_package.continuation',
    });
    expect((states.ContinuePackage as ChoiceState).ResultPath).toBe('$.subject_package');
    expect(states.ContinuePackage?.Next).toBe('BuildPackageAdmitted?');
  });

  it('runs ArchiveExport again while it answers a continuation, at most ARCHIVE_MAX_INVOCATIONS invocations, then fails', () => {
    // Assess
    type ChoiceState = State & { Choices?: Record<string, unknown>[]; Default?: string };
    const after = states['RequestType?'] as ChoiceState;
    const continues = states['ArchiveContinues?'] as ChoiceState;

    expect(states.ArchiveExport?.Next).toBe('RequestType?');
    // Before the request type is looked at: a continued copy is not archived yet.
    const continuation = after.Choices?.findIndex((choice) => choice.Variable === '$.archive.continuation');
    const erasure = after.Choices?.findIndex((choice) => choice.StringEquals === 'erasure');
    expect(after.Choices?.[continuation ?? -1]).toEqual({
      Variable: '$.archive.continuation',
      IsPresent: true,
      Next: 'ArchiveContinues?',
    });
    expect(continuation).toBeLessThan(erasure ?? -1);
    // Back into the same ArchiveExport state: the checkpoint is in the ledger, not in state.
    expect(continues.Choices).toEqual([
      {
        Variable: '$.archive.continuation.invocation',
        NumericLessThan: ARCHIVE_MAX_INVOCATIONS,
        Next: 'ArchiveExport',
      },
    ]);
    expect(continues.Default).toBe('ArchiveUnfinished');
    expect(states.ArchiveUnfinished).toMatchObject({
      Type: 'Pass',
      Parameters: { Error: 'ArchiveUnfinished' },
      ResultPath: '$.error',
      Next: 'RecordFailure',
    });
  });

  it('runs ArchiveExport again when its invocation died without answering, twice per visit', () => {
    // Assess
    const killed = states.ArchiveExport?.Retry?.find((rule) => rule.ErrorEquals.includes('Sandbox.Timedout'));
    expect(killed).toEqual({
      ErrorEquals: ['Lambda.Unknown', 'Sandbox.Timedout', 'States.Timeout'],
      IntervalSeconds: 5,
      BackoffRate: 2,
      MaxAttempts: 2,
    });
    // Only ArchiveExport carries its work on from a checkpoint; no other task runs again after a death.
    for (const [name, state] of tasks.filter(([taskName]) => taskName !== 'ArchiveExport')) {
      const rules = state.Retry?.filter((rule) => rule.ErrorEquals.includes('Sandbox.Timedout')) ?? [];
      expect({ name, rules }).toEqual({ name, rules: [] });
    }
  });
});
