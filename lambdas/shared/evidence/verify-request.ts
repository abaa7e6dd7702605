// One request verified: its archive and subject package re-hashed, its chains and side chains, the manifests' hold on them, and its ledger against its records.
import type { S3Client } from '@aws-sdk/client-s3';
import { AUDIT_PREFIX, type AuditRecord, type AuditVerification, type SideChainKind } from '#shared/audit';
import { readManifests } from '#shared/audit-manifest';
import type { ArchiveFacts, Ledger, LedgerItem } from '#shared/ledger';
import { siteRequestId } from '#shared/sites';
import {
  anchoredChains,
  anchorProblems,
  manifestIndex,
  sideChainAnchors,
  type VerifyAllCheck,
  verifierTrail,
  versionFindings,
} from './chains.ts';
import { EvidenceChangedError } from './errors.ts';
import { lastRecordOf, ledgerMismatches, ruleProblems } from './ledger-facts.ts';

/** The size and SHA-256 of a stored object as the bucket holds it at the key the ledger records (null when none). */
export type StoredCheck = (
  requestId: string,
  object: 'archive' | 'subject_package',
) => Promise<{ readonly key: string | null; readonly stored: { bytes: number; sha256: string } | null }>;

/** The stack names verification reads. */
export interface EvidenceNames {
  readonly AuditBucketName: string;
  readonly TimeZone?: string | undefined;
  readonly AccessArchiveRetentionDays?: number | undefined;
  readonly ErasureArchiveRetentionDays?: number | undefined;
}

/** What verification works with: reads of the ledger and the audit bucket, and a re-hash of stored objects. */
export interface EvidenceContext {
  readonly ledger: Ledger;
  readonly s3: S3Client;
  readonly names: EvidenceNames;
  readonly clock: () => Date;
  /** Re-hashes an archive or subject package (the operator function's `check_stored`). */
  readonly checkStored: StoredCheck;
}

/**
 * The archive check: `none` when the ledger records no archive (no_data, rejected, not that far
 * yet); `expired` when it is gone from the bucket after its retention (the lifecycle rule of its
 * type deleted it, as the policy says), `missing` when it is gone before.
 */
export interface ArchiveCheck {
  readonly status: 'match' | 'mismatch' | 'missing' | 'expired' | 'none';
  readonly key: string | null;
  readonly expected: { bytes: number; sha256: string } | null;
  readonly actual: { bytes: number; sha256: string } | null;
  /** When the archive's retention ends (it was written, plus its type's retention), if the stack outputs say. */
  readonly retention_ends_at?: string;
}

/**
 * One side chain of the request (its notices, its package hand-outs): the chain itself, and its
 * head against the ledger's. `records` is 0 and `findings` empty when there is none and the ledger
 * records none.
 */
export interface SideChainCheck {
  readonly kind: SideChainKind;
  readonly chain: string;
  readonly records: number;
  readonly head: string | null;
  readonly findings: readonly { readonly check: VerifyAllCheck; readonly detail: string }[];
}

/** What `verify --json` prints; `ok` decides the exit code. */
export interface VerifyResult {
  readonly request_id: string;
  readonly ok: boolean;
  readonly archive: ArchiveCheck;
  /** The subject package an access request's BuildPackage stored beside the archive, checked alike. */
  readonly subject_package: ArchiveCheck;
  readonly audit: AuditVerification;
  /**
   * What the request's own chain and the ledger say about each other: the ledger's head of the chain,
   * its end (a final record once the request has ended), and the facts both hold.
   */
  readonly findings: readonly { readonly check: VerifyAllCheck; readonly detail: string }[];
  readonly side_chains: readonly SideChainCheck[];
  /**
   * A request in parts: each site's part verified as a request of its own (its archive, its
   * package, its chains), which the request holds only when every part holds.
   */
  readonly parts?: readonly { readonly request_id: string; readonly site: string; readonly ok: boolean }[];
}

/**
 * Re-hashes the stored archive against the ledger's byte count and SHA-256, verifies the request's
 * audit hash chain and its side chains (each against its ledger head), and compares the ledger with
 * what the records locked. `ok` when all hold (a request with no archive needs only the chains).
 */
export async function verifyRequest(context: EvidenceContext, item: LedgerItem): Promise<VerifyResult> {
  const requestId = item.request_id;
  const trail = verifierTrail(context);
  const audit = await trail.verify(requestId);
  const chain = audit.ok ? audit.chain : [];
  const archive = await checkArchive(context, item, chain);
  const subjectPackage = await checkArchive(context, item, chain, 'subject_package');
  // The manifests are read as --all reads them: what they locked of this request's chains.
  const manifests = await readManifests({ s3: context.s3, bucket: context.names.AuditBucketName });
  const index = manifestIndex(manifests.manifests);
  const [own] = anchoredChains(item);
  const sideChains: SideChainCheck[] = [];
  let notices: readonly AuditRecord[] = [];
  for (const anchor of sideChainAnchors(item)) {
    const chain = await trail.verify(anchor.id);
    if (anchor.side === 'notices' && chain.ok) notices = chain.chain;
    sideChains.push({
      kind: anchor.side,
      chain: anchor.id,
      records: chain.ok ? chain.records : 0,
      head: chain.ok ? chain.head : null,
      findings: anchorProblems(item, anchor, chain, index),
    });
  }
  // Every key of the request's chains in their versions: a record replaced or deleted leaves one more.
  const chainPrefixes = anchoredChains(item).map((anchor) => `${AUDIT_PREFIX}${anchor.id}/`);
  const versions = await versionFindings(context.s3, context.names.AuditBucketName, chainPrefixes);
  const findings = [
    ...(manifests.problem === undefined
      ? []
      : [{ check: 'manifest_broken' as const, detail: manifests.problem }]),
    ...versions.map(({ check, detail }) => ({ check, detail })),
    ...(own === undefined ? [] : anchorProblems(item, own, audit, index)),
    ...ledgerMismatches(item, chain, notices).map((detail) => ({
      check: 'ledger_mismatch' as const,
      detail,
    })),
    ...ruleProblems(chain, notices).map((detail) => ({ check: 'rule_broken' as const, detail })),
  ];
  const parts: { request_id: string; site: string; ok: boolean }[] = [];
  if (item.site_results !== undefined) {
    for (const site of item.sites ?? []) {
      const partId = siteRequestId(item.request_id, site);
      const partItem = await context.ledger.get(partId);
      const ok = partItem === undefined ? false : (await verifyRequest(context, partItem)).ok;
      parts.push({ request_id: partId, site, ok });
    }
  }
  const ok =
    archiveHolds(archive) &&
    archiveHolds(subjectPackage) &&
    audit.ok &&
    findings.length === 0 &&
    sideChains.every((side) => side.findings.length === 0) &&
    parts.every((part) => part.ok);
  const result: VerifyResult = {
    request_id: requestId,
    ok,
    archive,
    subject_package: subjectPackage,
    audit,
    findings,
    side_chains: sideChains,
    ...(parts.length === 0 ? {} : { parts }),
  };
  return result;
}

/** True when the archive check is no finding: it matches, none is recorded, or it expired by policy. */
export function archiveHolds(archive: ArchiveCheck): boolean {
  return archive.status === 'match' || archive.status === 'none' || archive.status === 'expired';
}

const ARCHIVE_DAY_MS = 24 * 3600 * 1000;

/**
 * When the archive of `item` is deleted by the lifecycle rule of its type: S3 expires an object
 * its retention's days after it was written (rounded up to the next midnight UTC), so an archive
 * gone from then on is expired by policy. Undefined when the stack outputs do not give the days.
 */
function archiveRetentionEndsAt(names: EvidenceNames, item: LedgerItem, writtenAt: string): Date | undefined {
  const days = item.type === 'erasure' ? names.ErasureArchiveRetentionDays : names.AccessArchiveRetentionDays;
  const written = Date.parse(writtenAt);
  if (days === undefined || Number.isNaN(written)) return undefined;
  return new Date(written + days * ARCHIVE_DAY_MS);
}

/**
 * The stored object of `which` as the ledger records it: its key, size, SHA-256 and when it was
 * written. That time is the later of the ledger's and the locked record's, so a ledger whose time
 * was moved back cannot make a recent deletion look like an expiry.
 */
function recordedObject(
  item: LedgerItem,
  chain: readonly AuditRecord[],
  which: 'archive' | 'subject_package',
): { key: string; bytes: number; sha256: string; writtenAt: string } | undefined {
  const locked = lastRecordOf(chain, which === 'archive' ? 'archive_verified' : 'subject_package_built')?.at;
  const later = (ledgerAt: string) => (locked !== undefined && locked > ledgerAt ? locked : ledgerAt);
  if (which === 'archive') {
    const archive: ArchiveFacts | undefined = item.archive;
    return archive === undefined ? undefined : { ...archive, writtenAt: later(archive.verified_at) };
  }
  const built = item.subject_package;
  return built === undefined ? undefined : { ...built, writtenAt: later(built.built_at) };
}

/**
 * Re-hashes the archive (or the subject package) against the ledger; see ArchiveCheck. The operator
 * function reads and hashes the stored object (the privacy team's policy has no read of archive
 * content) and answers its size and SHA-256; the verdict is made here, from the ledger and the chain.
 */
export async function checkArchive(
  context: Pick<EvidenceContext, 'checkStored' | 'names' | 'clock'>,
  item: LedgerItem,
  chain: readonly AuditRecord[],
  which: 'archive' | 'subject_package' = 'archive',
): Promise<ArchiveCheck> {
  const recorded = recordedObject(item, chain, which);
  if (recorded === undefined) return { status: 'none', key: null, expected: null, actual: null };
  const expected = { bytes: recorded.bytes, sha256: recorded.sha256.toLowerCase() };
  const checked = await context.checkStored(item.request_id, which);
  if (checked.key !== recorded.key) {
    throw new EvidenceChangedError(
      `the ledger of request ${item.request_id} changed while it was verified (its ${which === 'archive' ? 'archive' : 'subject package'} is now ${checked.key ?? 'none'}, was ${recorded.key}); run the verification again`,
    );
  }
  const actual = checked.stored;
  if (actual !== null) {
    const match = actual.bytes === expected.bytes && actual.sha256 === expected.sha256;
    return { status: match ? 'match' : 'mismatch', key: recorded.key, expected, actual };
  }
  // An erasure's archive deleted once the erasure was verified, as its locked record says.
  const deleted = lastRecordOf(chain, 'erasure_verified');
  const ends =
    which === 'archive' && deleted?.facts.archive_deleted === true
      ? new Date(deleted.at)
      : archiveRetentionEndsAt(context.names, item, recorded.writtenAt);
  const retention = ends === undefined ? {} : { retention_ends_at: ends.toISOString() };
  const expired = ends !== undefined && ends.getTime() <= context.clock().getTime();
  return {
    status: expired ? 'expired' : 'missing',
    key: recorded.key,
    expected,
    actual: null,
    ...retention,
  };
}
