// The checks of a request's audit chains against its ledger item, the daily manifests and the bucket's versions, shared by verify and the report.
import { ListObjectsV2Command, ListObjectVersionsCommand, type S3Client } from '@aws-sdk/client-s3';
import {
  AUDIT_PREFIX,
  type AuditRecord,
  AuditTrail,
  type AuditVerification,
  parseChainId,
  type SideChainKind,
  sideChainOf,
} from '#shared/audit';
import { LEGACY_MANIFEST_SCHEMA, lockedHeadsOf, type Manifest } from '#shared/audit-manifest';
import { ConfigurationError } from '#shared/errors';
import { isTerminal, type LedgerItem, SIDE_CHAINS } from '#shared/ledger';
import { MAX_CLOCK_SKEW_MS } from '#shared/request';
import { closingRecord, ledgerMismatches, ruleProblems } from './ledger-facts.ts';

/** A trail that only reads: the chain verifies without the key, and verify checks no subject hashes. */
export function verifierTrail(context: {
  readonly s3: S3Client;
  readonly names: { readonly AuditBucketName: string };
}): AuditTrail {
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
export function manifestIndex(manifests: readonly Manifest[]): ManifestIndex {
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
export async function bucketChains(s3: S3Client, bucket: string): Promise<string[]> {
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
export interface AnchoredChain {
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
export interface SideChainAnchor extends AnchoredChain {
  readonly side: SideChainKind;
}

/** The chains of a request: its own, and its side chains (SIDE_CHAINS in the ledger module). */
export function anchoredChains(item: LedgerItem): AnchoredChain[] {
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
export function sideChainAnchors(item: LedgerItem): SideChainAnchor[] {
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
export function anchorProblems(
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
export async function versionFindings(
  s3: S3Client,
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
