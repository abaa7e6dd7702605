import { App } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { nextWaitSeconds } from '#shared/config';
import { platformWaitsBudgeted } from '#shared/step-handler';
import { ARCHIVE_MAX_INVOCATIONS } from '../../lambdas/archive-export/continuation.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { statesOfDefinition, worstCaseHistory, worstCasePolls } from '../../lib/history-budget.ts';
import { productionConfig } from './fixtures.ts';

function stack(config: Record<string, unknown> = {}): DsrStack {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  return new DsrStack(app, 'Test', { config: { ...productionConfig, ...config } });
}

const task = (retries: number[] = []) => ({
  Type: 'Task',
  Retry: retries.map((MaxAttempts) => ({ MaxAttempts })),
});
/** The workflow's states with no retries at all. */
const bareStates = {
  ResolveSubject: task(),
  'AlreadyCompleted?': { Type: 'Choice' },
  StartExport: task(),
  'StartExportAdmitted?': { Type: 'Choice' },
  WaitForExport: { Type: 'Wait' },
  CheckExport: task(),
  'ExportReady?': { Type: 'Choice' },
  ArchiveExport: task(),
  'RequestType?': { Type: 'Choice' },
  'ArchiveContinues?': { Type: 'Choice' },
  EraseSubject: task(),
  'EraseSubjectAdmitted?': { Type: 'Choice' },
  VerifyErasure: task(),
  'VerifyErasureAdmitted?': { Type: 'Choice' },
  RecordErased: task(),
  BuildPackage: task(),
  'BuildPackageAdmitted?': { Type: 'Choice' },
  'PackageContinues?': { Type: 'Choice' },
  ContinuePackage: task(),
  RecordExported: task(),
  CorrectSubject: task(),
  'CorrectSubjectAdmitted?': { Type: 'Choice' },
  'CorrectedAsRequested?': { Type: 'Choice' },
  RecordCorrectedWithChanges: task(),
  OutcomeNotRecorded: { Type: 'Pass' },
  RecordFailure: task(),
  RecordFailedInLedger: task(),
};

describe('worstCasePolls', () => {
  it('spends the budget on the shortest waits the schedule allows, one schedule for every attempt', () => {
    // Prepare: doubling waits 10, 20, 40, 40, ... capped at 40.
    const schedule = { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 };

    // Act
    const polls = worstCasePolls(schedule);

    // Assess: 10 20 40 40 40 40 (= 190 s, short of 200) and one more cut to the budget: 7 polls.
    expect(polls).toBe(7);
  });

  it('counts the default schedule: 30 s, then 5% of the time waited, capped at 2 h, within 72 h', () => {
    // Prepare
    const schedule = { initialSeconds: 30, maxSeconds: 7200, budgetSeconds: 259_200, growthPercent: 5 };
    let waited = 0;
    let belowCap = 0;
    while (nextWaitSeconds(schedule, waited) < schedule.maxSeconds) {
      waited += nextWaitSeconds(schedule, waited);
      belowCap += 1;
    }

    // Act
    const polls = worstCasePolls(schedule);

    // Assess: the growing waits reach the cap after about 40 h; the rest goes in 2-hour waits.
    expect(waited).toBeGreaterThan(39 * 3600);
    expect(polls).toBe(belowCap + Math.ceil((schedule.budgetSeconds - waited) / schedule.maxSeconds));
    expect(polls).toBeLessThan(151);
  });
});

describe('worstCaseHistory', () => {
  it('matches a hand count of a small schedule with no retries', () => {
    // Act
    const budget = worstCaseHistory({
      schedule: { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 },
      exportMaxAttempts: 2,
      states: bareStates,
    });

    // Assess
    // execution 2, ResolveSubject 5, AlreadyCompleted? 2, two (StartExport 5 + its Choice 2) 14,
    // 7 polls of (Wait 3 + CheckExport 5 + ExportReady? 2) = 70,
    // the longer tail, with no retries the access one: ArchiveExport 5, RequestType? 2, and 4 more
    // invocations of the copy (ArchiveContinues? 2, ArchiveExport 5, RequestType? 2) = 36,
    // BuildPackage 5 + Choice 2, one more pass (PackageContinues? 2, ContinuePackage 5, Choice 2),
    // RecordExported 5, OutcomeNotRecorded 2, RecordFailure 5, RecordFailedInLedger 5 = 76
    // (the erasure tail: EraseSubject 5 + Choice 2 and VerifyErasure 5 + Choice 2 instead, 74),
    // 300 waits for platform capacity (the export-slot waits of 92 days at 80% of 16 hours after
    // their ramp, 46 + 174, and 80 rate and outage waits), each at most a wait for an export slot
    // whose message could not be sent: (attempt 5 + Choice 2 + the failed Task 5 + Wait 3) x 300 =
    // 4,500, and the final Fail 2.
    expect(platformWaitsBudgeted()).toBe(46 + 174 + 80);
    const events = 2 + 5 + 2 + 14 + 70 + 76 + 4_500 + 2;
    expect(budget).toEqual({ events, polls: 7, fraction: events / 25_000 });
  });

  it('counts the erasure tail when its retries make it the longer one', () => {
    // Prepare
    const small = { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 };

    // Act
    const bare = worstCaseHistory({ schedule: small, exportMaxAttempts: 2, states: bareStates });
    const verifyRetried = worstCaseHistory({
      schedule: small,
      exportMaxAttempts: 2,
      states: { ...bareStates, VerifyErasure: task([3]) },
    });

    // Assess
    // The erasure tail grows from 74 to 74 + 9 = 83, past the access tail's 76.
    expect(verifyRetried.events - bare.events).toBe(83 - 76);
  });

  it('counts every retry each Retry rule allows, three for a rule that names no MaxAttempts', () => {
    // Act
    const base = worstCaseHistory({
      schedule: { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 },
      exportMaxAttempts: 2,
      states: bareStates,
    });
    const retried = worstCaseHistory({
      schedule: { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 },
      exportMaxAttempts: 2,
      states: { ...bareStates, CheckExport: { Type: 'Task', Retry: [{ MaxAttempts: 6 }, {}] } },
    });

    // Each of the 7 CheckExport visits may make 6 + 3 retries of 3 events each (TaskScheduled,
    // Assess
    // TaskStarted, TaskFailed or TaskSucceeded; the state is entered and exited once).
    expect(retried.events - base.events).toBe(7 * 3 * 9);
  });

  it('counts the correction path, and takes it when it is the longer one', () => {
    // Prepare
    const schedule = { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 };

    // Act
    const base = worstCaseHistory({ schedule, exportMaxAttempts: 2, states: bareStates });
    // A CorrectSubject retried far more than any export path visit: its path is now the longest.
    const retried = worstCaseHistory({
      schedule,
      exportMaxAttempts: 2,
      states: { ...bareStates, CorrectSubject: task([100]) },
    });

    // Assess
    // Correction path: ResolveSubject 5, AlreadyCompleted? 2, CorrectSubject 5 + 100 retries x 3,
    // its two Choices 4, RecordCorrectedWithChanges 5, OutcomeNotRecorded 2, RecordFailure 5,
    // RecordFailedInLedger 5 = 333, against the export path's 5 + 2 + 14 + 70 + 76 = 167 (its longest
    // tail, the archive copied in 5 invocations and the package built in two passes).
    expect(base.events).toBe(2 + 5 + 2 + 14 + 70 + 76 + 4_500 + 2);
    expect(retried.events).toBe(2 + 333 + 4_500 + 2);
  });

  it('counts every invocation the archive copy may take, each with every retry of ArchiveExport', () => {
    // Prepare
    const schedule = { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 };

    // Act
    const base = worstCaseHistory({ schedule, exportMaxAttempts: 2, states: bareStates });
    const retried = worstCaseHistory({
      schedule,
      exportMaxAttempts: 2,
      states: { ...bareStates, ArchiveExport: task([2]) },
    });

    // Assess: ARCHIVE_MAX_INVOCATIONS (5) visits of ArchiveExport, each with its 2 retries of 3 events.
    expect(ARCHIVE_MAX_INVOCATIONS).toBe(5);
    expect(retried.events - base.events).toBe(5 * 2 * 3);
  });

  it('refuses a workflow that lacks a state it counts', () => {
    // Prepare
    const { CheckExport: _gone, ...states } = bareStates;

    // Act / Assess
    expect(() =>
      worstCaseHistory({
        schedule: { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 },
        exportMaxAttempts: 1,
        states,
      }),
    ).toThrow('the workflow has no state "CheckExport"');
  });

  it('reads the retries of the synthesized workflow', () => {
    // Act
    const template = Template.fromStack(stack()).toJSON();

    // Assess
    const [machine] = Object.values(
      template.Resources as Record<string, { Type: string; Properties: { DefinitionString: unknown } }>,
    ).filter((resource) => resource.Type === 'AWS::StepFunctions::StateMachine');
    const states = statesOfDefinition(machine?.Properties.DefinitionString);

    // One transient retry of 12 attempts (a 6 h horizon), which covers Lambda's service errors too.
    expect(
      worstCaseHistory({
        schedule: { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 },
        exportMaxAttempts: 1,
        states,
      }).events,
    ).toBeGreaterThan(
      worstCaseHistory({
        schedule: { initialSeconds: 10, maxSeconds: 40, budgetSeconds: 200, growthPercent: 100 },
        exportMaxAttempts: 1,
        states: bareStates,
      }).events,
    );
    const retries = (name: string) =>
      ((states[name] as { Retry?: { MaxAttempts?: number }[] }).Retry ?? []).reduce(
        (sum, rule) => sum + (rule.MaxAttempts ?? 3),
        0,
      );
    expect(retries('CheckExport')).toBe(12);
    // The transient retry, and two runs again of an invocation that died (carried on from its checkpoint).
    expect(retries('ArchiveExport')).toBe(14);
    expect(retries('StartExport')).toBe(14);
    expect(retries('VerifyErasure')).toBe(15);
    expect(retries('RecordFailedInLedger')).toBe(12);
  });
});

describe('the stack', () => {
  it('prints the worst case of the default schedule at synth', () => {
    // Act
    const synthesized = stack();

    // Assess
    Annotations.fromStack(synthesized).hasInfo(
      '/Test',
      Match.stringLikeRegexp(
        '^svc-dsr: worst case [0-9,]+ events per execution of 25,000 \\(148 export polls\\)$',
      ),
    );
  });

  it('counts a longer retry horizon, and refuses one the history cannot hold', () => {
    // Act / Assess
    expect(() => stack({ retryHorizonHours: 6 })).not.toThrow();
    expect(() => stack({ retryHorizonHours: 48 })).toThrow(/retryHorizonHours 48\)/);
  });

  it('refuses a schedule whose worst case passes half the history limit, naming the settings to change', () => {
    // Act / Assess
    expect(() => stack({ pollMaxSeconds: 600 })).toThrow(
      /history events per execution \(\d+ export polls\), more than 50% of the 25,000 Step Functions allows \(received pollInitialSeconds 30, pollMaxSeconds 600, pollBudgetSeconds 259200, pollGrowthPercent 5, exportMaxAttempts 3, retryHorizonHours 6\)\. Fix: raise "pollMaxSeconds", "pollInitialSeconds" or "pollGrowthPercent", or lower "pollBudgetSeconds", "exportMaxAttempts" or "retryHorizonHours"/,
    );
  });
});
