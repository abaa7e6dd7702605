import { describe, expect, it } from 'vitest';
import { resolveStateMachine } from '#local/asl';
import { synthesizeTemplate } from '#local/template';
import { EXPORT_RESTART_ERRORS, NO_DATA_ERRORS, RETRYABLE_ERRORS } from '#shared/errors';

type State = {
  Type: string;
  Retry?: { ErrorEquals: string[]; JitterStrategy?: string; BackoffRate?: number }[];
  Catch?: { ErrorEquals: string[]; Next: string; ResultPath?: string }[];
  SecondsPath?: string;
  Next?: string;
  Parameters?: Record<string, unknown>;
};

const template = synthesizeTemplate();
const { definition } = resolveStateMachine(template);
const states = definition.States as Record<string, State>;
const tasks = Object.entries(states).filter(([, state]) => state.Type === 'Task');

describe('the synthesized state machine', () => {
  it('has one task per workflow step invocation', () => {
    expect(tasks.map(([name]) => name).sort()).toEqual(
      [
        'ArchiveExport',
        'CheckExport',
        'EraseSubject',
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

  it('retries the exported retryable error names, with backoff and full jitter, on every task', () => {
    for (const [name, state] of tasks) {
      const retry = state.Retry?.find((rule) => rule.ErrorEquals.includes(RETRYABLE_ERRORS[0]));
      expect({ name, errors: retry?.ErrorEquals }).toEqual({ name, errors: [...RETRYABLE_ERRORS] });
      expect(retry?.JitterStrategy).toBe('FULL');
      expect(retry?.BackoffRate).toBe(2);
    }
  });

  it('never retries on States.ALL', () => {
    for (const [, state] of tasks) {
      for (const rule of state.Retry ?? []) expect(rule.ErrorEquals).not.toContain('States.ALL');
    }
  });

  it('sends every failure of every task except RecordFailure to RecordFailure', () => {
    const subjectGone = { ErrorEquals: [...NO_DATA_ERRORS], Next: 'RecordNoData', ResultPath: '$.error' };
    const exportTasks = new Set(['StartExport', 'CheckExport', 'ArchiveExport']);
    for (const [name, state] of tasks.filter(([taskName]) => taskName !== 'RecordFailure')) {
      expect({ name, catch: state.Catch }).toEqual({
        name,
        catch: [
          ...(exportTasks.has(name) ? [subjectGone] : []),
          { ErrorEquals: ['States.ALL'], Next: 'RecordFailure', ResultPath: '$.error' },
        ],
      });
    }
    expect(states.RecordFailure?.Catch).toBeUndefined();
  });

  it('restarts an uncertain export start as a new counted attempt', () => {
    const restart = states.StartExport?.Retry?.find((rule) =>
      rule.ErrorEquals.includes(EXPORT_RESTART_ERRORS[0]),
    );
    expect(restart).toBeDefined();
  });

  it('waits between polls for the seconds CheckExport chose', () => {
    expect(states.WaitForExport).toMatchObject({
      Type: 'Wait',
      SecondsPath: '$.export.wait_seconds',
      Next: 'CheckExport',
    });
  });

  it('gives CheckExport the wait it chose and the export StartExport answered', () => {
    expect(states.CheckExport?.Parameters).toEqual({
      'request_id.$': '$.request_id',
      'waited.$': '$.export.wait_seconds',
      'export_id.$': '$.export.export_id',
    });
  });

  it('passes only the request id (and step facts) to the Lambdas', () => {
    for (const [name, state] of tasks) {
      const payload = JSON.stringify(state.Parameters?.Payload ?? state.Parameters ?? {});
      expect({ name, leaks: /primary_key|svc_user_id|link|token/.test(payload) }).toEqual({
        name,
        leaks: false,
      });
      expect(payload).toContain('request_id');
    }
  });
});
