/**
 * `svc-dsr notice` as the command line shows it: its arguments, options and help. The action loads
 * ../commands/notice.ts, and what that uses, only when `notice` runs.
 */
import type { Command } from 'commander';
import { NOTICE_KINDS } from '#shared/vocabulary';
import type { NoticeCommandFlags } from '../commands/notice.ts';
import { addTargetOptions } from '../target-flags.ts';

/** Registers `svc-dsr notice`. */
export function registerNoticeCommand(program: Command): void {
  const command = program
    .command('notice')
    .description('record a notice given to the subject: receipt, extension, response or denial')
    .argument('<request_id>', 'the request id')
    .requiredOption('--kind <kind>', NOTICE_KINDS.join(', '))
    .requiredOption('--channel <channel>', 'how the subject was told, e.g. email, letter, portal')
    .option('--at <time>', 'when (RFC 3339; default now)')
    .option('--reference <reference>', "the team's reference of the message, e.g. a ticket id")
    .option(
      '--template <id>',
      'the template the notice was written from, e.g. gdpr-denial-v3 (kept in the audit record)',
    )
    .option(
      '--value <name=value>',
      'a value filled into the template, e.g. reason_code=exempt (repeatable; kept in the audit record: no names, e-mail addresses or links)',
      (value: string, previous: string[] = []) => [...previous, value],
    )
    .option('--json', 'print the result as JSON');
  addTargetOptions(command)
    .addHelpText(
      'after',
      `
A CCPA receipt confirmation is due by the request's confirm-by date; a response once the request
is completed; a denial once it is denied. An extension notice is recorded by svc-dsr extend itself.
npx svc-dsr status shows which notices are due and which were given. A response or denial counts
as given at the later of --at and the time it is recorded: record it the day it is sent.
--template and --value keep what the notice said in its audit record (the rendered text, which
names the subject, is not kept there).

Exit codes: 0 recorded, 1 no such request or a notice its status does not call for, 2 invalid flags.

Example:
  $ npx svc-dsr notice 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --kind receipt --channel email --reference DSR-1042
  $ npx svc-dsr notice 7d3c2f9e-1b4a-4c8e-9f2d-5a6b7c8d9e0f --kind denial --channel letter \\
      --template gdpr-denial-v3 --value reason_code=exempt --value complaint_authority=CNIL`,
    )
    .action(async (requestId: string, flags: NoticeCommandFlags) => {
      const { noticeAction } = await import('../commands/notice.ts');
      await noticeAction(requestId, flags);
    });
}
