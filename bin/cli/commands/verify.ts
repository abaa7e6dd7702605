// The `svc-dsr verify` command: re-hashes a request's archive and checks its audit chain, or every one's.
import { ListObjectsV2Command, ListObjectVersionsCommand } from '@aws-sdk/client-s3';
import { z } from 'zod';
import {
  AUDIT_PREFIX,
  type AuditRecord,
  AuditTrail,
  type AuditVerification,
  parseChainId,
  type SideChainKind,
  sideChainOf,
} from '#shared/audit';
import {
  LEGACY_MANIFEST_SCHEMA,
  lockedHeadsOf,
  MANIFEST_PREFIX,
  type Manifest,
  readManifests,
} from '#shared/audit-manifest';
import { ConfigurationError } from '#shared/errors';
import { type ArchiveFacts, isTerminal, type LedgerItem, SIDE_CHAINS } from '#shared/ledger';
import { MAX_CLOCK_SKEW_MS } from '#shared/request';
import { siteRequestId } from '#shared/sites';
import { closingRecord, lastRecordOf, ledgerMismatches, ruleProblems } from '../evidence/ledger-facts.ts';
import {
  type CliIo,
  type CommandResult,
  collectingIo,
  formatTable,
  parseRequestId,
  processIo,
  writeJson,
} from '../format.ts';
import { CliError, EXIT, parseOption } from '../io.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';
import { loadRequest } from './common.ts';

/** Options of `svc-dsr verify`. */
export interface VerifyOptions {
  readonly requestId: string;
  readonly json?: boolean;
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
 * what the records locked. Exit 0 when all hold (a request with no archive needs only the chains),
 * 1 when any does not.
 */
export async function runVerify(
  context: Pick<CliContext, 'ledger' | 's3' | 'names' | 'target' | 'clock' | 'operatorFunction'>,
  options: VerifyOptions,
  io: CliIo,
): Promise<CommandResult<VerifyResult>> {
  const requestId = parseRequestId(options.requestId);
  const item = await loadRequest(context, requestId);
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
      const part = await runVerify(context, { requestId: partId, json: true }, collectingIo());
      parts.push({ request_id: partId, site, ok: part.result.ok });
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
  if (options.json === true) writeJson(io, result);
  else io.out(describe(result));
  return { exitCode: ok ? EXIT.ok : EXIT.failed, result };
}

/** A trail that only reads: the chain verifies without the key, and verify checks no subject hashes. */
export function verifierTrail(context: Pick<CliContext, 's3' | 'names'>): AuditTrail {
  return new AuditTrail(
    { s3: context.s3, bucket: context.names.AuditBucketName },
    {
      hmacKey: () => {
        throw new ConfigurationError(
          'svc-dsr verify and report check the hash chain only and have no HMAC key',
        );
      },
    },
  );
}

/** One line on a stored object: the archive, or the subject package. */
function describeStored(label: 'archive' | 'package', check: ArchiveCheck): string {
  const name = label.padEnd(8);
  switch (check.status) {
    case 'none':
      return `${name} none recorded in the ledger (nothing to re-hash)`;
    case 'match':
      return `${name} OK: ${check.key} is ${check.actual?.bytes} bytes, sha256 ${check.actual?.sha256}, as recorded`;
    case 'mismatch':
      return `${name} MISMATCH: ${check.key} is ${check.actual?.bytes} bytes, sha256 ${check.actual?.sha256}; the ledger says ${check.expected?.bytes} bytes, sha256 ${check.expected?.sha256}`;
    case 'missing':
      return `${name} MISSING: ${check.key} is not in the bucket, though its retention ${check.retention_ends_at === undefined ? 'is not known (the stack outputs do not give it)' : `runs until ${check.retention_ends_at}`}`;
    case 'expired':
      return `${name} expired: ${check.key} was deleted by the retention policy (its retention ended ${check.retention_ends_at}); the ledger keeps its size and SHA-256`;
  }
}

/** True when the archive check is no finding: it matches, none is recorded, or it expired by policy. */
function archiveHolds(archive: ArchiveCheck): boolean {
  return archive.status === 'match' || archive.status === 'none' || archive.status === 'expired';
}

const ARCHIVE_DAY_MS = 24 * 3600 * 1000;

/**
 * When the archive of `item` is deleted by the lifecycle rule of its type: S3 expires an object
 * its retention's days after it was written (rounded up to the next midnight UTC), so an archive
 * gone from then on is expired by policy. Undefined when the stack outputs do not give the days.
 */
function archiveRetentionEndsAt(
  names: CliContext['names'],
  item: LedgerItem,
  writtenAt: string,
): Date | undefined {
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
async function checkArchive(
  context: Pick<CliContext, 'operatorFunction' | 'names' | 'clock'>,
  item: LedgerItem,
  chain: readonly AuditRecord[],
  which: 'archive' | 'subject_package' = 'archive',
): Promise<ArchiveCheck> {
  const recorded = recordedObject(item, chain, which);
  if (recorded === undefined) return { status: 'none', key: null, expected: null, actual: null };
  const expected = { bytes: recorded.bytes, sha256: recorded.sha256.toLowerCase() };
  const checked = await context.operatorFunction({
    command: 'check_stored',
    request_id: item.request_id,
    object: which,
  });
  if (checked.key !== recorded.key) {
    throw new CliError(
      `the ledger of request ${item.request_id} changed while it was verified (its ${which === 'archive' ? 'archive' : 'subject package'} is now ${checked.key ?? 'none'}, was ${recorded.key}); run the verification again`,
      EXIT.failed,
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

function describe(result: VerifyResult): string {
  const { archive, audit } = result;
  const lines: string[] = [describeStored('archive', archive)];
  if (result.subject_package.status !== 'none') lines.push(describeStored('package', result.subject_package));
  lines.push(
    audit.ok
      ? `audit    OK: ${audit.records} record(s) chained, head ${audit.head}`
      : `audit    BROKEN: ${audit.problem}${audit.at >= 0 ? ` (record ${audit.at})` : ''}`,
  );
  for (const { check, detail } of result.findings) lines.push(`audit    FAILED ${check}: ${detail}`);
  for (const side of result.side_chains) {
    const name = side.kind.padEnd(8);
    if (side.findings.length > 0) {
      for (const { check, detail } of side.findings) lines.push(`${name} FAILED ${check}: ${detail}`);
    } else if (side.records === 0) {
      lines.push(`${name} none recorded (audit/${side.chain}/)`);
    } else {
      lines.push(`${name} OK: ${side.records} record(s) chained, head ${side.head}, as the ledger holds it`);
    }
  }
  for (const part of result.parts ?? []) {
    lines.push(
      part.ok
        ? `site     ${part.site} OK: ${part.request_id} verified`
        : `site     ${part.site} FAILED: npx svc-dsr verify ${part.request_id} says why`,
    );
  }
  lines.push(result.ok ? `verified ${result.request_id}` : `verification of ${result.request_id} FAILED`);
  return `${lines.join('\n')}\n`;
}

export interface VerifyFlags extends TargetFlags {
  readonly json?: boolean;
  readonly all?: boolean;
  readonly from?: string;
  readonly to?: string;
}

/** `svc-dsr verify` run with its parsed arguments and flags (registered in ../register/verify.ts). */
export async function verifyAction(requestId: string | undefined, flags: VerifyFlags): Promise<void> {
  if (flags.all === true) {
    if (requestId !== undefined) throw new CliError('pass a request id or --all, not both', EXIT.usage);
    const options = parseVerifyAllOptions(flags);
    const { exitCode } = await withTarget(flags, (context) => runVerifyAll(context, options, processIo));
    process.exitCode = exitCode;
    return;
  }
  if (flags.from !== undefined || flags.to !== undefined) {
    throw new CliError('--from and --to go with --all', EXIT.usage);
  }
  const options = { requestId: parseRequestId(requestId), json: flags.json === true };
  const { exitCode } = await withTarget(flags, (context) => runVerify(context, options, processIo));
  process.exitCode = exitCode;
}

/** What a request's chains and its ledger item say about each other: {@link checkAgainstRecords}. */
export interface RecordsCheck {
  /** Every finding, in the order verify --all prints them: chain by chain, then the ledger's facts, then the rules. */
  readonly findings: readonly { readonly check: VerifyAllCheck; readonly detail: string }[];
  /** The request's own chain as read (empty when it is broken or missing). */
  readonly own: readonly AuditRecord[];
  /** Its notices chain as read (empty when there is none, or it is broken). */
  readonly notices: readonly AuditRecord[];
}

/**
 * Reads the chains of one request and checks them and its ledger item against each other: each
 * chain link by link and against the ledger's head of it, the times S3 stored its records, the
 * records the manifests of `index` locked (none when no index is given), a final record once the
 * request has ended, every ledger field a record locks (`ledger_mismatch`) and the rules
 * (`rule_broken`). `sides` picks the side chains read (all by default); the request's own chain is
 * always read. `verify --all` reads every chain; `report` the own and the notices, the only ones
 * its figures come from.
 */
export async function checkAgainstRecords(
  trail: AuditTrail,
  item: LedgerItem,
  options: { readonly index?: ManifestIndex; readonly sides?: readonly SideChainKind[] } = {},
): Promise<RecordsCheck> {
  const index = options.index ?? { heads: new Map(), days: new Map() };
  const findings: { check: VerifyAllCheck; detail: string }[] = [];
  let own: readonly AuditRecord[] = [];
  let notices: readonly AuditRecord[] = [];
  const read = anchoredChains(item).filter(
    (anchor) =>
      anchor.id === item.request_id ||
      options.sides === undefined ||
      options.sides.some((kind) => anchor.id === sideChainOf(kind, item.request_id)),
  );
  const chains = await Promise.all(read.map((anchor) => trail.verify(anchor.id)));
  for (const [position, anchor] of read.entries()) {
    const chain = chains[position];
    if (chain === undefined) continue;
    for (const { check, detail } of anchorProblems(item, anchor, chain, index))
      findings.push({ check, detail: `${anchor.label}${detail}` });
    if (anchor.id === item.request_id && chain.ok) own = chain.chain;
    if (anchor.id === sideChainOf('notices', item.request_id) && chain.ok) notices = chain.chain;
  }
  for (const detail of ledgerMismatches(item, own, notices))
    findings.push({ check: 'ledger_mismatch', detail });
  for (const detail of ruleProblems(own, notices)) findings.push({ check: 'rule_broken', detail });
  return { findings, own, notices };
}

/** What `verify --all` can find, one name per check (docs/audit.md explains each). */
export const VERIFY_ALL_CHECKS = [
  'chain_missing',
  'chain_broken',
  'chain_truncated',
  'tail_rewritten',
  'head_behind',
  'final_missing',
  'manifest_mismatch',
  'manifest_broken',
  'record_time',
  'ledger_missing',
  'ledger_mismatch',
  'ledger_broken',
  'rule_broken',
  'multiple_versions',
  'archive_mismatch',
  'archive_missing',
] as const;
export type VerifyAllCheck = (typeof VERIFY_ALL_CHECKS)[number];

/** One finding of `verify --all`; `request_id` is null for a finding about the manifests as a whole. */
export interface VerifyAllFinding {
  readonly request_id: string | null;
  readonly check: VerifyAllCheck;
  readonly detail: string;
}

/** Options of `svc-dsr verify --all`. */
export interface VerifyAllOptions {
  /** Requests created at or after this instant (ISO). */
  readonly from?: string;
  /** Requests created before this instant (ISO). */
  readonly to?: string;
  readonly json?: boolean;
}

/** What `verify --all --json` prints; `ok` decides the exit code. */
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

const DAY_MS = 24 * 3600 * 1000;
const dateOrInstant = z.union([z.iso.date(), z.iso.datetime({ offset: true })], {
  message: 'must be a date (2026-01-31) or an RFC 3339 instant (2026-01-31T12:00:00Z)',
});

/** Validates --from/--to: a bare date is a whole UTC day, so --to includes it. */
export function parseVerifyAllOptions(flags: {
  from?: string;
  to?: string;
  json?: boolean;
}): VerifyAllOptions {
  const from =
    flags.from === undefined
      ? undefined
      : new Date(Date.parse(parseOption('--from', dateOrInstant, flags.from))).toISOString();
  const to =
    flags.to === undefined
      ? undefined
      : new Date(
          Date.parse(parseOption('--to', dateOrInstant, flags.to)) +
            (/^\d{4}-\d{2}-\d{2}$/.test(flags.to) ? DAY_MS : 1),
        ).toISOString();
  if (from !== undefined && to !== undefined && from >= to)
    throw new CliError('--from is after --to', EXIT.usage);
  return {
    ...(from === undefined ? {} : { from }),
    ...(to === undefined ? {} : { to }),
    json: flags.json === true,
  };
}

/**
 * Checks every request of the ledger (created in [from, to)) against its audit chain, the daily
 * manifests and its archive, plus the version history of the audit bucket; prints a summary table
 * and every finding. Exit 0 with no finding, 1 with any.
 */
export async function runVerifyAll(
  context: Pick<CliContext, 'ledger' | 's3' | 'names' | 'target' | 'clock' | 'operatorFunction'>,
  options: VerifyAllOptions,
  io: CliIo,
): Promise<CommandResult<VerifyAllResult>> {
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
  if (options.json === true) writeJson(io, result);
  else io.out(describeAll(result));
  return { exitCode: result.ok ? EXIT.ok : EXIT.failed, result };
}

interface LockedHead {
  readonly day: string;
  readonly count: number;
  readonly head: string;
  /** When S3 stored that record, as the manifest locked it (manifests built from the bucket). */
  readonly stored_at?: string;
}

/** What the manifests locked: heads by chain, and per day built from the bucket, every record it lists. */
export interface ManifestIndex {
  readonly heads: ReadonlyMap<string, readonly LockedHead[]>;
  /** Days whose manifest was built from the bucket, each with the records it lists (`<chain>/<seq>`). */
  readonly days: ReadonlyMap<string, ReadonlySet<string>>;
}

/** Every head the manifests locked, by chain, and the records each day's manifest lists. */
function manifestIndex(manifests: readonly Manifest[]): ManifestIndex {
  const heads = new Map<string, LockedHead[]>();
  const days = new Map<string, Set<string>>();
  for (const manifest of manifests) {
    const listed = new Set<string>();
    for (const locked of lockedHeadsOf(manifest)) {
      const ofChain = heads.get(locked.chain) ?? [];
      ofChain.push({
        day: manifest.day,
        count: locked.count,
        head: locked.head,
        ...(locked.stored_at === undefined ? {} : { stored_at: locked.stored_at }),
      });
      heads.set(locked.chain, ofChain);
      listed.add(`${locked.chain}/${locked.count - 1}`);
    }
    if (manifest.schema !== LEGACY_MANIFEST_SCHEMA) days.set(manifest.day, listed);
  }
  return { heads, days };
}

/** The chain ids the audit bucket holds: the folders under `audit/`. */
export async function bucketChains(s3: CliContext['s3'], bucket: string): Promise<string[]> {
  const chains: string[] = [];
  let token: string | undefined;
  do {
    const page = await s3.send(
      new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: AUDIT_PREFIX,
        Delimiter: '/',
        ContinuationToken: token,
      }),
    );
    for (const prefix of page.CommonPrefixes ?? []) {
      const chainId = prefix.Prefix?.slice(AUDIT_PREFIX.length).replace(/\/$/, '');
      if (chainId) chains.push(chainId);
    }
    token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
  } while (token !== undefined);
  return chains;
}

/**
 * How far a record's own time (`at`) may lie from the time S3 stored it: the writer's clock and
 * S3's may differ, and the put follows the clock reading by a moment. Further apart, the record
 * was written at another time than it says (backdated, or forged later and given an old time).
 */
export const RECORD_TIME_TOLERANCE_MS = MAX_CLOCK_SKEW_MS;

/** One chain of a request and what the ledger holds of it. */
interface AnchoredChain {
  /** The chain id: the request id, or `<request_id>.<kind>` for a side chain. */
  readonly id: string;
  /** How a finding's detail names the chain: '' for the request's own. */
  readonly label: string;
  readonly count: number | undefined;
  readonly head: string | undefined;
  /** Whether the bucket must hold it: the request's own always; a side chain once the ledger records it. */
  readonly expected: boolean;
  /** What a chain_missing finding says when the bucket does not hold an expected chain. */
  readonly missing: string;
  /** Whether it must end in a final record: the request's own once its status is terminal. */
  readonly mustEnd: boolean;
}

/** A side chain of a request: its notices (svc-dsr notice), its package hand-outs (svc-dsr package). */
interface SideChainAnchor extends AnchoredChain {
  readonly side: SideChainKind;
}

/** The chains of a request: its own, and its side chains (SIDE_CHAINS in the ledger module). */
function anchoredChains(item: LedgerItem): AnchoredChain[] {
  return [
    {
      id: item.request_id,
      label: '',
      count: item.audit_count,
      head: item.audit_head,
      expected: true,
      missing: `the ledger has the request (${item.status}) but the bucket has no records`,
      mustEnd: isTerminal(item.status),
    },
    ...sideChainAnchors(item),
  ];
}

/**
 * The side chains of a request, each with the ledger's head of it. An extension's notice is in the
 * request's own chain, with the extension.
 */
function sideChainAnchors(item: LedgerItem): SideChainAnchor[] {
  return SIDE_CHAINS.map((side) => {
    const id = sideChainOf(side.kind, item.request_id);
    return {
      id,
      side: side.kind,
      label: `${side.kind} chain: `,
      count: item[side.fields.count],
      head: item[side.fields.head],
      expected: side.required(item),
      missing: `the ledger records ${side.what} but the bucket has no audit/${id}/ records`,
      mustEnd: false,
    };
  });
}

/**
 * The problems of one chain against the ledger's head of it, the records the manifests locked, and
 * the times S3 stored its records.
 */
function anchorProblems(
  item: LedgerItem,
  anchor: AnchoredChain,
  chain: AuditVerification,
  index: ManifestIndex,
): { check: VerifyAllCheck; detail: string }[] {
  const locked = index.heads.get(anchor.id) ?? [];
  const finding = (check: VerifyAllCheck, detail: string) => ({ check, detail });
  if (!chain.ok) {
    if (chain.problem === 'no audit records for this request') {
      if (anchor.expected) return [finding('chain_missing', anchor.missing)];
      // The ledger may have lost the fields that require it; a manifest that locked it has not.
      const last = locked.at(-1);
      if (last === undefined) return [];
      return [
        finding(
          'chain_missing',
          `manifest ${last.day} locked it at ${last.count} record(s), but the bucket has no audit/${anchor.id}/ records`,
        ),
      ];
    }
    return [finding('chain_broken', `${chain.problem}${chain.at >= 0 ? ` (record ${chain.at})` : ''}`)];
  }
  const findings: { check: VerifyAllCheck; detail: string }[] = [];
  const count = anchor.count;
  if (count !== undefined && anchor.head !== undefined) {
    if (chain.records < count) {
      findings.push(
        finding('chain_truncated', `the chain has ${chain.records} record(s); the ledger counted ${count}`),
      );
    } else if (chain.hashes[count - 1] !== anchor.head) {
      findings.push(
        finding(
          'tail_rewritten',
          `record ${count - 1} has hash ${chain.hashes[count - 1]}; the ledger's head is ${anchor.head}`,
        ),
      );
    } else if (chain.records > count) {
      findings.push(
        finding(
          'head_behind',
          `the chain has ${chain.records} record(s); the ledger's head stops at ${count} (a writer died between the record and the ledger)`,
        ),
      );
    }
  }
  if (anchor.mustEnd && closingRecord(chain.chain) === undefined) {
    findings.push(
      finding('final_missing', `the request is ${item.status} but its chain ends without a final record`),
    );
  }
  for (const head of locked) {
    const storedAt = chain.stored_at[head.count - 1];
    if (chain.hashes[head.count - 1] !== head.head) {
      findings.push(
        finding(
          'manifest_mismatch',
          `manifest ${head.day} locked record ${head.count - 1} with hash ${head.head}; the chain has ${chain.hashes[head.count - 1] ?? 'no such record'}`,
        ),
      );
    } else if (head.stored_at !== undefined && storedAt != null && storedAt !== head.stored_at) {
      findings.push(
        finding(
          'manifest_mismatch',
          `manifest ${head.day} locked record ${head.count - 1} as stored at ${head.stored_at}; the bucket's copy was stored at ${storedAt} (written again since)`,
        ),
      );
    }
  }
  for (const [seq, record] of chain.chain.entries()) {
    const storedAt = chain.stored_at[seq];
    if (storedAt == null) continue;
    const apart = Date.parse(storedAt) - Date.parse(record.at);
    if (Math.abs(apart) > RECORD_TIME_TOLERANCE_MS) {
      findings.push(
        finding(
          'record_time',
          `record ${seq} (${record.action}) says it was written at ${record.at}, but S3 stored it at ${storedAt} (${describeGap(apart)} ${apart > 0 ? 'later' : 'earlier'})`,
        ),
      );
    }
    // A manifest built from the bucket lists every record S3 stored on its day.
    const listed = index.days.get(storedAt.slice(0, 10));
    if (listed !== undefined && !listed.has(`${anchor.id}/${seq}`)) {
      findings.push(
        finding(
          'manifest_mismatch',
          `record ${seq} was stored at ${storedAt}, but manifest ${storedAt.slice(0, 10)} does not list it`,
        ),
      );
    }
  }
  return findings;
}

/** A time span in words: minutes, hours or days. */
function describeGap(ms: number): string {
  const minutes = Math.abs(ms) / 60_000;
  if (minutes < 120) return `${Math.round(minutes)} minutes`;
  if (minutes < 48 * 60) return `${Math.round(minutes / 60)} hours`;
  return `${Math.round(minutes / 1440)} days`;
}

/**
 * Every key under the prefixes (records, manifests) with more than one version (or a delete
 * marker): under compliance-mode Object Lock a record can be neither replaced nor deleted, so a
 * second version is an attempt, and the earlier version is the one that counts.
 */
async function versionFindings(
  s3: CliContext['s3'],
  bucket: string,
  prefixes: readonly string[],
): Promise<VerifyAllFinding[]> {
  const findings: VerifyAllFinding[] = [];
  for (const prefix of prefixes) {
    const versions = new Map<string, number>();
    let markers: { KeyMarker?: string; VersionIdMarker?: string } = {};
    for (;;) {
      const page = await s3.send(
        new ListObjectVersionsCommand({ Bucket: bucket, Prefix: prefix, ...markers }),
      );
      for (const version of [...(page.Versions ?? []), ...(page.DeleteMarkers ?? [])]) {
        if (version.Key !== undefined) versions.set(version.Key, (versions.get(version.Key) ?? 0) + 1);
      }
      if (page.IsTruncated !== true) break;
      markers = {
        ...(page.NextKeyMarker ? { KeyMarker: page.NextKeyMarker } : {}),
        ...(page.NextVersionIdMarker ? { VersionIdMarker: page.NextVersionIdMarker } : {}),
      };
    }
    for (const [key, count] of versions) {
      if (count < 2) continue;
      const chainId = key.startsWith(AUDIT_PREFIX) ? key.slice(AUDIT_PREFIX.length).split('/')[0] : undefined;
      const requestId = chainId === undefined ? null : parseChainId(chainId).requestId;
      findings.push({
        request_id: requestId,
        check: 'multiple_versions',
        detail: `${key} has ${count} versions (or delete markers); list them with aws s3api list-object-versions --prefix ${key}`,
      });
    }
  }
  return findings;
}

function describeAll(result: VerifyAllResult): string {
  const range =
    result.from === null && result.to === null
      ? 'all'
      : `created ${result.from ?? '…'} to ${result.to ?? '…'}`;
  const lines = [
    `checked ${result.requests} request(s) (${range}) against ${result.manifests} daily manifest(s)${result.unanchored > 0 ? `; ${result.unanchored} without a ledger head (written before heads were kept)` : ''}${result.expired_archives > 0 ? `; ${result.expired_archives} archive(s) expired by the retention policy (no finding)` : ''}`,
    '',
    formatTable(
      ['check', 'findings'],
      VERIFY_ALL_CHECKS.map((check) => [check, String(result.summary[check])]),
    ).trimEnd(),
  ];
  if (result.findings.length > 0) {
    lines.push(
      '',
      formatTable(
        ['request', 'check', 'detail'],
        result.findings.map((finding) => [finding.request_id ?? '-', finding.check, finding.detail]),
      ).trimEnd(),
    );
  }
  lines.push(
    '',
    result.ok ? 'verified: no findings' : `verification FAILED: ${result.findings.length} finding(s)`,
  );
  return `${lines.join('\n')}\n`;
}
