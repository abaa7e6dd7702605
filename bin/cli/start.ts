/** Registers the `start` command (`npm start`); its code is the local package's (local/cli/start.ts), loaded when it runs. */
import type { Command } from 'commander';
import { loadLocalCommands, type StartFlags } from './local-package.ts';

/** `npm start`: the whole workflow on this machine with sample data, shown as it runs. */
export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description(
      'run a demonstration: sample requests through the whole workflow, locally, with no AWS account',
    )
    .option('--data-dir <dir>', 'where to keep the demonstration (emptied first)', '.svc-dsr/demo')
    .action(async (flags: StartFlags) => {
      await (await loadLocalCommands()).startCommand(flags);
    });
}
