/**
 * The audit trail's names and keyed hashes, apart from the trail itself (audit.ts): a request's
 * side chains and their ids, and the HMAC an identifier is stored as. The ledger uses them; it
 * loads no S3 client for them.
 */
import { createHmac } from 'node:crypto';

/**
 * The side chains of a request, `audit/<request_id>.<kind>/`: records that may follow the final
 * record of the request's own chain, so they have chains of their own. `notices`: the notices
 * given to the subject (a response, a denial); `packages`: every hand-out of its archive;
 * `effects`: a platform side effect (an export started, a DELETE) that an execution made after the
 * request had ended meanwhile, so that no call to the platform goes unrecorded.
 */
export const SIDE_CHAIN_KINDS = ['notices', 'packages', 'effects'] as const;
export type SideChainKind = (typeof SIDE_CHAIN_KINDS)[number];

/** The chain id of one of a request's side chains: `<request_id>.<kind>`. */
export function sideChainOf(kind: SideChainKind, requestId: string): string {
  return `${requestId}.${kind}`;
}

/** The chain id of a request's notices to the subject. */
export function noticesChainOf(requestId: string): string {
  return sideChainOf('notices', requestId);
}

/** The request a chain id belongs to, and which side chain it is (none for the request's own). */
export function parseChainId(chainId: string): { requestId: string; side?: SideChainKind } {
  for (const kind of SIDE_CHAIN_KINDS) {
    if (chainId.endsWith(`.${kind}`)) return { requestId: chainId.slice(0, -(kind.length + 1)), side: kind };
  }
  return { requestId: chainId };
}

type SubjectKind = 'primary_key' | 'svc_user_id';
/** What a keyed hash stands for: a subject identifier, or another field of the ledger that names a person. */
export type HashedKind = SubjectKind | 'verified_by' | 'submitted_by' | 'fingerprint' | 'profile_value';

/** `'hmac-sha256:' + hex(HMAC-SHA256(key, kind + ':' + value))`: the only form an identifier is stored in. */
export function subjectHash(hmacKey: string, kind: HashedKind, value: string): string {
  return `hmac-sha256:${createHmac('sha256', hmacKey).update(`${kind}:${value}`, 'utf8').digest('hex')}`;
}
