/**
 * The ledger against the locked audit records. The ledger is a table that anyone allowed to write it
 * can change at any time; the records are under Object Lock. Where both hold a fact (the request's
 * type and receipt, the archive's and the package's size and SHA-256, how the request ended), they
 * must agree, or the ledger was changed after the record was locked.
 */

import { type AuditRecord, factDigest } from '#shared/audit';
import type { LedgerItem, Status } from '#shared/ledger';
import { MAX_CLOCK_SKEW_MS } from '#shared/request';
import { siteSummary } from '#shared/site-outcomes';

/** The status each final action leaves a request in. */
const FINAL_STATUS: Readonly<Record<string, Status>> = {
  request_completed: 'completed',
  request_failed: 'failed',
  request_cancelled: 'cancelled',
  request_denied: 'denied',
  request_rejected: 'rejected',
};

/** The stored objects whose facts a record locks: the ledger field, and the action that locked it. */
const STORED_OBJECTS = [
  { field: 'archive', action: 'archive_verified' },
  { field: 'subject_package', action: 'subject_package_built' },
] as const;

/** The last record of the chain with this action. */
export function lastRecordOf(chain: readonly AuditRecord[], action: string): AuditRecord | undefined {
  return chain.findLast((record) => record.action === action);
}

/**
 * The record that ends the chain: its last record when that is final, or the final record an
 * operator's extension of a failed request follows (an extension changes the deadline, not the
 * status: the request stays failed, still owed an answer). Undefined while the chain is open.
 */
export function closingRecord(chain: readonly AuditRecord[]): AuditRecord | undefined {
  for (let index = chain.length - 1; index >= 0; index -= 1) {
    const record = chain[index];
    if (record === undefined) return undefined;
    if (record.final) return record;
    if (record.step !== 'Operator' || record.action !== 'deadline_extended') return undefined;
  }
  return undefined;
}

/**
 * Every fact on which the ledger item and its request's chains disagree, one sentence each, naming
 * the ledger's value and the record that locked the other. Empty when they agree. `notices` is the
 * request's notices chain, when it has one. docs/audit.md lists each ledger field and the record
 * that locks it.
 */
export function ledgerMismatches(
  item: LedgerItem,
  chain: readonly AuditRecord[],
  notices: readonly AuditRecord[] = [],
): string[] {
  const problems: string[] = [];
  const compare = (what: string, ledger: unknown, record: AuditRecord, locked: unknown) => {
    if (locked === undefined || ledger === locked) return;
    problems.push(
      `the ledger's ${what} is ${show(ledger)}; record ${record.seq} (${record.action}) locked ${show(locked)}`,
    );
  };
  // A time is compared as an instant: the same moment may be written with or without milliseconds.
  const compareTime = (what: string, ledger: string | undefined, record: AuditRecord, locked: unknown) => {
    if (typeof locked !== 'string') return;
    if (ledger !== undefined && Date.parse(ledger) === Date.parse(locked)) return;
    compare(what, ledger, record, locked);
  };

  const intake = lastRecordOf(chain, 'request_received');
  if (intake !== undefined) {
    for (const field of ['type', 'regulation', 'received_at'] as const)
      compare(field, item[field], intake, intake.facts[field]);
    compare('verification method', item.verification?.method, intake, intake.facts.verification_method);
    compareTime('verified_at', item.verification?.verified_at, intake, intake.facts.verified_at);
    compareTime('confirm_by', item.confirm_by ?? undefined, intake, intake.facts.confirm_by ?? undefined);
    // The channel (what report gives as §7101's manner of request): a ledger channel the intake
    // record does not hold was set after it.
    compare(
      'channel',
      item.channel,
      intake,
      intake.facts.channel ?? (item.channel === undefined ? undefined : null),
    );
    const reference = intake.facts.reference_sha256;
    if (reference !== undefined) {
      const ledger = item.reference === undefined ? null : factDigest(item.reference);
      if (ledger !== reference)
        problems.push(`the ledger's reference is not the one record ${intake.seq} (request_received) locked`);
    }
  }

  // The due date: the intake record's, or the extension's once the deadline was extended.
  const extension = lastRecordOf(chain, 'deadline_extended');
  if (extension !== undefined) {
    compareTime('due_at', item.due_at, extension, extension.facts.due_at);
    compare('extended', item.extended, extension, true);
    // The due date the extension replaced: a GDPR denial notice is due by it (Art. 12(4)). Items
    // extended before the ledger kept it have none, and the date is computed from received_at.
    if (item.original_due_at !== undefined)
      compareTime('original due_at', item.original_due_at, extension, extension.facts.previous_due_at);
    compare('extension reason', item.extension_reason, extension, extension.facts.reason ?? undefined);
    // The extension's notice, unless a later notice of that kind was recorded on the notices chain.
    if (!notices.some((entry) => entry.action === 'notice_given' && entry.facts.kind === 'extension')) {
      compareTime('extension notice time', item.notice_extension?.at, extension, extension.facts.notice_at);
      compare(
        'extension notice channel',
        item.notice_extension?.channel,
        extension,
        extension.facts.notice_channel,
      );
    }
  } else if (intake !== undefined) {
    compareTime('due_at', item.due_at, intake, intake.facts.due_at);
    if (item.extended && intake.facts.due_at !== undefined) {
      problems.push(
        'the ledger says the deadline was extended, but no record locked an extension (deadline_extended)',
      );
    }
  }

  for (const { field, action } of STORED_OBJECTS) {
    const stored = item[field];
    if (stored === undefined) continue;
    const record = lastRecordOf(chain, action);
    if (record === undefined) {
      problems.push(`the ledger records the ${field} ${stored.key}, but no record locked it (${action})`);
      continue;
    }
    for (const fact of ['key', 'bytes', 'sha256'] as const)
      compare(`${field} ${fact}`, stored[fact], record, record.facts[fact]);
  }

  const last = closingRecord(chain);
  const ended = last === undefined ? undefined : FINAL_STATUS[last.action];
  if (last !== undefined && ended !== undefined) {
    compare('status', item.status, last, ended);
    if (last.action === 'request_completed') compare('outcome', item.outcome, last, last.facts.outcome);
    // A request over several sites: what each site came to, as its final record locked it.
    if (item.sites !== undefined && typeof last.facts.sites === 'string')
      compare('sites', siteSummary(item.sites, item.site_results ?? {}), last, last.facts.sites);
    compareTime('completed_at', item.completed_at, last, last.facts.completed_at);
    if (last.action === 'request_denied')
      compare('denial code', item.denial?.code, last, last.facts.reason_code);
    if (last.action === 'request_failed' && item.status === 'failed')
      compare('error code', item.error?.code, last, last.facts.code);
    if (last.action === 'request_cancelled' && last.facts.reason !== undefined)
      compare('cancel reason', item.cancel_reason, last, last.facts.reason);
    const errors = last.action === 'request_rejected' ? last.facts.errors_sha256 : undefined;
    if (errors !== undefined && factDigest(item.rejection_errors ?? []) !== errors)
      problems.push(
        `the ledger's rejection errors are not the ones record ${last.seq} (request_rejected) locked`,
      );
  }

  for (const kind of ['receipt', 'extension', 'response', 'denial'] as const) {
    const notice = item[`notice_${kind}`];
    const record = notices.findLast((entry) => entry.action === 'notice_given' && entry.facts.kind === kind);
    if (record === undefined) {
      // An extension's first notice is locked by the extension's own record (above).
      if (notice !== undefined && notices.length > 0 && kind !== 'extension')
        problems.push(`the ledger records a ${kind} notice, but no notices record locked one`);
      continue;
    }
    compareTime(`${kind} notice time`, notice?.at, record, record.facts.given_at);
    compare(`${kind} notice channel`, notice?.channel, record, record.facts.channel);
    compare(
      `${kind} notice template`,
      notice?.template,
      record,
      record.facts.template ?? (notice?.template === undefined ? undefined : null),
    );
    // When the notice was recorded (report judges lateness by it): the record's own time, itself
    // checked against the time S3 stored it (record_time).
    const recordedAt = notice?.recorded_at;
    if (
      recordedAt !== undefined &&
      Math.abs(Date.parse(recordedAt) - Date.parse(record.at)) > MAX_CLOCK_SKEW_MS
    ) {
      problems.push(
        `the ledger's ${kind} notice was recorded at ${recordedAt}; record ${record.seq} (notice_given) was written at ${record.at}`,
      );
    }
  }
  return problems;
}

/**
 * What the records show that the rules forbid, whatever the ledger says: an extension recorded
 * after the deadline it extended (only an extension before the first deadline is valid), a
 * second extension, or a notice to the subject dated before the request was received (no
 * answer can precede the question; `svc-dsr notice` refuses one, so only an edit or a writer
 * that skipped the check leaves one). `notices` is the request's notices chain.
 */
export function ruleProblems(chain: readonly AuditRecord[], notices: readonly AuditRecord[] = []): string[] {
  const problems: string[] = [];
  const intake = lastRecordOf(chain, 'request_received');
  const receivedAt = intake?.facts.received_at;
  const receivedMs = typeof receivedAt === 'string' ? Date.parse(receivedAt) : Number.NaN;
  if (!Number.isNaN(receivedMs)) {
    const given = [
      ...chain.flatMap((record) =>
        record.action === 'deadline_extended'
          ? [{ record, where: 'record', kind: 'extension', at: record.facts.notice_at }]
          : [],
      ),
      ...notices.flatMap((record) =>
        record.action === 'notice_given'
          ? [
              {
                record,
                where: 'notices chain: record',
                kind: String(record.facts.kind),
                at: record.facts.given_at,
              },
            ]
          : [],
      ),
    ];
    for (const { record, where, kind, at } of given) {
      if (typeof at === 'string' && Date.parse(at) < receivedMs) {
        problems.push(
          `${where} ${record.seq} (${record.action}) says the ${kind} notice was given at ${at}, before the request was received (${receivedAt}, record ${intake?.seq} request_received)`,
        );
      }
    }
  }
  const extensions = chain.filter((record) => record.action === 'deadline_extended');
  for (const record of extensions) {
    const previous = record.facts.previous_due_at;
    if (typeof previous === 'string' && Date.parse(record.at) > Date.parse(previous)) {
      problems.push(
        `record ${record.seq} (deadline_extended) was written at ${record.at}, after the deadline ${previous} it extended`,
      );
    }
  }
  if (extensions.length > 1) {
    problems.push(
      `the deadline was extended ${extensions.length} times (records ${extensions.map((record) => record.seq).join(', ')}); only one extension is allowed`,
    );
  }
  return problems;
}

function show(value: unknown): string {
  return value === undefined ? 'not set' : JSON.stringify(value);
}
