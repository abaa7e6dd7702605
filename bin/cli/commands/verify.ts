import type { Command } from 'commander';
import { hashStoredObject } from '#shared/archive';
import { AuditTrail, type AuditVerification } from '#shared/audit';
import { ConfigurationError, InvalidArchiveError } from '#shared/errors';
import type { LedgerItem } from '#shared/ledger';
import { type CliIo, type CommandResult, parseRequestId, processIo, writeJson } from '../format.ts';
import { EXIT } from '../io.ts';
import { addTargetOptions, type CliContext, type TargetFlags, withTarget } from '../target.ts';
import { loadRequest } from './common.ts';

/** Options of `svc-dsr verify`. */
export interface VerifyOptions {
  readonly requestId: string;
  readonly json?: boolean;
}

/** The archive check: `none` when the ledger records no archive (no_data, rejected, not that far yet). */
export interface ArchiveCheck {
  readonly status: 'match' | 'mismatch' | 'missing' | 'none';
  readonly key: string | null;
  readonly expected: { bytes: number; sha256: string } | null;
  readonly actual: { bytes: number; sha256: string } | null;
}

/** What `verify --json` prints; `ok` decides the exit code. */
export interface VerifyResult {
  readonly request_id: string;
  readonly ok: boolean;
  readonly archive: ArchiveCheck;
  readonly audit: AuditVerification;
}

/**
 * Re-hashes the stored archive against the ledger's byte count and SHA-256, and verifies the
 * request's audit hash chain. Exit 0 when both hold (a request with no archive needs only the
 * chain), 1 when either does not.
 */
export async function runVerify(
  context: Pick<CliContext, 'ledger' | 's3' | 'names' | 'target'>,
  options: VerifyOptions,
  io: CliIo,
): Promise<CommandResult<VerifyResult>> {
  const requestId = parseRequestId(options.requestId);
  const item = await loadRequest(context, requestId);
  const archive = await checkArchive(context, item);
  const trail = new AuditTrail(
    { s3: context.s3, bucket: context.names.AuditBucketName },
    {
      // The chain verifies without the key; only subject hashes would need it, and verify checks none.
      hmacKey: () => {
        throw new ConfigurationError('svc-dsr verify checks the hash chain only and has no HMAC key');
      },
    },
  );
  const audit = await trail.verify(requestId);
  const ok = (archive.status === 'match' || archive.status === 'none') && audit.ok;
  const result: VerifyResult = { request_id: requestId, ok, archive, audit };
  if (options.json === true) writeJson(io, result);
  else io.out(describe(result));
  return { exitCode: ok ? EXIT.ok : EXIT.failed, result };
}

async function checkArchive(
  context: Pick<CliContext, 's3' | 'names'>,
  item: LedgerItem,
): Promise<ArchiveCheck> {
  const recorded = item.archive;
  if (recorded === undefined) return { status: 'none', key: null, expected: null, actual: null };
  const expected = { bytes: recorded.bytes, sha256: recorded.sha256.toLowerCase() };
  try {
    const actual = await hashStoredObject({
      s3: context.s3,
      bucket: context.names.ArchiveBucketName,
      key: recorded.key,
    });
    const match = actual.bytes === expected.bytes && actual.sha256 === expected.sha256;
    return { status: match ? 'match' : 'mismatch', key: recorded.key, expected, actual };
  } catch (error) {
    const gone =
      (error instanceof InvalidArchiveError && error.message.includes('missing')) ||
      (error instanceof Error && error.name === 'NoSuchKey');
    if (gone) {
      return { status: 'missing', key: recorded.key, expected, actual: null };
    }
    throw error;
  }
}

function describe(result: VerifyResult): string {
  const { archive, audit } = result;
  const lines: string[] = [];
  switch (archive.status) {
    case 'none':
      lines.push('archive  none recorded in the ledger (nothing to re-hash)');
      break;
    case 'match':
      lines.push(
        `archive  OK: ${archive.key} is ${archive.actual?.bytes} bytes, sha256 ${archive.actual?.sha256}, as recorded`,
      );
      break;
    case 'mismatch':
      lines.push(
        `archive  MISMATCH: ${archive.key} is ${archive.actual?.bytes} bytes, sha256 ${archive.actual?.sha256}; the ledger says ${archive.expected?.bytes} bytes, sha256 ${archive.expected?.sha256}`,
      );
      break;
    case 'missing':
      lines.push(
        `archive  MISSING: ${archive.key} is not in the bucket (expired by the lifecycle rule, or deleted)`,
      );
      break;
  }
  lines.push(
    audit.ok
      ? `audit    OK: ${audit.records} record(s) chained, head ${audit.head}`
      : `audit    BROKEN: ${audit.problem}${audit.at >= 0 ? ` (record ${audit.at})` : ''}`,
  );
  lines.push(result.ok ? `verified ${result.request_id}` : `verification of ${result.request_id} FAILED`);
  return `${lines.join('\n')}\n`;
}

interface VerifyFlags extends TargetFlags {
  readonly json?: boolean;
}

/** Registers `svc-dsr verify`. */
export function registerVerifyCommand(program: Command): void {
  const command = program
    .command('verify')
    .description("re-hash a request's stored archive against the ledger and verify its audit hash chain")
    .argument('<request_id>', 'the request id')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
The archive is streamed from S3 and its SHA-256 and byte count compared with the ledger; the audit
records are checked link by link (no key is needed for the chain).

Exit codes: 0 the archive matches (or none is recorded) and the chain holds, 1 no such request, a
mismatch, a missing archive or a broken chain, 2 invalid flags.

Example:
  $ npx svc-dsr verify 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --json`,
    )
    .action(async (requestId: string, flags: VerifyFlags) => {
      const options = { requestId: parseRequestId(requestId), json: flags.json === true };
      const { exitCode } = await withTarget(flags, (context) => runVerify(context, options, processIo));
      process.exitCode = exitCode;
    });
}
