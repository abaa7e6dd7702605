import { describe, expect, it } from 'vitest';
import * as errors from '#shared/errors';

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
      'PlatformUnavailableError',
      'PlatformTimeoutError',
      'PlatformConnectionResetError',
      'TruncatedDownloadError',
      'AwsTransientError',
    ]);
    expect(errors.CANCEL_ERRORS).toEqual(['RequestCancelledError', 'SupersededRunError']);
    expect(errors.NO_DATA_ERRORS).toEqual(['SubjectNotFoundError']);
    expect(errors.TERMINAL_ERRORS).toContain('AuditRecordInvalidError');
    // A wait for capacity never reaches a Catch, and the errors outside the workflow are in no list.
    for (const name of ['PlatformCapacityError', 'StatusEventsNotPublishedError', 'DataDirInUseError']) {
      expect(all).not.toContain(name);
    }
  });
});
