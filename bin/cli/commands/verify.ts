// The `svc-dsr verify` command: re-hashes a request's archive and checks its audit chain, or every one's.
import { z } from 'zod';
import { VERIFY_ALL_CHECKS } from '#shared/evidence/chains';
import { EvidenceChangedError } from '#shared/evidence/errors';
import { type VerifyAllOptions, type VerifyAllResult, verifyAll } from '#shared/evidence/verify-all';
import {
  type ArchiveCheck,
  type EvidenceContext,
  type VerifyResult,
  verifyRequest,
} from '#shared/evidence/verify-request';
import {
  type CliIo,
  type CommandResult,
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

type VerifyContext = Pick<CliContext, 'ledger' | 's3' | 'names' | 'target' | 'clock' | 'operatorFunction'>;

/**
 * What verification reads, from the CLI's target: the operator function re-hashes the stored
 * objects (the privacy team's policy has no read of archive content).
 */
export function evidenceContextOf(context: VerifyContext): EvidenceContext {
  return {
    ledger: context.ledger,
    s3: context.s3,
    names: context.names,
    clock: context.clock,
    checkStored: (requestId, object) =>
      context.operatorFunction({ command: 'check_stored', request_id: requestId, object }),
  };
}

/** Runs `work`, a ledger that changed under it being the command's failure with its message. */
async function failingOnChange<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof EvidenceChangedError) throw new CliError(error.message, EXIT.failed);
    throw error;
  }
}

/**
 * Re-hashes the stored archive against the ledger's byte count and SHA-256, verifies the request's
 * audit hash chain and its side chains (each against its ledger head), and compares the ledger with
 * what the records locked (lambdas/shared/evidence/verify-request.ts). Exit 0 when all hold, 1 when
 * any does not.
 */
export async function runVerify(
  context: VerifyContext,
  options: VerifyOptions,
  io: CliIo,
): Promise<CommandResult<VerifyResult>> {
  const item = await loadRequest(context, parseRequestId(options.requestId));
  const result = await failingOnChange(() => verifyRequest(evidenceContextOf(context), item));
  if (options.json === true) writeJson(io, result);
  else io.out(describe(result));
  return { exitCode: result.ok ? EXIT.ok : EXIT.failed, result };
}

/**
 * Checks every request of the ledger (created in [from, to)) against its audit chain, the daily
 * manifests and its archive, plus the version history of the audit bucket
 * (lambdas/shared/evidence/verify-all.ts); prints a summary table and every finding. Exit 0 with no
 * finding, 1 with any.
 */
export async function runVerifyAll(
  context: VerifyContext,
  options: VerifyAllOptions & { readonly json?: boolean },
  io: CliIo,
): Promise<CommandResult<VerifyAllResult>> {
  const { json, ...range } = options;
  const result = await failingOnChange(() => verifyAll(evidenceContextOf(context), range));
  if (json === true) writeJson(io, result);
  else io.out(describeAll(result));
  return { exitCode: result.ok ? EXIT.ok : EXIT.failed, result };
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

const DAY_MS = 24 * 3600 * 1000;
const dateOrInstant = z.union([z.iso.date(), z.iso.datetime({ offset: true })], {
  message: 'must be a date (2026-01-31) or an RFC 3339 instant (2026-01-31T12:00:00Z)',
});

/** Validates --from/--to: a bare date is a whole UTC day, so --to includes it. */
export function parseVerifyAllOptions(flags: {
  from?: string;
  to?: string;
  json?: boolean;
}): VerifyAllOptions & { readonly json?: boolean } {
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
