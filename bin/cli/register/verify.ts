/**
 * `svc-dsr verify` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/verify.ts, and what that uses, only when `verify` runs.
 */
import type { Command } from 'commander';
import type { VerifyFlags } from '../commands/verify.ts';
import { addTargetOptions } from '../target-flags.ts';

/** Registers `svc-dsr verify`. */
export function registerVerifyCommand(program: Command): void {
  const command = program
    .command('verify')
    .description(
      "re-hash a request's stored archive against the ledger and verify its audit hash chain; --all checks every request",
    )
    .argument('[request_id]', 'the request id (or --all)')
    .option('--all', 'check every request in the ledger against its chain, the manifests and its archive')
    .option(
      '--from <date>',
      'with --all: requests created on or after this date (YYYY-MM-DD, UTC) or instant',
    )
    .option('--to <date>', 'with --all: requests created on or before this date (YYYY-MM-DD, UTC) or instant')
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
The archive is streamed from S3 and its SHA-256 and byte count compared with the ledger; the audit
records are checked link by link (no key is needed for the chain), and so are the request's side
chains, its notices (audit/<request_id>.notices/) and package hand-outs (audit/<request_id>.packages/),
each also against the head the ledger keeps of it, against every record the daily manifests locked,
and against the time S3 stored each record (a record whose own time is more than 5 minutes from it
was written at another time than it says). Every ledger fact a record locks (deadlines, extension,
completion, outcome, verification, notices, archive and package) is compared with that record.

With --all every request in the ledger (created in --from/--to) is checked so: its chain holds, is as
long as the ledger's record count and ends in the ledger's head hash, ends in a final record once the
request has ended, and holds every record the manifests locked; so do its side chains (no final
record); its archive matches; without --from/--to, every chain in the bucket has a ledger item;
no audit record or manifest has more than one version. docs/audit.md explains each check.

An archive gone from the bucket after its retention (the stack's accessArchiveRetentionDays or
erasureArchiveRetentionDays, from the stack outputs) was deleted by policy: it reads as expired, and
is no finding. Gone before then, it is missing.

Exit codes: 0 the archive matches (or none is recorded, or it expired by policy) and the chain
holds (with --all: no finding), 1 no such request, a mismatch, a missing archive, a broken chain or
any finding, 2 invalid flags.

Examples:
  $ npx svc-dsr verify 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --json
  $ npx svc-dsr verify --all --from 2026-01-01 --to 2026-03-31`,
    )
    .action(async (requestId: string | undefined, flags: VerifyFlags) => {
      const { verifyAction } = await import('../commands/verify.ts');
      await verifyAction(requestId, flags);
    });
}
