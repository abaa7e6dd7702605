import { describe, expect, it } from 'vitest';
import * as errors from '#shared/errors';
import { retryPlanOf } from '#shared/ledger';
import { ledgerRecord } from '../../cli/helpers.ts';

const { DsrError, ERROR_CLASSES } = errors;

/** Every exported subclass of DsrError, found by walking the module rather than trusting the list. */
const exportedClasses = Object.values(errors).filter(
  (value): value is (typeof ERROR_CLASSES)[number] =>
    typeof value === 'function' && value.prototype instanceof DsrError,
);

/** An instance of `type`; every constructor takes a message (or a wait reason) first, the rest optional. */
const instanceOf = (type: (typeof ERROR_CLASSES)[number]) =>
  Reflect.construct(type, ['a message', 1, {}]) as InstanceType<typeof type>;

describe('the error taxonomy', () => {
  it('lists every exported error class once, so no class escapes the state machine lists', () => {
    expect(new Set(ERROR_CLASSES).size).toBe(ERROR_CLASSES.length);
    expect([...exportedClasses].sort((a, b) => a.name.localeCompare(b.name))).toEqual(
      [...ERROR_CLASSES].sort((a, b) => a.name.localeCompare(b.name)),
    );
  });

  it('names each error as its class, which the state machine matches by', () => {
    for (const type of ERROR_CLASSES) expect(instanceOf(type).name).toBe(type.name);
  });

  it('derives retryable from the handling, so an uncertain export start is retryable and on the restart path only', () => {
    const uncertain = new errors.ExportStartUncertainError('answered 503');
    expect(uncertain.retryable).toBe(true);
    expect(errors.EXPORT_RESTART_ERRORS).toEqual(['ExportStartUncertainError']);
    expect(errors.RETRYABLE_ERRORS).not.toContain('ExportStartUncertainError');
    for (const type of ERROR_CLASSES) {
      const error = instanceOf(type);
      expect({ name: error.name, retryable: error.retryable }).toEqual({
        name: error.name,
        retryable: ['retry', 'restart_export', 'wait', 'redeliver'].includes(type.handling),
      });
    }
  });

  it('puts each name in at most one of the lists the state machine reads, and the retried ones in the Retry list', () => {
    const lists = [
      errors.RETRYABLE_ERRORS,
      errors.TERMINAL_ERRORS,
      errors.CANCEL_ERRORS,
      errors.NO_DATA_ERRORS,
      errors.EXPORT_RESTART_ERRORS,
    ];
    const all = lists.flat();
    expect(new Set(all).size).toBe(all.length);
    expect(errors.RETRYABLE_ERRORS).toEqual([
      'PlatformThrottledError',
      'PlatformExportsFullError',
      'PlatformUnavailableError',
      'PlatformTimeoutError',
      'PlatformConnectionResetError',
      'TruncatedDownloadError',
      'AwsTransientError',
    ]);
    expect(errors.CANCEL_ERRORS).toEqual(['RequestCancelledError', 'SupersededRunError']);
    expect(errors.NO_DATA_ERRORS).toEqual(['SubjectNotFoundError']);
    expect(errors.TERMINAL_ERRORS).toContain('AuditRecordInvalidError');
    // A wait for capacity never reaches a Catch: it is in no list.
    for (const name of ['PlatformCapacityError']) {
      expect(all).not.toContain(name);
    }
  });
});

describe('exportAttemptsSpentError', () => {
  it('blames a failed export only when the platform reported the last export failed', () => {
    // Act
    const failed = errors.exportAttemptsSpentError(3, 3, { start: 'accepted', status: 'failed' });
    // Assess
    expect(failed).toBeInstanceOf(errors.ExportFailedError);
    expect(failed.code).toBe('export_failed');
    expect(failed.message).toBe(
      'the platform reported the export failed; 3 export attempt(s) were made, the limit is 3; `npx svc-dsr retry` gives it a fresh budget',
    );
  });

  it.each([
    ['uncertain', 'the platform gave no clear answer to the last start'],
    ['interrupted', 'the last start was interrupted before the platform answered'],
  ])('names the starts, not an export, when the last start was %s', (start, how) => {
    // Act: the ledger holds export_status "failed" for an uncertain start, though no export failed
    const error = errors.exportAttemptsSpentError(2, 2, { start, status: 'failed' });
    // Assess
    expect(error).toBeInstanceOf(errors.ExportStartUnconfirmedError);
    expect(error.code).toBe('export_start_unconfirmed');
    expect(error.message).toBe(
      `no export was confirmed started: 2 start(s) may have reached the platform and ${how}; the limit is 2; \`npx svc-dsr retry\` gives it a fresh budget`,
    );
    expect(error.message).not.toMatch(/export (?:has |was )?failed|failed export/);
  });

  it('gives a request failed either way a fresh export on retry', () => {
    for (const code of ['export_failed', 'export_start_unconfirmed']) {
      const item = ledgerRecord({ status: 'failed', error: { code, message: 'spent' } });
      expect(retryPlanOf(item).freshExport).toBe(true);
    }
  });
});
