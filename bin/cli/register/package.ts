/**
 * `svc-dsr package` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/package.ts, and what that uses, only when `package` runs.
 */
import type { Command } from 'commander';
import type { PackageFlags } from '../commands/package.ts';
import { addTargetOptions } from '../target-flags.ts';

/** Registers `svc-dsr package`. */
export function registerPackageCommand(program: Command): void {
  const command = program
    .command('package')
    .description(
      "hand over a completed access request's package for the subject (or, with --raw, the platform's export zip): a short-lived download link, or a verified local copy",
    )
    .argument('<request_id>', 'the request id')
    .option(
      '--raw',
      "the platform's original export zip (portability, evidence) instead of the subject package",
    )
    .option('--out <file>', 'download the package to this file (checked against the ledger SHA-256)')
    .option('--expires-in <seconds>', 'lifetime of a presigned link, at most 3600 (1 hour)', '3600')
    .option('--force', 'replace --out if it exists')
    .option(
      '--reason <reason>',
      "why it is handed out (kept in the audit record); required for an erasure's archive",
    )
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
By default the command hands out the subject package: your-data-<date>.zip, holding index.html (a
page the subject can read offline: who answers, the Art. 15(1) information, the profile, every
comment by conversation, likes, roles, a glossary), data.json (the same, for portability),
README.txt and platform/ (the platform's four files, untouched, with their SHA-256). --raw hands out
the platform's export zip as it was archived.

The operator function hands it out: it records the hand-out, then answers a presigned link to the
recorded version, signed with its own role (your role cannot read archives). With --out the copy is
streamed from a link of 5 minutes to a temporary file (readable only by you), its size and SHA-256
are checked against the ledger, and only then renamed to --out. Without --out the command prints
the link, which expires after --expires-in seconds (default and longest: one hour).

Every hand-out is an audit record (audit/<request_id>.packages/), written before the link is
answered: who, when, the link's expiry, a file (mode 0600; its path is not kept) or a link, which
package, and the reason. An erasure request has no
subject package; its archive (the subject's data taken before erasure) is handed out only with
--raw and --reason.

Exit codes: 0 link printed, or copy written and verified; 1 no such request, no package, an
erasure's archive without --reason, the download failed or does not match, or the audit record
could not be written; 2 invalid flags.

Examples:
  $ npx svc-dsr package 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --expires-in 1800
  $ npx svc-dsr package 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --out your-data.zip
  $ npx svc-dsr package 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --raw --out alice-export.zip
  $ npx svc-dsr package 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --raw --reason "restore after a wrongful erasure, ticket DSR-77"`,
    )
    .action(async (requestId: string, flags: PackageFlags) => {
      const { packageAction } = await import('../commands/package.ts');
      await packageAction(requestId, flags);
    });
}
