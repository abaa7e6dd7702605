// Why a verification or a report stopped before it could say anything: its evidence could not be read, or changed under it.

/** The audit bucket or the ledger could not be read, so nothing can be said of what they hold. */
export class EvidenceUnreadableError extends Error {
  override readonly name = 'EvidenceUnreadableError';
}

/** The ledger changed while a request was verified: what was read does not describe one moment. */
export class EvidenceChangedError extends Error {
  override readonly name = 'EvidenceChangedError';
}
