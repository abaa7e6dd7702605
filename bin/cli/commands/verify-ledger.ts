/**
 * The ledger against the locked audit records. The ledger is a table that anyone allowed to write it
 * can change at any time; the records are under Object Lock. Where both hold a fact (the request's
 * type and receipt, the archive's and the package's size and SHA-256, how the request ended), they
 * must agree, or the ledger was changed after the record was locked.
 */
import type { AuditRecord } from '#shared/audit';
import type { LedgerItem, Status } from '#shared/ledger';

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
 * Every fact on which the ledger item and its request's chain disagree, one sentence each, naming
 * the ledger's value and the record that locked the other. Empty when they agree.
 */
export function ledgerMismatches(item: LedgerItem, chain: readonly AuditRecord[]): string[] {
  const problems: string[] = [];
  const compare = (what: string, ledger: unknown, record: AuditRecord, locked: unknown) => {
    if (locked === undefined || ledger === locked) return;
    problems.push(
      `the ledger's ${what} is ${show(ledger)}; record ${record.seq} (${record.action}) locked ${show(locked)}`,
    );
  };

  const intake = lastRecordOf(chain, 'request_received');
  if (intake !== undefined) {
    for (const field of ['type', 'regulation', 'received_at'] as const)
      compare(field, item[field], intake, intake.facts[field]);
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

  const last = chain.at(-1);
  const ended = last?.final === true ? FINAL_STATUS[last.action] : undefined;
  if (last !== undefined && ended !== undefined) {
    compare('status', item.status, last, ended);
    if (last.action === 'request_completed') compare('outcome', item.outcome, last, last.facts.outcome);
  }
  return problems;
}

function show(value: unknown): string {
  return value === undefined ? 'not set' : JSON.stringify(value);
}
