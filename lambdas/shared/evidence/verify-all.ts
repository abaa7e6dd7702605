// Every request of the ledger verified at once, with the manifests, the chains no ledger item names and the bucket's versions: `verify --all`.
import { AUDIT_PREFIX, parseChainId, sideChainOf } from '#shared/audit';
import { MANIFEST_PREFIX, readManifests } from '#shared/audit-manifest';
import { SIDE_CHAINS } from '#shared/ledger';
import {
  anchoredChains,
  bucketChains,
  checkAgainstRecords,
  manifestIndex,
  VERIFY_ALL_CHECKS,
  type VerifyAllCheck,
  type VerifyAllFinding,
  verifierTrail,
  versionFindings,
} from './chains.ts';
import { checkArchive, type EvidenceContext } from './verify-request.ts';

/** Which requests `verify --all` checks. */
export interface VerifyAllOptions {
  /** Requests created at or after this instant (ISO). */
  readonly from?: string;
  /** Requests created before this instant (ISO). */
  readonly to?: string;
}

/** What `verify --all` found; `ok` when nothing. */
export interface VerifyAllResult {
  readonly ok: boolean;
  readonly from: string | null;
  readonly to: string | null;
  readonly requests: number;
  /** Requests whose ledger item holds no chain head (written before heads were kept). */
  readonly unanchored: number;
  /** Archives deleted by the retention policy after their retention ended: no finding. */
  readonly expired_archives: number;
  readonly manifests: number;
  readonly summary: Readonly<Record<VerifyAllCheck, number>>;
  readonly findings: readonly VerifyAllFinding[];
}

/**
 * Checks every request of the ledger (created in [from, to)) against its audit chain, the daily
 * manifests and its archive, plus the version history of the audit bucket. `ok` with no finding.
 */
export async function verifyAll(
  context: EvidenceContext,
  options: VerifyAllOptions,
): Promise<VerifyAllResult> {
  const findings: VerifyAllFinding[] = [];
  const trail = verifierTrail(context);
  const audit = { s3: context.s3, bucket: context.names.AuditBucketName };
  const { manifests, problem } = await readManifests(audit);
  if (problem !== undefined) findings.push({ request_id: null, check: 'manifest_broken', detail: problem });
  const index = manifestIndex(manifests);

  let requests = 0;
  let unanchored = 0;
  let expiredArchives = 0;
  const seen = new Set<string>();
  for await (const item of context.ledger.scan({
    field: 'created_at',
    ...(options.from === undefined ? {} : { from: options.from }),
    ...(options.to === undefined ? {} : { to: options.to }),
    // One item the schema refuses is a finding about that request, not the end of the check.
    onInvalid: ({ requestId, problem }) => {
      requests += 1;
      if (requestId !== undefined) {
        seen.add(requestId);
        for (const side of SIDE_CHAINS) seen.add(sideChainOf(side.kind, requestId));
      }
      findings.push({
        request_id: requestId ?? null,
        check: 'ledger_broken',
        detail: `the ledger item does not match the schema (${problem}), so nothing else of it was checked`,
      });
    },
  })) {
    requests += 1;
    seen.add(item.request_id);
    if (item.audit_head === undefined) unanchored += 1;
    for (const anchor of anchoredChains(item)) seen.add(anchor.id);
    const checked = await checkAgainstRecords(trail, item, { index });
    const own = checked.own;
    for (const { check, detail } of checked.findings)
      findings.push({ request_id: item.request_id, check, detail });
    for (const which of ['archive', 'subject_package'] as const) {
      const archive = await checkArchive(context, item, own, which);
      if (archive.status === 'expired' && which === 'archive') expiredArchives += 1;
      if (archive.status === 'mismatch' || archive.status === 'missing') {
        findings.push({
          request_id: item.request_id,
          check: archive.status === 'mismatch' ? 'archive_mismatch' : 'archive_missing',
          detail:
            archive.status === 'mismatch'
              ? `${archive.key} is ${archive.actual?.bytes} bytes, sha256 ${archive.actual?.sha256}; the ledger says ${archive.expected?.bytes} bytes, sha256 ${archive.expected?.sha256}`
              : `${archive.key} is not in the archive bucket${archive.retention_ends_at === undefined ? '' : `, though its retention runs until ${archive.retention_ends_at}`}`,
        });
      }
    }
  }
  // A chain in the bucket, or one a manifest locked, whose request the ledger does not have: a
  // ledger item deleted, or records made for a request nobody submitted (only a full run can tell).
  if (options.from === undefined && options.to === undefined) {
    for (const [chainId, heads] of index.heads) {
      if (seen.has(chainId)) continue;
      seen.add(chainId);
      const { requestId, side } = parseChainId(chainId);
      findings.push({
        request_id: requestId,
        check: 'ledger_missing',
        detail: `manifest ${heads.at(-1)?.day} locked its ${side === undefined ? 'chain' : `${side} chain`}, but the ledger has no such request`,
      });
    }
    for (const chainId of await bucketChains(context.s3, context.names.AuditBucketName)) {
      if (seen.has(chainId)) continue;
      const { requestId, side } = parseChainId(chainId);
      findings.push({
        request_id: requestId,
        check: 'ledger_missing',
        detail: `the bucket holds ${side === undefined ? 'the chain' : `the ${side} chain`} audit/${chainId}/, but the ledger has no such request`,
      });
    }
  }
  findings.push(
    ...(await versionFindings(context.s3, context.names.AuditBucketName, [AUDIT_PREFIX, MANIFEST_PREFIX])),
  );

  const summary = Object.fromEntries(
    VERIFY_ALL_CHECKS.map((check) => [check, findings.filter((finding) => finding.check === check).length]),
  ) as Record<VerifyAllCheck, number>;
  const result: VerifyAllResult = {
    ok: findings.length === 0,
    from: options.from ?? null,
    to: options.to ?? null,
    requests,
    unanchored,
    expired_archives: expiredArchives,
    manifests: manifests.length,
    summary,
    findings,
  };
  return result;
}
