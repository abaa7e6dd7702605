/**
 * `svc-dsr start` as the command line shows it: its options and help. Local mode's command: the
 * action runs the local package's (local/cli/start.ts) through tsx, so it costs the other commands nothing.
 */
import type { Command } from 'commander';
import type { StartFlags } from '../local-package.ts';
import { localCommands } from '../typescript.ts';

/** `npm start`: the whole workflow on this machine with sample data, shown as it runs. */
export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description(
      'run a demonstration: sample requests through the whole workflow, locally, with no AWS account',
    )
    .option('--data-dir <dir>', 'where to keep the demonstration (emptied first)', '.svc-dsr/demo')
    .action(async (flags: StartFlags) => {
      await (await localCommands()).startCommand(flags);
    });
}
